"""Random and mutated frames sent to a virtual board, valid POLLs interleaved.

The board (firmware/ on the MicroPython unix port, started with tools/board.py) must keep answering
every POLL correctly while it drops the bad frames, and count each one: the agent's bad-frame
counter travels in the health records (u16, saturated at 65535) and, exactly (u32), as the value of
the bad-frame alarm. A model of the agent's receive path (`verdict`) says which inputs are bad; the
few mutants that are still valid requests (a resealed POLL, an ACK, a SUBSCRIBE) are not sent, so the
expected count is simply the number sent.

Flow control: after every `window` bad frames one POLL goes and its answer is awaited; the board
reads its socket in order, so the answer proves the frames before it were all processed (nothing
overflows the board's socket buffer, and the count stays exact).
"""

from __future__ import annotations

import os
import random
import select
import socket
import termios
import time
import tty
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from leadwire import client, codec, framing, messages, wire
from leadwire.tools.fuzz_mutate import Mutator, corpus

RX = 136  # the agent's receive buffer (lwagent._RX): UDP datagrams are truncated to it
HEALTH_CH = 8
ALARM_CH = 9
MAX_DATAGRAM = 1500


def verdict(data: bytes, udp: bool = True) -> str:
    """What the agent does with one received datagram (lwagent.Agent._rx): 'bad' or the request."""
    if udp:
        data = data[:RX]
    n = len(data)
    if wire.check(data, n):
        return "bad"
    if data[1] & 0x20:
        return "bad"  # signed (F_AUTH) to a board with auth off
    t = data[0] & 0x1F
    if t == wire.POLL and n == 16:
        return "poll"
    if t == wire.POLL and n == 17 and 1 <= data[14] & 0x7F <= wire.MAX_INDEX + 1:
        return "poll"  # a burst POLL (max_frames 1..32; the top bit: go on past a RECOVERY)
    if t == wire.HELLO and n == wire.OVERHEAD:
        return "hello"
    if t == wire.ACK and n == 14:
        return "ack"
    if t == wire.SUBSCRIBE and n >= 13 and data[10] == n - 13:
        return "subscribe"
    return "bad"


def auth_verdict(data: bytes, accepted: set[bytes]) -> str:
    """What an agent with auth on does with one received datagram: 'bad' (a bad-frame count),
    'unsigned', 'replayed' (a signed frame it took before, in `accepted`), 'forged' (any other
    signed frame: the host made none but those), or 'hello' (a signed HELLO request: it may be a
    right one, which starts a new session; not sent)."""
    data = data[:RX]
    if wire.check(data, len(data)):
        return "bad"
    if not data[1] & 0x20:
        return "unsigned"
    if data[0] & 0x1F == wire.HELLO and len(data) == wire.OVERHEAD + 8:
        return "hello"
    return "replayed" if data in accepted else "forged"


def reseal_signed(b: bytearray) -> bytearray:
    """A signed frame's length field and CRC made right again (its tag is left as it is)."""
    if len(b) < wire.OVERHEAD + 8:
        return b
    n = min(len(b) - wire.OVERHEAD - 8, wire.MAX_PAYLOAD)
    del b[wire.OVERHEAD + 8 + n :]
    b[1] |= 0x20
    b[4] = (b[4] & 0xF8) | (n >> 8)
    b[5] = n & 0xFF
    wire.seal(b, n + 8)
    return b


@dataclass
class Result:
    sent: Counter[str] = field(default_factory=Counter)  # bad inputs sent, by kind
    skipped: Counter[str] = field(default_factory=Counter)  # inputs that are valid requests: not sent
    polls: int = 0
    answers: Counter[str] = field(default_factory=Counter)
    unanswered: int = 0
    wrong: list[str] = field(default_factory=list)  # answers that were not right
    health_bad: list[int] = field(default_factory=list)  # bad-frame counts in health records
    alarm_bad: list[int] = field(default_factory=list)  # bad-frame alarm values
    final_alarm: int | None = None
    final_health: int | None = None
    heap_min: int | None = None
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.sent.values())

    def summary(self) -> dict[str, Any]:
        return {
            "bad_sent": self.total,
            "by_kind": dict(self.sent),
            "valid_requests_skipped": dict(self.skipped),
            "polls": self.polls,
            "answers": dict(self.answers),
            "unanswered": self.unanswered,
            "wrong_answers": len(self.wrong),
            "final_alarm_value": self.final_alarm,
            "final_health_bad_frames": self.final_health,
            "heap_min": self.heap_min,
            "seconds": round(self.seconds, 2),
            "bad_frames_per_s": round(self.total / self.seconds) if self.seconds else None,
        }


class BoardFuzzer:
    def __init__(
        self, address: tuple[str, int] | None, seed: int = 1, window: int = 16, timeout: float = 2.0
    ) -> None:
        self.address = address
        self.rng = random.Random(seed)
        self.m = Mutator(corpus(seed), self.rng)
        self.window = window
        self.timeout = timeout
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM) if address is not None else None
        if self.sock is not None:
            self.sock.bind(("127.0.0.1", 0))
        self.pc = client.PollClient()
        self.r = Result()
        self.offsets: dict[int, tuple[int, int]] = {}  # ring offset -> (channel, value)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()

    # -- the link (UDP here; SerialBoardFuzzer: a COBS stream on the board's pty)
    def send_frame(self, data: bytes) -> None:
        """One valid request (a POLL or HELLO of the poll client)."""
        self.sock.sendto(data, self.address)

    def recv(self, deadline: float) -> bytes | wire.WireError | None:
        """One frame's bytes from the board by `deadline` (time.monotonic()), or None."""
        r, _, _ = select.select([self.sock], [], [], max(0.0, deadline - time.monotonic()))
        return self.sock.recv(4096) if r else None

    def send_final(self) -> None:
        self.sock.sendto(b"\x00", self.address)  # one byte: E_SHORT

    # -- inputs
    def bad_input(self) -> tuple[str, bytes]:
        r = self.rng.random()
        m = self.m
        if r < 0.45:
            return "mutated", m.one()
        if r < 0.70:
            return "random", m.raw()
        if r < 0.88:
            return "valid_other", self.rng.choice(m.seeds)  # well-formed, but not a request it takes
        if r < 0.96:  # longer than the agent's buffer: truncated by recvfrom, then refused
            base = bytearray(self.rng.choice(m.seeds)[:10]) + self.rng.randbytes(self.rng.randrange(RX, 1400))
            return "oversize", bytes(base)
        return "tiny", self.rng.randbytes(self.rng.randrange(0, 12))

    def send_bad(self) -> None:
        while True:
            kind, data = self.bad_input()
            v = verdict(data[:MAX_DATAGRAM])
            if v == "bad":
                break
            self.r.skipped[v] += 1
        self.sock.sendto(data[:MAX_DATAGRAM], self.address)
        self.r.sent[kind] += 1

    # -- the poll side
    def poll(self) -> bool:
        """One request of the poll client (HELLO first, then POLLs) and its answer."""
        pc = self.pc
        req = pc.next_request(64, 1000)
        self.r.polls += 1
        self.send_frame(codec.encode(req))
        end = time.monotonic() + self.timeout
        while time.monotonic() < end:
            data = self.recv(end)
            if data is None:
                break
            try:
                if isinstance(data, wire.WireError):
                    raise data
                f = codec.decode(data)
            except wire.WireError as e:
                self.r.wrong.append("undecodable answer: %s" % e)
                continue
            if f.message_id != req.message_id and f.type != wire.HELLO:
                self.r.wrong.append("answer with tag %d to request %d" % (f.message_id, req.message_id))
                continue
            if f.type == wire.HELLO and f.message_id != req.message_id:
                continue  # the boot announcement
            want = (wire.HELLO,) if req.type == wire.HELLO else (wire.EVENTS, wire.NO_EVENT, wire.RECOVERY)
            if f.type not in want:
                self.r.wrong.append(
                    "%s answering %s" % (codec.TYPE_NAMES.get(f.type), codec.TYPE_NAMES[req.type])
                )
                return False
            kind, out = pc.on_frame(f)
            self.r.answers[str(kind)] += 1
            if kind == client.STALE:
                self.r.wrong.append("stale answer to the outstanding request: %r" % f)
            elif kind == client.EVENTS:
                self._events(out)
            return True
        pc.on_timeout()
        self.r.unanswered += 1
        return False

    def _events(self, events: list[tuple[int, int, bytes]]) -> None:
        sent = self.r.total
        for off, ch, data in events:
            if ch == HEALTH_CH:
                h = messages.decode_health(data)
                self.offsets[off] = (ch, h["bad_frames"])
                self.r.heap_min = h["heap_min"]
                if self.r.health_bad and h["bad_frames"] < self.r.health_bad[-1]:
                    self.r.wrong.append("health bad-frame count went down")
                if h["bad_frames"] > min(sent, 0xFFFF):
                    self.r.wrong.append("health counts %d bad frames, %d sent" % (h["bad_frames"], sent))
                self.r.health_bad.append(h["bad_frames"])
            elif ch == ALARM_CH:
                code, value = messages.decode_alarm(data)
                if code == messages.ALARM_BAD_FRAME:
                    self.offsets[off] = (ch, value)
                    if self.r.alarm_bad and value <= self.r.alarm_bad[-1]:
                        self.r.wrong.append("bad-frame alarm values not increasing")
                    if value > sent:
                        self.r.wrong.append("alarm counts %d bad frames, %d sent" % (value, sent))
                    self.r.alarm_bad.append(value)

    # -- the run
    def start(self) -> None:
        for _ in range(5):  # HELLO, then the first-contact RECOVERY
            if self.poll() and self.pc.polling and self.pc.recoveries:
                return
        raise RuntimeError("the board does not answer")

    def run(self, n: int) -> Result:
        t = time.monotonic()
        self.start()
        for i in range(n):
            self.send_bad()
            if (i + 1) % self.window == 0:
                self.poll()
        self.poll()
        self.r.seconds = time.monotonic() - t
        return self.r

    def settle(self, alarm_gap_s: float, health_s: float, timeout: float = 10.0) -> Result:
        """One more bad frame after the alarm gap (so its alarm carries the exact total), then poll
        until a health record written after that alarm has come."""
        time.sleep(alarm_gap_s * 1.5)
        self.send_final()  # one bad frame
        self.r.sent["final"] += 1
        end = time.monotonic() + timeout
        total = self.r.total
        while time.monotonic() < end:
            self.poll()
            alarm_at = [o for o, (ch, v) in self.offsets.items() if ch == ALARM_CH and v == total]
            if alarm_at:
                self.r.final_alarm = total
                after = sorted(o for o, (ch, _) in self.offsets.items() if ch == HEALTH_CH
                               and (o - alarm_at[0]) % 2**32 < 2**31 and o != alarm_at[0])  # fmt: skip
                if after:
                    self.r.final_health = self.offsets[after[0]][1]
                    return self.r
            time.sleep(health_s / 4)
        return self.r


# -- serial: a COBS byte stream on the board's pty ---------------------------------------------

SERIAL_MAX_FRAME = 128  # the agent's serial decoder is StreamDecoder(128) (lwboot; 136 with auth)
SERIAL_CAP = framing.max_encoded(SERIAL_MAX_FRAME)  # 129: a longer run before a 0x00 is oversize


def serial_items(data: bytes, max_frame: int = SERIAL_MAX_FRAME) -> list[bytes | int]:
    """What the agent's serial receive path makes of `data` (complete up to its last 0x00): a frame
    (its decoded bytes) or an error (an E_* code) for every non-empty run before a delimiter.
    Written from docs/protocol.md's rules, independently of framing.StreamDecoder: a run longer
    than max_encoded(max_frame) is E_OVERSIZE, bad stuffing E_COBS, then wire.check."""
    cap = framing.max_encoded(max_frame)
    out: list[bytes | int] = []
    for run in data.split(b"\x00")[:-1]:  # the part after the last delimiter is not complete
        if not run:
            continue  # an empty frame: ignored
        if len(run) > cap:
            out.append(wire.E_OVERSIZE)
            continue
        buf = bytearray(run)
        m = framing.decode_in_place(buf, len(buf))
        if m < 0:
            out.append(wire.E_COBS)
            continue
        code = wire.check(buf, m)
        out.append(code or bytes(buf[:m]))
    return out


def serial_verdicts(data: bytes) -> list[str]:
    """What the agent does with each item of a serial stream: 'bad' or the request it answers."""
    return [verdict(x, udp=False) if isinstance(x, bytes) else "bad" for x in serial_items(data)]


class SerialBoardFuzzer(BoardFuzzer):
    """The same, over the board's serial link: bad inputs are units of bytes, each ending with a
    0x00 (so the agent's decoder is back at a frame boundary after each), and a unit may hold
    several frames or none. Expected count: `serial_items` over every unit sent (units holding a
    valid request are not sent)."""

    def __init__(self, port: str, seed: int = 1, window: int = 16, timeout: float = 2.0) -> None:
        super().__init__(None, seed, window, timeout)
        self.fd = os.open(port, os.O_RDWR | os.O_NOCTTY)
        tty.setraw(self.fd, termios.TCSANOW)  # bytes pass unchanged (0x00, 0x11, 0x13, \r ...)
        self.dec = framing.StreamDecoder()  # the host's: answers of any size
        self.ready: list[bytes | wire.WireError] = []
        self.units = 0
        self.bytes_sent = 0

    def close(self) -> None:
        os.close(self.fd)

    def _write(self, data: bytes) -> None:
        self.bytes_sent += len(data)
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]

    def send_frame(self, data: bytes) -> None:
        self._write(b"\x00" + framing.encode(data))  # a lone 0x00 first: ignored by the board

    def recv(self, deadline: float) -> bytes | wire.WireError | None:
        while not self.ready:
            r, _, _ = select.select([self.fd], [], [], max(0.0, deadline - time.monotonic()))
            if not r:
                return None
            for x in self.dec.feed(os.read(self.fd, 65536)):
                self.ready.append(codec.encode(x) if isinstance(x, codec.Frame) else x)
        return self.ready.pop(0)

    def send_final(self) -> None:
        self._write(b"\x01\x00")  # one empty COBS block: a 0-byte frame, E_SHORT

    def bad_unit(self) -> tuple[str, bytes]:
        rng = self.rng
        m = self.m
        r = rng.random()
        if r < 0.40:
            return "mutated", framing.encode(m.one())
        if r < 0.52:
            return "random", m.raw() + b"\x00"  # may hold zeros: several frames, or none
        if r < 0.62:
            return "valid_other", framing.encode(rng.choice(m.seeds))
        if r < 0.82:
            enc = bytearray(framing.encode(rng.choice(m.seeds))[:-1])
            op = rng.randrange(4)
            if op == 0:  # a stuffing code changed
                enc[0] = rng.randrange(1, 256)
            elif op == 1:  # a zero inside
                enc[rng.randrange(len(enc))] = 0
            elif op == 2:  # the delimiter lost: runs into the next frame
                enc += framing.encode(rng.choice(m.seeds))[:-1]
            else:  # cut short
                enc = enc[: rng.randrange(len(enc) + 1)]
            return "cobs_damage", bytes(enc) + b"\x00"
        if r < 0.86:
            return "noise", rng.randbytes(rng.randrange(1, 40)) + b"\x00"
        if r < 0.96:  # at and around the board's exact limit, and far past it
            if rng.random() < 0.5:
                n = rng.choice([SERIAL_CAP - 1, SERIAL_CAP, SERIAL_CAP + 1, rng.randrange(SERIAL_CAP, 3000)])
                return "oversize", bytes(x or 1 for x in rng.randbytes(n)) + b"\x00"
            size = rng.choice([SERIAL_MAX_FRAME, SERIAL_MAX_FRAME + 1, rng.randrange(100, 600)])
            f = codec.Frame(wire.EVENTS, rng.getrandbits(32), rng.randbytes(size - wire.OVERHEAD))
            return "oversize", framing.encode(codec.encode(f))
        return "tiny", rng.randbytes(rng.randrange(0, 12)) + b"\x00"

    def send_bad(self) -> None:
        while True:
            kind, data = self.bad_unit()
            v = serial_verdicts(data)
            good = [x for x in v if x != "bad"]
            if not good:
                break
            self.r.skipped[good[0]] += 1
        self._write(data)
        self.units += 1
        self.r.sent[kind] += len(v)


def board_config(health_ms: int = 100, alarm_gap_ms: int = 50) -> dict[str, Any]:
    return {"sensors": [{"ch": 1, "hz": 20, "size": 16}], "health": {"ms": health_ms},
            "alarm": {"gap": alarm_gap_ms}}  # fmt: skip
