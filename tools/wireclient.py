"""A small host-side test client built on the core (codec, messages, framing): frames in and out
over UDP or serial (COBS), with a stash so unsolicited frames (NOTIFY, CLOSE) do not get lost
while a test waits for the answer to a request. Not the bridge: tests see the wire as it is."""

from __future__ import annotations

import os
import select
import socket
import termios
import time
import tty
from collections.abc import Iterable

from leadwire import codec, framing, messages, wire
from leadwire.codec import Frame


class Link:
    """Raw frames over one transport."""

    def send(self, data: bytes) -> None:
        raise NotImplementedError

    def recv(self, timeout: float) -> bytes | wire.WireError | None:
        """One frame's bytes (serial: a decoding error as WireError), or None on timeout."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class UdpLink(Link):
    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.address = address

    def send(self, data: bytes) -> None:
        self.sock.sendto(data, self.address)

    def recv(self, timeout: float) -> bytes | wire.WireError | None:
        r, _, _ = select.select([self.sock], [], [], max(0.0, timeout))
        if not r:
            return None
        data, _ = self.sock.recvfrom(4096)
        return data

    def close(self) -> None:
        self.sock.close()


class SerialLink(Link):
    """A serial port (a virtual board's pty, or a USB-UART), raw, COBS framed."""

    def __init__(self, port: str) -> None:
        self.fd = os.open(port, os.O_RDWR | os.O_NOCTTY)
        if os.isatty(self.fd):
            tty.setraw(self.fd, termios.TCSANOW)  # not TCSAFLUSH: keep what the board already sent
        self.dec = framing.StreamDecoder()
        self.ready: list[bytes | wire.WireError] = []

    def send(self, data: bytes) -> None:
        out = b"\x00" + framing.encode(data)  # the leading delimiter flushes a partial frame
        while out:
            n = os.write(self.fd, out)
            out = out[n:]

    def send_bytes(self, data: bytes) -> None:
        os.write(self.fd, data)

    def flush(self) -> None:
        """Forget what the port holds unread (a board shared between tests: the last test's
        session kept sending after its client stopped reading, and a pty keeps that)."""
        termios.tcflush(self.fd, termios.TCIFLUSH)
        while select.select([self.fd], [], [], 0)[0] and os.read(self.fd, 65536):
            pass
        self.dec = framing.StreamDecoder()
        self.ready = []

    def skip_to_hello(self, timeout: float) -> None:
        """Drop frames up to the first HELLO and keep that one to be read next: after flush() and a
        reset, what the old agent sent between the two comes before the new boot's HELLO."""
        end = time.monotonic() + timeout
        while True:
            got = self.recv(end - time.monotonic())
            if got is None:
                raise AssertionError("no boot HELLO within %.0f s of the reset" % timeout)
            if isinstance(got, bytes) and wire.frame_type(got) == wire.HELLO:
                self.ready.insert(0, got)
                return

    def recv(self, timeout: float) -> bytes | wire.WireError | None:
        end = time.monotonic() + timeout
        while not self.ready:
            left = end - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([self.fd], [], [], left)
            if not r:
                return None
            data = os.read(self.fd, 65536)
            pos = 0
            while pos < len(data):
                pos = self.dec.scan(data, pos, len(data))
                if self.dec.ready > 0:
                    self.ready.append(bytes(self.dec.frame[: self.dec.ready]))
                elif self.dec.ready < 0:
                    self.ready.append(wire.WireError(-self.dec.ready))
        return self.ready.pop(0)

    def close(self) -> None:
        os.close(self.fd)


class Client:
    def __init__(self, link: Link) -> None:
        self.link = link
        self.stash: list[Frame] = []
        self.log: list[tuple[float, bytes]] = []  # every frame received, with its arrival time
        self.errors: list[wire.WireError] = []
        self.tag = 0

    def send(self, frame: Frame) -> None:
        self.link.send(codec.encode(frame))

    def send_raw(self, data: bytes) -> None:
        self.link.send(data)

    def _next(self, timeout: float) -> Frame | None:
        end = time.monotonic() + timeout
        while True:
            got = self.link.recv(end - time.monotonic())
            if got is None:
                return None
            if isinstance(got, wire.WireError):
                self.errors.append(got)
                continue
            self.log.append((time.monotonic(), got))
            return codec.decode(got)

    def recv(self, types: Iterable[int] | None = None, timeout: float = 2.0) -> Frame | None:
        """The next frame (of one of `types`), stashed frames first; None on timeout."""
        want = set(types) if types is not None else None
        for i, f in enumerate(self.stash):
            if want is None or f.type in want:
                return self.stash.pop(i)
        end = time.monotonic() + timeout
        while True:
            f = self._next(end - time.monotonic())
            if f is None:
                return None
            if want is None or f.type in want:
                return f
            self.stash.append(f)

    def request(self, frame: Frame, types: Iterable[int], timeout: float = 2.0, tries: int = 3) -> Frame:
        """Send and wait for an answer of one of `types`; resend on timeout (a transport error).
        Stashed frames of those types are older than the request: dropped first."""
        want = set(types)
        self.stash = [f for f in self.stash if f.type not in want]
        for _ in range(tries):
            self.tag = (self.tag + 1) & 0xFF
            frame.message_id = self.tag  # the answer echoes it: late answers are told apart
            self.send(frame)
            end = time.monotonic() + timeout
            while True:
                got = self.recv(types, end - time.monotonic())
                if got is None or got.message_id == self.tag:
                    break
            if got is not None:
                return got
        raise TimeoutError("no answer to %r" % (frame,))

    def hello(self) -> messages.Hello:
        return messages.decode_hello(self.request(messages.hello_request(), [wire.HELLO]))

    def poll(self, n: int, max_events: int = 1, max_bytes: int = wire.MAX_PAYLOAD) -> Frame:
        return self.request(
            messages.poll_frame(n, max_events, max_bytes), [wire.EVENTS, wire.NO_EVENT, wire.RECOVERY]
        )

    def drain(self, quiet: float = 0.3) -> list[Frame]:
        """Everything that arrives until the link has been quiet for `quiet` seconds."""
        out = list(self.stash)
        self.stash.clear()
        while True:
            f = self._next(quiet)
            if f is None:
                return out
            out.append(f)

    def close(self) -> None:
        self.link.close()
