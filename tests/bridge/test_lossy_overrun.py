"""A lossy link at a rate that overruns the ring: where an overrun starts.

A board with a 24-slot ring generating 16 events per millisecond overruns on every lost POLL or
answer. The spec's recovery polls from the oldest held event n0 - 1, which the ring has overwritten
by the time that POLL gets there: the answer is another RECOVERY, one more round trip with no event,
often three or four in a row before the chase guard's quarters catch up. The bridge measures the
device's generation rate from the newest offset its answers show (n + backlog, a RECOVERY's n1) and
tells PollClient how many events turn over per round trip (`turnover`): the first RECOVERY starts
past them. Virtual time (tests/bridge/test_rtt.py's Link: the daemon's scheduler in miniature), 5%
loss each way, the same seeds with and without the estimate; every event stored once or counted
lost, exactly, in both.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from leadwire import codec, wire
from leadwire.bridge.client import DeviceClient
from leadwire.bridge.config import DeviceConfig, PollConfig
from leadwire.tools.simdevice import SimCore

from .helpers import make_client
from .lossy_sim import drain_and_account
from .test_rtt import Link

pytestmark = pytest.mark.timeout(120)


def run(
    seed: int, rate: int, loss: float, ms: int = 400, follow: bool = False, **tuning: Any
) -> dict[str, Any]:
    rng = random.Random(seed)
    core = SimCore(0, capacity=24, start=rng.randrange(2**32))
    poll = PollConfig(batch=8, frames=4, pipeline=True, timeout=0.1, interval=0.002, interval_min=0.0,
                      interval_max=0.01, rto_min=0.001, follow=follow, **tuning)  # fmt: skip
    cl = DeviceClient(1, DeviceConfig("dev", "udp"), poll)
    link = Link(cl, core, rng, {"loss": loss, "dup": 0.0, "reorder": 0.0, "spike": 0.0})
    link.push(0.0, "due", None)
    for t in range(ms):
        core.write_events(rate)
        link.run_until(t * 0.001)
    stored_in_window = len(cl.out_events)
    turnover = cl.pc.turnover  # (at the end of the lossy window: the drain that follows idles)
    link.faults = {"loss": 0.0, "dup": 0.0, "reorder": 0.0, "spike": 0.0}
    # exact accounting: stored once each, or counted lost
    stored, losses = drain_and_account(link, cl, core, 5.0, 0.2)
    lost = sum(r.lost for r in losses if r.lost is not None)
    overruns = [r for r in losses if r.cause == "overrun"]
    return {"stored": stored_in_window, "overruns": len(overruns),
            "chased": sum(1 for r in overruns if r.recovered == 0), "turnover": turnover,
            "lost": lost, "all": len(stored), "gap_ahead": cl.pc.gap_ahead,
            "generated": core.generated}  # fmt: skip


def test_overrun_starts_past_the_turnover_fewer_empty_round_trips_same_exact_count() -> None:
    seeds = range(6)
    now = [run(s, 16, 0.05) for s in seeds]
    spec = [
        run(s, 16, 0.05, gen_rate_span=1e9) for s in seeds
    ]  # no generation rate: turnover 0, the spec's n0 - 1
    print("now", now, "\nspec", spec)
    assert all(r["turnover"] > 0 for r in now) and all(r["turnover"] == 0 for r in spec)
    chased_now, chased_spec = sum(r["chased"] for r in now), sum(r["chased"] for r in spec)
    assert chased_now * 2 < chased_spec  # RECOVERY answers followed by another, no event between
    assert sum(r["stored"] for r in now) > sum(r["stored"] for r in spec)


def test_no_overrun_no_skip() -> None:
    """The hint only moves where an overrun's recovery starts: at 1 event per ms (the ring holds 24 ms)
    with the same loss nothing overruns and every event is stored."""
    r = run(3, 1, 0.05)
    assert r["overruns"] == 0 and r["lost"] == 0 and r["all"] == 400


def test_gap_repoll_with_a_second_poll_in_flight() -> None:
    """A frame lost inside a burst: the gap repoll goes out with a second POLL from where the held
    frames' burst ends (leadwire.hold), so the ring is drained while the gap is filled. Same seeds
    without the second POLL (the gap alone, then the next POLL a round trip later): fewer events
    stored, more overruns, where the ring turns over in about one round trip (12-16 events per ms
    into 24 slots; at 8 per ms the two are within 3% of each other either way). Exact accounting in
    both (run() asserts it)."""
    cases = [(s, 16, 0.05) for s in range(5)] + [(s, 12, 0.01) for s in range(5)]
    two = [run(*c) for c in cases]
    one = [run(*c, rules=tuple(x for x in PollConfig.rules if x != "predict_held_end")) for c in cases]
    print("two", two, "\none", one)
    assert all(r["gap_ahead"] > 0 for r in two) and all(r["gap_ahead"] == 0 for r in one)
    assert sum(r["stored"] for r in two) > 1.1 * sum(r["stored"] for r in one)
    assert sum(r["overruns"] for r in two) < sum(r["overruns"] for r in one)


def test_a_recovery_that_goes_on_from_n0_stores_more_with_the_same_exact_count() -> None:
    """PollConfig.follow: the device goes on past a RECOVERY with the events from n0 in the same
    burst (ring.answer_into's follow), so an overrun costs no round trip of its own and no chase
    (the turnover rule above is for devices without it, and one-frame gap repolls). The same seeds
    without and with it, 5% loss each way: more stored in the lossy window, fewer counted lost, and
    after the drain every event stored once or counted lost (drain_and_account asserts it)."""
    seeds = range(6)
    off = [run(s, 16, 0.05) for s in seeds]
    on = [run(s, 16, 0.05, follow=True) for s in seeds]
    print("off", off, "\non", on)
    # (6 seeds, off / on: stored 21,075 / 28,281 in the window, counted lost 14,680 / 7,935 of 38,400)
    assert sum(r["stored"] for r in on) > 1.25 * sum(r["stored"] for r in off)
    assert sum(r["lost"] for r in on) < 0.6 * sum(r["lost"] for r in off)


def test_a_late_answer_to_a_request_sent_again_does_not_arm_the_tail_loss_probe() -> None:
    """A frame past s(n) arms the tail-loss probe only from the burst asked for last (or the
    pipelined one before it): there it shows a datagram lost. A late answer to a request that
    timed out and went again (a RECOVERY going on from n0, its EVENTS all past s(n)) shows a slow
    device, not a lossy link: on a clean loaded link such answers armed the probe, whose short
    wait then fired spuriously (256 B at 100,000/s, no loss: 98-109 timeouts per 5 s, 23-31
    without them)."""
    core = SimCore(0, capacity=8, start=1000)
    cl, core, d = make_client(core=core, poll=PollConfig(batch=2, frames=4, follow=True))
    core.write_events(3)
    d.run(4)  # HELLO, first contact, events
    assert cl.pc.n == core.ring.newest() and cl._loss_send < 0
    core.write_events(20)  # the ring overruns: a RECOVERY going on from n0
    d.exchange(hold=True)  # its answer is late
    late = d.held
    assert [codec.decode(x).type for x in late] == [wire.RECOVERY, wire.EVENTS, wire.EVENTS, wire.EVENTS]
    cl.on_transport_error()
    retry = cl.request_bytes(d.t)  # the same n, a new tag
    for x in late:
        d.feed(x)  # stale: its tag is not the outstanding request's
    assert cl._loss_send < 0 and cl.pc.n == 1002
    answers = core.handle(retry, d.t)  # the retry's answer: its RECOVERY lost
    d.feed(answers[1])  # an EVENTS frame of the burst asked for last, past s(n): a datagram lost
    assert cl._loss_send == cl.rtt.sends
