"""Throughput over a lossy link in virtual time: the bench's top rungs without the host's noise.

`Link` (tests/bridge/test_rtt.py: the daemon's scheduler in miniature) carries the datagrams; here
the device also takes time to answer: a request costs `req_us` and each event it sends `ev_us`, one
request at a time (the board's single loop), so the device has a throughput ceiling as the real
board has. Events are written into its ring (SimCore, the core's EventRing) every `step_us` at the
offered rate. Reported per run: events stored per second of the window, events counted lost, the
overruns (and of them those answered by another RECOVERY with no event between: "chased"), the
timeouts and the fraction of the window the link sat idle waiting for one ("idle on RTO": from the
later of the send and the last frame to the timeout).

Run: .venv/bin/python -m tests.bridge.lossy_sim [--quick]
"""

from __future__ import annotations

import heapq
import random
import sys
from typing import Any

from leadwire import codec, u32, wire
from leadwire.bridge.accounting import check_client, require
from leadwire.bridge.client import DeviceClient
from leadwire.bridge.config import DeviceConfig, PollConfig
from leadwire.client import RESTARTED
from leadwire.tools.simdevice import SimCore

from .test_rtt import Link

CLEAN = {"loss": 0.0, "dup": 0.0, "reorder": 0.0, "spike": 0.0}


class OldFirmwareCore(SimCore):
    """A device without the copy rule: it answers a copy of the POLL it answered last, too."""

    def handle(self, data: bytes, now_s: float = 0.0) -> list[bytes]:
        self.last_poll = -1
        return super().handle(data, now_s)


class BusyLink(Link):
    """Link with a one-way delay of `owd` (+ up to `jitter`) and a device that is busy while it answers."""

    def __init__(self, cl: DeviceClient, core: SimCore, rng: random.Random, faults: dict[str, float],
                 owd: float, jitter: float, req_us: float, ev_us: float) -> None:  # fmt: skip
        super().__init__(cl, core, rng, faults)
        self.owd = owd
        self.jitter = jitter
        self.req_s = req_us * 1e-6
        self.ev_s = ev_us * 1e-6
        self.busy_until = 0.0
        self.fifo: dict[str, float] = {}  # direction -> the last delivery time
        self.idle_rto = 0.0  # seconds waited for timeouts: from the later of send and last frame
        self.pipelined = 0  # requests made while pipelining was on
        # a slow host: each frame it reads costs host_s + host_ev_s per event, and now and then (a
        # loaded machine, the store writer) it stalls for up to stall_s; frames, timers and due
        # requests wait until it is free (frames first, as the daemon's reader runs before timers)
        self.host_s = 0.0
        self.host_ev_s = 0.0
        self.stall_p = 0.0
        self.stall_s = 0.0
        self.host_free = 0.0
        self.check: Any = None  # called after every step (the accounting invariant)
        orig = cl.on_transport_error

        def on_err() -> float:
            self.idle_rto += self.t - max(self.sent, self.last_rx)
            return orig()

        cl.on_transport_error = on_err  # type: ignore[method-assign]

    def carry(self, data: bytes, kind: str, at: float | None = None) -> None:
        r = self.rng
        if r.random() < self.faults["loss"]:
            return
        t0 = self.t if at is None else at
        late = 0.0
        if self.faults.get("spike") and r.random() < self.faults["spike"]:
            late = 0.005 + r.random() * 0.01
        # in order per direction, as on loopback and netem without reordering (a late one holds up
        # the ones after it, as a stalled host does)
        d = max(t0 + self.owd + r.random() * self.jitter + late, self.fifo.get(kind, 0.0) + 1e-6)
        if self.faults.get("reorder") and r.random() < self.faults["reorder"]:
            self.push(d + r.random() * 0.002, kind, data)  # out of order: after the ones behind it
        else:
            self.fifo[kind] = d
            self.push(d, kind, data)
        if self.faults.get("dup") and r.random() < self.faults["dup"]:
            self.push(d + r.random() * 0.002, kind, data)

    def send(self) -> None:
        super().send()
        self.pipelined += self.cl.pc.pipeline

    def step(self) -> None:
        at, _, kind, item = self.q[0]
        if kind in ("cli", "deadline", "due") and at < self.host_free:
            heapq.heappop(self.q)  # the host is busy: it gets to it when free (frames before timers)
            self.push(self.host_free + (0.0 if kind == "cli" else 1e-9), kind, item)
            return
        if kind == "cli" and (self.host_s or self.host_ev_s or self.stall_p):
            assert isinstance(item, bytes)
            f = codec.decode(item)
            k = len(f.payload) and f.payload[0] if f.type == wire.EVENTS else 0
            cost = self.host_s + self.host_ev_s * k
            if self.stall_p and self.rng.random() < self.stall_p:
                cost += self.rng.random() * self.stall_s
            self._step()
            self.host_free = self.t + cost
            return
        self._step()

    def _step(self) -> None:
        at, _, kind, item = self.q[0]
        if kind == "dev":  # the device reads it when its loop is free
            self.t = at
            heapq.heappop(self.q)
            start = max(at, self.busy_until)
            self.busy_until = start + self.req_s
            self.push(start, "serve", item)
            return
        if kind == "serve":
            heapq.heappop(self.q)
            self.t = at
            assert isinstance(item, bytes)
            done = at
            for out in self.core.handle(item, at):
                f = codec.decode(out)
                k = len(f.payload) and f.payload[0] if f.type == wire.EVENTS else 0
                done += self.ev_s * k
                self.carry(out, "cli", done)
            self.busy_until = max(self.busy_until, done + self.req_s)
            return
        super().step()
        if kind == "cli" and self.check is not None:
            self.check()


def run(size: int, ring: int, rate: float, loss: float, seed: int = 0, window: float = 0.5,
        owd: float = 0.0004, jitter: float = 0.0002, req_us: float = 30.0, ev_us: float | None = None,
        step_us: float = 20.0, idle: float = 0.0, spike: float = 0.0, dup: float = 0.0, reorder: float = 0.0,
        copies: bool = True, host_us: float = 0.0, host_ev_us: float = 0.0, stall: float = 0.0,
        stall_ms: float = 0.0, check_every: int = 0, old_firmware: bool = False, restart: float = 0.0,
        **poll_kw: Any) -> dict[str, Any]:  # fmt: skip
    """One run: `rate` events/s of `size` bytes into a `ring`-slot ring for `window` s at `loss` each
    way, then drained on a clean link; exact accounting checked. `poll_kw`: PollConfig fields that
    differ from the defaults here (the netem bench's timeout=0.02, backoff_max=0.05)."""
    rng = random.Random(seed)
    core = (OldFirmwareCore if old_firmware else SimCore)(
        0, capacity=ring, slot_size=size, payload_size=size, start=rng.randrange(2**32)
    )
    kw: dict[str, Any] = dict(batch=255, max_bytes=1460, frames=16, pipeline=True, timeout=0.25,
                              interval=0.005, interval_min=0.0, interval_max=0.05, rto_min=0.002,
                              backoff_max=0.25, copies=copies)  # fmt: skip
    poll = PollConfig(**dict(kw, **poll_kw))
    cl = DeviceClient(1, DeviceConfig("dev", "udp"), poll)
    if ev_us is None:
        ev_us = 2.0 + size / 32  # 64 B: 4 us, 256 B: 10 us per event sent
    link = BusyLink(cl, core, rng, dict(CLEAN, loss=loss), owd, jitter, req_us, ev_us)
    link.host_s, link.host_ev_s = host_us * 1e-6, host_ev_us * 1e-6
    link.stall_p, link.stall_s = stall, stall_ms * 1e-3
    tick = [0]
    ended: dict[int, tuple[int, int | None]] = {}  # boots the device restarted out of: (start, newest)

    def truth() -> tuple[int, int | None] | None:
        """The device's record of the boot the client is on (None: not known to it yet)."""
        if cl.epoch == core.epoch:
            return core.start, core.ring.newest() if core.generated else None
        return ended.get(cl.epoch) if cl.epoch is not None else None

    if check_every:

        def check() -> None:
            tick[0] += 1
            boot = truth()
            if tick[0] % check_every == 0 and boot is not None:
                require(check_client(cl, *boot))

        link.check = check
    link.push(0.0, "due", None)
    # warm up on a clean link (handshake, first contact, RTT samples), then the window
    t = 0.0
    dt = step_us * 1e-6
    carry = 0.0
    link.faults = dict(CLEAN)
    warm = 0.05
    while t < warm:
        t += dt
        link.run_until(t)
    base_stored = len(cl.out_events)
    base_lost = cl.dc["overrun_lost"]
    base = {k: cl.dc[k] for k in ("timeouts", "overruns", "stale_answers", "polls")}
    link.idle_rto = 0.0
    losses_before = {id(r) for r in cl.out_losses}
    link.faults = dict(CLEAN, loss=loss, spike=spike, dup=dup, reorder=reorder)
    gen0 = core.generated_total
    while t < warm + window:
        carry += rate * dt
        k = int(carry)
        carry -= k
        if restart and rng.random() < restart:
            # the device restarts: the boot the client is on must be exact up to its n; late
            # answers of the old boot are still checked against its record after
            ended[core.epoch] = (core.start, core.ring.newest() if core.generated else None)
            boot = truth()
            if boot is not None:
                require(check_client(cl, *boot))
            core.boot()
        if k:
            core.write_events(k, int(t * 1e6))
        t += dt
        link.run_until(t)
    stored = len(cl.out_events) - base_stored
    generated = core.generated_total - gen0
    idle = link.idle_rto
    d = {k: cl.dc[k] - v for k, v in base.items()}
    lost = cl.dc["overrun_lost"] - base_lost
    win_losses = [r for r in {id(r): r for r in cl.out_losses}.values() if id(r) not in losses_before]
    # one overrun per RECOVERY acted on (the gaps behind held frames it took are rows of their own)
    by_answer: dict[tuple[int, int, int], int] = {}
    for r in win_losses:
        if r.cause == "overrun":
            key = (r.n0, r.n1, r.started_us)
            by_answer[key] = by_answer.get(key, 0) + r.recovered
    overruns = list(by_answer.values())
    chased = sum(1 for recovered in overruns if recovered == 0)
    # drain on a clean link (after `idle` s with nothing generated), then check the accounting
    link.faults = dict(CLEAN)
    polls0 = cl.dc["polls"]
    link.run_until(link.t + idle)
    idle_polls = cl.dc["polls"] - polls0
    drain_and_account(link, cl, core, 2.0, 0.05)
    return {
        "ev_s": stored / window,
        "offered": generated / window,
        "lost": lost,
        "overruns": len(overruns),
        "chased": chased,
        "timeouts": d["timeouts"],
        "idle_rto": idle / window,
        "stale": d["stale_answers"],
        "polls": d["polls"],
        "spurious": cl.rtt.spurious,
        "probes": getattr(cl, "probes", 0),
        "pipelined": link.pipelined,
        "unproven_end": getattr(cl.pc, "unproven", 0),
        "idle_polls": idle_polls,
        # how often each rule of leadwire.hold and the bridge client acted (whole run, drain included)
        "absorbed": getattr(cl.pc, "absorbed", 0),
        "turnover_skips": getattr(cl.pc, "turnover_skips", 0),
        "past_newest": getattr(cl.pc, "past_newest", 0),
        "aheads": getattr(cl.pc, "aheads", 0),
        "taken_back": getattr(cl.pc, "taken_back", 0),
        "early_gaps": getattr(cl, "early_gaps", 0),
        "third_polls": getattr(cl, "third_polls", 0),
        "copies": cl.copies.sent,
        "copies_answered": cl.copies.answered_twice,
        "device_copies": getattr(core, "copies", 0),
        "checks": tick[0] // check_every if check_every else 0,  # accounting checks made
    }


def drain_and_account(
    link: Link, cl: DeviceClient, core: SimCore, limit_s: float, settle_s: float
) -> tuple[list[Any], list[Any]]:
    """Run the link (faults off: the caller's) until the client has drained the device's ring or
    limit_s passed, then settle_s more; assert the exact accounting: every event generated is
    stored once or counted lost (first contact included), n at the newest offset (past it by the
    events a skip has not yet seen generated: leadwire.hold). The stored event rows and the loss
    records (each once)."""
    # a boot the device has written nothing in yet (it restarted at the window's end) has nothing
    # to drain: the client has seen it when it knows its epoch, and waits for its first RECOVERY
    # with no n of that boot (the boots before were checked exact when they ended)
    empty_boot = core.boots > 1 and core.generated == 0
    end = link.t + limit_s
    while link.t < end and link.q:
        link.run_until(link.t + 0.01)
        if cl.epoch != core.epoch:
            continue
        if empty_boot or (u32.le(core.ring.newest(), cl.n) and (cl.recovery is None or cl.pc.unproven)):
            break
    link.run_until(link.t + settle_s)
    stored = [ev[2] for ev in cl.out_events]
    losses = list({id(r): r for r in cl.out_losses}.values())
    if empty_boot:
        assert cl.epoch == core.epoch, "restart not seen"
        assert cl.pc.state == RESTARTED, "a boot with no events left its first contact: " + cl.pc.state
        return stored, losses
    assert u32.distance(cl.n, core.ring.newest()) == getattr(cl.pc, "unproven", 0), "not drained"
    if core.boots > 1:  # the device restarted: its last boot, with its restart row, exactly
        assert cl.epoch == core.epoch, "restart not seen"
        require(check_client(cl, core.start, core.ring.newest(), drained=True))
        return stored, losses
    lost = sum(r.lost for r in losses if r.lost is not None)
    before = sum(u32.distance(r.n0, core.start) for r in losses if r.cause == "first_contact")
    assert len(stored) == len(set(stored)), "an event stored twice"
    assert len(stored) + lost + before == core.generated, "silent loss"
    return stored, losses


POINTS = [(64, 264, r) for r in (20_000, 60_000, 150_000)] + [(256, 60, r) for r in (10_000, 40_000, 100_000)]


def table(seeds: int = 3, owd: float = 0.0004, window: float = 0.5) -> list[dict[str, Any]]:
    rows = []
    for size, ring, rate in POINTS:
        for loss in (0.0, 0.01, 0.05):
            rs = [run(size, ring, rate, loss, seed=s, owd=owd, window=window) for s in range(seeds)]
            m = {k: sum(r[k] for r in rs) / len(rs) for k in rs[0]}
            m.update(size=size, ring=ring, rate=rate, loss=loss)
            rows.append(m)
    return rows


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    owd = 0.0004
    for a in argv:
        if a.startswith("--owd="):
            owd = float(a[6:])
    rows = table(seeds=2 if quick else 4, owd=owd, window=0.3 if quick else 0.5)
    print("size ring offered loss | ev/s ratio | lost overruns chased | timeouts idle_rto spurious stale")
    lossless: dict[tuple[int, int], float] = {}
    for m in rows:
        key = (m["size"], m["rate"])
        if m["loss"] == 0.0:
            lossless[key] = m["ev_s"]
        ratio = m["ev_s"] / lossless[key] if lossless.get(key) else 0.0
        print("%4d %4d %7d %4.0f%% | %8.0f %5.3f | %8.0f %6.1f %6.1f | %6.1f %5.1f%% %5.1f %6.0f" % (
            m["size"], m["ring"], m["rate"], m["loss"] * 100, m["ev_s"], ratio, m["lost"], m["overruns"],
            m["chased"], m["timeouts"], m["idle_rto"] * 100, m["spurious"], m["stale"]))  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
