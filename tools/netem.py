"""Network impairment between the bridge and the boards: a UDP proxy and a serial (pty) proxy.

Both proxies sit between a client (the bridge) and a target (a board, real or virtual) and impair
each direction on its own: loss, duplication, reordering (delay + jitter), corruption (bit flips),
a bandwidth limit (an emulated baud rate on serial) and blackout windows. Every decision comes from
a seeded random generator per direction, drawn a fixed number of times per datagram (UDP) or per
byte position and per frame (serial), so a run with the same seed and the same traffic makes the
same decisions; only the delivery times depend on the scheduler. Everything done is counted.

Directions: ``up`` is client -> target (bridge -> board), ``down`` is target -> client.

UDP, per datagram, in this order (6 random numbers drawn per datagram whatever happens):
  blackout (dropped while a window is open), loss, bandwidth (a bottleneck of ``rate`` bits/s with a
  tail-drop queue of ``queue`` bytes), corruption (one bit flipped), delay + jitter (uniform in
  delay +- jitter, at least 0), reorder (held ``reorder_ms`` longer so later datagrams overtake
  it), duplication (sent twice). Replies from the target go back to the client that caused them:
  one upstream socket per client address, as a NAT does.

Serial (a byte stream: frames are COBS runs ended by 0x00):
  per byte position: loss (a run of 1..``loss_run`` bytes dropped, starting with probability
  ``loss`` per byte), corruption (one bit flipped, probability ``corrupt`` per byte), blackout
  (bytes read while a window is open are dropped); per frame (bytes up to a 0x00 delimiter):
  duplication (the frame's bytes sent twice), reorder (held until the next frame has gone; released
  as is after ``reorder_ms`` if none comes), delay + jitter (order kept: a byte stream does not
  overtake itself); bandwidth: ``rate`` is the baud rate, 10 bits per byte (start, 8 data, stop).

From Python (tests, the chaos run):

    prof = Impairment(loss=0.1, dup=0.05, reorder=0.05, delay_ms=5, jitter_ms=2, corrupt=0.01, seed=1)
    async with UdpImpairer(("127.0.0.1", 0), ("127.0.0.1", board_port), prof) as imp:
        imp.address          # ("127.0.0.1", PORT): point the bridge here
        imp.counts           # {"up": {...}, "down": {...}}
    async with SerialImpairer("/dev/pts/7", prof) as imp:
        imp.port             # "/dev/pts/9": point the bridge here

    with in_thread(UdpImpairer(...)) as imp:   # synchronous callers: its own loop in a thread
        ...

From the shell: ``leadwire netem udp --listen 127.0.0.1:0 --target 127.0.0.1:40123 --loss 0.1
--seed 1`` prints one JSON ready line, and the counts as one JSON line on SIGTERM or SIGINT
(SIGUSR1: the counts so far, and it goes on).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import heapq
import json
import math
import os
import pty
import random
import signal
import socket
import sys
import threading
import time
import tty
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import click

Address = tuple[str, int]

UDP_KEYS = (
    "in",  # datagrams received
    "in_bytes",
    "out",  # datagrams sent (copies included)
    "out_bytes",
    "blackout",  # dropped in a blackout window
    "lost",  # dropped by the loss probability
    "queue_drops",  # dropped by the bandwidth limit's full queue
    "corrupted",  # one bit flipped
    "corrupted_out",  # copies of corrupted datagrams sent (what the receiver sees as bad)
    "duplicated",  # extra copies sent
    "held",  # held back by the reorder probability
    "reordered",  # sent after a datagram that arrived later (measured at sending)
    "send_errors",  # the socket refused (e.g. ICMP port unreachable: the board is down)
    "pending",  # scheduled but not sent when the proxy stopped
)

SERIAL_KEYS = (
    "in_bytes",  # bytes read
    "out_bytes",  # bytes written (copies included)
    "blackout_bytes",
    "lost_bytes",
    "loss_runs",
    "corrupted",  # bits flipped (one per corrupted byte)
    "frames",  # 0x00-terminated runs seen (after byte-level impairments)
    "duplicated",  # frames sent twice
    "held",
    "reordered",  # frames sent after the frame that followed them
    "overflow_bytes",  # the reader was not reading (a UART drops them too)
    "pending_bytes",  # not written when the proxy stopped
)


@dataclass
class Impairment:
    """What to do to one direction of a link. Probabilities are in 0..1; times in milliseconds.

    rate: bits per second (UDP: the bottleneck's bandwidth, payload bytes x 8; serial: the baud
    rate, 10 bits per byte); 0 = unlimited. blackouts: (start, end) in seconds from the proxy's
    start, during which nothing passes in either direction.
    """

    loss: float = 0.0
    dup: float = 0.0
    reorder: float = 0.0
    reorder_ms: float = 50.0
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    corrupt: float = 0.0
    rate: float = 0.0
    queue: int = 65536
    loss_run: int = 16
    blackouts: list[tuple[float, float]] = field(default_factory=list)
    seed: int = 0

    def __post_init__(self) -> None:
        self.blackouts = [(float(a), float(b)) for a, b in self.blackouts]
        for name in ("loss", "dup", "reorder", "corrupt"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError("%s must be a probability in 0..1, got %r" % (name, v))
        for name in ("reorder_ms", "delay_ms", "jitter_ms", "rate"):
            if getattr(self, name) < 0:
                raise ValueError("%s must be >= 0" % name)
        if self.queue < 1 or self.loss_run < 1:
            raise ValueError("queue and loss_run must be >= 1")
        for a, b in self.blackouts:
            if not 0 <= a < b:
                raise ValueError(
                    "a blackout window is (start, end) with 0 <= start < end, got (%r, %r)" % (a, b)
                )

    def in_blackout(self, t: float) -> bool:
        return any(a <= t < b for a, b in self.blackouts)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _rng(seed: int, direction: str, what: str) -> random.Random:
    # string seeds go through SHA-512 (random.seed version 2): the same on every run and platform
    return random.Random("leadwire-netem/%d/%s/%s" % (seed, direction, what))


def _geometric(rng: random.Random, p: float) -> float:
    """Trials before the next success at probability p (0 when p = 1, infinite when p = 0)."""
    if p <= 0.0:
        return math.inf
    if p >= 1.0:
        return 0
    return int(math.log(1.0 - rng.random()) / math.log(1.0 - p))


class _Scheduler:
    """Items sent at given loop times, FIFO among equal times (a heap keyed by time, then order)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, send: Callable[[Any], None]) -> None:
        self.loop = loop
        self.send = send
        self.heap: list[tuple[float, int, Any]] = []
        self.n = 0
        self.timer: asyncio.TimerHandle | None = None

    def at(self, when: float, item: Any) -> None:
        heapq.heappush(self.heap, (when, self.n, item))
        self.n += 1
        if self.heap[0][1] == self.n - 1:  # the new item is the earliest: re-arm
            if self.timer is not None:
                self.timer.cancel()
            self.timer = self.loop.call_at(when, self._run)

    def _run(self) -> None:
        self.timer = None
        now = self.loop.time()
        while self.heap and self.heap[0][0] <= now:
            _, _, item = heapq.heappop(self.heap)
            self.send(item)
        if self.heap:
            self.timer = self.loop.call_at(self.heap[0][0], self._run)

    def close(self) -> list[Any]:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        left = [item for _, _, item in self.heap]
        self.heap = []
        return left


# -- UDP ---------------------------------------------------------------------------------------


class _UdpDirection:
    """The per-datagram decisions of one direction of the UDP proxy."""

    def __init__(self, name: str, profile: Impairment, loop: asyncio.AbstractEventLoop, t0: float) -> None:
        self.name = name
        self.profile = profile
        self.loop = loop
        self.t0 = t0
        self.rng = _rng(profile.seed, name, "udp")
        self.counts: dict[str, int] = dict.fromkeys(UDP_KEYS, 0)
        self.link_free = 0.0  # when the bandwidth bottleneck has sent everything queued so far
        self.arrivals = 0
        self.max_sent = -1
        self.sched = _Scheduler(loop, self._send)

    def push(self, data: bytes, send: Callable[[bytes], None]) -> None:
        p = self.profile
        c = self.counts
        c["in"] += 1
        c["in_bytes"] += len(data)
        idx = self.arrivals
        self.arrivals += 1
        r = self.rng.random
        r_loss, r_corrupt, r_bit, r_jitter, r_reorder, r_dup = r(), r(), r(), r(), r(), r()
        now = self.loop.time()
        if p.blackouts and p.in_blackout(now - self.t0):
            c["blackout"] += 1
            return
        if r_loss < p.loss:
            c["lost"] += 1
            return
        when = now
        if p.rate > 0:
            start = max(now, self.link_free)
            if (start - now) * p.rate / 8 + len(data) > p.queue:
                c["queue_drops"] += 1
                return
            self.link_free = start + len(data) * 8 / p.rate
            when = self.link_free
        bad = r_corrupt < p.corrupt and bool(data)
        if bad:
            b = bytearray(data)
            bit = int(r_bit * len(b) * 8)
            b[bit >> 3] ^= 0x80 >> (bit & 7)
            data = bytes(b)
            c["corrupted"] += 1
        delay = p.delay_ms + (2 * r_jitter - 1) * p.jitter_ms
        if r_reorder < p.reorder:
            delay += p.reorder_ms
            c["held"] += 1
        when += max(delay, 0.0) / 1000
        copies = 2 if r_dup < p.dup else 1
        c["duplicated"] += copies - 1
        for _ in range(copies):
            if when <= now and not self.sched.heap:
                self._send((idx, data, send, bad))  # no delay and nothing queued: at once, in order
            else:
                self.sched.at(when, (idx, data, send, bad))

    def _send(self, item: tuple[int, bytes, Callable[[bytes], None], bool]) -> None:
        idx, data, send, bad = item
        c = self.counts
        if idx < self.max_sent:
            c["reordered"] += 1
        self.max_sent = max(self.max_sent, idx)
        try:
            send(data)
        except OSError:
            c["send_errors"] += 1
            return
        c["out"] += 1
        c["out_bytes"] += len(data)
        c["corrupted_out"] += bad

    def close(self) -> None:
        self.counts["pending"] += len(self.sched.close())


class _Listen(asyncio.DatagramProtocol):
    def __init__(self, owner: UdpImpairer) -> None:
        self.owner = owner

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.owner._from_client(data, (addr[0], addr[1]))

    def error_received(self, exc: Exception) -> None:
        self.owner.down.counts["send_errors"] += 1


class _Upstream(asyncio.DatagramProtocol):
    def __init__(self, owner: UdpImpairer, client: Address) -> None:
        self.owner = owner
        self.client = client
        self.transport: asyncio.DatagramTransport | None = None
        self.pending: list[bytes] = []  # sent before its socket was open

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # (3.11's is not a DatagramTransport subclass)
        for data in self.pending:
            transport.sendto(data)  # type: ignore[attr-defined]
        self.pending = []

    def send(self, data: bytes) -> None:
        if self.transport is None:
            self.pending.append(data)
        else:
            self.transport.sendto(data)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.owner._from_target(data, self.client)

    def error_received(self, exc: Exception) -> None:
        self.owner.up.counts["send_errors"] += 1  # ICMP unreachable: the target is not listening


class UdpImpairer:
    """A UDP proxy from `listen` to `target` impairing both directions (see the module docstring).

    `profile` applies to both directions unless `down` (target -> client) is given; `up` is the same
    as `profile`. Start with `await start()` or `async with`; `address` is the bound address.
    """

    MAX_CLIENTS = 256

    def __init__(
        self,
        listen: Address = ("127.0.0.1", 0),
        target: Address = ("127.0.0.1", 4210),
        profile: Impairment | None = None,
        down: Impairment | None = None,
    ) -> None:
        self.listen = listen
        self.target = target
        self.profile_up = profile or Impairment()
        self.profile_down = down if down is not None else self.profile_up
        self.address: Address | None = None
        self.started_at = 0.0
        self._listen: asyncio.DatagramTransport | None = None
        self._clients: dict[Address, _Upstream] = {}
        self._last_client: Address | None = None
        self._target_ip: Address | None = None
        self.up: _UdpDirection
        self.down: _UdpDirection
        self.unroutable = 0
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def counts(self) -> dict[str, dict[str, int]]:
        return {"up": self.up.counts, "down": self.down.counts}

    def snapshot(self) -> dict[str, Any]:
        """A copy of the counts, safe to keep (and to take from another thread)."""
        return {"up": dict(self.up.counts), "down": dict(self.down.counts), "unroutable": self.unroutable,
                "elapsed_s": round(time.monotonic() - self.started_at, 3)}  # fmt: skip

    async def start(self) -> UdpImpairer:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        self.started_at = time.monotonic()
        self.up = _UdpDirection("up", self.profile_up, loop, t0)
        self.down = _UdpDirection("down", self.profile_down, loop, t0)
        info = await loop.getaddrinfo(self.target[0], self.target[1], family=socket.AF_INET,
                                      type=socket.SOCK_DGRAM)  # fmt: skip
        host, port = info[0][4][:2]
        self._target_ip = (str(host), int(port))
        transport, _ = await loop.create_datagram_endpoint(lambda: _Listen(self), local_addr=self.listen)
        self._listen = transport
        host, port = transport.get_extra_info("sockname")[:2]
        self.address = (host, port)
        return self

    def _from_client(self, data: bytes, client: Address) -> None:
        if client == self._target_ip:
            # the target talking to the proxy's own address (a board configured with it as its host):
            # down, to the latest client
            if self._last_client is None:
                self.unroutable += 1
                return
            self.down.push(data, self._to_client(self._last_client))
            return
        up = self._clients.get(client)
        if up is None:
            if len(self._clients) >= self.MAX_CLIENTS:
                self.unroutable += 1
                return
            up = _Upstream(self, client)
            self._clients[client] = up
            task = asyncio.get_running_loop().create_task(self._connect(up))
            self._tasks.add(task)  # the loop keeps only weak references to tasks
            task.add_done_callback(self._tasks.discard)
        self._last_client = client
        self.up.push(data, up.send)

    async def _connect(self, up: _Upstream) -> None:
        loop = asyncio.get_running_loop()
        await loop.create_datagram_endpoint(lambda: up, remote_addr=self._target_ip)

    def _to_client(self, client: Address) -> Callable[[bytes], None]:
        def send(data: bytes) -> None:
            if self._listen is not None:
                self._listen.sendto(data, client)

        return send

    def _from_target(self, data: bytes, client: Address) -> None:
        self.down.push(data, self._to_client(client))

    def blackout(self, seconds: float) -> None:
        """Start a blackout window now, for `seconds`, in both directions (chaos runs)."""
        for d in (self.up, self.down):
            t = d.loop.time() - d.t0
            d.profile = copy.deepcopy(d.profile)
            d.profile.blackouts.append((t, t + seconds))

    async def stop(self) -> None:
        for d in (self.up, self.down):
            d.close()
        for task in list(self._tasks):
            task.cancel()
        for up in self._clients.values():
            if up.transport is not None:
                up.transport.close()
        if self._listen is not None:
            self._listen.close()
            self._listen = None
        await asyncio.sleep(0)

    async def __aenter__(self) -> UdpImpairer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


# -- serial --------------------------------------------------------------------------------------


class _StreamDirection:
    """One direction of the serial proxy: byte-level and frame-level impairments, then pacing."""

    FLUSH_S = 0.02  # bytes without a delimiter for this long go on as they are (e.g. a REPL)

    def __init__(
        self, name: str, profile: Impairment, loop: asyncio.AbstractEventLoop, t0: float, fd: int
    ) -> None:
        self.name = name
        self.profile = profile
        self.loop = loop
        self.t0 = t0
        self.fd = fd  # where the bytes go
        self.counts: dict[str, int] = dict.fromkeys(SERIAL_KEYS, 0)
        # one generator per kind of decision: positions do not depend on how reads were chunked
        self.rng_loss = _rng(profile.seed, name, "loss")
        self.rng_flip = _rng(profile.seed, name, "flip")
        self.rng_frame = _rng(profile.seed, name, "frame")
        self.pos = 0  # stream position of the next byte read
        self.next_loss = _geometric(self.rng_loss, profile.loss)
        self.drop_until = 0
        self.next_flip = _geometric(self.rng_flip, profile.corrupt)
        self.partial = bytearray()
        self.flush_timer: asyncio.TimerHandle | None = None
        self.held: bytes | None = None
        self.held_timer: asyncio.TimerHandle | None = None
        self.last_release = 0.0
        self.out: list[tuple[float, bytes]] = []  # FIFO of (release time, bytes)
        self.wake = asyncio.Event()
        self.link_free = 0.0
        self.writer = loop.create_task(self._write_loop())
        self.closed = False

    # bytes in
    def push(self, data: bytes) -> None:
        p = self.profile
        c = self.counts
        n = len(data)
        c["in_bytes"] += n
        start, end = self.pos, self.pos + n
        self.pos = end
        keep = bytearray(data)
        dropped = bytearray(n)  # 1 where the byte is dropped
        # runs of loss
        lo = start
        while lo < end:
            if self.drop_until > lo:
                hi = min(self.drop_until, end)
                dropped[lo - start : hi - start] = b"\x01" * (hi - lo)
                lo = hi
                continue
            if self.next_loss >= end:
                break
            at = int(self.next_loss)
            run = self.rng_loss.randint(1, p.loss_run)
            c["loss_runs"] += 1
            self.drop_until = at + run
            self.next_loss = at + run + _geometric(self.rng_loss, p.loss)
            lo = at
        while self.next_flip < end:
            at = int(self.next_flip)
            bit = self.rng_flip.randrange(8)
            if not dropped[at - start]:
                keep[at - start] ^= 1 << bit
                c["corrupted"] += 1
            self.next_flip = at + 1 + _geometric(self.rng_flip, p.corrupt)
        if p.blackouts and p.in_blackout(self.loop.time() - self.t0):
            c["blackout_bytes"] += n - sum(dropped)
            c["lost_bytes"] += sum(dropped)
            return
        if any(dropped):
            k = sum(dropped)
            c["lost_bytes"] += k
            keep = bytearray(b for b, d in zip(keep, dropped, strict=True) if not d)
        if keep:
            self._frames(bytes(keep))

    def _frames(self, data: bytes) -> None:
        self.partial += data
        while True:
            i = self.partial.find(0)
            if i < 0:
                break
            frame = bytes(self.partial[: i + 1])
            del self.partial[: i + 1]
            self._frame(frame)
        if self.flush_timer is not None:
            self.flush_timer.cancel()
            self.flush_timer = None
        if self.partial:
            self.flush_timer = self.loop.call_later(self.FLUSH_S, self._flush_partial)

    def _flush_partial(self) -> None:
        self.flush_timer = None
        if self.partial:
            data = bytes(self.partial)
            self.partial.clear()
            self._enqueue(data, self._delay(None))

    def _delay(self, r_jitter: float | None) -> float:
        p = self.profile
        d = p.delay_ms + ((2 * r_jitter - 1) * p.jitter_ms if r_jitter is not None else 0.0)
        return max(d, 0.0) / 1000

    def _frame(self, frame: bytes) -> None:
        p = self.profile
        c = self.counts
        c["frames"] += 1
        r = self.rng_frame.random
        r_jitter, r_reorder, r_dup = r(), r(), r()
        copies = 2 if r_dup < p.dup else 1
        c["duplicated"] += copies - 1
        data = frame * copies
        if self.held is None and r_reorder < p.reorder:
            self.held = data
            c["held"] += 1
            self.held_timer = self.loop.call_later(p.reorder_ms / 1000, self._release_held, False)
            return
        self._enqueue(data, self._delay(r_jitter))
        if self.held is not None:
            self._release_held(True)

    def _release_held(self, overtaken: bool) -> None:
        if self.held_timer is not None:
            self.held_timer.cancel()
            self.held_timer = None
        if self.held is None:
            return
        data, self.held = self.held, None
        if overtaken:
            self.counts["reordered"] += 1
        self._enqueue(data, self._delay(None))

    def _enqueue(self, data: bytes, delay: float) -> None:
        when = max(self.loop.time() + delay, self.last_release)  # a byte stream keeps its order
        self.last_release = when
        self.out.append((when, data))
        self.wake.set()

    # bytes out
    async def _write_loop(self) -> None:
        loop = self.loop
        while True:
            while not self.out:
                self.wake.clear()
                await self.wake.wait()
            when, data = self.out[0]
            now = loop.time()
            if when > now:
                await asyncio.sleep(when - now)
            self.out.pop(0)
            rate = self.profile.rate
            step = max(1, int(rate / 10 * 0.005)) if rate > 0 else len(data)  # 5 ms of bytes
            for i in range(0, len(data), step):
                chunk = data[i : i + step]
                if rate > 0:
                    # the line's clock runs on from where the last byte ended, up to 20 ms in the
                    # past: a late wake-up (a loaded machine) is caught up instead of lost, so a
                    # busy line carries baud / 10 bytes/s on average; an idle line starts afresh
                    now = loop.time()
                    start = max(now - 0.02, self.link_free)
                    self.link_free = start + len(chunk) * 10 / rate
                    if start > now:
                        await asyncio.sleep(start - now)
                await self._write(chunk)
                if rate > 0:
                    now = loop.time()
                    if self.link_free > now:
                        await asyncio.sleep(self.link_free - now)

    async def _write(self, data: bytes) -> None:
        c = self.counts
        # the board's side waits for a slow reader; the bridge's side drops after 0.1 s, as a UART
        deadline = self.loop.time() + (0.1 if self.name == "down" else 1.0)
        while data:
            try:
                n = os.write(self.fd, data)
            except BlockingIOError:
                if self.loop.time() >= deadline:  # nobody reading: dropped, as a UART does
                    c["overflow_bytes"] += len(data)
                    return
                await asyncio.sleep(0.001)
                continue
            except OSError:
                c["overflow_bytes"] += len(data)
                return
            c["out_bytes"] += n
            data = data[n:]

    def close(self) -> None:
        for t in (self.flush_timer, self.held_timer):
            if t is not None:
                t.cancel()
        self.writer.cancel()
        left = len(self.partial) + len(self.held or b"") + sum(len(d) for _, d in self.out)
        self.counts["pending_bytes"] += left
        self.out = []
        self.closed = True


class SerialImpairer:
    """A serial proxy: opens `target` (a tty, e.g. a virtual board's /dev/pts path) and a new pty
    whose other end, `port`, the bridge opens. Both ends raw. `profile` for both directions unless
    `down` (target -> bridge) is given; rate = baud (10 bits per byte)."""

    def __init__(
        self, target: str, profile: Impairment | None = None, down: Impairment | None = None
    ) -> None:
        self.target = target
        self.profile_up = profile or Impairment()
        self.profile_down = down if down is not None else self.profile_up
        self.port: str | None = None
        self.started_at = 0.0
        self._fds: list[int] = []
        self._readers: list[int] = []
        self.target_closed = False
        self.up: _StreamDirection
        self.down: _StreamDirection

    @property
    def counts(self) -> dict[str, dict[str, int]]:
        return {"up": self.up.counts, "down": self.down.counts}

    def snapshot(self) -> dict[str, Any]:
        return {"up": dict(self.up.counts), "down": dict(self.down.counts),
                "elapsed_s": round(time.monotonic() - self.started_at, 3)}  # fmt: skip

    async def start(self) -> SerialImpairer:
        loop = asyncio.get_running_loop()
        tfd = os.open(self.target, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        self._fds.append(tfd)
        try:
            tty.setraw(tfd)
            master, slave = pty.openpty()
            self._fds += [master, slave]
            tty.setraw(slave)  # the bridge's end: bytes pass unchanged, no echo
            os.set_blocking(master, False)
        except OSError:
            self._close_fds()
            raise
        self.port = os.ttyname(slave)  # kept open here too: the master never sees EIO between opens
        t0 = loop.time()
        self.started_at = time.monotonic()
        self.up = _StreamDirection("up", self.profile_up, loop, t0, tfd)
        self.down = _StreamDirection("down", self.profile_down, loop, t0, master)
        loop.add_reader(master, self._read, master, self.up)
        loop.add_reader(tfd, self._read, tfd, self.down)
        self._readers = [master, tfd]
        return self

    def _read(self, fd: int, d: _StreamDirection) -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the target went away (its pty closed): stop reading it
            asyncio.get_running_loop().remove_reader(fd)
            self._readers.remove(fd)
            self.target_closed = True
            return
        d.push(data)

    def blackout(self, seconds: float) -> None:
        for d in (self.up, self.down):
            t = d.loop.time() - d.t0
            d.profile = copy.deepcopy(d.profile)
            d.profile.blackouts.append((t, t + seconds))

    def _close_fds(self) -> None:
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = []

    async def stop(self) -> None:
        loop = asyncio.get_running_loop()
        for fd in self._readers:
            loop.remove_reader(fd)
        self._readers = []
        for d in (self.up, self.down):
            d.close()
        await asyncio.gather(self.up.writer, self.down.writer, return_exceptions=True)
        self._close_fds()

    async def __aenter__(self) -> SerialImpairer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


# -- synchronous use ------------------------------------------------------------------------------

Impairer = UdpImpairer | SerialImpairer


@contextlib.contextmanager
def in_thread(imp: Impairer, timeout: float = 10.0) -> Iterator[Impairer]:
    """Run an impairer on its own event loop in a daemon thread; yields it once it is listening.

    For synchronous code (subprocess-based tests, the chaos run). Read the counts with
    `imp.snapshot()`; call `imp.blackout(s)` through `call(imp, ...)` if exactness matters.
    """
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(imp.start())
        except BaseException as e:  # reported to the caller below
            failed.append(e)
            ready.set()
            return
        ready.set()
        loop.run_forever()
        loop.run_until_complete(imp.stop())
        loop.close()

    th = threading.Thread(target=run, name="netem", daemon=True)
    th.start()
    if not ready.wait(timeout) or failed:
        loop.call_soon_threadsafe(loop.stop)
        raise RuntimeError("netem did not start: %r" % (failed[0] if failed else "timeout"))
    try:
        yield imp
    finally:
        loop.call_soon_threadsafe(loop.stop)
        th.join(timeout)


def call(imp: Impairer, fn: Callable[[], Any]) -> None:
    """Run fn() on the impairer's loop (from the thread that started it with in_thread)."""
    loop = imp.up.loop
    done = threading.Event()

    def go() -> None:
        try:
            fn()
        finally:
            done.set()

    loop.call_soon_threadsafe(go)
    done.wait(5)


# -- command line ---------------------------------------------------------------------------------


def parse_address(text: str) -> Address:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError("expected HOST:PORT, got %r" % text)
    return host, int(port)


def parse_window(text: str) -> tuple[float, float]:
    a, sep, b = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return float(a), float(b)
    except ValueError:
        raise ValueError("a blackout window is START:END in seconds, got %r" % text) from None


def _profile_options(f: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.option("--loss", type=float, default=0.0, show_default=True, help="Loss probability."),
        click.option("--dup", type=float, default=0.0, show_default=True, help="Duplication probability."),
        click.option("--reorder", type=float, default=0.0, show_default=True,
                     help="Probability that a datagram (serial: a frame) is held back."),
        click.option("--reorder-ms", type=float, default=50.0, show_default=True,
                     help="How long a held datagram waits (serial: at most)."),
        click.option("--delay-ms", type=float, default=0.0, show_default=True, help="One-way delay."),
        click.option("--jitter-ms", type=float, default=0.0, show_default=True,
                     help="Delay varies uniformly by +- this."),
        click.option("--corrupt", type=float, default=0.0, show_default=True,
                     help="Bit-flip probability per datagram (serial: per byte)."),
        click.option("--rate", type=float, default=0.0, show_default=True,
                     help="Bandwidth in bits/s (serial: baud, 10 bits a byte); 0 = unlimited."),
        click.option("--queue", type=int, default=65536, show_default=True,
                     help="UDP: bytes queued at the bandwidth limit before tail drop."),
        click.option("--loss-run", type=int, default=16, show_default=True,
                     help="Serial: longest run of bytes one loss drops."),
        click.option("--blackout", "blackouts", multiple=True, metavar="START:END",
                     help="Nothing passes from START to END seconds after start (repeatable)."),
        click.option("--direction", type=click.Choice(["both", "up", "down"]), default="both",
                     show_default=True, help="Impair both directions, or only up (to the target) or down."),
        click.option("--seed", type=int, default=0, show_default=True, help="Random seed (per direction)."),
    ]  # fmt: skip
    for o in reversed(opts):
        f = o(f)
    return f


def _profiles(kw: dict[str, Any]) -> tuple[Impairment, Impairment]:
    direction = kw.pop("direction")
    try:
        kw["blackouts"] = [parse_window(w) for w in kw["blackouts"]]
        prof = Impairment(**kw)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    clean = Impairment(seed=prof.seed)
    up = prof if direction in ("both", "up") else clean
    down = prof if direction in ("both", "down") else clean
    return up, down


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def _serve(imp: Impairer, ready: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await imp.start()
    loop.add_signal_handler(signal.SIGUSR1, lambda: _emit({"counts": imp.snapshot()}))
    _emit(ready())
    await stop.wait()
    snap = imp.snapshot()  # counts at the signal; stop() adds what was still pending
    await imp.stop()
    return {"counts": imp.snapshot() | {"elapsed_s": snap["elapsed_s"]}}


@click.group()
def netem() -> None:
    """Impair the link between bridge and boards: loss, duplication, reordering, corruption, bandwidth,
    blackouts; seeded; counts what it did (printed as JSON on SIGTERM/SIGINT, and on SIGUSR1)."""


@netem.command()
@click.option("--listen", default="127.0.0.1:0", show_default=True, help="HOST:PORT the bridge sends to.")
@click.option("--target", required=True, help="HOST:PORT of the board.")
@_profile_options
def udp(listen: str, target: str, **kw: Any) -> None:
    """UDP proxy: prints {"listen": "HOST:PORT", "pid": ...} when ready."""
    try:
        la, ta = parse_address(listen), parse_address(target)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    up, down = _profiles(kw)
    imp = UdpImpairer(la, ta, up, down)

    def ready() -> dict[str, Any]:
        assert imp.address is not None
        return {"listen": "%s:%d" % imp.address, "target": "%s:%d" % ta, "pid": os.getpid(),
                "up": up.as_dict(), "down": down.as_dict()}  # fmt: skip

    try:
        _emit(asyncio.run(_serve(imp, ready)))
    except OSError as e:
        raise click.ClickException("cannot listen on %s: %s" % (listen, e)) from None


@netem.command()
@click.option("--target", required=True, help="The board's tty (e.g. the port of `leadwire board`).")
@_profile_options
def serial(target: str, **kw: Any) -> None:
    """Serial proxy: a new pty; prints {"port": "/dev/pts/N", "pid": ...} when ready."""
    up, down = _profiles(kw)
    imp = SerialImpairer(target, up, down)

    def ready() -> dict[str, Any]:
        return {"port": imp.port, "target": target, "pid": os.getpid(), "up": up.as_dict(),
                "down": down.as_dict()}  # fmt: skip

    try:
        _emit(asyncio.run(_serve(imp, ready)))
    except OSError as e:
        raise click.ClickException("cannot open %s: %s" % (target, e)) from None
