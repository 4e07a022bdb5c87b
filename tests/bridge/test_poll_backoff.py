"""The dead-link backoff after silent rounds: it waits for silence, not for a count of timeouts.

A lost POLL or answer costs its RTO, doubled by each timeout in a row (rtt.py). On top of that the
bridge spares a dead link a bounded exponential backoff from ``timeout / 2``. It starts once the
silent rounds' RTOs add up to ``timeout / 2`` (PollConfig.dead_silence); with the default floor
(0.1 s) that is the third round. Not at the third silent round whatever the RTO: with the 2 ms
floor of a fast link, three timeouts in a row (about once per thousand round trips at 5% loss each
way) are 14 ms of silence, and 125 ms idle after them overruns a ring that holds less than that.
"""

from __future__ import annotations

import random

import pytest

from leadwire import u32, wire
from leadwire.bridge.client import DeviceClient
from leadwire.bridge.config import DeviceConfig, PollConfig
from leadwire.tools.simdevice import SimCore

from .helpers import make_client
from .test_rtt import Link

pytestmark = pytest.mark.timeout(120)


def silent_rounds(poll: PollConfig, rounds: int) -> tuple[list[float], list[float], list[int]]:
    """RTOs, delays and request types of `rounds` lost exchanges in a row after three answered."""
    cl, core, d = make_client(poll=poll, capacity=16, start=40)
    core.write_events(2)
    d.run(3)
    assert cl.rtt.srtt == 0.0  # the driver answers in zero time: RTO = the floor
    rtos, types = [], []
    for _ in range(rounds):
        assert not d.exchange(drop=True)
        rtos.append(cl.rto)  # the RTO the lost request was armed with
        types.append(d.requests[-1].type)
    delays = d.delays[-rounds:]
    d.run(3)  # an answer ends the silence: the next loss starts from scratch
    assert cl.pc.consecutive_errors == 0 and offsets_ok(cl)
    assert not d.exchange(drop=True) and d.delays[-1] == 0.0
    return rtos, delays, types


def offsets_ok(cl: DeviceClient) -> bool:
    return [e[2] for e in cl.out_events] == [40, 41]


def test_backoff_waits_for_half_the_ceiling_of_silence() -> None:
    # the benches' fast link: a 2 ms floor, the default 0.25 s ceiling
    poll = PollConfig(batch=16, timeout=0.25, rto_min=0.002, backoff_max=1.0)
    rtos, delays, types = silent_rounds(poll, 9)
    assert rtos == [0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.25, 0.25]
    # silence after each round: 2, 6, 14, 30, 62, 126 ms: the 6th reaches timeout / 2
    assert delays == [0.0] * 5 + [0.125, 0.25, 0.5, 1.0]
    # a HELLO from the third silent round on, as before (the device may have restarted)
    assert types[:3] == [wire.POLL] * 3 and types[3:] == [wire.HELLO] * 6


def test_default_floor_backs_off_from_the_third_round_as_before() -> None:
    poll = PollConfig(batch=16)  # rto_min 0.1, timeout 0.25: 0.1 + 0.2 + 0.25 s by the third round
    _, delays, _ = silent_rounds(poll, 6)
    assert delays == [0.0, 0.0, 0.125, 0.25, 0.5, 1.0]


def lossy_run(seed: int, ms: int = 4000, **tuning: float) -> dict[str, int]:
    """A 64-slot ring filled at 1 event per ms (it holds 64 ms) polled over a link losing 5% each
    way, 2 ms RTO floor: every event stored once or counted lost, exactly."""
    rng = random.Random(seed)
    core = SimCore(0, capacity=64, start=rng.randrange(2**32))
    poll = PollConfig(batch=16, frames=4, pipeline=True, timeout=0.25, interval=0.002,
                      interval_min=0.0, interval_max=0.01, rto_min=0.002, backoff_max=1.0,
                      copies=False, **tuning)  # fmt: skip
    cl = DeviceClient(1, DeviceConfig("dev", "udp"), poll)
    link = Link(cl, core, rng, {"loss": 0.05, "dup": 0.0, "reorder": 0.0, "spike": 0.0})
    most = [0]
    orig = cl.on_transport_error

    def on_transport_error() -> float:
        d = orig()
        most[0] = max(most[0], cl.pc.consecutive_errors)
        return d

    cl.on_transport_error = on_transport_error  # type: ignore[method-assign]
    link.push(0.0, "due", None)
    core.write_events(1)
    link.run_until(0.5)  # first contact (a lost HELLO waits the 0.25 s ceiling: no sample yet)
    assert not cl.pc.fresh
    for t in range(ms):
        core.write_events(1)
        link.run_until(0.5 + t * 0.001)
    link.faults = {"loss": 0.0, "dup": 0.0, "reorder": 0.0, "spike": 0.0}
    link.run_until(link.t + 2.0)
    stored = [ev[2] for ev in cl.out_events]
    losses = list({id(r): r for r in cl.out_losses}.values())
    lost = sum(r.lost for r in losses if r.cause == "overrun")
    assert len(stored) == len(set(stored)) and cl.n == core.ring.newest()
    before = sum(u32.distance(r.n0, core.start) for r in losses if r.cause == "first_contact")
    assert len(stored) + lost + before == core.generated
    return {"lost": lost, "most_in_a_row": most[0], "stored": len(stored)}


def test_lossy_link_below_the_ring_loses_nothing() -> None:
    """Same seeds, the backoff from the third silent round (dead_silence 0) against waiting for
    silence (the default): three
    timeouts in a row come in about half the runs, and where they came while the ring was filling
    the 125 ms idle after them (twice what the ring holds) lost events."""
    # the dead-link rule alone: no tail-loss probe and no POLL copies (which act at every rate over
    # UDP and make three silent rounds in a row rarer than the rule needs shown)
    seeds = range(8)
    now = [lossy_run(s, probe_recent=0) for s in seeds]
    before = [lossy_run(s, probe_recent=0, dead_silence=0.0) for s in seeds]
    print("now", now, "\nbefore", before)
    assert sum(r["most_in_a_row"] >= 3 for r in now) >= 3
    assert all(r["lost"] == 0 for r in now)
    assert sum(r["lost"] > 0 for r in before) >= 2
