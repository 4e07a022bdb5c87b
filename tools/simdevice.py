"""A light simulated leadwire device, built on the protocol core, for bridge tests and benchmarks.

:class:`SimCore` is the device agent without I/O: an ``EventRing`` (spec 004) answering HELLO and
POLL, push sessions with a ``ReportSequence`` per channel (spec 003) sent through a ``FrameQueue``
(spec 002), and a deterministic event generator: event ``i`` of a boot carries
``u64 generation time (us) | u32 device index | u32 i`` and goes on channel ``1 + i % channels``.

:class:`SimDevice` serves one core over UDP on 127.0.0.1 (asyncio; many per process), or over a
pseudo-terminal with COBS framing (:class:`SimSerial`), with injectable faults (dropped, duplicated,
delayed or corrupted answers; ignored ACKs). :class:`SimFleet` runs many devices in one event
loop with one generator task.

:class:`VirtualRing` and :func:`serve_fast` are the light simulator for benchmarks: the same
answers as an ``EventRing`` fed by the generator (checked byte for byte in
tests/bridge/test_simdevice.py), computed when a poll arrives instead of written event by event,
with the generation time of event i fixed in advance (t0 + i / rate), built with one struct call
per answer, served by one epoll loop over all the devices' sockets. No push sessions, no faults.

    python -m leadwire.tools.simdevice --devices 10 --rate 100          # prints one JSON line, runs
    python -m leadwire.tools.simdevice --fast --devices 1000 --rate 20  # the light simulator
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from leadwire import auth, codec, framing, messages, wire
from leadwire.frames import FrameQueue
from leadwire.reports import ReportSequence
from leadwire.ring import EventRing

EVENT = struct.Struct(">QII")  # generation time us, device index, event number in this boot


def now_us() -> int:
    return time.time_ns() // 1000


class SimCore:
    """The device side of the protocol, sans I/O: bytes in, bytes out."""

    def __init__(
        self,
        index: int = 0,
        capacity: int = 1024,
        slot_size: int = 32,
        seed: int = 0,
        channels: int = 3,
        frame_size: int = 1024,
        firmware: str = "sim-0.1",
        board: str = "sim",
        start: int | None = None,
        payload_size: int = 16,
        key: bytes | None = None,
    ) -> None:
        self.index = index
        self.key = key  # authentication (issue 6): every frame signed and checked; None: auth off
        self.auth: auth.Endpoint | None = None
        self.refused = 0  # signed frames refused with auth off
        self.capacity = capacity
        self.slot_size = slot_size
        self.channels = channels
        self.frame_size = frame_size
        self.firmware = firmware
        self.board = board
        self.board_id = "sim-%d" % index
        self.payload_size = max(EVENT.size, payload_size)
        self.rng = random.Random(seed * 1_000_003 + index)
        self.boots = 0
        self.generated_total = 0
        self.reports_sent = 0
        self.report_retransmissions = 0
        self.acks_received = 0
        self.bad_frames = 0
        self.boot(start)

    # -- boot and events -----------------------------------------------------------------

    def boot(self, start: int | None = None) -> None:
        """(Re)start: new boot epoch, new ring from a random offset, no push sessions."""
        self.boots += 1
        self.epoch = self.rng.getrandbits(32)
        first = self.rng.getrandbits(32) if start is None else start & 0xFFFFFFFF
        self.start = first
        self.ring = EventRing(self.capacity, first, self.slot_size, epoch=self.epoch)
        self.generated = 0  # events written in this boot
        self.sessions: dict[int, ReportSequence] = {}
        self.queue = FrameQueue(self.frame_size)
        self.pending: dict[int, tuple[list[bytes], float]] = {}  # channel -> (frames, sent at)
        self.subscriber: Any = None
        self._pad = bytes(self.payload_size - EVENT.size)
        if self.key is not None:
            self.auth = auth.Endpoint(self.key, auth.TO_HOST)  # a new boot: no session, K from 1

    def write_events(self, k: int, t_us: int | None = None) -> None:
        t = now_us() if t_us is None else t_us
        ring = self.ring
        pad = self._pad
        for _ in range(k):
            i = self.generated
            ring.write(EVENT.pack(t, self.index, i & 0xFFFFFFFF) + pad, 1 + i % self.channels)
            self.generated = i + 1
        self.generated_total += k

    def offset_of(self, i: int) -> int:
        """Offset of event number i of this boot."""
        return (self.start + i) & 0xFFFFFFFF

    # -- requests ------------------------------------------------------------------------

    def hello(self, tag: int = 0) -> bytes:
        """The HELLO answer (with auth: after a handshake, signed with the session K; before any,
        the boot HELLO signed with K = 0)."""
        signed = self.auth is not None
        h = messages.Hello(
            self.epoch, self.capacity, self.slot_size, self.frame_size, self.boots, self.board_id,
            self.firmware, self.board, 0 if signed else None,
        )  # fmt: skip
        b = codec.encode(messages.hello_frame(h, tag))
        if self.auth is None:
            return b
        buf = bytearray(b) + bytes(auth.AUTH_SIZE)
        return bytes(buf[: self.auth.device_sign_hello(buf, len(b), self.epoch >> 16, self.epoch & 0xFFFF)])

    def sign(self, b: bytes) -> bytes:
        """One outgoing frame, signed in the current session when auth is on."""
        if self.auth is None:
            return b
        buf = bytearray(b) + bytes(auth.AUTH_SIZE)
        return bytes(buf[: self.auth.sign_into(buf, len(b))])

    def handle(self, data: bytes, now_s: float = 0.0) -> list[bytes]:
        """Answer one frame from the host (auth on: checked first, every answer signed)."""
        try:
            f = codec.decode(data)
        except wire.WireError:
            self.bad_frames += 1
            return []
        ep = self.auth
        if ep is None:
            if data[1] & (wire.F_AUTH << 4):
                self.refused += 1  # auth off: signed frames refused
                return []
            return self._handle(f)
        buf = bytearray(data)
        if f.type == wire.HELLO and not f.payload:
            if ep.device_hello(buf, len(buf), self.epoch >> 16, self.epoch & 0xFFFF):
                return []
            return [self.hello(f.message_id)]  # at once: the answer starts the session
        if ep.verify(buf, len(buf)):
            return []
        return [self.sign(b) for b in self._handle(f)]

    def _handle(self, f: codec.Frame) -> list[bytes]:
        t = f.type
        try:
            if t == wire.POLL:
                n, me, mb = messages.decode_poll(f)
                buf = bytearray(wire.OVERHEAD + wire.MAX_PAYLOAD)
                hi, lo = n >> 16, n & 0xFFFF
                answers = []
                for i in range(messages.poll_frames(f)):  # a burst: frames going on from each other
                    size = self.ring.answer_into(buf, hi, lo, me, mb, f.message_id, i)
                    answers.append(bytes(buf[:size]))
                    if buf[0] & 0x1F != wire.EVENTS or not self.ring.backlog:
                        break
                    hi, lo = self.ring.last_hi, self.ring.last_lo
                return answers
            if t == wire.HELLO and not f.payload:
                return [self.hello(f.message_id)]
            if t == wire.SUBSCRIBE:
                chans = messages.decode_subscribe(f)
                out = []
                if not chans:
                    for ch in list(self.sessions):
                        self.sessions[ch].end()
                        out.append(codec.encode(codec.Frame(wire.CLOSE, 0, b"", ch)))
                    self.sessions = {}
                    self.pending = {}
                    return [*out, codec.encode(messages.ack_frame(0, tag=f.message_id))]
                self.sessions = {}
                self.pending = {}
                for ch in chans:
                    rs = ReportSequence()
                    rs.begin()
                    self.sessions[ch] = rs
                return [codec.encode(messages.ack_frame(0, tag=f.message_id))]
            if t == wire.ACK:
                number, status = messages.decode_ack(f)
                rs = self.sessions.get(f.channel)
                if rs is not None and rs.pending is not None and number == rs.number:
                    self.acks_received += 1
                    rs.confirm(status)
                    self.pending.pop(f.channel, None)
                return []
        except wire.WireError:
            self.bad_frames += 1
            return []
        self.bad_frames += 1
        return []

    # -- push sessions -------------------------------------------------------------------

    def report_tick(self, now_s: float, ack_timeout: float = 0.5, t_us: int | None = None) -> list[bytes]:
        """New reports for channels with nothing awaiting confirmation; identical resends on timeout."""
        out: list[bytes] = []
        meta: dict[int, tuple[int, int]] = {}
        for ch, rs in self.sessions.items():
            p = self.pending.get(ch)
            if p is not None:
                if now_s - p[1] >= ack_timeout:
                    rs.timeout()
                    self.report_retransmissions += 1
                    self.pending[ch] = (p[0], now_s)
                    out.extend([self.sign(b) for b in p[0]])  # R0802: identical (the trailer is per send)
                continue
            t = now_us() if t_us is None else t_us
            body = messages.encode_records([(ch, EVENT.pack(t, self.index, rs.number))])
            rs.hold(body)
            mid = self.queue.post(body, priority=ch % 16)
            meta[mid] = (ch, rs.number)
        sent: dict[int, list[bytes]] = {}
        while True:
            fr = self.queue.pop()
            if fr is None:
                break
            ch, number = meta[fr.message_id]
            b = codec.encode(
                codec.Frame(wire.NOTIFY, number, fr.data, ch, fr.priority, wire.F_LAST if fr.last else 0,
                            fr.message_id, fr.index)
            )  # fmt: skip
            sent.setdefault(ch, []).append(b)
            out.append(self.sign(b))
        for ch, frames_ in sent.items():
            self.pending[ch] = (frames_, now_s)
            self.reports_sent += 1
        return out


@dataclass
class Faults:
    """Deterministic fault injection on a simulated device's link (counts of frames to affect)."""

    drop_answers: int = 0  # answers not sent at all (a transport error for the host)
    dup_answers: int = 0  # answers sent twice in a row
    late_answers: int = 0  # answers held back and sent after the next answer
    corrupt_answers: int = 0  # one bit flipped (CRC error at the host)
    ignore_acks: int = 0  # incoming ACKs ignored (the device retransmits the report)
    mute: bool = False  # answer nothing
    held: list[bytes] = field(default_factory=list)


class _Link:
    """What SimDevice and SimSerial share: fault injection around SimCore.handle."""

    core: SimCore
    faults: Faults

    def _send(self, data: bytes) -> None:
        raise NotImplementedError

    def _answers(self, data: bytes) -> None:
        fl = self.faults
        if fl.mute:
            return
        if fl.ignore_acks and len(data) > 0 and (data[0] & 0x1F) == wire.ACK:
            fl.ignore_acks -= 1
            return
        for out in self.core.handle(data, time.monotonic()):
            if out[0] & 0x1F in (wire.ACK, wire.CLOSE):
                self._send(out)
                continue
            if fl.drop_answers:
                fl.drop_answers -= 1
                continue
            if fl.corrupt_answers:
                fl.corrupt_answers -= 1
                b = bytearray(out)
                b[len(b) // 2] ^= 0x10
                self._send(bytes(b))
                continue
            if fl.late_answers:
                fl.late_answers -= 1
                fl.held.append(out)
                continue
            self._send(out)
            if fl.dup_answers:
                fl.dup_answers -= 1
                self._send(out)
            while fl.held:
                self._send(fl.held.pop(0))

    def push(self, now_s: float, ack_timeout: float) -> None:
        if self.faults.mute:
            return
        for b in self.core.report_tick(now_s, ack_timeout):
            self._send(b)


class SimDevice(_Link, asyncio.DatagramProtocol):
    """One simulated device on a UDP socket at 127.0.0.1."""

    def __init__(self, core: SimCore) -> None:
        self.core = core
        self.faults = Faults()
        self.transport: asyncio.DatagramTransport | None = None
        self.peer: Any = None
        self.address = ("", 0)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> SimDevice:
        loop = asyncio.get_running_loop()
        await loop.create_datagram_endpoint(lambda: self, local_addr=(host, port))
        assert self.transport is not None
        self.address = self.transport.get_extra_info("sockname")[:2]
        return self

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.peer = addr
        self._answers(data)

    def _send(self, data: bytes) -> None:
        if self.transport is not None and self.peer is not None:
            self.transport.sendto(data, self.peer)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class SimSerial(_Link):
    """One simulated device behind a pseudo-terminal: the bridge opens `path` as a serial port."""

    def __init__(self, core: SimCore) -> None:
        import pty
        import tty

        self.core = core
        self.faults = Faults()
        self.master, self.slave = pty.openpty()
        tty.setraw(self.slave)
        self.path = os.ttyname(self.slave)
        os.set_blocking(self.master, False)
        self.decoder = framing.StreamDecoder()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> SimSerial:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.master, self._readable)
        return self

    def _readable(self) -> None:
        try:
            data = os.read(self.master, 65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return
        dec = self.decoder
        pos = 0
        while pos < len(data):
            pos = dec.scan(data, pos, len(data))
            if dec.ready > 0:
                self._answers(bytes(dec.frame[: dec.ready]))  # as received: a signed frame keeps its tag
            elif dec.ready < 0:
                self.core.bad_frames += 1

    def _send(self, data: bytes) -> None:
        b = framing.encode(data)
        try:
            os.write(self.master, b)
        except OSError:
            pass

    def close(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self.master)
        for fd in (self.master, self.slave):
            try:
                os.close(fd)
            except OSError:
                pass


class SimFleet:
    """Many simulated devices in one event loop, with one generator task for all of them."""

    def __init__(
        self,
        count: int,
        rate: float = 10.0,
        capacity: int = 1024,
        seed: int = 0,
        channels: int = 3,
        limit: int | None = None,
        tick: float = 0.01,
        ack_timeout: float = 0.5,
        payload_size: int = 16,
        serial: int = 0,
        first_index: int = 0,
        auth: bool = False,
    ) -> None:
        self.count = count
        self.rate = rate  # events per second per device
        self.limit = limit  # stop each device after this many events per boot
        self.tick = tick
        self.ack_timeout = ack_timeout
        self.cores = [
            SimCore(
                first_index + i, capacity=capacity, seed=seed, channels=channels, payload_size=payload_size,
                key=os.urandom(32) if auth else None,
            )
            for i in range(count)
        ]
        self.serial_count = serial  # the last `serial` devices are on pseudo-terminals
        self.links: list[_Link] = []
        self._task: asyncio.Task[None] | None = None
        self._acc = [0.0] * count
        self.running = True

    async def start(self) -> SimFleet:
        for i, core in enumerate(self.cores):
            if i >= self.count - self.serial_count:
                self.links.append(await SimSerial(core).start())
            else:
                self.links.append(await SimDevice(core).start())
        self._task = asyncio.get_running_loop().create_task(self._generate())
        return self

    def describe(self) -> list[dict[str, Any]]:
        """Each device's bridge config: id, udp or serial, and `key` (hex: a secret, for the bridge's
        config only) or `auth = false`."""
        out = []
        for link in self.links:
            if isinstance(link, SimDevice):
                d: dict[str, Any] = {"id": link.core.board_id, "udp": "%s:%d" % link.address}
            elif isinstance(link, SimSerial):
                d = {"id": link.core.board_id, "serial": link.path}
            else:
                continue
            k = link.core.key
            d.update({"key": k.hex()} if k is not None else {"auth": False})
            out.append(d)
        return out

    async def _generate(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(self.tick)
            now = loop.time()
            dt = now - last
            last = now
            t = now_us()
            if self.running and self.rate > 0:
                for i, core in enumerate(self.cores):
                    a = self._acc[i] + self.rate * dt
                    k = int(a)
                    self._acc[i] = a - k
                    if self.limit is not None:
                        k = min(k, self.limit - core.generated)
                    if k > 0:
                        core.write_events(k, t)
            for link in self.links:
                if link.core.sessions:
                    link.push(now, self.ack_timeout)

    def generated(self) -> int:
        return sum(c.generated_total for c in self.cores)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        for link in self.links:
            link.close()  # type: ignore[attr-defined]


def _frame(ftype: int, tag: int, seq: int, body: bytes, ep: auth.Endpoint | None = None) -> bytes:
    """One answer frame, laid out by the core (wire.put_header / wire.seal): no second definition;
    signed by the device's auth endpoint when given."""
    n = len(body)
    buf = bytearray(wire.OVERHEAD + n + (auth.AUTH_SIZE if ep is not None else 0))
    wire.put_header(buf, ftype, wire.F_LAST, 0, 0, tag, 0, n, seq >> 16, seq & 0xFFFF)
    buf[wire.HEADER_SIZE : wire.HEADER_SIZE + n] = body
    size = wire.seal(buf, n)
    if ep is not None:
        size = ep.sign_into(buf, size)
    return bytes(buf[:size])


class VirtualRing:
    """A simulated device whose ring is computed, not written: event i of the boot (offset
    start + i, channel 1 + i % channels, payload ``EVENT.pack(gen_us(i), index, i)`` + zero padding)
    exists from ``gen_us(i) = t0_us + int(i * 1e6 / rate)`` on, and the ring holds the last
    ``capacity`` of them. Answers HELLO and POLL exactly as ``SimCore`` with an ``EventRing`` fed the
    same events would (spec 004: EVENTS from s(n), NO_EVENT, RECOVERY with the boot epoch).
    """

    def __init__(
        self,
        index: int,
        rate: float,
        capacity: int = 1024,
        payload_size: int = 16,
        channels: int = 3,
        seed: int = 0,
        t0_us: int | None = None,
        start: int | None = None,
        limit: int | None = None,
        key: bytes | None = None,
    ) -> None:
        if not 1 <= capacity <= 65535 or rate < 0:
            raise ValueError("capacity 1..65535, rate >= 0")
        self.index = index
        self.key = key  # authentication: requests checked, answers signed (auth.Endpoint)
        self.auth = auth.Endpoint(key, auth.TO_HOST) if key is not None else None
        self.refused = 0  # requests refused by authentication (or signed with auth off)
        self.rate = rate
        self.period = 1e6 / rate if rate > 0 else 0.0
        self.capacity = capacity
        self.payload_size = max(EVENT.size, payload_size)
        self.channels = channels
        self.limit = limit
        rng = random.Random(seed * 1_000_003 + index)
        self.epoch = rng.getrandbits(32)
        self.start = rng.getrandbits(32) if start is None else start & 0xFFFFFFFF
        self.t0_us = now_us() if t0_us is None else t0_us
        self.board_id = "sim-%d" % index
        self.answers = 0
        self.bad_frames = 0
        self._rec = 3 + self.payload_size
        self._fmt = "BHQII%dx" % (self.payload_size - EVENT.size)
        self._structs: dict[int, struct.Struct] = {}

    def generated(self, now: int) -> int:
        """Events generated up to now (us)."""
        if self.rate <= 0 or now < self.t0_us:
            return 0
        g = int((now - self.t0_us) / self.period) + 1
        while self.gen_us(g) <= now:  # float rounding at the boundary: exactly the i with gen_us(i) <= now
            g += 1
        while g and self.gen_us(g - 1) > now:
            g -= 1
        return g if self.limit is None else min(g, self.limit)

    def gen_us(self, i: int) -> int:
        return self.t0_us + int(i * self.period)

    def payload(self, i: int) -> bytes:
        return EVENT.pack(self.gen_us(i), self.index, i & 0xFFFFFFFF) + bytes(self.payload_size - EVENT.size)

    def hello(self, tag: int) -> bytes:
        slot = max(32, self.payload_size)  # SimCore's default slot, or one that fits the payload
        ep = self.auth
        h = messages.Hello(self.epoch, self.capacity, slot, 1024, 1, self.board_id, "sim-0.1", "sim",
                           None if ep is None else 0)  # fmt: skip
        b = codec.encode(messages.hello_frame(h, tag))
        if ep is None:
            return b
        buf = bytearray(b) + bytes(auth.AUTH_SIZE)
        return bytes(buf[: ep.device_sign_hello(buf, len(b), self.epoch >> 16, self.epoch & 0xFFFF)])

    def handle(self, data: bytes, now: int) -> bytes | None:
        """The answer to one request (HELLO or POLL), or None."""
        n = len(data)
        if wire.check(data, n):
            self.bad_frames += 1
            return None
        t = data[0] & 0x1F
        tag = data[3]
        ep = self.auth
        if data[1] & 0x20:  # signed
            if ep is None:
                self.refused += 1
                return None
            if t == wire.HELLO and n == wire.OVERHEAD + auth.AUTH_SIZE:
                if ep.device_hello(data, n, self.epoch >> 16, self.epoch & 0xFFFF):
                    self.refused += 1
                    return None
                return self.hello(tag)
            if ep.verify(data, n):
                self.refused += 1
                return None
            n -= auth.AUTH_SIZE
        elif ep is not None:
            ep.unsigned += 1
            self.refused += 1
            return None
        if t == wire.HELLO and n == wire.OVERHEAD:
            return self.hello(tag)
        if t != wire.POLL or n != wire.OVERHEAD + 4:
            self.bad_frames += 1
            return None
        self.answers += 1
        seq, me, mb = struct.unpack_from(">IHH", data, 6)
        g = self.generated(now)
        count = min(g, self.capacity)
        newest = (self.start + g - 1) & 0xFFFFFFFF
        d = (newest - seq) & 0xFFFFFFFF
        if count == 0 or d == 0:
            return _frame(wire.NO_EVENT, tag, seq, b"", ep)
        if d > count:
            n0 = (newest - count + 1) & 0xFFFFFFFF
            return _frame(wire.RECOVERY, tag, n0, struct.pack(">II", newest, self.epoch), ep)
        budget = min(mb, wire.MAX_PAYLOAD - (auth.AUTH_SIZE if ep is not None else 0))
        k = min(me, wire.MAX_BATCH, d, max(1, (budget - wire.BATCH_HEAD) // self._rec))
        first = g - d
        backlog = d - k
        st = self._structs.get(k)
        if st is None:
            st = self._structs[k] = struct.Struct(">BBB" + self._fmt * k)
        t0 = self.t0_us
        per = self.period
        ch = self.channels
        size = self.payload_size
        idx = self.index
        args = [
            v
            for i in range(first, first + k)
            for v in (1 + i % ch, size, t0 + int(i * per), idx, i & 0xFFFFFFFF)
        ]
        body = st.pack(k, backlog >> 8, backlog & 0xFF, *args)
        s1 = (seq + 1) & 0xFFFFFFFF
        return _frame(wire.EVENTS, tag, s1, body, ep)



def serve_fast(
    rings: list[VirtualRing], ready: Any = None, stop: Any = None, host: str = "127.0.0.1"
) -> None:
    """Serve every ring on its own UDP socket from one epoll loop until stop() is true (or a signal).

    ready(descriptions) is called once the sockets are bound."""
    ep = select.epoll()
    socks: dict[int, tuple[socket.socket, VirtualRing]] = {}
    desc = []
    for r in rings:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setblocking(False)
        s.bind((host, 0))
        socks[s.fileno()] = (s, r)
        ep.register(s.fileno(), select.EPOLLIN)
        desc.append({"id": r.board_id, "udp": "%s:%d" % s.getsockname()[:2],
                     **({"key": r.key.hex()} if r.key is not None else {"auth": False})})  # fmt: skip
    if ready is not None:
        ready(desc)
    try:
        while stop is None or not stop():
            for fd, _ in ep.poll(0.2):
                s, r = socks[fd]
                while True:
                    try:
                        data, addr = s.recvfrom(4096)
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:
                        continue
                    out = r.handle(data, time.time_ns() // 1000)
                    if out is not None:
                        try:
                            s.sendto(out, addr)
                        except OSError:
                            pass
    finally:
        ep.close()
        for s, _ in socks.values():
            s.close()


def raise_nofile() -> None:
    """Many devices need many sockets: lift the soft open-files limit to the hard one."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass


async def _main(args: argparse.Namespace) -> None:
    raise_nofile()
    fleet = await SimFleet(
        args.devices, rate=args.rate, capacity=args.capacity, seed=args.seed, limit=args.limit,
        tick=args.tick, serial=args.serial, payload_size=args.payload, first_index=args.first_index,
        auth=args.auth,
    ).start()  # fmt: skip
    print(json.dumps({"pid": os.getpid(), "devices": fleet.describe()}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if args.duration:
        loop.call_later(args.duration, stop.set)
    await stop.wait()
    gen = fleet.generated()
    await fleet.stop()
    print(json.dumps({"generated": gen}), flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--serial", type=int, default=0, help="how many of the devices sit on pseudo-terminals")
    p.add_argument("--rate", type=float, default=10.0, help="events per second per device")
    p.add_argument("--capacity", type=int, default=1024)
    p.add_argument("--payload", type=int, default=16, help="event payload bytes (>= 16)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=None, help="events per device, then stop generating")
    p.add_argument("--tick", type=float, default=0.01)
    p.add_argument("--duration", type=float, default=0.0)
    p.add_argument("--first-index", type=int, default=0, help="index of the first device (its id sim-INDEX)")
    p.add_argument(
        "--fast", action="store_true", help="the light simulator (VirtualRing; HELLO and POLL only)"
    )
    p.add_argument(
        "--auth",
        action="store_true",
        help="a random key per device (signed frames); the keys are in the JSON line (secrets)",
    )
    args = p.parse_args(argv)
    if args.fast:
        return _main_fast(args)
    asyncio.run(_main(args))
    return 0


def _main_fast(args: argparse.Namespace) -> int:
    raise_nofile()
    rings = [
        VirtualRing(
            args.first_index + i, args.rate, args.capacity, args.payload, seed=args.seed, limit=args.limit,
            key=os.urandom(32) if args.auth else None,
        )
        for i in range(args.devices)
    ]
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    signal.signal(signal.SIGINT, lambda *a: stop.append(1))
    end = time.monotonic() + args.duration if args.duration else None

    def ready(desc: list[dict[str, Any]]) -> None:
        print(json.dumps({"pid": os.getpid(), "devices": desc}), flush=True)

    def done() -> bool:
        return bool(stop) or (end is not None and time.monotonic() >= end)

    serve_fast(rings, ready, done)
    now = now_us()
    print(json.dumps({"generated": sum(r.generated(now) for r in rings)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
