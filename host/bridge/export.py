"""`leadwire export`: the store as Hive-partitioned Parquet for the fleet job (host/fleet/schema.py).

Layout under ``--out DIR`` (schemas: :mod:`leadwire.fleet.schema`; publishing, merging and the
files' names: export_publish.py; the run manifests: export_manifest.py)::

    arrivals/date=YYYY-MM-DD/part-<bridge>-<hi>.parquet   rows of a run: arrival ids up to <hi>
    losses/date=YYYY-MM-DD/part-<bridge>-<hi>.parquet     rows of a run: losses rowids up to <hi>
    boots/date=YYYY-MM-DD/part-<bridge>-<hi>.parquet      rows of a run: boots rowids up to <hi>
    <table>/date=.../part-<bridge>-<hi>-c<run>.parquet    small files merged by run <run>
    _runs/<bridge>/<run>.json                             what run <run> added and merged away

Each run exports what the store gained since the window the bridge's newest manifest ends at:
arrivals by id, losses and boots by SQLite rowid (a loss row the bridge rewrites when its
recovery ends, late, gets a new rowid: its day is published again with the row replaced). Only
the days those rows belong to are touched, each republished atomically (a reader sees a day's
old files or its new ones); a day whose small files of this bridge would exceed
``compact_files`` has them merged into one. No row is written twice, also when a run is retried
after a crash; ``since`` only limits what a fresh export writes. Shards (one store per bridge)
export into the same directory, one publisher at a time (a lock in ``_leadwire_export``).
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from leadwire.fleet.schema import BOOTS, LOSSES, TABLES

from . import export_manifest as manifest
from .export_publish import (
    COMPACT_FILES,
    STATE_DIR,
    ExportError,
    day_dir,
    leftovers,
    locked,
    merge_tables,
    part_name,
    publish_day,
    read_day,
)
from .store import connect_ro
from .store_reader import parse_time

CHUNK = 1_000_000
DAY_US = 86_400_000_000
KIND = ("event", "report")
# The columns that name a loss or boot row: a row exported again (a recovery that ended after its
# first export) replaces the one with the same key.
ROW_KEYS = {
    "losses": ("device_id", "boot_epoch", "cause", "started_ts"),
    "boots": ("device_id", "boot_epoch"),
}

_ARRIVALS_SQL = """
SELECT d.device_id, a.boot_epoch, a.boots, a.channel, a.kind, a.session, a.lead_channel, a.seq, a.arrival,
       a.lead, a.duplicate, a.retransmission, a.priority, a.payload_bytes, a.frame_bytes, a.gen_us, a.rx_us,
       a.commit_us, COALESCE(b.firmware, d.firmware), d.transport, a.id
FROM arrivals a JOIN devices d ON d.dev = a.dev
LEFT JOIN boots b ON b.dev = a.dev AND b.boot_epoch = a.boot_epoch
WHERE a.id >= ? AND a.id <= ? ORDER BY a.id
"""
_LOSSES_SQL = """
SELECT d.device_id, l.boot_epoch, l.client_n, l.n0, l.n1, l.lost, l.cause, l.started_us, l.ended_us,
       l.recovered, l.firmware, d.transport, l.rowid
FROM losses l JOIN devices d ON d.dev = l.dev WHERE l.rowid > ? AND l.rowid <= ? ORDER BY l.dev, l.seq
"""
_BOOTS_SQL = """
SELECT d.device_id, b.boot_epoch, b.boots, b.firmware, b.board, d.transport, b.first_seen_us, b.detected_by,
       b.rowid
FROM boots b JOIN devices d ON d.dev = b.dev WHERE b.rowid > ? AND b.rowid <= ?
ORDER BY b.dev, b.first_seen_us
"""
# per small table: its query over a rowid window, the column of its date, its schema
_SMALL = {"losses": (_LOSSES_SQL, 7, LOSSES), "boots": (_BOOTS_SQL, 6, BOOTS)}


def day_of(us: int) -> str:
    return (dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=(us // DAY_US) * DAY_US)).strftime("%Y-%m-%d")


def parse_since(value: str) -> int:
    """YYYY-MM-DD, an ISO timestamp (UTC if naive) or an age (10m, 2h, 1d) -> us since the epoch."""
    return parse_time(value)


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


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


def _small_table(schema: pa.Schema, rows: list[tuple[Any, ...]], bridge_id: str) -> pa.Table:
    c = [list(x) for x in zip(*rows, strict=True)][:-1]  # without the rowid
    return _table(schema, [*c, [bridge_id] * len(rows)])


def export(
    store_path: str,
    out: str | Path,
    since: str | None = None,
    compact_files: int = COMPACT_FILES,
    retain_days: float = manifest.RETAIN_DAYS,
) -> dict[str, int]:
    """Export what the store gained since the last run; returns rows written per table (and
    `run`: the run's number, 0 when nothing was new). ExportError (one line) when the directory
    needs `leadwire export --repair`."""
    since_us = parse_since(since) if since else None
    if not Path(store_path).exists():
        raise FileNotFoundError(store_path)
    out = Path(out)
    conn = connect_ro(store_path)
    try:
        row = conn.execute("SELECT value FROM meta WHERE key='bridge_id'").fetchone()
        bridge_id = row[0] if row else "bridge"
        with locked(out):
            return _export(conn, out, bridge_id, since_us, compact_files, retain_days)
    finally:
        conn.close()


def _start(out: Path, tag: str) -> tuple[int, dict[str, int]]:
    """This run's number and where each table's window starts: the newest manifest's ends (an
    export written before manifests: its last arrival id; its small tables from the start)."""
    left = leftovers(out, list(TABLES))
    if left:
        raise ExportError(
            "%s: an export run stopped while publishing %s: run `leadwire export --repair --out %s`"
            % (out, left[0].relative_to(out), out)
        )
    last = manifest.latest(out, tag)
    if last is not None:
        return int(last["run"]) + 1, {t: int(last["windows"][t][1]) for t in TABLES}
    lo = {t: 0 for t in TABLES}
    legacy = out / STATE_DIR / (tag + ".json")
    if legacy.exists():
        try:
            lo["arrivals"] = int(json.loads(legacy.read_text()).get("arrivals_max_id", 0))
        except (OSError, ValueError, AttributeError, TypeError):
            raise manifest.corrupt(legacy, "not the export state", out) from None
    return 1, lo


def _export(
    conn: sqlite3.Connection,
    out: Path,
    bridge_id: str,
    since_us: int | None,
    compact_files: int,
    retain_days: float,
) -> dict[str, int]:
    tag = _safe(bridge_id)
    since_day = day_of(since_us) if since_us is not None else None
    run, lo = _start(out, tag)
    conn.execute("BEGIN")  # one snapshot of the store for the whole export
    hi = {
        "arrivals": conn.execute("SELECT COALESCE(MAX(id), 0) FROM arrivals").fetchone()[0],
        "losses": conn.execute("SELECT COALESCE(MAX(rowid), 0) FROM losses").fetchone()[0],
        "boots": conn.execute("SELECT COALESCE(MAX(rowid), 0) FROM boots").fetchone()[0],
    }
    hi = {t: max(hi[t], lo[t]) for t in TABLES}
    counts = {t: 0 for t in TABLES}
    days: dict[str, set[str]] = defaultdict(set)

    def publish(table: str, day: str, rows: list[tuple[Any, ...]], end: int) -> None:
        """Rows of one window (rowid or id last) into their day: those beyond the day's coverage."""
        if since_day is not None and day < since_day:
            return
        days[table].add(day)
        cur = read_day(out, table, day, tag)
        rows = [r for r in rows if r[-1] > cur.covered]
        if not rows:
            return
        if table == "arrivals":
            t = _arrival_table(rows, bridge_id)
        else:
            t = _small_table(_SMALL[table][2], rows, bridge_id)
        drop, rewrite = _replaced(out, table, day, cur.own, t)
        publish_day(out, table, day, tag, run, (part_name(tag, end), t), drop, rewrite, compact_files)
        counts[table] += len(rows)

    lo_id = lo["arrivals"] + 1
    if since_us is not None:
        first = conn.execute("SELECT MIN(id) FROM arrivals WHERE rx_us >= ?", (since_us,)).fetchone()[0]
        lo_id = max(lo_id, first if first is not None else hi["arrivals"] + 1)
    for chunk in range(lo_id // CHUNK, hi["arrivals"] // CHUNK + 1):
        first, end = max(lo_id, chunk * CHUNK), min(hi["arrivals"], (chunk + 1) * CHUNK - 1)
        rows = conn.execute(_ARRIVALS_SQL, (first, end)).fetchall()
        for day, rs in sorted(_by_day(rows, 16).items()):
            publish("arrivals", day, rs, end)
    for table, (sql, ts_col, _) in _SMALL.items():
        rows = conn.execute(sql, (lo[table], hi[table])).fetchall()
        for day, rs in sorted(_by_day(rows, ts_col).items()):
            publish(table, day, rs, hi[table])
    conn.execute("COMMIT")
    if hi == lo:
        return {**counts, "run": 0}
    added, removed = manifest.collect(out, tag, run, lo, days)
    doc = {
        "format": manifest.FORMAT,
        "bridge": bridge_id,
        "run": run,
        "time": time.time(),
        "windows": {t: [lo[t], hi[t]] for t in TABLES},
        "added": added,
        "removed": removed,
    }
    manifest.write(out, tag, doc)
    manifest.prune(out, tag, retain_days)
    return {**counts, "run": run}


def _replaced(
    out: Path, table: str, day: str, own: dict[str, int], new: pa.Table
) -> tuple[list[str], pa.Table | None]:
    """For a loss or boot row exported again (its key already in this bridge's files of the
    day): all of them to drop, and their rows without the replaced ones to write back."""
    keys = ROW_KEYS.get(table)
    if keys is None or not own:
        return [], None
    d = day_dir(out, table, day)
    old = merge_tables([pq.read_table(d / n) for n in sorted(own)])
    new_keys = set(zip(*(new.column(k).to_pylist() for k in keys), strict=True))
    mask = [k in new_keys for k in zip(*(old.column(k).to_pylist() for k in keys), strict=True)]
    if not any(mask):
        return [], None
    return sorted(own), old.filter(pc.invert(pa.array(mask)))
