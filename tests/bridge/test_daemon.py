"""The asyncio bridge against simulated devices over real UDP sockets and pseudo-terminals."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from leadwire.bridge import logs
from leadwire.bridge.daemon import Bridge, Scheduler
from leadwire.tools.fleetsim import Fleet
from leadwire.tools.simdevice import SimFleet

from .helpers import bridge_config, query, wait_for

pytestmark = pytest.mark.timeout(60)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _started(tmp: Path, fleet: SimFleet, subscribe: list[int] | None = None, **sections: Any) -> Bridge:
    devs = fleet.describe()
    for d in devs:
        if subscribe:
            d["subscribe"] = subscribe
    b = Bridge(bridge_config(tmp, devs, **sections), logs.setup("warning"))
    return b


class _Sent:
    def __init__(self, due: float, sent: float) -> None:
        self.due, self.sent = due, sent


def test_fixed_interval_counts_from_the_due_time_not_the_late_wake_up() -> None:
    base = Scheduler._period_base
    # sent 4 ms late: the next poll is due 100 ms after the due time (no drift: 10 Hz stays 10 Hz)
    assert base(_Sent(due=1.0, sent=1.004), 0.1) + 0.1 == 1.1  # type: ignore[arg-type]
    # sent on time: the same either way
    assert base(_Sent(due=2.0, sent=2.0), 0.1) == 2.0  # type: ignore[arg-type]
    # a stall longer than the interval: counted from the send, so no burst of catch-up polls
    assert base(_Sent(due=1.0, sent=1.25), 0.1) == 1.25  # type: ignore[arg-type]
    # a backlog (next_delay 0) is drained from now on
    assert base(_Sent(due=1.0, sent=1.004), 0.0) == 1.004  # type: ignore[arg-type]


def test_long_waits_share_wake_ups_on_a_grid_short_ones_keep_their_time() -> None:
    key = Scheduler.__new__(Scheduler)._key
    assert key(10.0004, 0.1) == pytest.approx(10.001)  # a 100 ms poll interval: up to 1 ms late
    assert key(10.0004, 0.008) == pytest.approx(10.001)
    assert key(10.0004, 0.0079) == 10.0004  # a short RTO or a probe: exact
    assert key(10.0004, 0.0003) == 10.0004
    assert key(10.002, 0.5) == pytest.approx(10.002)  # on the grid already: not later


def test_a_late_wake_up_takes_the_answers_already_queued_not_timeouts(tmp_path: Path) -> None:
    """The loop stalls right after sending several requests, past their RTO, while the devices (in
    another process) answer; one datagram is read per readable callback: the timer's wake-up reads
    the rest before it declares a timeout, so none is counted; one datagram per slice too (it goes
    on with the rest on the loop's next turn)."""

    async def main() -> None:
        with Fleet(8, 50.0, auth=False) as fleet:
            devs = [{"id": d["id"], "udp": d["udp"], "auth": False} for d in fleet.devices]
            poll = {"adaptive": False, "interval": 0.05, "interval_min": 0.05, "interval_max": 0.05,
                    "timeout": 0.03, "rto_min": 0.03}  # fmt: skip
            b = Bridge(bridge_config(tmp_path, devs, polling=poll), logs.setup("warning"))
            await b.start()
            await wait_for(lambda: all(c.dc["round_trips"] >= 3 for c in b.clients.values()))
            assert b._udp is not None
            b._udp.burst = 1
            b.sched.SLICE = 1
            udp_drain = b._udp.drain
            sliced: list[bool] = []

            def drain(limit: int, readable: bool = True) -> bool:
                more = udp_drain(limit, readable)
                if limit == 1 and not readable:
                    sliced.append(more)
                return more

            b._udp.drain = drain  # type: ignore[method-assign]
            runners = list(b.runners.values())
            send = b.sched.run_ready
            stalled: list[int] = []

            def run_ready() -> None:
                send()
                waiting = sum(r.waiting for r in runners)
                if len(stalled) < 6 and (not stalled or waiting >= 4):
                    stalled.append(waiting)
                    time.sleep(0.2)  # the loop busy: every request out is past its RTO on waking

            before = sum(c.dc["timeouts"] for c in b.clients.values())
            b.sched.run_ready = run_ready  # type: ignore[method-assign]
            await wait_for(lambda: len(stalled) == 6)
            await asyncio.sleep(0.1)
            assert sum(stalled[1:]) >= 20  # the stalls came with requests out
            assert sum(c.dc["timeouts"] for c in b.clients.values()) == before
            assert sliced.count(True) >= 3  # wake-ups that left the rest of the queue for the next turn
            await b.stop()

    run(main())


def test_every_event_exactly_once_over_udp_and_serial(tmp_path: Path) -> None:
    async def main() -> None:
        fleet = await SimFleet(4, rate=400, capacity=512, limit=600, serial=1, seed=1).start()
        b = await _started(tmp_path, fleet)
        await b.start()
        await wait_for(lambda: b.events_committed == 4 * 600)
        await b.stop()
        await fleet.stop()
        db = tmp_path / "store.db"
        for dev, core in enumerate(fleet.cores, start=1):
            offs = [r[0] for r in query(db, "SELECT offset FROM events WHERE dev=? ORDER BY arrival", dev)]
            assert offs == [core.offset_of(i) for i in range(600)]
        assert query(db, "SELECT COUNT(*), SUM(duplicate) FROM arrivals") == [(2400, 0)]
        assert query(db, "SELECT transport, COUNT(*) FROM devices GROUP BY 1") == [("serial", 1), ("udp", 3)]
        causes = query(db, "SELECT cause, COUNT(*) FROM losses GROUP BY 1")
        assert causes == [("first_contact", 4)]
        # arrival numbers per device: 1..600 without a hole
        assert query(db, "SELECT dev, MIN(arrival), MAX(arrival), COUNT(*) FROM arrivals GROUP BY dev") == [
            (d, 1, 600, 600) for d in range(1, 5)
        ]

    run(main())


def test_burst_polls_every_event_exactly_once_in_fewer_round_trips(tmp_path: Path) -> None:
    """POLLs asking for up to 8 frames of 10 events: the same exactly-once store, a fraction of the polls."""

    async def main() -> None:
        fleet = await SimFleet(3, rate=0, capacity=1024, serial=1, seed=4).start()
        b = await _started(
            tmp_path, fleet, polling={"batch": 10, "frames": 8, "adaptive": False, "interval": 0.05}
        )
        for core in fleet.cores:
            core.write_events(700)  # first contact finds them all held: recovered, then in order
        await b.start()
        await wait_for(lambda: b.events_committed == 3 * 700)
        await b.stop()
        await fleet.stop()
        db = tmp_path / "store.db"
        for dev, core in enumerate(fleet.cores, start=1):
            offs = [r[0] for r in query(db, "SELECT offset FROM events WHERE dev=? ORDER BY arrival", dev)]
            assert offs == [core.offset_of(i) for i in range(700)]
        assert query(db, "SELECT COUNT(*), SUM(duplicate) FROM arrivals") == [(2100, 0)]
        # 700 events in frames of 10 = 70 frames; bursts of 8: 9 polls + HELLO and first contact
        assert len(b.clients) == 3 and all(cl.dc["polls"] <= 15 for cl in b.clients.values())

    run(main())


def test_overrun_loss_is_exact_over_udp(tmp_path: Path) -> None:
    async def main() -> None:
        fleet = await SimFleet(2, rate=0, capacity=16, seed=2).start()
        b = await _started(
            tmp_path, fleet, polling={"adaptive": False, "interval": 0.05, "interval_max": 0.05}
        )
        await b.start()
        for core in fleet.cores:
            core.write_events(5)
        await wait_for(lambda: b.events_committed == 10)
        for core in fleet.cores:
            core.write_events(100)  # between two polls: the ring keeps 16 of them
        await wait_for(lambda: b.events_committed == 10 + 2 * 16)
        await b.stop()
        await fleet.stop()
        db = tmp_path / "store.db"
        rows = query(
            db, "SELECT dev, cause, lost, recovered, ended_us IS NOT NULL FROM losses ORDER BY dev, seq"
        )
        assert rows == [
            (1, "first_contact", None, 5, 1),
            (1, "overrun", 84, 16, 1),
            (2, "first_contact", None, 5, 1),
            (2, "overrun", 84, 16, 1),
        ]
        for dev, core in enumerate(fleet.cores, start=1):
            n = query(db, "SELECT COUNT(*) FROM events WHERE dev=?", dev)[0][0]
            assert n + 84 == core.generated == 105
        assert query(db, "SELECT lead FROM arrivals WHERE dev=1 ORDER BY arrival")[5][0] == 85

    run(main())


def test_restart_detected_and_recorded(tmp_path: Path) -> None:
    async def main() -> None:
        fleet = await SimFleet(1, rate=0, capacity=64, seed=3).start()
        b = await _started(tmp_path, fleet)
        await b.start()
        core = fleet.cores[0]
        core.write_events(3)
        await wait_for(lambda: b.events_committed == 3)
        old = core.epoch
        core.boot()
        core.write_events(4)
        await wait_for(lambda: b.events_committed == 7)
        await wait_for(lambda: len(query(tmp_path / "store.db", "SELECT * FROM boots")) == 2)
        await b.stop()
        await fleet.stop()
        db = tmp_path / "store.db"
        assert query(db, "SELECT boot_epoch, boots, detected_by FROM boots ORDER BY first_seen_us") == [
            (old, 1, "hello"),
            (core.epoch, 2, "recovery"),
        ]
        assert query(db, "SELECT cause, lost, n0, recovered FROM losses ORDER BY seq")[1] == (
            "restart", None, core.start, 4,
        )  # fmt: skip
        assert query(db, "SELECT boot_epoch, COUNT(*) FROM events GROUP BY 1 ORDER BY 2") == [
            (old, 3),
            (core.epoch, 4),
        ]
        assert query(db, "SELECT lead FROM arrivals ORDER BY arrival") == [(1,)] * 7
        assert b.clients["sim-0"].dc["restarts"] == 1

    run(main())


def test_subscribe_vs_subscribe_ordered_with_injected_duplicates_and_late_answers(tmp_path: Path) -> None:
    async def main() -> None:
        fleet = await SimFleet(1, rate=0, capacity=256, seed=4).start()
        b = await _started(tmp_path, fleet)
        everything: list[tuple[int, int, bool]] = []
        ordered: list[tuple[int, int, bool]] = []
        sources = set()
        for ch in (1, 2, 3):
            b.subscribe(ch, lambda m, lead, src: everything.append((m.seq, lead, m.duplicate)))
            b.subscribe_ordered(ch, lambda m, lead, src: (ordered.append((m.seq, lead, m.duplicate)),
                                                          sources.add(src)))  # fmt: skip
        await b.start()
        core = fleet.cores[0]
        link = fleet.links[0]
        core.write_events(1)
        await wait_for(lambda: b.events_committed == 1)
        link.faults.dup_answers = 1  # the next answer arrives twice in a row
        core.write_events(3)
        await wait_for(lambda: len(everything) == 7)
        link.faults.late_answers = 1  # the next answer is delayed behind the following one
        core.write_events(2)
        await wait_for(lambda: b.events_committed == 6)
        await wait_for(lambda: len(everything) == 11)
        await b.stop()
        await fleet.stop()
        o = [core.offset_of(i) for i in range(6)]
        assert everything == [
            (o[0], 1, False),
            (o[1], 1, False), (o[2], 1, False), (o[3], 1, False),
            (o[1], -2, True), (o[2], -1, True), (o[3], 0, True),
            (o[4], 1, False), (o[5], 1, False),
            (o[4], -1, True), (o[5], 0, True),
        ]  # fmt: skip
        assert ordered == [e for e in everything if e[1] >= 1]
        (src,) = sources
        assert (src.device_id, src.boot_epoch, src.transport) == ("sim-0", core.epoch, "udp")
        db = tmp_path / "store.db"
        assert query(db, "SELECT COUNT(*) FROM events") == [(6,)]
        assert query(db, "SELECT seq, lead, duplicate FROM arrivals ORDER BY arrival") == [
            (s, lead, int(dup)) for s, lead, dup in everything
        ]

    run(main())


@pytest.mark.parametrize("auth", [False, True], ids=["unsigned", "signed"])
def test_push_sessions_partial_subscriber_retransmission_stored_once(tmp_path: Path, auth: bool) -> None:
    async def main() -> None:
        fleet = await SimFleet(
            1, rate=0, capacity=64, seed=5, tick=0.01, ack_timeout=0.2, channels=4, auth=auth
        ).start()
        b = await _started(tmp_path, fleet, subscribe=[2, 4])
        got: list[tuple[str, int, int, int, bool]] = []
        b.subscribe(2, lambda m, lead, src: got.append((m.kind, m.channel, m.seq, lead, m.retransmission)))
        link = fleet.links[0]
        link.faults.ignore_acks = 1  # the first ACK is lost: that report is retransmitted
        await b.start()
        core = fleet.cores[0]
        await wait_for(lambda: set(core.sessions) == {2, 4})
        await wait_for(lambda: core.sessions[2].number > 5 and core.sessions[4].number > 5)
        await b.stop()
        await fleet.stop()
        db = tmp_path / "store.db"
        reps = query(db, "SELECT channel, session, number FROM reports ORDER BY channel, number")
        for ch in (2, 4):
            nums = [r[2] for r in reps if r[0] == ch]
            assert nums == list(range(1, len(nums) + 1))  # once each, no gap
        assert {r[1] for r in reps} == {1}
        retx = query(db, "SELECT channel, seq, lead, duplicate FROM arrivals WHERE retransmission=1")
        assert len(retx) == 1 and retx[0][2] == 0 and retx[0][3] == 1
        assert core.report_retransmissions >= 1
        n_arr = query(db, "SELECT COUNT(*) FROM arrivals WHERE kind=1")[0][0]
        assert n_arr == len(reps) + 1
        assert all(g[0] == "report" and g[1] == 2 for g in got)
        assert [g[2] for g in got if not g[4]] == [r[2] for r in reps if r[0] == 2]
        if auth:  # reports, their resends and the ACKs all signed, none refused either way
            c = b.clients["sim-0"].dc
            ep = core.auth
            assert ep is not None and (ep.forged, ep.replayed, ep.unsigned) == (0, 0, 0)
            assert (c["auth_forged"], c["auth_replayed"], c["auth_unsigned"]) == (0, 0, 0)

    run(main())


def test_metrics_endpoint_reports_exact_counters(tmp_path: Path) -> None:
    async def main() -> None:
        fleet = await SimFleet(1, rate=0, capacity=64, seed=6, channels=2).start()
        b = await _started(tmp_path, fleet, bridge={"metrics": "127.0.0.1:0"})
        await b.start()
        core = fleet.cores[0]
        core.write_events(10)
        await wait_for(lambda: b.events_committed == 10)
        fleet.links[0].faults.corrupt_answers = 1
        core.write_events(1)
        await wait_for(lambda: b.events_committed == 11)
        url = "http://127.0.0.1:%d/metrics" % b.metrics_port
        text = await asyncio.get_running_loop().run_in_executor(
            None, lambda: urllib.request.urlopen(url).read()
        )
        await b.stop()
        await fleet.stop()
        lines = set(text.decode().splitlines())
        for want in (
            'leadwire_received_total{channel="1",device="sim-0"} 6.0',
            'leadwire_received_total{channel="2",device="sim-0"} 5.0',
            'leadwire_duplicates_total{channel="1",device="sim-0"} 0.0',
            'leadwire_crc_errors_total{device="sim-0"} 1.0',
            'leadwire_events_stored_total{device="sim-0"} 11.0',
            'leadwire_recoveries_total{device="sim-0"} 1.0',
            'leadwire_overrun_lost_total{device="sim-0"} 0.0',
            'leadwire_restarts_total{device="sim-0"} 0.0',
            'leadwire_auth_forged_total{device="sim-0"} 0.0',
            "leadwire_devices 1.0",
        ):
            assert want in lines, want
        assert any(ln.startswith('leadwire_round_trips_total{device="sim-0"}') for ln in lines)
        assert any(ln.startswith("leadwire_commit_seconds_bucket") for ln in lines)

    run(main())
