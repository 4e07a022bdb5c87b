"""Loopback peers for the netem tests: a UDP echo server and client, a fake board on a pty."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import subprocess
import sys
import time
import tty
from collections.abc import Iterator
from pathlib import Path
from typing import Any

LEADWIRE = str(Path(sys.executable).parent / "leadwire")


class Peer(asyncio.DatagramProtocol):
    """A UDP endpoint that records what it receives and, as a server, echoes it back."""

    def __init__(self, echo: bool = False) -> None:
        self.echo = echo
        self.got: list[tuple[bytes, Any]] = []
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.got.append((data, addr))
        if self.echo:
            self.transport.sendto(data, addr)

    @property
    def address(self) -> tuple[str, int]:
        return self.transport.get_extra_info("sockname")[:2]

    @property
    def data(self) -> list[bytes]:
        return [d for d, _ in self.got]

    def close(self) -> None:
        self.transport.close()


async def peer(echo: bool = False) -> Peer:
    loop = asyncio.get_running_loop()
    _, p = await loop.create_datagram_endpoint(lambda: Peer(echo), local_addr=("127.0.0.1", 0))
    return p


async def send_paced(p: Peer, to: tuple[str, int], items: list[bytes], gap: float = 0.0005) -> None:
    """Send with a small gap: a burst would overflow the proxy's socket buffer, not the proxy."""
    for d in items:
        p.transport.sendto(d, to)
        await asyncio.sleep(gap)


async def wait_for(cond: Any, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        await asyncio.sleep(0.01)
    return bool(cond())


def messages(n: int, tag: bytes = b"m") -> list[bytes]:
    return [tag + b"%05d" % i for i in range(n)]


class FakeBoard:
    """The board's side of a serial link: a raw pty; `target` is the path netem opens."""

    def __init__(self) -> None:
        self.master, self.slave = pty.openpty()
        tty.setraw(self.slave)
        os.set_blocking(self.master, False)
        self.target = os.ttyname(self.slave)

    def read(self) -> bytes:
        out = b""
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except (BlockingIOError, OSError):
                return out
            if not chunk:
                return out
            out += chunk

    def write(self, data: bytes) -> None:
        os.write(self.master, data)

    def close(self) -> None:
        for fd in (self.master, self.slave):
            with contextlib.suppress(OSError):
                os.close(fd)


def open_port(path: str) -> int:
    fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    tty.setraw(fd)
    return fd


def read_fd(fd: int) -> bytes:
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except (BlockingIOError, OSError):
            return out
        if not chunk:
            return out
        out += chunk


async def collect(read: Any, want: int, timeout: float = 5.0, settle: float = 0.1) -> bytes:
    """Read until `want` bytes came (then `settle` seconds more for extras) or the timeout."""
    got = b""
    end = time.monotonic() + timeout
    while time.monotonic() < end and len(got) < want:
        await asyncio.sleep(0.005)
        got += read()
    await asyncio.sleep(settle)
    return got + read()


@contextlib.contextmanager
def netem_process(*args: str) -> Iterator[subprocess.Popen[str]]:
    """`leadwire netem ...` as a process; killed on the way out if the test did not stop it."""
    proc = subprocess.Popen(
        [LEADWIRE, "netem", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(5)
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()
