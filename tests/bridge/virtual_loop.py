"""The daemon's Scheduler and DeviceRunners on an asyncio loop in virtual time, with simulated devices.

`VirtualLoop` is an asyncio selector loop whose clock only moves when the loop would wait: a wait
of t seconds for the next timer is no wait, the clock jumps by t. The daemon's own code (Scheduler,
DeviceRunner, DeviceClient) runs unchanged on it, so a test reads exact send times. `SimLink` is a
device's link: each request goes to a SimCore at once and its answers come back `rtt` later (or
`slow(frame)` later, or never when `drop(frame)` says so). No store: the rows stay in the clients'
out lists (check them with leadwire.bridge.accounting.check_client).
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from leadwire import codec
from leadwire.bridge.client import DeviceClient
from leadwire.bridge.daemon import Bridge, DeviceRunner, Scheduler
from leadwire.tools.simdevice import SimCore

from .helpers import bridge_config

T0 = 1000.0003  # the clock at start: dues off the 1 ms grid (no ties in the grid's rounding)


class _Selector(selectors.DefaultSelector):
    def __init__(self, clock: list[float]) -> None:
        super().__init__()
        self.clock = clock

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = super().select(0)
        if not events:
            if timeout is None:
                raise RuntimeError("virtual loop: nothing scheduled, nothing to read (a wait forever)")
            self.clock[0] += timeout
        return events


class VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self.clock = [T0]
        super().__init__(_Selector(self.clock))

    def time(self) -> float:
        return self.clock[0]


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    loop = VirtualLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


class SimLink:
    """A runner's link to a SimCore (see the module docstring); `sent` is (time, request frame)."""

    def __init__(self, runner: DeviceRunner, core: SimCore, rtt: float) -> None:
        self.runner = runner
        self.core = core
        self.rtt = rtt
        self.loop = asyncio.get_running_loop()
        self.sent: list[tuple[float, codec.Frame]] = []
        self.drop: Callable[[int, codec.Frame], bool] = lambda i, f: False  # (request number, request)
        self.slow: Callable[[int, codec.Frame], float | None] = lambda i, f: None  # its answer's delay

    def send(self, data: bytes) -> None:
        now = self.loop.time()
        f = codec.decode(data)
        i = len(self.sent)
        self.sent.append((now, f))
        outs = self.core.handle(data, now)
        if self.drop(i, f):
            return
        delay = self.slow(i, f)
        self.loop.call_at(now + (self.rtt if delay is None else delay), self._deliver, outs)

    def _deliver(self, outs: list[bytes]) -> None:
        b = self.runner.bridge
        for o in outs:
            self.runner.on_datagram(o)
        b.pending_rows = 0  # no store: the rows stay in the client (no backpressure)
        b.sched.run_ready()

    def close(self) -> None:
        pass


class Fleet:
    """Devices (SimCores) and their runners on one Scheduler, as Bridge.start sets them up (no
    sockets, no store). Use inside `run`: ``f = Fleet(tmp, keys, polling); f.start(spread); await
    asyncio.sleep(t); f.stop()``."""

    def __init__(
        self, tmp: Path, keys: list[bytes | None], polling: dict[str, Any], rtt: float = 0.002
    ) -> None:
        auth = [{"key": k.hex()} if k else {"auth": False} for k in keys]
        devs = [{"id": "d%d" % i, "udp": "127.0.0.1:%d" % (9000 + i), **a} for i, a in enumerate(auth)]
        self.cfg = bridge_config(tmp, devs, polling=polling)
        self.bridge = b = Bridge(self.cfg)
        b.sched = Scheduler(b)
        self.cores: list[SimCore] = []
        self.links: list[SimLink] = []
        for i, (d, k) in enumerate(zip(self.cfg.my_devices(), keys, strict=True)):
            core = SimCore(i, capacity=64, start=1000 * (i + 1), key=k)
            client = DeviceClient(i + 1, d, self.cfg.poll, nonce=lambda i=i: 0x5EED0000 + i)
            r = DeviceRunner(b, client, d)
            r.link = link = SimLink(r, core, rtt)
            b.clients[d.id] = client
            b.runners[d.id] = r
            self.cores.append(core)
            self.links.append(link)

    @property
    def clients(self) -> list[DeviceClient]:
        return list(self.bridge.clients.values())

    def start(self, spread: float) -> None:
        self.bridge.sched.start(list(self.bridge.runners.values()), spread)

    def stop(self) -> None:
        self.bridge.sched.stop()
        self.bridge._writer.shutdown(wait=False)
