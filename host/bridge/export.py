"""`leadwire export`: the store as Hive-partitioned Parquet for the fleet job (host/fleet/schema.py).

Layout under ``--out DIR`` (schemas: :mod:`leadwire.fleet.schema`)::

    arrivals/date=YYYY-MM-DD/part-<bridge>-<chunk>-<first id>.parquet
                                 arrival ids [first id, end) within [chunk*C, (chunk+1)*C)
    losses/date=YYYY-MM-DD/part-<bridge>.parquet
    boots/date=YYYY-MM-DD/part-<bridge>.parquet
    _leadwire_export/<bridge>.json                           the last arrival id exported

Arrival files are published once and never rewritten: each export writes the rows after the last
exported id into NEW files (named by their first id), each written to a temporary name and then
renamed into place, and records the last id only after that. A reader (a fleet job) that listed
a file can always read it whole, and no row is written twice. A re-export with nothing new writes
no arrival file; `since` only limits what a fresh export writes (ids already exported are never
written again). ``losses`` and ``boots`` are small and their rows change when a recovery ends, so
they are rewritten whole (write, then rename over the old file: a reader holding the old one keeps
reading it; one that lists after the rename reads the new one). Shards (one store per bridge)
write distinct file names into the same directory.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sqlite3
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from leadwire.fleet.schema import BOOTS, LOSSES, PARTITION_COLUMN, TABLES

from .store import connect_ro
from .store_reader import parse_time

CHUNK = 1_000_000
DAY_US = 86_400_000_000
KIND = ("event", "report")

_ARRIVALS_SQL = """
SELECT d.device_id, a.boot_epoch, a.boots, a.channel, a.kind, a.session, a.lead_channel, a.seq, a.arrival,
       a.lead, a.duplicate, a.retransmission, a.priority, a.payload_bytes, a.frame_bytes, a.gen_us, a.rx_us,
       a.commit_us, COALESCE(b.firmware, d.firmware), d.transport
FROM arrivals a JOIN devices d ON d.dev = a.dev
LEFT JOIN boots b ON b.dev = a.dev AND b.boot_epoch = a.boot_epoch
WHERE a.id >= ? AND a.id < ? ORDER BY a.id
"""
_LOSSES_SQL = """
SELECT d.device_id, l.boot_epoch, l.client_n, l.n0, l.n1, l.lost, l.cause, l.started_us, l.ended_us,
       l.recovered, l.firmware, d.transport
FROM losses l JOIN devices d ON d.dev = l.dev ORDER BY l.dev, l.seq
"""
_BOOTS_SQL = """
SELECT d.device_id, b.boot_epoch, b.boots, b.firmware, b.board, d.transport, b.first_seen_us, b.detected_by
FROM boots b JOIN devices d ON d.dev = b.dev ORDER BY b.dev, b.first_seen_us
"""


def day_of(us: int) -> str:
    return (dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=(us // DAY_US) * DAY_US)).strftime("%Y-%m-%d")


def parse_since(value: str) -> int:
    """YYYY-MM-DD, an ISO timestamp (UTC if naive) or an age (10m, 2h, 1d) -> us since the epoch."""
    return parse_time(value)


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def _write(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name + ".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def _by_day(rows: list[tuple[Any, ...]], ts_col: int) -> dict[str, list[tuple[Any, ...]]]:
    out: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for r in rows:
        out[day_of(r[ts_col])].append(r)
    return out


def _table(schema: pa.Schema, cols: list[list[Any]]) -> pa.Table:
    return pa.Table.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(cols, schema, strict=True)], schema=schema
    )


def _arrival_table(rows: list[tuple[Any, ...]], bridge_id: str) -> pa.Table:
    c = list(zip(*rows, strict=True))
    n = len(rows)
    cols = [
        c[0], c[1], c[2], c[3], [KIND[k] for k in c[4]], c[5], c[6], c[7], c[8], c[9],
        [bool(v) for v in c[10]], [bool(v) for v in c[11]], c[12], c[13], c[14], c[15], c[16], c[17], c[18],
        c[19], [bridge_id] * n,
    ]  # fmt: skip
    return _table(TABLES["arrivals"], [list(x) for x in cols])


def export(store_path: str, out: str | Path, since: str | None = None) -> dict[str, int]:
    """Write (or rewrite) the Parquet export; returns rows written per table."""
    since_us = parse_since(since) if since else None
    since_day = day_of(since_us) if since_us is not None else None
    if not Path(store_path).exists():
        raise FileNotFoundError(store_path)
    out = Path(out)
    conn = connect_ro(store_path)
    try:
        return _export(conn, out, since_us, since_day)
    finally:
        conn.close()


def _export(
    conn: sqlite3.Connection, out: Path, since_us: int | None, since_day: str | None
) -> dict[str, int]:
    row = conn.execute("SELECT value FROM meta WHERE key='bridge_id'").fetchone()
    bridge_id = row[0] if row else "bridge"
    tag = _safe(bridge_id)
    state_path = out / "_leadwire_export" / (tag + ".json")
    state: dict[str, int] = {}
    if state_path.exists():
        try:
            state = json.loads(state_path.read_text())
        except (OSError, ValueError):
            state = {}
    conn.execute("BEGIN")  # one snapshot of the store for the whole export
    counts = {"arrivals": 0, "losses": 0, "boots": 0}
    max_id = conn.execute("SELECT COALESCE(MAX(id), 0) FROM arrivals").fetchone()[0]
    lo_id = int(state.get("arrivals_max_id", -1)) + 1  # ids up to the recorded one are published
    if since_us is not None:
        lo = conn.execute("SELECT MIN(id) FROM arrivals WHERE rx_us >= ?", (since_us,)).fetchone()[0]
        lo_id = max(lo_id, lo if lo is not None else max_id + 1)
    for chunk in range(lo_id // CHUNK, max_id // CHUNK + 1):
        first = max(lo_id, chunk * CHUNK)
        rows = conn.execute(_ARRIVALS_SQL, (first, (chunk + 1) * CHUNK)).fetchall()
        for day, rs in sorted(_by_day(rows, 16).items()):
            if since_day is not None and day < since_day:
                continue
            _write(_arrival_table(rs, bridge_id), out / "arrivals" / ("%s=%s" % (PARTITION_COLUMN, day))
                   / ("part-%s-%06d-%012d.parquet" % (tag, chunk, first)))  # fmt: skip
            counts["arrivals"] += len(rs)
    # losses and boots: small, and loss rows change when a recovery ends -> rewritten whole
    losses = conn.execute(_LOSSES_SQL).fetchall()
    for day, rs in sorted(_by_day(losses, 7).items()):
        if since_day is not None and day < since_day:
            continue
        c = [list(x) for x in zip(*rs, strict=True)]
        _write(_table(LOSSES, [*c, [bridge_id] * len(rs)]),
               out / "losses" / ("%s=%s" % (PARTITION_COLUMN, day)) / ("part-%s.parquet" % tag))  # fmt: skip
        counts["losses"] += len(rs)
    boots = conn.execute(_BOOTS_SQL).fetchall()
    for day, rs in sorted(_by_day(boots, 6).items()):
        if since_day is not None and day < since_day:
            continue
        c = [list(x) for x in zip(*rs, strict=True)]
        _write(_table(BOOTS, [*c, [bridge_id] * len(rs)]),
               out / "boots" / ("%s=%s" % (PARTITION_COLUMN, day)) / ("part-%s.parquet" % tag))  # fmt: skip
        counts["boots"] += len(rs)
    conn.execute("COMMIT")
    state_path.parent.mkdir(parents=True, exist_ok=True)
    state["arrivals_max_id"] = max(int(state.get("arrivals_max_id", 0)), max_id)
    tmp = state_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, state_path)
    return counts
