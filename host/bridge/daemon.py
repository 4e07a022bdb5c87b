"""The asyncio bridge: transports, one poll loop per device, batched commits, subscriptions.

Everything protocol-shaped happens in :class:`~leadwire.bridge.client.DeviceClient`; this module
only moves bytes and time:

* one UDP socket for all UDP devices (datagrams are routed to the device by source address);
* one pyserial port per serial device, COBS-framed through the core's ``StreamDecoder``;
* a task per device: ``request`` -> send -> wait for the answer or the timeout -> sleep the
  client's ``next_delay`` (0 while the device reports a backlog: adaptive polling);
* one flusher task: every ``commit_interval`` (or sooner when ``commit_rows`` are pending) it
  drains the clients into one :class:`~leadwire.bridge.store.Batch` and commits it on the single
  store thread; report ACKs go out only after their transaction committed.

If a commit fails the bridge stops without writing anything more: the store still holds a
consistent offset for every device and the next run polls the missing events again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import socket
import time
from array import array
from collections.abc import Callable
from typing import Any, NamedTuple

from leadwire import codec, framing, messages, wire

from . import logs
from .client import Delivery, DeviceClient
from .config import BridgeConfig, DeviceConfig, parse_address
from .metrics import Histogram, make_registry, serve
from .store import Batch, Store, drain


class Source(NamedTuple):
    """Who sent a message: a device boot (spec 000's sender) and how it reached us."""

    device_id: str
    boot_epoch: int
    transport: str
    address: str


Callback = Callable[[Delivery, int, Source], Any]


def now_us() -> int:
    return time.time_ns() // 1000


class _UdpProtocol(asyncio.DatagramProtocol):
    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge
        self.transport: asyncio.DatagramTransport | None = None
        self.unknown = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: Any) -> None:
        r = self.bridge.by_addr.get(addr[:2])
        if r is None:
            self.unknown += 1
            return
        r.on_datagram(data)

    def error_received(self, exc: Exception) -> None:  # ICMP unreachable etc.: the timeout handles it
        pass


class _UdpLink:
    def __init__(self, proto: _UdpProtocol, addr: tuple[str, int]) -> None:
        self.proto = proto
        self.addr = addr

    def send(self, data: bytes) -> None:
        t = self.proto.transport
        if t is not None:
            t.sendto(data, self.addr)

    def close(self) -> None:
        pass


class _SerialLink:
    """A serial port read through the event loop (add_reader on its descriptor), COBS framed."""

    def __init__(self, runner: DeviceRunner, port: str, baud: int) -> None:
        self.runner = runner
        self.port = port
        self.baud = baud
        self.ser: Any = None
        self.decoder = framing.StreamDecoder()
        self.loop = asyncio.get_running_loop()

    def open(self) -> bool:
        if self.ser is not None:
            return True
        import serial

        try:
            self.ser = serial.serial_for_url(self.port, baudrate=self.baud, timeout=0, write_timeout=1)
        except (serial.SerialException, OSError, ValueError) as e:
            dev = self.runner.client.device_id
            logs.event(
                self.runner.bridge.log,
                logging.WARNING,
                "serial_open_failed",
                device=dev,
                port=self.port,
                error=str(e),
            )
            return False
        self.decoder = framing.StreamDecoder()
        self.loop.add_reader(self.ser.fileno(), self._readable)
        self.ser.write(b"\x00")  # flush the device decoder's partial state (docs/protocol.md)
        return True

    def _readable(self) -> None:
        try:
            data = os.read(self.ser.fileno(), 65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        if not data:
            self.close()
            return
        for item in self.decoder.feed(data):
            if isinstance(item, wire.WireError):
                self.runner.on_bad(item.code)
            else:
                self.runner.on_frame(item, len(item.payload) + wire.OVERHEAD)

    def send(self, data: bytes) -> None:
        if self.ser is None and not self.open():
            return
        try:
            self.ser.write(framing.encode(data))
        except Exception:  # a vanished port: reopened on the next request
            self.close()

    def close(self) -> None:
        if self.ser is not None:
            try:
                self.loop.remove_reader(self.ser.fileno())
            except Exception:
                pass
            try:
                self.ser.close()
            except Exception:
                pass
            self.ser = None


class DeviceRunner:
    """Drives one DeviceClient: the request/answer loop over its link."""

    def __init__(self, bridge: Bridge, client: DeviceClient, cfg: DeviceConfig) -> None:
        self.bridge = bridge
        self.client = client
        self.cfg = cfg
        self.link: Any = None
        self.waiter: asyncio.Future[bool] | None = None
        self.address = "%s:%d" % (cfg.host, cfg.port) if cfg.transport == "udp" else cfg.serial
        self.loop = asyncio.get_running_loop()

    # -- input -------------------------------------------------------------------------

    def on_datagram(self, data: bytes) -> None:
        try:
            f = codec.decode(data)
        except wire.WireError as e:
            self.on_bad(e.code)
            return
        self.on_frame(f, len(data))

    def on_bad(self, code: int) -> None:
        self.client.on_bad_frame(code)
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(False)  # a broken answer is a transport error: poll n again

    def on_frame(self, f: codec.Frame, nbytes: int) -> None:
        c = self.client
        before = c.arrival
        done = c.on_frame(f, nbytes, self.loop.time(), now_us())
        b = self.bridge
        if c.arrival != before:
            b.pending_rows += c.arrival - before
            if b.pending_rows >= b.cfg.commit_rows:
                b.flush_now.set()
        if c.out_deliveries:
            b.dispatch(self, c.out_deliveries)
            c.out_deliveries = []
        if c.log:
            for name, fields in c.log:
                logs.event(b.log, logging.INFO, name, device=c.device_id, **fields)
            c.log = []
        if done:
            w = self.waiter
            if w is not None and not w.done():
                w.set_result(True)

    # -- the loop ----------------------------------------------------------------------

    async def run(self) -> None:
        c = self.client
        b = self.bridge
        loop = self.loop
        poll_timeout = c.poll_cfg.timeout
        ack_timeout = c.poll_cfg.ack_timeout
        while True:
            if b.pending_rows >= 4 * b.cfg.commit_rows:
                await b.wait_flushed()  # backpressure: the store is behind
            sent = loop.time()
            f = c.request(sent)
            fut: asyncio.Future[bool] = loop.create_future()
            self.waiter = fut
            self.link.send(codec.encode(f))
            h = loop.call_later(ack_timeout if f.type == wire.SUBSCRIBE else poll_timeout, _expire, fut)
            ok = await fut
            h.cancel()
            self.waiter = None
            if not ok:
                c.on_transport_error()
            # the delay counts from when the request went out: a fixed 100 ms interval is 10 Hz
            delay = c.next_delay - (loop.time() - sent)
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)  # let the other devices run between back-to-back polls


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)


class Bridge:
    """The bridge daemon. Use: ``b = Bridge(cfg); await b.start(); ...; await b.stop()``."""

    def __init__(
        self, cfg: BridgeConfig, log: logging.Logger | None = None, keep_latencies: bool = False
    ) -> None:
        self.cfg = cfg
        self.log = log or logging.getLogger(logs.LOGGER)
        self.clients: dict[str, DeviceClient] = {}
        self.runners: dict[str, DeviceRunner] = {}
        self.by_addr: dict[tuple[str, int], DeviceRunner] = {}
        self._subs: dict[int, list[tuple[Callback, bool]]] = {}
        self.store: Store | None = None
        self.pending_rows = 0
        self.commits = 0
        self.rows_committed = 0
        self.events_committed = 0
        self.latency = Histogram()
        self.commit_time = Histogram()
        self.keep_latencies = keep_latencies
        self.latencies_us = array("q")
        self.failed: BaseException | None = None
        self.metrics_port = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._metrics_stop: Callable[[], None] | None = None
        self._udp: asyncio.DatagramTransport | None = None
        self._proto: _UdpProtocol | None = None
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="leadwire-store")
        self._flush_lock: asyncio.Lock | None = None
        self._flushed: asyncio.Event | None = None
        self.flush_now = asyncio.Event()
        self.stopped = asyncio.Event()
        self._stopping = False

    # -- application API (spec 000) --------------------------------------------------------

    def subscribe(self, channel: int, callback: Callback) -> None:
        """Call callback(message, lead, source) for every message on the channel, whatever its lead."""
        self._add_sub(channel, callback, False)

    def subscribe_ordered(self, channel: int, callback: Callback) -> None:
        """Like subscribe, but only for messages with lead >= 1 (in order or after a gap)."""
        self._add_sub(channel, callback, True)

    def _add_sub(self, channel: int, callback: Callback, ordered: bool) -> None:
        self._subs.setdefault(channel, []).append((callback, ordered))
        for c in self.clients.values():
            c.deliver = True

    def dispatch(self, runner: DeviceRunner, deliveries: list[tuple[Delivery, int]]) -> None:
        c = runner.client
        src = Source(c.device_id, c.epoch or 0, runner.cfg.transport, runner.address)
        for d, lead in deliveries:
            for cb, ordered in self._subs.get(d.channel, ()):
                if ordered and lead < 1:
                    continue
                try:
                    cb(d, lead, src)
                except Exception:
                    self.log.exception("callback_failed", extra={"fields": {"device": c.device_id}})

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        cfg = self.cfg
        loop = asyncio.get_running_loop()
        self._flush_lock = asyncio.Lock()
        self._flushed = asyncio.Event()
        self.store = await loop.run_in_executor(self._writer, Store, cfg.store, cfg.bridge_id)
        devices = cfg.my_devices()
        udp = [d for d in devices if d.transport == "udp"]
        if udp:
            host, port = parse_address(cfg.bind, "bridge.bind")
            proto = _UdpProtocol(self)
            self._proto = proto
            tr, _ = await loop.create_datagram_endpoint(lambda: proto, local_addr=(host, port))
            self._udp = tr
            try:
                sock = tr.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
            except OSError:
                pass
        deliver = bool(self._subs)
        for d in devices:
            address = "%s:%d" % (d.host, d.port) if d.transport == "udp" else d.serial
            key, state = await loop.run_in_executor(
                self._writer, self.store.register, d.id, d.transport, address
            )
            client = DeviceClient(key, d, cfg.poll, state, deliver=deliver)
            r = DeviceRunner(self, client, d)
            if d.transport == "udp":
                ip = _resolve(d.host, d.port)
                assert self._proto is not None
                r.link = _UdpLink(self._proto, ip)
                self.by_addr[ip] = r
            else:
                r.link = _SerialLink(r, d.serial, d.baud)
                r.link.open()
            self.clients[d.id] = client
            self.runners[d.id] = r
        if cfg.metrics:
            mh, mp = parse_address(cfg.metrics, "bridge.metrics")
            _, self._metrics_stop, self.metrics_port = serve(make_registry(self), mh, mp)
        logs.event(self.log, logging.INFO, "bridge_started", bridge_id=cfg.bridge_id, devices=len(devices),
                   store=cfg.store, metrics_port=self.metrics_port, shard="%d/%d" % cfg.shard)  # fmt: skip
        self._flusher = loop.create_task(self._flush_loop())
        # spread the first requests over one poll interval so 1,000 devices do not poll in lockstep
        spread = cfg.poll.interval / max(1, len(self.runners))
        for i, r in enumerate(self.runners.values()):
            self._tasks.append(loop.create_task(self._run_later(r, i * spread)))

    async def _run_later(self, r: DeviceRunner, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        try:
            await r.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            self.log.exception("device_task_failed", extra={"fields": {"device": r.client.device_id}})

    async def wait_flushed(self) -> None:
        assert self._flushed is not None
        self.flush_now.set()
        self._flushed.clear()
        await self._flushed.wait()

    async def _flush_loop(self) -> None:
        interval = self.cfg.commit_interval
        while True:
            try:
                await asyncio.wait_for(self.flush_now.wait(), interval)
            except TimeoutError:
                pass
            self.flush_now.clear()
            try:
                await self.flush()
            except Exception as e:
                self.failed = e
                self.log.exception("store_failed", extra={"fields": {"store": self.cfg.store}})
                asyncio.get_running_loop().create_task(self.stop())
                return

    async def flush(self) -> int:
        """Commit everything the clients produced so far in one transaction; returns arrival rows."""
        assert self._flush_lock is not None and self._flushed is not None
        if self.failed is not None or self.store is None:
            return 0
        async with self._flush_lock:
            batch = Batch()
            drain(self.clients.values(), batch)
            self.pending_rows = 0
            if not batch.devices:
                self._flushed.set()
                return 0
            batch.commit_us = now_us()
            t0 = time.perf_counter()
            await asyncio.get_running_loop().run_in_executor(self._writer, self.store.write, batch)
            done = now_us()
            self.commit_time.observe_many([time.perf_counter() - t0])
            self.commits += 1
            self.rows_committed += len(batch.arrivals)
            self.events_committed += len(batch.events)
            for client, acks in batch.acks:
                link = self.runners[client.device_id].link
                for a in acks:
                    link.send(a)
            lat = [done - a[15] for a in batch.arrivals if a[15] is not None]
            if lat:
                self.latency.observe_many(v / 1e6 for v in lat)
                if self.keep_latencies:
                    self.latencies_us.extend(lat)
            self._flushed.set()
            return len(batch.arrivals)

    async def stop(self) -> None:
        """Stop polling, commit what was received (the in-flight transaction), close everything."""
        if self._stopping:
            await self.stopped.wait()
            return
        self._stopping = True
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for r in self.runners.values():
            if r.cfg.subscribe and self.failed is None:
                r.link.send(codec.encode(messages.subscribe_frame([])))  # end the push sessions
        if self._flusher is not None and self._flusher is not asyncio.current_task():
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
        if self.failed is None and self.store is not None:
            try:
                await self.flush()
            except Exception as e:
                self.failed = e
                self.log.exception("store_failed", extra={"fields": {"store": self.cfg.store}})
        for r in self.runners.values():
            r.link.close()
        if self._udp is not None:
            self._udp.close()
        if self._metrics_stop is not None:
            self._metrics_stop()
        if self.store is not None:
            await asyncio.get_running_loop().run_in_executor(self._writer, self.store.close)
        self._writer.shutdown(wait=True)
        failed = repr(self.failed) if self.failed else None
        logs.event(
            self.log,
            logging.INFO,
            "bridge_stopped",
            commits=self.commits,
            arrivals=self.rows_committed,
            failed=failed,
        )
        self.stopped.set()


def _resolve(host: str, port: int) -> tuple[str, int]:
    """The (ip, port) datagrams from this device come from (IPv4; what the socket reports)."""
    try:
        info = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_DGRAM)
        return str(info[0][4][0]), port
    except OSError:
        return host, port
