"""Host power cuts: no report the device saw ACKed is lost, no event lost silently.

The bridge runs in this process with its store writer in a child process that preloads the
power-cut shim (tools/powercut.py): every write the writer makes to the store files is undoable
until the file is fsynced. A cut, at a random moment while polling and push sessions run:

1. SIGKILL the writer (the shim recorded its pid) and, in the same step of the event loop, drop
   the in-process bridge without a flush, a stop or another datagram (its links replaced by dead
   ones): the host is gone;
2. undo every write not yet fsynced (tools/powercut.rollback: store.db, -wal; the -shm deleted or
   left stale at random);
3. start a new bridge on what survived. The simulated devices (tools/simdevice.SimCore over UDP and
   a pty, push sessions on three channels) run on through it all, as devices do when the host
   loses power.

At the end the devices stop generating, the bridge drains them and stops, and the check runs:

* every report a device saw ACKed (its ReportSequence confirmed it, so the device forgot it) is in
  the store's ``reports`` view, byte for byte (same device, boot, channel, number, body);
* every event the devices generated is stored once or counted lost: tools/chaos_check.check, the
  chaos run's checker, on each device's own record of its ring (no silent loss, no duplicate, no
  corruption, no phantom);
* no report and no event is stored twice.

``make test`` runs POWERCUT_CUTS cuts (default 200). The long run and ``"normal"``:

    LEADWIRE_POWERCUT_CUTS=2000 .venv/bin/pytest -q tests/bridge/test_powercut.py -k durable -s
    LEADWIRE_POWERCUT_SYNC=normal .venv/bin/pytest -q tests/bridge/test_powercut.py -k durable -s

(the second runs the durable test against ``synchronous = "normal"``, the old default: it fails,
reports ACKed and then lost). test_old_mode_loses_acked_reports keeps that proof in ``make test``
with a few cuts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from leadwire import codec, messages, wire
from leadwire.bridge import logs
from leadwire.bridge.config import parse
from leadwire.bridge.daemon import Bridge
from leadwire.tools import powercut
from leadwire.tools.chaos_check import Tally, Trace, TraceBoot
from leadwire.tools.chaos_check import check as check_events
from leadwire.tools.simdevice import SimCore, SimFleet

CUTS = int(os.environ.get("LEADWIRE_POWERCUT_CUTS", "200"))
SYNC = os.environ.get("LEADWIRE_POWERCUT_SYNC", "full")
LANES = int(os.environ.get("LEADWIRE_POWERCUT_LANES", "5"))
CHANNELS = (1, 2, 3)

needs_cc = pytest.mark.skipif(
    powercut.compiler() is None, reason="no C compiler (cc/gcc/clang) to build the power-cut shim"
)


class RecordingCore(SimCore):
    """A simulated device that keeps its own record: every event its ring took (as chaos's Trace
    of a virtual board) and every report it saw confirmed."""

    def boot(self, start: int | None = None) -> None:
        super().boot(start)
        if not hasattr(self, "record"):
            self.record: list[TraceBoot] = []
            self.acked: list[tuple[int, int, int, bytes]] = []  # (epoch, channel, number, body)
        tb = TraceBoot(self.epoch, self.start, self.boots, self.capacity)
        self.record.append(tb)
        write = self.ring.write

        def recording_write(payload: bytes, channel: int = 0, length: int = -1) -> Any:
            tb.pos.append(len(tb.blob))
            tb.blob += bytes((channel,)) + len(payload).to_bytes(2, "big") + payload
            return write(payload, channel, length)

        self.ring.write = recording_write  # type: ignore[method-assign]

    def _handle(self, f: codec.Frame) -> list[bytes]:
        if f.type == wire.ACK:
            rs = self.sessions.get(f.channel)
            if rs is not None and rs.pending is not None:
                number, status = messages.decode_ack(f)
                if number == rs.number and 200 <= status <= 299:
                    self.acked.append((self.epoch, f.channel, number, bytes(rs.pending)))
        return super()._handle(f)


class RecordTrace(Trace):
    """The device's record in the shape tools/chaos_check reads (a board's trace file)."""

    def __init__(self, core: RecordingCore) -> None:
        super().__init__(Path(os.devnull))
        self.boots = core.record

    def update(self) -> int:
        return sum(len(b) for b in self.boots)


class _Dead:
    """A link after the power went: sends nothing."""

    def send(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass
class CutRun:
    cuts: int = 0
    bridge_starts: int = 0
    undone_records: int = 0  # writes and truncations the cuts threw away
    undone_files_deleted: int = 0
    shm_stale: int = 0
    reports_acked: int = 0
    reports_found: int = 0
    reports_missing: list[tuple[str, int, int, int]] = field(default_factory=list)
    reports_twice: int = 0
    events_twice: int = 0
    tallies: list[Tally] = field(default_factory=list)
    seconds: float = 0.0
    start_seconds: float = 0.0  # in Bridge.start() (the store writer process starting), all cuts

    def add(self, o: CutRun) -> None:
        for k, v in vars(o).items():
            if k != "seconds":
                setattr(self, k, getattr(self, k) + v)

    def figures(self) -> str:
        t = Tally("all")
        for x in self.tallies:
            t.add(x)
        return (
            "%d cuts (%d bridge starts, %d unsynced writes undone, %d unsynced files deleted, -shm stale %d"
            " times) in %.0f s: reports ACKed %d, found %d, missing %d, stored twice %d; events generated"
            " %d: stored %d, lost counted %d (overrun rows %d), before first contact %d, silent %d,"
            " stored twice %d; bridge starts took %.1f s"
            % (self.cuts, self.bridge_starts, self.undone_records, self.undone_files_deleted, self.shm_stale,
               self.seconds, self.reports_acked, self.reports_found, len(self.reports_missing),
               self.reports_twice, t.generated, t.stored, t.lost, t.overruns, t.before_contact, t.silent,
               self.events_twice + t.duplicates, self.start_seconds)
        )  # fmt: skip


def _config(db: Path, fleet: SimFleet, sync: str) -> dict[str, Any]:
    devices = []
    for d in fleet.describe():
        devices.append({**d, "subscribe": list(CHANNELS)})
    return {
        "bridge": {"id": "powercut", "metrics": ""},
        "store": {"path": str(db), "commit_interval": 0.05, "synchronous": sync},
        "polling": {"interval": 0.02, "interval_min": 0.005, "interval_max": 0.1, "timeout": 0.15,
                    "backoff_max": 0.3, "hello_interval": 5.0, "ack_timeout": 0.3},
        "device": devices,
    }  # fmt: skip


def _crash(b: Bridge) -> None:
    """The bridge process loses power: no flush, no SUBSCRIBE [], no datagram, no serial reopen.
    Called in one step of the event loop right after the writer was SIGKILLed."""
    b.failed = RuntimeError("power cut")
    b._stopping = True
    b.sched.stop()
    for r in b.runners.values():
        with contextlib.suppress(Exception):
            r.link.close()
        r.link = _Dead()
    if b._udp is not None:
        b._udp.close()
    if b._flusher is not None:
        b._flusher.cancel()
    if b._lock is not None and b._lock.fd is not None:  # the kernel drops a dead process's flock
        os.close(b._lock.fd)  # (its lock file stays: stale, it does not block the next bridge)
        b._lock.fd = None
    b.stopped.set()  # a stop() the failing flush schedules returns at once


async def _wait_drained(b: Bridge, cores: list[RecordingCore], timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        done = True
        for core in cores:
            c = b.clients[core.board_id]
            if not core.generated or c.epoch != core.epoch or c.pc.n != core.offset_of(core.generated - 1):
                done = False
                break
        if done:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the bridge did not drain the devices in %.0f s" % timeout)


async def run_lane(lane: Path, cuts: int, sync: str, seed: int) -> CutRun:
    """One store, one bridge, four devices: `cuts` power cuts, then a drain and a clean stop."""
    rng = random.Random(seed)
    lane.mkdir()
    db = lane / "store.db"
    res = CutRun()
    # device 0: a ring of 32 at 100 ev/s (overruns while the host is down: losses to count); 3: a pty
    fleet = SimFleet(4, rate=100.0, seed=seed, channels=3, serial=1, ack_timeout=0.3)
    fleet.cores = [RecordingCore(i, capacity=32 if i == 0 else 1024, seed=seed, channels=3) for i in range(4)]
    await fleet.start()
    cfg = parse(_config(db, fleet, sync))
    log = logs.setup("error")
    b: Bridge | None = None
    try:
        for _ in range(cuts):
            b = Bridge(cfg, log)
            ts = time.monotonic()
            await b.start()
            res.start_seconds += time.monotonic() - ts
            res.bridge_starts += 1
            await asyncio.sleep(rng.uniform(0.03, 0.3))
            # the cut: nothing between the writer's death and the bridge's (no await)
            powercut.kill_all(lane)
            _crash(b)
            st = powercut.rollback(lane, rng)
            res.cuts += 1
            res.undone_records += st.records
            res.undone_files_deleted += st.deleted
            res.shm_stale += st.shm == "stale"
            await asyncio.sleep(0)  # the dropped bridge's executor and tasks end (EOF from the writer)
            b._writer.shutdown(wait=False)
            b = None
        # the end: a last bridge drains the devices, then stops cleanly
        b = Bridge(cfg, log)
        await b.start()
        res.bridge_starts += 1
        await asyncio.sleep(0.5)
        fleet.running = False
        await _wait_drained(b, fleet.cores, 30.0)  # type: ignore[arg-type]
        await asyncio.sleep(0.5)  # the last ACKs of the push sessions
        await b.stop()
        assert b.failed is None, b.failed
        b = None
    finally:
        if b is not None:
            with contextlib.suppress(Exception):
                powercut.kill_all(lane)
            _crash(b)
        await fleet.stop()
    check(db, fleet.cores, res)  # type: ignore[arg-type]
    return res


async def run_cuts(root: Path, cuts: int, sync: str, lanes: int = LANES, seed: int = 16) -> CutRun:
    """`cuts` power cuts over `lanes` independent stores at once (a cut costs a bridge start, mostly
    the store writer process importing: lanes overlap those waits)."""
    t0 = time.monotonic()
    per = [cuts // lanes + (k < cuts % lanes) for k in range(lanes)]
    runs = await asyncio.gather(
        *(run_lane(root / ("lane%d" % k), per[k], sync, seed + k) for k in range(lanes))
    )
    res = CutRun()
    for r in runs:
        res.add(r)
    res.seconds = time.monotonic() - t0
    return res


def check(db: Path, cores: list[RecordingCore], res: CutRun) -> None:
    conn = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
    try:
        for core in cores:
            dev = conn.execute("SELECT dev FROM devices WHERE device_id=?", (core.board_id,)).fetchone()[0]
            stored = {
                (e, ch, n, bytes(d))
                for e, ch, n, d in conn.execute(
                    "SELECT boot_epoch, channel, number, data FROM reports WHERE dev=?", (dev,)
                )
            }
            res.reports_acked += len(core.acked)
            for a in core.acked:
                if a in stored:
                    res.reports_found += 1
                else:
                    res.reports_missing.append((core.board_id, a[0], a[1], a[2]))
            res.reports_twice += conn.execute(
                "SELECT COALESCE(SUM(c - 1), 0) FROM (SELECT COUNT(*) c FROM arrivals WHERE dev=? AND kind=1 "
                "AND data IS NOT NULL GROUP BY boot_epoch, channel, data HAVING c > 1)",
                (dev,),
            ).fetchone()[0]
            res.events_twice += conn.execute(
                "SELECT COUNT(*) FROM arrivals WHERE dev=? AND kind=0 AND duplicate=1 AND data IS NOT NULL",
                (dev,),
            ).fetchone()[0]
    finally:
        conn.close()
    res.tallies += check_events(db, {core.board_id: RecordTrace(core) for core in cores})


def _run(tmp: Path, cuts: int, sync: str, monkeypatch: pytest.MonkeyPatch) -> CutRun:
    root = (tmp / "stores").resolve()
    root.mkdir()
    # the writer children inherit the bridge's environment: the shim is preloaded there only
    for k, v in powercut.env(root).items():
        monkeypatch.setenv(k, v)
    return asyncio.run(asyncio.wait_for(run_cuts(root, cuts, sync), timeout=60 + 2.0 * cuts))


@needs_cc
@pytest.mark.timeout(120 + 2 * CUTS)  # the long run (LEADWIRE_POWERCUT_CUTS) outlasts the default 300 s
def test_durable_acks_survive_power_cuts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res = _run(tmp_path, CUTS, SYNC, monkeypatch)
    print("\npower cuts, synchronous = %s: %s" % (SYNC, res.figures()))
    assert res.cuts == CUTS
    assert res.reports_acked > CUTS  # push sessions ran all along
    assert res.reports_missing == [], "ACKed reports lost: %d of %d, e.g. %s" % (
        len(res.reports_missing), res.reports_acked, res.reports_missing[:3])  # fmt: skip
    assert res.reports_found == res.reports_acked
    assert res.reports_twice == 0 and res.events_twice == 0
    for t in res.tallies:
        assert t.ok, (t.name, t.problems[:5])
        assert t.silent == 0 and t.duplicates == 0 and t.corrupted == 0 and t.phantom == 0
        assert t.generated == t.stored + t.lost + t.before_contact
    assert sum(t.stored for t in res.tallies) > 0
    assert res.undone_records > 0  # the cuts did throw writes away


@needs_cc
def test_old_mode_loses_acked_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same cuts against synchronous = "normal" (fsync at checkpoints only): reports the
    devices saw ACKed are gone from the store. Proves the check above can fail."""
    res = _run(tmp_path, 12, "normal", monkeypatch)
    print("\npower cuts, synchronous = normal: %s" % res.figures())
    assert res.reports_missing, res.figures()
    # the events still come back: polled again, or counted (the devices kept them)
    for t in res.tallies:
        assert t.silent == 0 and t.duplicates == 0, (t.name, t.problems[:5])


def test_a_report_of_the_previous_session_is_never_confirmed_in_the_next() -> None:
    """What the power cuts found (a serial device's reports, buffered in its port while the host was
    down, read by the next bridge after its SUBSCRIBE): the bridge took a report of the device's
    previous session as the new session's number 1 and ACKed it; the ACK (which names no session)
    confirmed the new session's own report 1, which the bridge had dropped as a duplicate. Now a
    report counts only after the SUBSCRIBE's ACK, and ACKs of a previous session are never sent."""
    from tests.bridge.helpers import make_client

    cl, core, d = make_client(capacity=8, start=77, subscribe=(2,), key=None)
    d.run(2)  # HELLO, SUBSCRIBE: session 1
    old = core.report_tick(0.0)  # report 1 of the device's session 1, still on its way
    cl.need_subscribe = True  # as after a restart of the bridge: a SUBSCRIBE again (session 2)
    sub = cl.request_bytes(d.t)
    assert codec.decode(sub).type == wire.SUBSCRIBE and cl.session == 2
    for b in old:  # arrives after our SUBSCRIBE went out, before the device took it
        d.feed(b)
    assert cl.out_acks == [] and cl.out_reports == [] and cl.dc["unsolicited"] == 1
    for b in core.handle(sub):  # the device starts session 2, ACKs the SUBSCRIBE
        d.feed(b)
    assert not cl.need_subscribe and cl.sub_channels == {2: 2}
    new = core.report_tick(0.1)  # its report 1 of session 2
    for b in new:
        d.feed(b)
    body = core.sessions[2].pending
    assert [(r[2], r[3], r[4], r[6]) for r in cl.out_reports] == [(2, 2, 1, body)]
    for a in cl.out_acks:
        core.handle(a)
    assert core.sessions[2].number == 2  # confirmed: and stored (above), not lost


def test_store_synchronous_config() -> None:
    """[store] synchronous: "full" by default, "normal" on request, anything else a one-line error."""
    from leadwire.bridge.config import ConfigError

    dev = [{"id": "d", "udp": "127.0.0.1:9", "auth": False}]
    assert parse({"device": dev}).store_sync == "full"
    assert parse({"store": {"synchronous": "normal"}, "device": dev}).store_sync == "normal"
    with pytest.raises(ConfigError) as e:
        parse({"store": {"synchronous": "off"}, "device": dev})
    assert str(e.value) == 'store.synchronous: must be "full" or "normal", got \'off\''
