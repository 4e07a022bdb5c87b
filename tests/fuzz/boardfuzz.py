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

import random
import socket
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from leadwire import client, codec, messages, wire

from .mutate import Mutator, corpus

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
    if t == wire.POLL and n == 17 and 1 <= data[14] <= wire.MAX_INDEX + 1:
        return "poll"  # a burst POLL (max_frames 1..32)
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
        self, address: tuple[str, int], seed: int = 1, window: int = 16, timeout: float = 2.0
    ) -> None:
        self.address = address
        self.rng = random.Random(seed)
        self.m = Mutator(corpus(seed), self.rng)
        self.window = window
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(timeout)
        self.pc = client.PollClient()
        self.r = Result()
        self.offsets: dict[int, tuple[int, int]] = {}  # ring offset -> (channel, value)

    def close(self) -> None:
        self.sock.close()

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
        self.sock.sendto(codec.encode(req), self.address)
        end = time.monotonic() + self.sock.gettimeout()  # type: ignore[operator]
        while time.monotonic() < end:
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                break
            try:
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
            if self.poll() and self.pc.state == client.POLLING and self.pc.recoveries:
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
        self.sock.sendto(b"\x00", self.address)  # one byte: E_SHORT
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


def board_config(health_ms: int = 100, alarm_gap_ms: int = 50) -> dict[str, Any]:
    return {"sensors": [{"ch": 1, "hz": 20, "size": 16}], "health": {"ms": health_ms},
            "alarm": {"gap": alarm_gap_ms}}  # fmt: skip
