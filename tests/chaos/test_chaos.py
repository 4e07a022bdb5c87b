"""The short chaos run: 3 virtual boards (UDP, serial, UDP with a small ring) at 200 Hz, every frame
signed with a per-board key, through netem at 10% loss, 5% duplication, 5% reordering, 1% corruption;
2 board power cuts and 2 bridge SIGKILLs at seeded random times; every generated event accounted for
against the boards' own records."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from leadwire.tools.chaos import ChaosOptions, check_board, default_boards, report, run

pytestmark = pytest.mark.timeout(300)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead too (its parent has not reaped it yet)
    try:
        return Path("/proc/%d/stat" % pid).read_text().split()[2] != "Z"
    except OSError:
        return False


def test_chaos_short_run_accounts_for_every_event(tmp_path: Path) -> None:
    # 3 x 201 events/s for 30 s: the >10,000 events below in half the time 100 Hz would take
    opts = ChaosOptions(
        out=tmp_path, boards=default_boards(3, hz=200), seconds=30, board_kills=2, bridge_kills=2, seed=3
    )
    res = run(opts, say=print)
    print(report(res))
    t = res.total
    # the faults really happened
    assert [f.kind for f in res.faults].count("board") == 2 and all(f.done_at is not None for f in res.faults)
    assert res.bridge_starts == 3
    udp = [s for n, s in res.netem.items() if "udp" in n]
    assert all(s["up"]["lost"] and s["down"]["lost"] and s["up"]["duplicated"] for s in udp)
    assert sum(s["up"]["corrupted_out"] + s["down"]["corrupted_out"] for s in udp) > 0
    # the accounting: every event in exactly one class, nothing silent, nothing stored wrong
    assert t.generated > 10_000
    assert t.generated == t.stored + t.lost + t.before_contact + t.died_with_boot + t.silent
    assert (t.silent, t.duplicates, t.corrupted, t.phantom, t.double_counted) == (0, 0, 0, 0, 0)
    assert t.restarts_made == 2 and t.restarts_detected == 2 and t.boots == 3 + 2
    assert t.problems == []
    assert res.ok
    # every frame signed (a key per board): corruption ends as CRC (or auth) rejects, never stored
    assert res.options["auth"] and t.crc_errors > 0
    assert t.stored > 0.8 * t.generated
    # every process the run started has ended
    assert res.pids and not [p for p in res.pids if alive(p)]


def test_checker_catches_silent_loss_duplicates_and_corruption(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checker on a doctored store: it must see what it is there to see."""
    import shutil
    import sqlite3

    from leadwire.tools.chaos import Trace

    # a small run without faults gives a real store and real records (--out relative to the current
    # directory, as `leadwire chaos` takes it; the bridge reads its store path relative to its config)
    monkeypatch.chdir(tmp_path)
    opts = ChaosOptions(out=Path("run"), boards=default_boards(1), seconds=4, board_kills=0, bridge_kills=0)
    res = run(opts, say=print)
    assert res.ok and res.total.stored > 100
    db = tmp_path / "doctored.db"
    shutil.copy(tmp_path / "run" / "store.db", db)
    name = opts.boards[0].name
    trace = Trace(tmp_path / "run" / "boards" / name / "trace")
    conn = sqlite3.connect(db)
    ids = [r[0] for r in conn.execute("SELECT id FROM arrivals WHERE kind=0 AND duplicate=0 ORDER BY seq")]
    conn.execute("DELETE FROM arrivals WHERE id=?", (ids[50],))  # a silent loss in the middle
    conn.execute("DELETE FROM arrivals WHERE id=?", (ids[-1],))  # the drained tail's last event
    (data,) = conn.execute("SELECT data FROM arrivals WHERE id=?", (ids[60],)).fetchone()
    conn.execute("UPDATE arrivals SET data=? WHERE id=?", (bytes([data[0] ^ 1]) + data[1:], ids[60]))  # a bit
    conn.execute("DROP INDEX arrivals_event_once")
    cols = "dev, arrival, kind, boot_epoch, boots, channel, seq, lead, priority, payload_bytes, frame_bytes, "
    cols += "rx_us, commit_us, data"
    conn.execute(
        "INSERT INTO arrivals(%s) SELECT %s FROM arrivals WHERE id=?" % (cols, cols), (ids[70],)
    )  # twice
    conn.commit()
    conn.close()
    from leadwire.bridge.store_reader import StoreReader

    with StoreReader(db) as ro:
        t = check_board(ro, name, trace, restarts_made=0)
    assert (t.silent, t.corrupted, t.duplicates) == (2, 1, 1)
    assert not t.ok
    # the same tail in a boot ended by a power cut: died with its boot, not silent
    with StoreReader(db) as ro:
        t2 = check_board(ro, name, trace, restarts_made=0, final_cut=True)
    assert (t2.silent, t2.died_with_boot) == (1, 1)
    # a made-up overrun row covering the hole: counted lost now, but its RECOVERY (n0 = the next
    # event, 10 held in a ring of 512 that was not full) is not what the ring could have answered
    conn = sqlite3.connect(db)
    (dev, epoch, off) = conn.execute(
        "SELECT dev, boot_epoch, seq FROM arrivals WHERE id=?", (ids[49],)
    ).fetchone()
    conn.execute(
        "INSERT INTO losses VALUES (?, 99, ?, ?, ?, ?, 1, 'overrun', 0, 0, 0, '')",
        (dev, epoch, off, (off + 2) & 0xFFFFFFFF, (off + 11) & 0xFFFFFFFF),
    )
    conn.commit()
    conn.close()
    with StoreReader(db) as ro:
        t3 = check_board(ro, name, trace, restarts_made=0, final_cut=True)
    assert (t3.silent, t3.lost, t3.died_with_boot) == (0, 1, 1)
    assert [p for p in t3.problems if "does not match the ring" in p] and not t3.ok
