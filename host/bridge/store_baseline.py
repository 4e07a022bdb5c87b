"""The comparison stores the benches measure the bridge's store against (not used by the bridge).

The bridge's own schema lives in store.py (written) and store_reader.py (read); the SQL of the
stores it is compared with lives here, so that no SQL is written outside host/bridge/store*:

    PlainEvents(path)      one events table keyed (dev, boot_epoch, offset): SQLite alone
    Schema1(path)          schema 1 (store.py migrates it): an events row and an arrival row per event
    MqttEvents(path)       the MQTT peer's subscriber store: (arrival, seq, dup, data)

All open WAL with synchronous=NORMAL (the bridge's settings) and write one transaction per call.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

_PLAIN = (
    "CREATE TABLE events(dev INTEGER, boot_epoch INTEGER, offset INTEGER, channel INTEGER,"
    " priority INTEGER, data BLOB, arrival INTEGER, PRIMARY KEY(dev, boot_epoch, offset)) WITHOUT ROWID"
)

_V1 = """
CREATE TABLE events(dev INTEGER NOT NULL, boot_epoch INTEGER NOT NULL, offset INTEGER NOT NULL,
    channel INTEGER NOT NULL, priority INTEGER NOT NULL, data BLOB NOT NULL, arrival INTEGER NOT NULL,
    PRIMARY KEY(dev, boot_epoch, offset)) WITHOUT ROWID;
CREATE TABLE arrivals(id INTEGER PRIMARY KEY, dev INTEGER NOT NULL, arrival INTEGER NOT NULL,
    kind INTEGER NOT NULL, boot_epoch INTEGER NOT NULL, boots INTEGER NOT NULL, channel INTEGER NOT NULL,
    session INTEGER NOT NULL, lead_channel INTEGER NOT NULL, seq INTEGER NOT NULL, lead INTEGER NOT NULL,
    duplicate INTEGER NOT NULL, retransmission INTEGER NOT NULL, priority INTEGER NOT NULL,
    payload_bytes INTEGER NOT NULL, frame_bytes INTEGER NOT NULL, gen_us INTEGER, rx_us INTEGER NOT NULL,
    commit_us INTEGER NOT NULL);
"""

_MQTT = "CREATE TABLE events(arrival INTEGER PRIMARY KEY, seq INTEGER, dup INTEGER, data BLOB)"


def _open(path: str, schema: str, **kw: Any) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, **kw)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(schema)
    return conn


class PlainEvents:
    """SQLite alone: rows (dev, boot_epoch, offset, channel, priority, data, arrival)."""

    def __init__(self, path: str) -> None:
        self.conn = _open(path, _PLAIN)

    def write(self, rows: Sequence[tuple[Any, ...]]) -> None:
        self.conn.execute("BEGIN")
        self.conn.executemany("INSERT INTO events VALUES (?,?,?,?,?,?,?)", rows)
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


class Schema1:
    """Schema 1: events rows (as PlainEvents, duplicates ignored) and arrival rows (dev, arrival, kind,
    boot_epoch, boots, channel, session, lead_channel, seq, lead, duplicate, retransmission, priority,
    payload_bytes, frame_bytes, gen_us, rx_us) committed at `commit_us`, one transaction."""

    def __init__(self, path: str) -> None:
        self.conn = _open(path, _V1)

    def write(
        self, events: Sequence[tuple[Any, ...]], arrivals: Sequence[tuple[Any, ...]], commit_us: int
    ) -> None:
        c = self.conn
        c.execute("BEGIN")
        c.executemany("INSERT OR IGNORE INTO events VALUES (?,?,?,?,?,?,?)", events)
        c.executemany(
            "INSERT INTO arrivals(dev, arrival, kind, boot_epoch, boots, channel, session, lead_channel, "
            "seq, lead, duplicate, retransmission, priority, payload_bytes, frame_bytes, gen_us, rx_us, "
            "commit_us) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,%d)" % commit_us,
            arrivals,
        )
        c.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


class MqttEvents:
    """The MQTT subscriber's store; written from its flusher thread, read at the end."""

    def __init__(self, path: str) -> None:
        self.conn = _open(path, _MQTT, check_same_thread=False)

    def write(self, rows: Sequence[tuple[int, int, int, bytes]]) -> None:
        """Rows (arrival, seq, dup, data)."""
        self.conn.execute("BEGIN")
        self.conn.executemany("INSERT INTO events VALUES (?,?,?,?)", rows)
        self.conn.execute("COMMIT")

    def seqs(self) -> list[int]:
        """The payloads' sequence numbers in arrival order."""
        return [r[0] for r in self.conn.execute("SELECT seq FROM events ORDER BY arrival")]

    def close(self) -> None:
        self.conn.close()
