"""The durable store: SQLite in WAL mode, one writer, batched transactions.

Tables (docs/bridge.md, "Store"):

* ``devices``   one row per device: the client offset n and all client state, the counters (JSON).
* ``events``    every polled event exactly once: primary key (dev, boot_epoch, offset).
* ``reports``   every pushed report exactly once: key (dev, boot_epoch, channel, session, number).
* ``arrivals``  every arrival, duplicates and late copies included, with its lead; feeds the export.
* ``losses``    one row per recovery (spec 004 case 3) the bridge acted on.
* ``boots``     one row per device boot seen.

The rows a client produced since the last commit and its ``devices`` row (offset n, arrival
counter, counters) are written in ONE transaction (:meth:`Store.write`). After a SIGKILL the
bridge restarts from the committed n: the events after it are still in the device's ring and are
polled again, so the store has neither a duplicate nor a gap.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .client import Boot, ClientState, DeviceClient, Loss

SCHEMA_VERSION = "1"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS devices(
    dev INTEGER PRIMARY KEY,
    device_id TEXT NOT NULL UNIQUE,
    transport TEXT NOT NULL,
    address TEXT NOT NULL,
    n INTEGER NOT NULL DEFAULT 0,
    has_n INTEGER NOT NULL DEFAULT 0,
    boot_epoch INTEGER,
    boots INTEGER NOT NULL DEFAULT 0,
    lead_last INTEGER,
    arrival INTEGER NOT NULL DEFAULT 0,
    loss_seq INTEGER NOT NULL DEFAULT 0,
    session INTEGER NOT NULL DEFAULT 0,
    firmware TEXT NOT NULL DEFAULT '',
    board TEXT NOT NULL DEFAULT '',
    board_id TEXT NOT NULL DEFAULT '',
    counters TEXT NOT NULL DEFAULT '{}',
    updated_us INTEGER
);
CREATE TABLE IF NOT EXISTS events(
    dev INTEGER NOT NULL, boot_epoch INTEGER NOT NULL, offset INTEGER NOT NULL,
    channel INTEGER NOT NULL, priority INTEGER NOT NULL, data BLOB NOT NULL, arrival INTEGER NOT NULL,
    PRIMARY KEY(dev, boot_epoch, offset)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS reports(
    dev INTEGER NOT NULL, boot_epoch INTEGER NOT NULL, channel INTEGER NOT NULL, session INTEGER NOT NULL,
    number INTEGER NOT NULL, priority INTEGER NOT NULL, data BLOB NOT NULL, arrival INTEGER NOT NULL,
    PRIMARY KEY(dev, boot_epoch, channel, session, number)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS arrivals(
    id INTEGER PRIMARY KEY,
    dev INTEGER NOT NULL, arrival INTEGER NOT NULL, kind INTEGER NOT NULL, boot_epoch INTEGER NOT NULL,
    boots INTEGER NOT NULL, channel INTEGER NOT NULL, session INTEGER NOT NULL, lead_channel INTEGER NOT NULL,
    seq INTEGER NOT NULL, lead INTEGER NOT NULL, duplicate INTEGER NOT NULL, retransmission INTEGER NOT NULL,
    priority INTEGER NOT NULL, payload_bytes INTEGER NOT NULL, frame_bytes INTEGER NOT NULL,
    gen_us INTEGER, rx_us INTEGER NOT NULL, commit_us INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS losses(
    dev INTEGER NOT NULL, seq INTEGER NOT NULL, boot_epoch INTEGER NOT NULL, client_n INTEGER NOT NULL,
    n0 INTEGER NOT NULL, n1 INTEGER NOT NULL, lost INTEGER, cause TEXT NOT NULL,
    started_us INTEGER NOT NULL, ended_us INTEGER, recovered INTEGER NOT NULL, firmware TEXT NOT NULL,
    PRIMARY KEY(dev, seq)
);
CREATE TABLE IF NOT EXISTS boots(
    dev INTEGER NOT NULL, boot_epoch INTEGER NOT NULL, boots INTEGER NOT NULL, firmware TEXT NOT NULL,
    board TEXT NOT NULL, first_seen_us INTEGER NOT NULL, detected_by TEXT NOT NULL,
    PRIMARY KEY(dev, boot_epoch)
);
"""

ARRIVAL_COLUMNS = (
    "dev, arrival, kind, boot_epoch, boots, channel, session, lead_channel, seq, lead, duplicate, "
    "retransmission, priority, payload_bytes, frame_bytes, gen_us, rx_us"
)

_DEVICE_UPDATE = (
    "UPDATE devices SET n=?, has_n=?, boot_epoch=?, boots=?, lead_last=?, arrival=?, loss_seq=?, session=?, "
    "firmware=?, board=?, board_id=?, counters=?, updated_us=%d WHERE dev=?"
)


@dataclass
class Batch:
    """Everything one transaction writes; built on the event loop, written by the store thread."""

    events: list[tuple[Any, ...]] = field(default_factory=list)
    reports: list[tuple[Any, ...]] = field(default_factory=list)
    arrivals: list[tuple[Any, ...]] = field(default_factory=list)
    losses: list[tuple[Any, ...]] = field(default_factory=list)
    boots: list[tuple[Any, ...]] = field(default_factory=list)
    devices: list[tuple[Any, ...]] = field(default_factory=list)
    acks: list[tuple[DeviceClient, list[bytes]]] = field(default_factory=list)
    commit_us: int = 0

    def __len__(self) -> int:
        return len(self.arrivals) + len(self.losses) + len(self.boots) + len(self.devices)


def loss_row(dev: int, firmware: str, r: Loss) -> tuple[Any, ...]:
    return (
        dev, r.seq, r.boot_epoch, r.client_n, r.n0, r.n1, r.lost, r.cause, r.started_us, r.ended_us,
        r.recovered, firmware,
    )  # fmt: skip


def boot_row(dev: int, b: Boot) -> tuple[Any, ...]:
    return (dev, b.boot_epoch, b.boots, b.firmware, b.board, b.first_seen_us, b.detected_by)


def drain(clients: Iterable[DeviceClient], batch: Batch) -> None:
    """Move every dirty client's outputs and state into the batch (on the event loop thread)."""
    for c in clients:
        if not c.dirty:
            continue
        c.dirty = False
        if c.out_events:
            batch.events.extend(c.out_events)
            c.out_events = []
        if c.out_reports:
            batch.reports.extend(c.out_reports)
            c.out_reports = []
        if c.out_arrivals:
            batch.arrivals.extend(c.out_arrivals)
            c.out_arrivals = []
        if c.out_losses:
            # the same Loss may be listed several times (started, then ended): last state wins
            batch.losses.extend(loss_row(c.dev_key, c.firmware, r) for r in c.out_losses)
            c.out_losses = []
        if c.out_boots:
            batch.boots.extend(boot_row(c.dev_key, b) for b in c.out_boots)
            c.out_boots = []
        if c.out_acks:
            batch.acks.append((c, c.out_acks))
            c.out_acks = []
        batch.devices.append(c.snapshot())


class Store:
    """One connection, used by one writer thread at a time (the daemon's single store executor)."""

    def __init__(self, path: str, bridge_id: str = "bridge") -> None:
        self.path = path
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        c = self.conn
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process crashes
        c.execute("PRAGMA busy_timeout=5000")
        c.executescript(SCHEMA)
        with_tx(c, lambda: self._meta(bridge_id))
        self.commits = 0
        self.rows = 0

    def _meta(self, bridge_id: str) -> None:
        self.conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('bridge_id', ?)", (bridge_id,))

    def close(self) -> None:
        self.conn.close()

    def register(self, device_id: str, transport: str, address: str) -> tuple[int, ClientState | None]:
        """The device's key, and its stored client state (None when the store has never seen it)."""
        c = self.conn
        row = c.execute(
            "SELECT dev, n, has_n, boot_epoch, boots, lead_last, arrival, loss_seq, session, firmware, "
            "board, board_id, counters FROM devices WHERE device_id=?",
            (device_id,),
        ).fetchone()
        if row is None:
            cur = c.execute(
                "INSERT INTO devices(device_id, transport, address) VALUES (?,?,?)",
                (device_id, transport, address),
            )
            assert cur.lastrowid is not None
            return cur.lastrowid, None
        c.execute("UPDATE devices SET transport=?, address=? WHERE dev=?", (transport, address, row[0]))
        st = ClientState(
            n=row[1],
            has_n=bool(row[2]),
            boot_epoch=row[3],
            boots=row[4],
            lead_last=row[5],
            arrival=row[6],
            loss_seq=row[7],
            session=row[8],
            firmware=row[9],
            board=row[10],
            board_id=row[11],
            counters=json.loads(row[12] or "{}"),
        )
        # a recovery phase still open when the last run stopped goes on where it was
        rec = c.execute(
            "SELECT seq, boot_epoch, client_n, n0, n1, lost, cause, started_us, recovered FROM losses "
            "WHERE dev=? AND ended_us IS NULL ORDER BY seq DESC LIMIT 1",
            (row[0],),
        ).fetchone()
        if rec is not None and rec[1] == st.boot_epoch:
            st.recovery = Loss(rec[0], rec[1], rec[2], rec[3], rec[4], rec[5], rec[6], rec[7], None, rec[8])
        return row[0], st

    def write(self, b: Batch) -> None:
        """One transaction: the clients' rows and their devices rows together."""
        c = self.conn
        c.execute("BEGIN")
        try:
            if b.events:
                c.executemany("INSERT OR IGNORE INTO events VALUES (?,?,?,?,?,?,?)", b.events)
            if b.reports:
                c.executemany("INSERT OR IGNORE INTO reports VALUES (?,?,?,?,?,?,?,?)", b.reports)
            if b.arrivals:
                c.executemany(
                    "INSERT INTO arrivals(%s, commit_us) VALUES (%s%d)"
                    % (ARRIVAL_COLUMNS, "?," * 17, b.commit_us),
                    b.arrivals,
                )
            if b.losses:
                c.executemany("INSERT OR REPLACE INTO losses VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", b.losses)
            if b.boots:
                c.executemany("INSERT OR IGNORE INTO boots VALUES (?,?,?,?,?,?,?)", b.boots)
            if b.devices:
                c.executemany(_DEVICE_UPDATE % b.commit_us, b.devices)
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        self.commits += 1
        self.rows += len(b.arrivals)


def with_tx(conn: sqlite3.Connection, fn: Any) -> Any:
    conn.execute("BEGIN")
    try:
        out = fn()
        conn.execute("COMMIT")
        return out
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def connect_ro(path: str) -> sqlite3.Connection:
    """A read-only connection for `status` and `export` (never creates the file)."""
    conn = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    conn.execute("PRAGMA busy_timeout=5000")
    return conn
