"""The durable store: SQLite in WAL mode, one writer, batched transactions.

Tables (docs/bridge.md, "Store"), schema version 2:

* ``devices``   one row per device: the client offset n and all client state, the counters (JSON).
* ``arrivals``  every arrival (events and reports, duplicates and retransmissions included) with its
                lead, sizes and times, and the payload of first arrivals (``data``). Exactly once is
                two partial unique indexes: (dev, boot_epoch, seq) over first arrivals of events and
                (dev, boot_epoch, channel, session, seq) over first arrivals of reports.
* ``events``, ``reports``  views: the first arrivals (what schema 1 kept in two more tables).
* ``losses``    one row per recovery (spec 004 case 3) the bridge acted on.
* ``boots``     one row per device boot seen.

One table instead of schema 1's ``events`` + ``arrivals`` pair: each event is one row and two
B-tree inserts (the table, appended at its end, and the partial index), not two rows and three.

The rows a client produced since the last commit and its ``devices`` row (offset n, arrival
counter, counters) are written in ONE transaction (:meth:`Store.write`). After a SIGKILL the
bridge restarts from the committed n: the events after it are still in the device's ring and are
polled again, so the store has neither a duplicate nor a gap.

Durability (``synchronous``, ``[store] synchronous``): with ``"full"`` (the default) a COMMIT
returns only after the WAL holding it was fsynced, so the ACKs the daemon sends after
:meth:`Store.write` returns confirm reports that survive a power loss; one fsync per commit (a
commit is a ``commit_interval`` batch: group commit). tests/bridge/test_powercut.py proves it with
power cuts (tools/powercut.py); ``"normal"`` (fsync at checkpoints only) fails that test.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .client import SEG_ARRIVAL, SEG_EVENT, Boot, ClientState, DeviceClient, Loss

SCHEMA_VERSION = "2"
SYNC_MODES = ("full", "normal")  # PRAGMA synchronous of the writer connection ([store] synchronous)

_ARRIVALS_TABLE = """
CREATE TABLE IF NOT EXISTS arrivals(
    id INTEGER PRIMARY KEY,
    dev INTEGER NOT NULL, arrival INTEGER NOT NULL, kind INTEGER NOT NULL DEFAULT 0,
    boot_epoch INTEGER NOT NULL, boots INTEGER NOT NULL, channel INTEGER NOT NULL,
    session INTEGER NOT NULL DEFAULT 0, lead_channel INTEGER NOT NULL DEFAULT -1,
    seq INTEGER NOT NULL, lead INTEGER NOT NULL, duplicate INTEGER NOT NULL DEFAULT 0,
    retransmission INTEGER NOT NULL DEFAULT 0, priority INTEGER NOT NULL,
    payload_bytes INTEGER NOT NULL, frame_bytes INTEGER NOT NULL,
    gen_us INTEGER, rx_us INTEGER NOT NULL, commit_us INTEGER NOT NULL,
    data BLOB
);
"""

SCHEMA = (
    """
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
    updated_us INTEGER,
    last_seen_us INTEGER
);
"""
    + _ARRIVALS_TABLE
    + """
CREATE UNIQUE INDEX IF NOT EXISTS arrivals_event_once
    ON arrivals(dev, boot_epoch, seq) WHERE kind = 0 AND duplicate = 0;
CREATE UNIQUE INDEX IF NOT EXISTS arrivals_report_once
    ON arrivals(dev, boot_epoch, channel, session, seq) WHERE kind = 1 AND duplicate = 0;
CREATE VIEW IF NOT EXISTS events AS
    SELECT dev, boot_epoch, seq AS offset, channel, priority, data, arrival
    FROM arrivals WHERE kind = 0 AND duplicate = 0;
CREATE VIEW IF NOT EXISTS reports AS
    SELECT dev, boot_epoch, channel, session, seq AS number, priority, data, arrival
    FROM arrivals WHERE kind = 1 AND duplicate = 0;
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
)

ARRIVAL_COLUMNS = (
    "dev, arrival, kind, boot_epoch, boots, channel, session, lead_channel, seq, lead, duplicate, "
    "retransmission, priority, payload_bytes, frame_bytes, gen_us, rx_us, data"
)

# first arrivals of polled events, the hot path: 12 values per row (client.DeviceClient._events),
# the constant columns from their defaults, payload_bytes from the data, commit_us a literal
_INSERT_EVENTS = (
    "INSERT INTO arrivals(dev, arrival, boot_epoch, boots, channel, seq, lead, priority, frame_bytes, "
    "gen_us, rx_us, data, payload_bytes, commit_us) "
    "VALUES (?1,?2,?3,?4,?5,?6,?7,?8,length(?12)+?9,?10,?11,?12,length(?12),%d)"
)
# every other arrival (duplicates, reports, retransmissions): all 18 columns
_INSERT_ARRIVALS = "INSERT INTO arrivals(%s, commit_us) VALUES (%s%%d)" % (ARRIVAL_COLUMNS, "?," * 18)

_DEVICE_UPDATE = (
    "UPDATE devices SET n=?, has_n=?, boot_epoch=?, boots=?, lead_last=?, arrival=?, loss_seq=?, session=?, "
    "firmware=?, board=?, board_id=?, counters=?, updated_us=%d WHERE dev=?"
)

# gen_us in a row of each segment kind (for the generation -> commit latency)
GEN_INDEX = {SEG_EVENT: 9, SEG_ARRIVAL: 15}


@dataclass
class Batch:
    """Everything one transaction writes; built on the event loop, written by the store thread.

    ``segments`` are (kind, rows) in arrival order per device: SEG_EVENT rows are first arrivals of
    polled events (the short row of ``_INSERT_EVENTS``), SEG_ARRIVAL rows any other arrival.
    """

    segments: list[tuple[int, list[tuple[Any, ...]]]] = field(default_factory=list)
    losses: list[tuple[Any, ...]] = field(default_factory=list)
    boots: list[tuple[Any, ...]] = field(default_factory=list)
    devices: list[tuple[Any, ...]] = field(default_factory=list)
    # (client, its push session when drained, ACKs): all of that session (a SUBSCRIBE clears them)
    acks: list[tuple[DeviceClient, int, list[bytes]]] = field(default_factory=list)
    # (last_seen_us, dev): the last valid answer of devices (reach.py), a few seconds apart at most
    seen: list[tuple[int, int]] = field(default_factory=list)
    commit_us: int = 0
    arrivals: int = 0  # rows in segments
    events: int = 0  # first arrivals of events among them

    def __len__(self) -> int:
        return self.arrivals + len(self.losses) + len(self.boots) + len(self.devices)


def loss_row(dev: int, firmware: str, r: Loss) -> tuple[Any, ...]:
    return (
        dev, r.seq, r.boot_epoch, r.client_n, r.n0, r.n1, r.lost, r.cause, r.started_us, r.ended_us,
        r.recovered, firmware,
    )  # fmt: skip


def boot_row(dev: int, b: Boot) -> tuple[Any, ...]:
    return (dev, b.boot_epoch, b.boots, b.firmware, b.board, b.first_seen_us, b.detected_by)


COUNTERS_EVERY = 1.0  # s: a devices row whose counters alone changed is written at most this often


def drain(clients: Iterable[DeviceClient], batch: Batch, now: float | None = None) -> None:
    """Move every dirty client's outputs and state into the batch (on the event loop thread).

    With `now` (the caller's clock, seconds), a client with no rows to write whose devices row
    differs from the last one drained only in its counters (an answer with no event: the polls
    and round trips counted) is left pending (``row_pending``, no longer dirty, so it is looked at
    again only when it changes again) and written once COUNTERS_EVERY has passed since that row,
    or with its next rows: every change of the offset n, the epoch or the arrival counter still
    commits with the rows it goes with, and the counters in the store are at most COUNTERS_EVERY
    old. Without `now` every dirty or pending client's row is written (a flush on request, the
    last one at stop)."""
    segs = batch.segments
    for c in clients:
        state = None
        if not c.dirty:
            if not c.row_pending or (now is not None and now - c.row_at < COUNTERS_EVERY):
                continue
        elif now is not None and not (c.out_segments or c.out_losses or c.out_boots or c.out_acks):
            state = c.row_state()
            if state == c.row_written and now - c.row_at < COUNTERS_EVERY:
                c.dirty = False
                c.row_pending = True
                continue
        c.dirty = c.row_pending = False
        if c.out_segments:
            segs.extend(c.out_segments)
            c.out_segments.clear()  # (the same list: a new one per drain is young for the collector)
            batch.arrivals += c.out_rows
            batch.events += c.out_event_rows
            c.out_rows = c.out_event_rows = 0
        if c.out_losses:
            # the same Loss may be listed several times (started, then ended): last state wins
            batch.losses.extend(loss_row(c.dev_key, c.firmware, r) for r in c.out_losses)
            c.out_losses = []
        if c.out_boots:
            batch.boots.extend(boot_row(c.dev_key, b) for b in c.out_boots)
            c.out_boots = []
        if c.out_acks:
            batch.acks.append((c, c.session, c.out_acks))
            c.out_acks = []
        if state is None:
            state = c.row_state()
        if now is not None:
            c.row_at = now
        c.row_written = state
        batch.devices.append(c.snapshot(state))


class Store:
    """One connection, used by one writer thread at a time (the daemon's single store executor).

    ``checkpoints = True`` moves WAL checkpoints off the writer: SQLite's automatic checkpoint
    (which copies the WAL back into the database inside a COMMIT) is turned off and a second
    connection on its own thread checkpoints (PASSIVE) at most every ``checkpoint_interval`` seconds
    after commits, so commits do not wait for it.
    """

    def __init__(
        self,
        path: str,
        bridge_id: str = "bridge",
        checkpoints: bool = False,
        checkpoint_interval: float = 0.5,
        synchronous: str = "full",
    ) -> None:
        if synchronous not in SYNC_MODES:
            raise ValueError("store: synchronous must be one of %s, got %r" % (SYNC_MODES, synchronous))
        self.path = path
        self.synchronous = synchronous
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        c = self.conn
        c.execute("PRAGMA journal_mode=WAL")
        # WAL + FULL (the default): COMMIT appends the transaction's frames to the WAL and fsyncs
        # the WAL before it returns; recovery after a power loss replays every WAL frame up to the
        # last valid commit frame, so a returned COMMIT is on disk. That is the whole guarantee the
        # ACKs need (they go out after write() returns), at one fsync per commit, and a commit is a
        # batch of commit_interval (group commit), not one per message. Why not NORMAL plus an fsync
        # of the WAL by hand before releasing ACKs: the same single fsync, but a second descriptor
        # on SQLite's file and a second way to get it wrong; FULL is SQLite's own durable commit.
        # WAL + NORMAL (the old default, "normal"): a COMMIT is only in the OS page cache when it
        # returns (it survives a crash of this process, not a power loss or kernel crash); the WAL
        # is fsynced at checkpoints. docs/bridge.md, "Durability".
        c.execute("PRAGMA synchronous=%s" % synchronous.upper())
        c.execute("PRAGMA busy_timeout=5000")
        c.execute("PRAGMA cache_size=-65536")  # 64 MiB: every device's hot index pages stay cached
        migrated = with_tx(c, self._migrate)
        c.executescript(SCHEMA)
        with_tx(c, self._add_columns)
        with_tx(c, lambda: self._meta(bridge_id))
        self.migrated_from = migrated
        self.commits = 0
        self.rows = 0
        self._ckpt: _Checkpointer | None = None
        if checkpoints:
            c.execute("PRAGMA wal_autocheckpoint=0")
            self._ckpt = _Checkpointer(path, checkpoint_interval)

    def _meta(self, bridge_id: str) -> None:
        self.conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('bridge_id', ?)", (bridge_id,))

    def _add_columns(self) -> None:
        """Columns added to schema 2 after its first release (a store of an older bridge)."""
        cols = {r[1] for r in self.conn.execute("PRAGMA table_info(devices)")}
        if "last_seen_us" not in cols:
            self.conn.execute("ALTER TABLE devices ADD COLUMN last_seen_us INTEGER")

    def _migrate(self) -> str | None:
        """Bring a schema 1 store (events + reports + arrivals tables) to schema 2, in place."""
        c = self.conn
        if c.execute("SELECT 1 FROM sqlite_master WHERE name='meta'").fetchone() is None:
            return None
        row = c.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if row is None or row[0] != "1":
            return None
        c.execute("ALTER TABLE arrivals RENAME TO arrivals_v1")
        c.execute(_ARRIVALS_TABLE)
        cols = ARRIVAL_COLUMNS.replace(", data", "")
        c.execute(
            "INSERT INTO arrivals(id, %s, commit_us, data) SELECT a.id, %s, a.commit_us, "
            "CASE WHEN a.duplicate = 0 THEN COALESCE(e.data, r.data) END FROM arrivals_v1 a "
            "LEFT JOIN events e ON a.kind = 0 AND a.duplicate = 0 AND e.dev = a.dev "
            "AND e.boot_epoch = a.boot_epoch AND e.offset = a.seq "
            "LEFT JOIN reports r ON a.kind = 1 AND a.duplicate = 0 AND r.dev = a.dev "
            "AND r.boot_epoch = a.boot_epoch AND r.channel = a.channel AND r.session = a.session "
            "AND r.number = a.seq ORDER BY a.id"
            % (cols, ", ".join("a." + x.strip() for x in cols.split(",")))
        )
        c.execute("DROP TABLE arrivals_v1")
        c.execute("DROP TABLE events")
        c.execute("DROP TABLE reports")
        c.execute("UPDATE meta SET value=? WHERE key='schema'", (SCHEMA_VERSION,))
        return "1"

    def close(self) -> None:
        if self._ckpt is not None:
            self._ckpt.close()
        self.conn.close()

    def register(self, device_id: str, transport: str, address: str) -> tuple[int, ClientState | None]:
        """The device's key, and its stored client state (None when the store has never seen it).

        Read under ``BEGIN IMMEDIATE``: it waits for any other writer's transaction (the writer
        process of a bridge that was just killed) and reads the offsets as committed.
        """
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            out = self._register(device_id, transport, address)
            c.execute("COMMIT")
            return out
        except BaseException:
            c.execute("ROLLBACK")
            raise

    def register_many(self, devices: list[tuple[str, str, str]]) -> list[tuple[int, ClientState | None]]:
        """:meth:`register` for many devices (device_id, transport, address) in one transaction: a
        bridge's start costs one commit (one fsync), not one per device."""
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            out = [self._register(*d) for d in devices]
            c.execute("COMMIT")
            return out
        except BaseException:
            c.execute("ROLLBACK")
            raise

    def _register(self, device_id: str, transport: str, address: str) -> tuple[int, ClientState | None]:
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
            st.recovery = Loss.row(
                rec[0], rec[1], rec[2], rec[3], rec[4], rec[5], rec[6], rec[7], None, rec[8]
            )
        return row[0], st

    def write(self, b: Batch) -> int:
        """One transaction: the clients' rows and their devices rows together.

        Returns how many first arrivals had to be stored as duplicates because the store already
        held their key (0 unless a device reused a boot epoch: see :meth:`_write_conflicting`).
        """
        c = self.conn
        conflicts = 0
        c.execute("BEGIN")
        try:
            try:
                self._rows(b.segments, b.commit_us)
            except sqlite3.IntegrityError:
                c.execute("ROLLBACK")
                c.execute("BEGIN")
                conflicts = self._write_conflicting(b.segments, b.commit_us)
            if b.losses:
                c.executemany("INSERT OR REPLACE INTO losses VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", b.losses)
            if b.boots:
                c.executemany("INSERT OR IGNORE INTO boots VALUES (?,?,?,?,?,?,?)", b.boots)
            if b.devices:
                c.executemany(_DEVICE_UPDATE % b.commit_us, b.devices)
            if b.seen:
                c.executemany("UPDATE devices SET last_seen_us=? WHERE dev=?", b.seen)
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        self.commits += 1
        self.rows += b.arrivals
        if self._ckpt is not None:
            self._ckpt.poke()
        return conflicts

    def _rows(self, segments: list[tuple[int, list[tuple[Any, ...]]]], commit_us: int) -> None:
        c = self.conn
        ev = _INSERT_EVENTS % commit_us
        arr = _INSERT_ARRIVALS % commit_us
        for kind, rows in segments:
            c.executemany(ev if kind == SEG_EVENT else arr, rows)

    def _write_conflicting(self, segments: list[tuple[int, list[tuple[Any, ...]]]], commit_us: int) -> int:
        """Slow path: some first arrival's key is already stored (the unique indexes refused it).

        The bridge's offsets never produce that; a device that reused a boot epoch (a 32-bit random
        number) would. Such rows are stored as duplicate arrivals (duplicate = 1, their payload
        kept) instead of failing the transaction or being dropped: counted, never silent.
        """
        c = self.conn
        ev = _INSERT_EVENTS % commit_us
        arr = _INSERT_ARRIVALS % commit_us
        conflicts = 0
        for kind, rows in segments:
            for r in rows:
                try:
                    c.execute(ev if kind == SEG_EVENT else arr, r)
                except sqlite3.IntegrityError:
                    conflicts += 1
                    if kind == SEG_EVENT:
                        dev, arrival, epoch, boots, ch, seq, lead, prio, extra, gen, rx, data = r
                        r = (dev, arrival, 0, epoch, boots, ch, 0, -1, seq, lead, True, False, prio,
                             len(data), len(data) + extra, gen, rx, data)  # fmt: skip
                    else:
                        r = (*r[:10], True, *r[11:])
                    c.execute(arr, r)
        return conflicts


class _Checkpointer:
    """WAL checkpoints on their own connection and thread, so commits never run one."""

    def __init__(self, path: str, interval: float) -> None:
        self.interval = interval
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA busy_timeout=5000")
        self.wake = threading.Event()
        self.stop = False
        self.thread = threading.Thread(target=self._run, name="leadwire-checkpoint", daemon=True)
        self.thread.start()
        self.commits = 0

    def poke(self) -> None:
        self.commits += 1
        self.wake.set()

    def _run(self) -> None:
        last = 0.0
        while not self.stop:
            self.wake.wait(1.0)
            self.wake.clear()
            if self.stop:
                break
            now = time.monotonic()
            if now - last < self.interval:
                time.sleep(self.interval - (now - last))
            last = time.monotonic()
            try:
                # PASSIVE: copies what it can without blocking the writer or waiting for readers
                self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            except sqlite3.Error:
                pass

    def close(self) -> None:
        self.stop = True
        self.wake.set()
        self.thread.join(timeout=10)
        try:
            self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error:
            pass
        self.conn.close()


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
