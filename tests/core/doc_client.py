"""A client written from docs/protocol.md alone: standard library only, no import of the leadwire core.

It is what a third-party implementer would write (CRC, frame layout, COBS, the authentication
contexts and handshake, POLL / EVENTS / NO_EVENT / RECOVERY, bursts), and tests/core/
test_protocol_doc.py runs it against a virtual board over UDP and serial: if the document and the
device disagree, this client fails where a real implementer would. Section numbers refer to
docs/protocol.md.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import select
import socket
import struct
import termios
import time
import tty

# section 3
HELLO, POLL, EVENTS, NO_EVENT, RECOVERY = 1, 2, 3, 4, 5
F_LAST, F_AUTH = 1, 2


def crc16(data: bytes) -> int:
    """CRC-16/CCITT-FALSE (section 1): poly 0x1021, init 0xFFFF, not reflected, xorout 0."""
    crc = 0xFFFF
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def frame(ftype: int, seq: int, payload: bytes, tag: int = 0) -> bytes:
    """An unsigned frame (section 1): F_LAST, priority 0, channel 0, index 0."""
    head = bytes([0x20 | ftype, F_LAST << 4, 0, tag]) + struct.pack(">HI", len(payload), seq)
    body = head + payload
    return body + struct.pack(">H", crc16(body))


def ctx(direction: int, epoch: int, session: int, counter: int) -> bytes:
    return struct.pack(">BIII", direction, epoch, session, counter)  # section 9.1: 13 bytes


def sign(unsigned: bytes, key: bytes, context: bytes) -> bytes:
    """Set F_AUTH, put counter low u16 + the 6-byte tag before the CRC (section 9.1)."""
    b = bytearray(unsigned[:-2])
    b[1] |= F_AUTH << 4
    tag = hmac.new(key, context + bytes(b), hashlib.sha256).digest()[:6]
    b += struct.pack(">H", struct.unpack(">I", context[9:])[0] & 0xFFFF) + tag
    return bytes(b) + struct.pack(">H", crc16(b))


class Frame:
    def __init__(self, data: bytes) -> None:
        """Checks of section 1, in order; raises ValueError naming the first that fails."""
        if len(data) < 12:
            raise ValueError("short")
        if data[0] >> 5 != 1:
            raise ValueError("version")
        self.type = data[0] & 0x1F
        if not 1 <= self.type <= 10:
            raise ValueError("type")
        self.signed = bool(data[1] & (F_AUTH << 4))
        length = ((data[4] & 7) << 8) | data[5]
        if length != len(data) - 12 - (8 if self.signed else 0):
            raise ValueError("length")
        if crc16(data[:-2]) != struct.unpack(">H", data[-2:])[0]:
            raise ValueError("crc")
        if data[1] & 0xC0:
            raise ValueError("flags")
        self.raw = data
        self.flags = data[1] >> 4
        self.tag = data[3]
        self.index = data[4] >> 3
        self.seq = struct.unpack(">I", data[6:10])[0]
        self.payload = data[10 : 10 + length]
        self.counter = struct.unpack(">H", data[10 + length : 12 + length])[0] if self.signed else None

    def verifies(self, key: bytes, context: bytes) -> bool:
        end = 10 + len(self.payload)
        want = hmac.new(key, context + self.raw[:end], hashlib.sha256).digest()[:6]
        return hmac.compare_digest(self.raw[end + 2 : end + 8], want)


def cobs_encode(data: bytes) -> bytes:
    """COBS (Cheshire & Baker), then the 0x00 delimiter (section 10)."""
    out = bytearray()
    block = bytearray()
    for b in data:
        if b == 0:
            out += bytes([len(block) + 1]) + block
            block = bytearray()
        else:
            block.append(b)
            if len(block) == 254:
                out += b"\xff" + block
                block = bytearray()
    out += bytes([len(block) + 1]) + block
    return bytes(out) + b"\x00"


def cobs_decode(run: bytes) -> bytes:
    out = bytearray()
    i = 0
    while i < len(run):
        code = run[i]
        if code == 0 or i + code > len(run):
            raise ValueError("cobs")
        out += run[i + 1 : i + code]
        i += code
        if code != 0xFF and i < len(run):
            out.append(0)
    return bytes(out)


class Udp:
    def __init__(self, address: tuple[str, int]) -> None:
        self.s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.s.bind(("127.0.0.1", 0))
        self.address = address

    def send(self, data: bytes) -> None:
        self.s.sendto(data, self.address)

    def recv(self, timeout: float) -> bytes | None:
        r, _, _ = select.select([self.s], [], [], timeout)
        return self.s.recv(4096) if r else None

    def close(self) -> None:
        self.s.close()


class Serial:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_NOCTTY)
        tty.setraw(self.fd, termios.TCSANOW)
        self.buf = b""

    def send(self, data: bytes) -> None:
        os.write(self.fd, b"\x00" + cobs_encode(data))  # a lone 0x00 first: ignored (section 10)

    def recv(self, timeout: float) -> bytes | None:
        end = time.monotonic() + timeout
        while True:
            while b"\x00" in self.buf:
                run, self.buf = self.buf.split(b"\x00", 1)
                if run:
                    return cobs_decode(run)
            left = end - time.monotonic()
            r, _, _ = select.select([self.fd], [], [], max(0.0, left))
            if not r:
                return None
            self.buf += os.read(self.fd, 65536)

    def close(self) -> None:
        os.close(self.fd)


class DocClient:
    """One link's client with auth on (section 9): handshake, then POLLs per sections 4-6."""

    def __init__(self, link: Udp | Serial, key: bytes) -> None:
        self.link = link
        self.key = key
        self.tag = 0
        self.epoch = self.k = self.nonce = 0
        self.tx = 0  # our counter
        self.rx_high = 0  # the device's highest counter
        self.n = 0
        self.offsets: list[int] = []  # every event offset received, in order
        self.lost = 0

    def _next_tag(self) -> int:
        self.tag = (self.tag + 1) & 0xFF
        return self.tag

    def recv(self, timeout: float = 2.0) -> Frame | None:
        data = self.link.recv(timeout)
        return None if data is None else Frame(data)

    def boot_hello_for_unsigned_poll(self) -> Frame:
        """Section 9.5: with no session, a refused frame is answered by the boot HELLO."""
        self.link.send(frame(POLL, 5, struct.pack(">HH", 1, 100), 99))
        while True:
            f = self.recv()
            assert f is not None, "no boot HELLO"
            if f.type == HELLO:
                return f

    def handshake(self) -> None:
        self.nonce = int.from_bytes(os.urandom(4), "big")
        tag = self._next_tag()
        self.link.send(sign(frame(HELLO, self.nonce, b"", tag), self.key, bytes(13)))
        while True:
            f = self.recv()
            assert f is not None, "no HELLO answer"
            if f.type == HELLO and f.tag == tag:
                break
        assert f.signed and f.counter == 0 and f.verifies(self.key, ctx(1, f.seq, self.nonce, 0))
        self.epoch = f.seq
        self.k = struct.unpack(">I", f.payload[-4:])[0]  # section 3: K ends a signed HELLO
        self.tx = 0
        self.rx_high = 0

    def _full_counter(self, c: int) -> int:
        d = (c - self.rx_high) & 0xFFFF  # section 9.1: the value nearest the highest
        return self.rx_high + d if d < 0x8000 else self.rx_high - (0x10000 - d)

    def poll(self, max_events: int, max_bytes: int, max_frames: int) -> list[Frame]:
        """One POLL(n) and its whole answer (section 4.2), each frame checked and verified."""
        tag = self._next_tag()
        self.tx += 1
        body = struct.pack(">HHB", max_events, max_bytes, max_frames)
        self.link.send(sign(frame(POLL, self.n, body, tag), self.key, ctx(0, self.epoch, self.k, self.tx)))
        out = []
        while True:
            f = self.recv()
            assert f is not None, "burst cut short"
            if f.tag != tag:
                continue  # not an answer to this request (a boot HELLO, a late frame)
            c = self._full_counter(f.counter or 0)
            assert f.verifies(self.key, ctx(1, self.epoch, self.nonce, c)), "answer does not verify"
            self.rx_high = max(self.rx_high, c)
            assert f.flags & F_LAST and f.index == len(out)  # every frame of a burst has F_LAST
            out.append(f)
            if f.type != EVENTS:
                return out
            count, backlog = f.payload[0], struct.unpack(">H", f.payload[1:3])[0]
            assert f.seq == (self.n + 1) & 0xFFFFFFFF and 1 <= count <= min(max_events, 255)
            pos = 3
            for i in range(count):
                ln = struct.unpack(">H", f.payload[pos + 1 : pos + 3])[0]
                pos += 3 + ln
                self.offsets.append((f.seq + i) & 0xFFFFFFFF)
            assert pos == len(f.payload)
            self.n = (f.seq + count - 1) & 0xFFFFFFFF
            if backlog == 0 or f.index == max_frames - 1:
                return out  # the burst is over (section 4.2)

    def first_contact(self) -> tuple[int, int]:
        """Section 6.1: probe n = 0, then 2^31, until a RECOVERY names the held range."""
        for _ in range(4):
            f = self.poll(8, 1000, 1)[0]
            if f.type == RECOVERY:
                n1, epoch = struct.unpack(">II", f.payload)
                assert epoch == self.epoch
                self.offsets.clear()
                self.n = (f.seq - 1) & 0xFFFFFFFF
                return f.seq, n1
            self.offsets.clear()  # not taken while fresh
            self.n ^= 0x80000000
        raise AssertionError("no RECOVERY on first contact")

    def drain(self, rounds: int, max_frames: int = 4) -> None:
        """Poll until the device has nothing new (or `rounds` POLLs); an overrun is counted."""
        for _ in range(rounds):
            f = self.poll(16, 200, max_frames)[-1]
            if f.type == RECOVERY:
                n0 = f.seq
                self.lost += (n0 - (self.n + 1)) & 0xFFFFFFFF  # section 6.2, no chase guard needed here
                self.n = (n0 - 1) & 0xFFFFFFFF
            elif f.type == NO_EVENT:
                assert f.seq == self.n
                return
