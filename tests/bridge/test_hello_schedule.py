"""The periodic HELLO goes between two POLLs, never in a POLL's slot: the daemon's Scheduler in
virtual time (virtual_loop.py), exact send times. A device without a key gets a HELLO every
``hello_interval`` half a poll interval before its next POLL is due, and that POLL still goes out
at its due time; a device with a key gets none (its restart shows as a refused POLL)."""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from leadwire import wire
from leadwire.bridge.accounting import check_client, require
from leadwire.bridge.daemon import Scheduler

from . import virtual_loop
from .virtual_loop import T0, Fleet

pytestmark = pytest.mark.timeout(60)

KEY = bytes(range(32))
IV = 0.5  # 2 Hz
RTT = 0.002
SPREAD = 0.0377
POLLING = {"adaptive": False, "interval": IV, "interval_min": IV, "interval_max": IV, "timeout": 0.25,
           "rto_min": 0.1, "hello_interval": 2.0}  # fmt: skip


def grid(at: float) -> float:
    """Where the Scheduler's timer sends a request due at `at` (a wait of 8 grid steps or more)."""
    return math.ceil(at / Scheduler.GRID) * Scheduler.GRID


def kinds(link: virtual_loop.SimLink) -> list[tuple[float, int]]:
    """(send time, request type) of every request the device got, times to the nanosecond."""
    return ns([(t, f.type) for t, f in link.sent])


def ns(sends: list[tuple[float, int]]) -> list[tuple[float, int]]:
    return [(round(t, 9), k) for t, k in sends]


def expected(start: float, until: float, hello_interval: float | None, late: dict[int, float] | None = None
             ) -> list[tuple[float, int]]:  # fmt: skip
    """The requests a device sends, by the daemon's rules: the first HELLO at its start, the first
    POLL when its answer is in (RTT); that POLL's answer (first contact: a RECOVERY) brings the next
    at once, and from that POLL's due time (the first POLL's send) a POLL every IV (due times that
    never drift, sent on the timer's grid); with hello_interval, a HELLO half an interval before
    the POLL after the first answer that finds one due (its answer RTT later). late: POLL number ->
    when it goes instead (its HELLO answered after its due time)."""
    out = [(start, wire.HELLO), (start + RTT, wire.POLL), (start + 2 * RTT, wire.POLL)]
    last_hello = start + RTT
    due = start + RTT
    k = 2
    while True:
        answered = out[-1][0] + RTT
        nxt = due + IV
        if hello_interval is not None and answered - last_hello >= hello_interval:
            h = grid(max(answered, nxt - IV / 2))
            if h >= until:
                break
            out.append((h, wire.HELLO))
            last_hello = h + RTT
        due = nxt
        k += 1
        t = (late or {}).get(k, grid(due))
        if t >= until:
            break
        out.append((t, wire.POLL))
    return out


def write_every(f: Fleet, every: float, k: int) -> None:
    """Each device writes k events now (the first POLL finds them: first contact) and every
    `every` seconds."""
    loop = asyncio.get_running_loop()
    for c in f.cores:
        c.write_events(k)

    def tick() -> None:
        for c in f.cores:
            c.write_events(k)
        loop.call_later(every, tick)

    loop.call_at(T0 + every / 3, tick)


def exact(f: Fleet) -> None:
    """Every event each device's current boot generated is stored once, or (written after the last
    POLL) still to be polled: nothing lost on these links, nothing silent."""
    for cl, core in zip(f.clients, f.cores, strict=True):
        newest = core.ring.newest() if core.ring.count else None
        led = require(check_client(cl, core.start, newest), cl.device_id)
        assert (led.generated, led.stored + led.pending, led.lost) == (core.generated, core.generated, 0)
        assert led.pending <= 2  # the events written since the last POLL (1 every 0.3 s)
        assert sorted(e[2] for e in cl.out_events if e[1] == core.epoch) == [
            core.offset_of(i) for i in range(led.stored)
        ]


def run_fleet(tmp: Path, keys: list[bytes | None], polling: dict[str, Any], seconds: float,
              setup: Callable[[Fleet], None] = lambda f: None) -> Fleet:  # fmt: skip
    """A Fleet (a device per key) set up by `setup`, each device writing an event every 0.3 s,
    started SPREAD apart and run for `seconds` of virtual time."""

    async def main() -> Fleet:
        f = Fleet(tmp, keys, polling, rtt=RTT)
        setup(f)
        write_every(f, 0.3, 1)
        f.start(SPREAD)
        await asyncio.sleep(seconds)
        f.stop()
        return f

    return virtual_loop.run(main())


def test_periodic_hello_goes_between_two_polls_and_every_poll_keeps_its_due_time(tmp_path: Path) -> None:
    f = run_fleet(tmp_path, [None, None], POLLING, 10.0)
    for i, link in enumerate(f.links):
        got = kinds(link)
        want = expected(T0 + i * SPREAD, T0 + 10.0, 2.0)
        assert got == ns(want)
        hellos = [t for t, k in got if k == wire.HELLO]
        assert len(hellos) == 5  # the first, then every 2.0-2.5 s (the gap after a due answer)
        polls = [t for t, k in got if k == wire.POLL]
        # between two POLLs, half an interval before the second: POLL, HELLO, POLL
        for h in [h for h in hellos[1:] if h < polls[-1]]:
            before = max(t for t in polls if t < h)
            after = min(t for t in polls if t > h)
            assert after - h == pytest.approx(IV / 2, abs=Scheduler.GRID)
            assert h - before == pytest.approx(IV / 2, abs=Scheduler.GRID)
        # the POLLs' intervals: IV each (the grid rounds a due time up by less than 1 ms)
        gaps = [b - a for a, b in itertools.pairwise(polls[2:])]
        assert max(gaps) - IV < Scheduler.GRID and IV - min(gaps) < Scheduler.GRID
    exact(f)
    assert [c.dc["timeouts"] for c in f.clients] == [0, 0]


def test_a_lost_periodic_hello_leaves_the_poll_on_time_and_goes_again_at_the_next_gap(tmp_path: Path) -> None:
    def lose_hellos(f: Fleet) -> None:
        f.links[0].drop = lambda i, fr: fr.type == wire.HELLO and i > 0 and not dropped.append(i)

    dropped: list[int] = []
    f = run_fleet(tmp_path, [None], POLLING, 4.0, lose_hellos)
    got = kinds(f.links[0])
    polls = [t for t, k in got if k == wire.POLL]
    hellos = [t for t, k in got if k == wire.HELLO]
    # every POLL on its grid although every periodic HELLO is lost (its RTO, 0.1 s, ends before the
    # POLL is due); the HELLO goes again in the next gap, POLL after POLL
    dues = [T0 + RTT + k * IV for k in range(1, 8)]
    assert polls == pytest.approx([T0 + RTT, T0 + 2 * RTT] + [grid(d) for d in dues], abs=1e-9)
    assert len(hellos) == 1 + len(dropped) and len(dropped) == 4
    assert hellos[1:] == pytest.approx([grid(T0 + RTT + k * IV - IV / 2) for k in (5, 6, 7, 8)], abs=1e-9)
    cl = f.clients[0]
    assert cl.dc["timeouts"] == 4 and cl.dc["restarts"] == 0
    exact(f)


def test_a_late_hello_answer_delays_only_the_poll_after_it(tmp_path: Path) -> None:
    """The HELLO's RTO is longer than the gap before the POLL (rto_min 0.3 s) and its answer takes
    0.28 s: the POLL waits for it (one request out at a time), then the grid goes on."""

    def slow_hellos(f: Fleet) -> None:
        f.links[0].slow = lambda i, fr: 0.28 if fr.type == wire.HELLO and i > 0 else None

    f = run_fleet(tmp_path, [None], {**POLLING, "rto_min": 0.3, "timeout": 0.5}, 3.0, slow_hellos)
    got = kinds(f.links[0])
    h = [t for t, k in got if k == wire.HELLO][1]
    assert h == pytest.approx(grid(T0 + RTT + 4.5 * IV), abs=1e-9)  # between the POLLs due at 2.0, 2.5 s
    assert got == ns(expected(T0, T0 + 3.0, 2.0, late={7: h + 0.28}))  # that POLL at h + 0.28, then the grid
    exact(f)


def test_restart_with_an_empty_ring_found_by_the_hello_between_polls(tmp_path: Path) -> None:
    async def main() -> Fleet:
        f = Fleet(tmp_path, [None, None], POLLING, rtt=RTT)
        loop = asyncio.get_running_loop()
        write_every(f, 0.3, 1)
        f.start(SPREAD)
        await asyncio.sleep(3.05)
        old.append(f.cores[0].epoch)
        stored_before.extend(e[2] for e in f.clients[0].out_events)
        generated_before.append(f.cores[0].generated)
        f.cores[0].boot(start=77)  # writes nothing for a while: POLLs answer NO_EVENT
        f.cores[0].write_events = lambda k, t_us=None: None  # type: ignore[method-assign]
        t_restart.append(loop.time())
        await asyncio.sleep(4.0)
        f.stop()
        return f

    old: list[int] = []
    stored_before: list[int] = []
    generated_before: list[int] = []
    t_restart: list[float] = []
    f = virtual_loop.run(main())
    cl, core = f.clients[0], f.cores[0]
    got = kinds(f.links[0])
    assert got == ns(expected(T0, T0 + 7.1, 2.0))  # the grid unbroken by the restart
    # found by the first periodic HELLO after it (at 4.75 s, between the POLLs due at 4.5 and 5.0)
    hello_after = min(t for t, k in got if k == wire.HELLO and t > t_restart[0])
    assert hello_after == pytest.approx(grid(T0 + RTT + 4.75), abs=1e-9)
    assert cl.dc["restarts"] == 1 and cl.epoch == core.epoch != old[0]
    assert [(b.boot_epoch, b.detected_by) for b in cl.out_boots] == [(old[0], "hello"), (core.epoch, "hello")]
    # the old boot: every event it generated before the restart was stored (polled within 0.5 s)
    assert stored_before == [1000 + i for i in range(generated_before[0])] and generated_before[0] == 11
    assert cl.pc.fresh and cl.pc.n in (0, 0x80000000)  # the new boot: first contact probes
    assert f.clients[1].dc["restarts"] == 0


@pytest.mark.parametrize("hint", [True, False], ids=["boot-hello", "silent"])
def test_signed_device_no_periodic_handshake_and_its_restart_is_found_by_a_refused_poll(
    tmp_path: Path, hint: bool
) -> None:
    """Signed: one session for the whole run (no HELLO but the first) and every POLL on its grid.
    A restart (empty ring): the next POLL is refused, the board says so with its boot HELLO (the
    handshake goes at once) or, a device that does not, by silence (the HELLO after 3 silent
    rounds)."""
    found: list[float] = []

    async def main() -> Fleet:
        f = Fleet(tmp_path, [KEY, KEY], POLLING, rtt=RTT)
        write_every(f, 0.3, 1)
        f.start(SPREAD)
        await asyncio.sleep(6.0)
        for c in f.cores:
            assert c.auth is not None and (c.auth.k_hi, c.auth.k_lo) == (0, 1)  # session 1 throughout
        c0 = f.cores[0]
        c0.write_events = lambda k, t_us=None: None  # type: ignore[method-assign]
        c0.boot(start=77)
        if hint:
            ep: Any = c0.auth
            c0.link[15][8] = lambda: 0 if ep.live else 1  # lwauth's hint(): a board's boot HELLO
        await asyncio.sleep(3.0)
        f.stop()
        return f

    f = virtual_loop.run(main())
    sent0 = kinds(f.links[0])
    assert kinds(f.links[1]) == ns(expected(T0 + SPREAD, T0 + 9.0, None))
    before = [(t, k) for t, k in sent0 if t < T0 + 6.0]
    assert before == ns(expected(T0, T0 + 6.0, None))
    after = [(t, k) for t, k in sent0 if t >= T0 + 6.0]
    cl = f.clients[0]
    first = grid(T0 + RTT + 6.0)  # the first POLL after the restart: refused
    if hint:
        # refused, the boot HELLO comes back: the handshake at once, the POLL after its answer
        assert after[:3] == ns([(first, wire.POLL), (first + RTT, wire.HELLO), (first + 2 * RTT, wire.POLL)])
        assert cl.dc["timeouts"] == 0
    else:
        # silence: the POLL again at each RTO (0.1, doubled), then the HELLO with the third retry
        assert [k for _, k in after[:4]] == [wire.POLL, wire.POLL, wire.POLL, wire.HELLO]
        assert cl.dc["timeouts"] == 3
    found.append(cl.dc["restarts"])
    assert found == [1] and cl.epoch == f.cores[0].epoch and cl.out_boots[-1].detected_by == "hello"
    assert (f.cores[1].auth.k_hi, f.cores[1].auth.k_lo) == (0, 1)  # type: ignore[union-attr]
    assert f.clients[1].dc["timeouts"] == 0
    exact(f)
