"""The store: schema 1 -> 2 migration, the exactly-once index, the conflict slow path."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from leadwire.bridge.client import SEG_ARRIVAL, SEG_EVENT
from leadwire.bridge.store import Batch, Store
from leadwire.bridge.writer import StoreProcess

from .helpers import query

pytestmark = pytest.mark.timeout(60)

_V1 = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES ('schema', '1'), ('bridge_id', 'old');
CREATE TABLE devices(dev INTEGER PRIMARY KEY, device_id TEXT NOT NULL UNIQUE, transport TEXT NOT NULL,
    address TEXT NOT NULL, n INTEGER NOT NULL DEFAULT 0, has_n INTEGER NOT NULL DEFAULT 0, boot_epoch INTEGER,
    boots INTEGER NOT NULL DEFAULT 0, lead_last INTEGER, arrival INTEGER NOT NULL DEFAULT 0,
    loss_seq INTEGER NOT NULL DEFAULT 0, session INTEGER NOT NULL DEFAULT 0,
    firmware TEXT NOT NULL DEFAULT '',
    board TEXT NOT NULL DEFAULT '', board_id TEXT NOT NULL DEFAULT '', counters TEXT NOT NULL DEFAULT '{}',
    updated_us INTEGER);
CREATE TABLE events(dev INTEGER NOT NULL, boot_epoch INTEGER NOT NULL, offset INTEGER NOT NULL,
    channel INTEGER NOT NULL, priority INTEGER NOT NULL, data BLOB NOT NULL, arrival INTEGER NOT NULL,
    PRIMARY KEY(dev, boot_epoch, offset)) WITHOUT ROWID;
CREATE TABLE reports(dev INTEGER NOT NULL, boot_epoch INTEGER NOT NULL, channel INTEGER NOT NULL,
    session INTEGER NOT NULL, number INTEGER NOT NULL, priority INTEGER NOT NULL, data BLOB NOT NULL,
    arrival INTEGER NOT NULL, PRIMARY KEY(dev, boot_epoch, channel, session, number)) WITHOUT ROWID;
CREATE TABLE arrivals(id INTEGER PRIMARY KEY, dev INTEGER NOT NULL, arrival INTEGER NOT NULL,
    kind INTEGER NOT NULL, boot_epoch INTEGER NOT NULL, boots INTEGER NOT NULL, channel INTEGER NOT NULL,
    session INTEGER NOT NULL, lead_channel INTEGER NOT NULL, seq INTEGER NOT NULL, lead INTEGER NOT NULL,
    duplicate INTEGER NOT NULL, retransmission INTEGER NOT NULL, priority INTEGER NOT NULL,
    payload_bytes INTEGER NOT NULL, frame_bytes INTEGER NOT NULL, gen_us INTEGER, rx_us INTEGER NOT NULL,
    commit_us INTEGER NOT NULL);
CREATE TABLE losses(dev INTEGER NOT NULL, seq INTEGER NOT NULL, boot_epoch INTEGER NOT NULL,
    client_n INTEGER NOT NULL, n0 INTEGER NOT NULL, n1 INTEGER NOT NULL, lost INTEGER, cause TEXT NOT NULL,
    started_us INTEGER NOT NULL, ended_us INTEGER, recovered INTEGER NOT NULL, firmware TEXT NOT NULL,
    PRIMARY KEY(dev, seq));
CREATE TABLE boots(dev INTEGER NOT NULL, boot_epoch INTEGER NOT NULL, boots INTEGER NOT NULL,
    firmware TEXT NOT NULL, board TEXT NOT NULL, first_seen_us INTEGER NOT NULL, detected_by TEXT NOT NULL,
    PRIMARY KEY(dev, boot_epoch));
INSERT INTO devices(dev, device_id, transport, address, n, has_n, boot_epoch, arrival)
    VALUES (1, 'd', 'udp', '127.0.0.1:1', 11, 1, 7, 4);
INSERT INTO events VALUES (1, 7, 10, 1, 0, x'0a', 1), (1, 7, 11, 2, 0, x'0b', 3);
INSERT INTO reports VALUES (1, 7, 5, 1, 1, 2, x'ff', 2);
INSERT INTO arrivals VALUES
    (1, 1, 1, 0, 7, 1, 1, 0, -1, 10, 1, 0, 0, 0, 1, 16, NULL, 100, 200),
    (2, 1, 2, 1, 7, 1, 5, 1, 5, 1, 1, 0, 0, 2, 1, 13, NULL, 101, 200),
    (3, 1, 3, 0, 7, 1, 2, 0, -1, 11, 1, 0, 0, 0, 1, 4, NULL, 102, 200),
    (4, 1, 4, 0, 7, 1, 2, 0, -1, 11, 0, 1, 0, 0, 1, 4, NULL, 103, 300);
"""


def test_schema_1_store_is_migrated_in_place(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    conn.executescript(_V1)
    conn.close()
    st = Store(str(db), "new")
    assert st.migrated_from == "1"
    st.close()
    assert query(db, "SELECT value FROM meta WHERE key='schema'") == [("2",)]
    assert query(db, "SELECT offset, channel, data, arrival FROM events ORDER BY arrival") == [
        (10, 1, b"\n", 1),
        (11, 2, b"\x0b", 3),
    ]
    assert query(db, "SELECT channel, session, number, data FROM reports") == [(5, 1, 1, b"\xff")]
    assert query(db, "SELECT id, arrival, duplicate, data IS NULL, commit_us FROM arrivals ORDER BY id") == [
        (1, 1, 0, 0, 200),
        (2, 2, 0, 0, 200),
        (3, 3, 0, 0, 200),
        (4, 4, 1, 1, 300),
    ]
    assert {r[0] for r in query(db, "SELECT name FROM sqlite_master WHERE type='table'")} == {
        "meta", "devices", "arrivals", "losses", "boots"
    }  # fmt: skip
    st = Store(str(db), "new")  # opening again: nothing to migrate
    assert st.migrated_from is None
    key, state = st.register("d", "udp", "127.0.0.1:1")
    assert key == 1 and state is not None and (state.n, state.arrival) == (11, 4)
    st.close()


def event_row(arrival: int, seq: int, epoch: int = 7) -> tuple[object, ...]:
    return (1, arrival, epoch, 1, 1, seq, 1, 0, 3, None, 1000 + arrival, b"x%d" % seq)


def test_a_first_arrival_already_stored_becomes_a_counted_duplicate(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    st = Store(str(db), "b", checkpoints=True)
    dev, _ = st.register("d", "udp", "a")
    snap = (5, 1, 7, 1, 5, 3, 0, 0, "", "", "", "{}", dev)
    rows = [event_row(1, 3), event_row(2, 4)]
    assert (
        st.write(Batch(segments=[(SEG_EVENT, rows)], devices=[snap], commit_us=9, arrivals=2, events=2)) == 0
    )
    # the same boot epoch and offsets again (a device that drew the same epoch): not dropped, not a failure
    dup = (1, 3, 0, 7, 1, 2, 0, -1, 5, 1, True, False, 0, 2, 5, None, 1003, None)
    segs = [(SEG_EVENT, [event_row(4, 4), event_row(5, 5)]), (SEG_ARRIVAL, [dup])]
    assert st.write(Batch(segments=segs, devices=[snap], commit_us=10, arrivals=3, events=2)) == 1
    st.close()
    assert query(db, "SELECT arrival, seq, duplicate, data FROM arrivals ORDER BY id") == [
        (1, 3, 0, b"x3"),
        (2, 4, 0, b"x4"),
        (4, 4, 1, b"x4"),
        (5, 5, 0, b"x5"),
        (3, 5, 1, None),
    ]
    assert query(db, "SELECT offset FROM events ORDER BY offset") == [(3,), (4,), (5,)]
    assert query(db, "SELECT payload_bytes, frame_bytes FROM arrivals WHERE arrival=1") == [(2, 5)]


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_store_process_writes_what_the_store_writes(tmp_path: Path, kind: str) -> None:
    """The writer process ([store] writer = "process") stores the same rows as Store on a thread,
    conflict slow path included; its errors come back as exceptions; a dead writer fails the write."""
    db = tmp_path / "s.db"
    st: Store | StoreProcess = (
        Store(str(db), "b") if kind == "thread" else StoreProcess(str(db), "b").wait_ready()
    )
    dev, state = st.register("d", "udp", "a")
    assert (dev, state) == (1, None)
    snap = (5, 1, 7, 1, 5, 3, 0, 0, "fw", "", "", '{"polls": 2}', dev)
    rows = [event_row(1, 3), event_row(2, 4)]
    assert (
        st.write(Batch(segments=[(SEG_EVENT, rows)], devices=[snap], commit_us=9, arrivals=2, events=2)) == 0
    )
    assert st.write(Batch(segments=[(SEG_EVENT, [event_row(3, 4)])], devices=[snap], commit_us=10,
                          arrivals=1, events=1)) == 1  # fmt: skip
    dev2, state = st.register("d", "udp", "a")
    assert (
        dev2 == dev and state is not None and (state.n, state.arrival, state.counters) == (5, 3, {"polls": 2})
    )
    # a bridge's start registers all its devices in one request and one transaction: the known one
    # with its state, the new ones with new keys, in order
    many = st.register_many([("e", "udp", "b"), ("d", "serial", "/dev/x"), ("f", "udp", "c")])
    assert [(k, s is None) for k, s in many] == [(2, True), (1, False), (3, True)]
    assert many[1][1] is not None and (many[1][1].n, many[1][1].arrival) == (5, 3)
    with pytest.raises(sqlite3.IntegrityError):  # a losses row with a NULL in a NOT NULL column
        st.write(
            Batch(losses=[(dev, 1, 7, 0, 0, 0, None, None, 0, None, 0, "")], devices=[snap], commit_us=11)
        )
    if isinstance(st, StoreProcess):
        st.kill()
        with pytest.raises((RuntimeError, OSError)):
            st.write(Batch(devices=[snap], commit_us=12))
    st.close()
    assert query(db, "SELECT arrival, seq, duplicate FROM arrivals ORDER BY id") == [
        (1, 3, 0),
        (2, 4, 0),
        (3, 4, 1),
    ]
    assert query(db, "SELECT COUNT(*) FROM losses") == [(0,)]


def test_store_process_error_at_open_is_raised(tmp_path: Path) -> None:
    with pytest.raises(sqlite3.OperationalError):
        StoreProcess(str(tmp_path / "no" / "dir" / "s.db"), "b").wait_ready()
