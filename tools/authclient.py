"""A small host-side client for boards with authentication on: the host's end of the link
is an auth_host.HostEndpoint(key) from the core, frames go over the HIL links (UDP or serial)
as bytes. Not the bridge: the tests see every signed byte, and can resend, forge or hold frames.
"""

from __future__ import annotations

import copy
import os
import time

from leadwire import auth, auth_host, codec, messages, wire
from leadwire.codec import Frame

from .wireclient import Link

POLL_ANSWERS = (wire.EVENTS, wire.NO_EVENT, wire.RECOVERY)


class AuthClient:
    def __init__(self, link: Link, key: bytes | str) -> None:
        self.link = link
        self.ep = auth_host.HostEndpoint(bytes.fromhex(key) if isinstance(key, str) else key)
        self.tag = 0
        self.rejected: list[int] = []  # what our endpoint refused of the board's frames (codes)
        self.raw: list[bytes] = []  # every frame received that verified, as it came

    # -- making frames ------------------------------------------------------------------------

    def next_tag(self) -> int:
        self.tag = (self.tag + 1) & 0xFF
        return self.tag

    def sign(self, frame: Frame, ep: auth.Endpoint | None = None) -> bytes:
        """The frame signed in the current session (the counter moves on: sign once, send once)."""
        buf = bytearray(codec.encode(frame)) + bytearray(auth.AUTH_SIZE)
        n = (ep or self.ep).sign_into(buf, len(buf) - auth.AUTH_SIZE)
        return bytes(buf[:n])

    def hello_request(self, ep: auth.Endpoint | None = None) -> bytes:
        nonce = int.from_bytes(os.urandom(4), "big")
        buf = bytearray(codec.encode(messages.hello_request(self.next_tag()))) + bytearray(auth.AUTH_SIZE)
        buf[6:10] = nonce.to_bytes(4, "big")  # seq = the nonce H
        n = (ep or self.ep).host_sign_hello(buf, len(buf) - auth.AUTH_SIZE)
        return bytes(buf[:n])

    def with_key(self, key: bytes) -> auth.Endpoint:
        """A copy of our endpoint (same session, contexts, counters) that signs with another key."""
        other = copy.copy(self.ep)
        other.tx = bytearray(self.ep.tx)
        other.key = auth.Key(key)
        return other

    # -- the link -----------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        self.link.send(data)

    def recv_bytes(self, timeout: float) -> bytes | None:
        end = time.monotonic() + timeout
        while True:
            got = self.link.recv(max(0.0, end - time.monotonic()))
            if got is None:
                return None
            if isinstance(got, bytes):
                return got

    def recv(self, timeout: float = 2.0, types: tuple[int, ...] | None = None) -> Frame | None:
        """The next frame from the board that verifies (HELLO: host_hello), decoded as unsigned;
        frames that do not verify are refused (codes in self.rejected) and skipped."""
        end = time.monotonic() + timeout
        while True:
            data = self.recv_bytes(end - time.monotonic())
            if data is None:
                return None
            buf = bytearray(data)
            if wire.check(buf, len(buf)):
                self.rejected.append(wire.check(buf, len(buf)))
                continue
            if buf[0] & 0x1F == wire.HELLO:
                r = self.ep.host_hello(buf, len(buf))
            else:
                r = self.ep.verify(buf, len(buf))
            if r not in (wire.OK, auth.HINT):
                self.rejected.append(r)
                continue
            self.raw.append(data)
            f = codec.decode(data)
            if types is None or f.type in types:
                return f

    def quiet(self, timeout: float = 0.5) -> list[bytes]:
        """Every frame's bytes that arrive within `timeout` (none expected: a refused request)."""
        out = []
        end = time.monotonic() + timeout
        while True:
            got = self.recv_bytes(end - time.monotonic())
            if got is None:
                return out
            out.append(got)

    # -- requests -----------------------------------------------------------------------------

    def handshake(self, timeout: float = 3.0) -> messages.Hello:
        """HELLO request (a fresh nonce) until the board's answer verifies: a new session."""
        for _ in range(3):
            self.send(self.hello_request())
            end = time.monotonic() + timeout
            while True:
                data = self.recv_bytes(end - time.monotonic())
                if data is None:
                    break
                buf = bytearray(data)
                if wire.check(buf, len(buf)) or buf[0] & 0x1F != wire.HELLO:
                    continue
                if self.ep.host_hello(buf, len(buf)) == wire.OK:
                    return messages.decode_hello(codec.decode(data))
        raise TimeoutError("no HELLO answer that verifies")

    def request(self, frame: Frame, types: tuple[int, ...], timeout: float = 2.0) -> Frame:
        frame.message_id = self.next_tag()
        self.send(self.sign(frame))
        end = time.monotonic() + timeout
        while True:
            f = self.recv(end - time.monotonic(), types)
            if f is None:
                raise TimeoutError("no answer to %r" % (frame,))
            if f.message_id == frame.message_id:
                return f

    def poll(self, n: int, max_events: int = 255, max_bytes: int = wire.MAX_PAYLOAD) -> Frame:
        return self.request(messages.poll_frame(n, max_events, max_bytes), POLL_ANSWERS)

    def records(self, channel: int | None = None, timeout: float = 3.0) -> list[tuple[int, bytes]]:
        """Every event the ring holds now, oldest first (polls from the oldest until NO_EVENT)."""
        f = self.poll(0, 1)
        if f.type == wire.RECOVERY:
            n0, _ = messages.decode_recovery(f)
            n = (n0 - 1) & 0xFFFFFFFF
        elif f.type == wire.EVENTS:  # the ring holds s(0) (a start near 2^32): read from it
            n = (f.seq - 1) & 0xFFFFFFFF
        else:
            return []
        out: list[tuple[int, bytes]] = []
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            f = self.poll(n)
            if f.type != wire.EVENTS:
                break
            _, recs = messages.decode_records(f.payload)
            out += recs
            n = (f.seq + len(recs) - 1) & 0xFFFFFFFF
        return [r for r in out if channel is None or r[0] == channel]

    def auth_health(self, channel: int = 8) -> dict[str, int] | None:
        """The board's latest auth record (the 6-byte record after a health record), or None."""
        recs = [d for _, d in self.records(channel) if len(d) == messages.HEALTH_AUTH_SIZE]
        return messages.decode_health_auth(recs[-1]) if recs else None

    def close(self) -> None:
        self.link.close()
