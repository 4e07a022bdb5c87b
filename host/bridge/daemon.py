"""The asyncio bridge: transports, one poll loop per device, batched commits, subscriptions.

Everything protocol-shaped happens in :class:`~leadwire.bridge.client.DeviceClient`; this module
only moves bytes and time:

* one UDP socket for all UDP devices, read with ``add_reader`` and drained of every queued datagram
  per wake-up (datagrams are routed to the device by source address);
* one pyserial port per serial device, COBS-framed through the core's ``StreamDecoder``;
* one :class:`Scheduler` for all devices (no task per device): ``request`` -> send -> the answer or
  the timeout -> the next request ``next_delay`` after the send (at once while the device reports a
  backlog: adaptive polling). Due requests go out in bursts, timeouts are one heap;
* one flusher task: every ``commit_interval`` (or sooner when ``commit_rows`` are pending) it
  drains the clients into one :class:`~leadwire.bridge.store.Batch` and commits it through the
  single store executor thread: in the store writer process (``[store] writer = "process"``, the
  default, :mod:`~leadwire.bridge.writer`) or on that thread itself (``"thread"``); report ACKs go
  out only after their transaction committed;
* one look at every device every ``reach.TICK`` (:mod:`~leadwire.bridge.reach`): which devices
  answer, the likely causes when one does not, its last contact for the store and the metrics.

Before any of it, :meth:`Bridge.start` takes the resources in the order ``leadwire bridge --check``
checks them (:mod:`~leadwire.bridge.preflight`: the store's lock, the metrics address, the UDP
socket and routes, the serial ports), so a run that cannot have one creates nothing.

If a commit fails the bridge stops without writing anything more: the store still holds a
consistent offset for every device and the next run polls the missing events again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import heapq
import itertools
import logging
import math
import os
import select
import socket
import time
from array import array
from collections.abc import Callable
from typing import Any, NamedTuple

from leadwire import codec, framing, messages, wire
from leadwire.auth import TO_DEVICE, Endpoint
from leadwire.client import PollStateError

from . import heap, logs, preflight
from .client import Delivery, DeviceClient
from .config import BridgeConfig, DeviceConfig, parse_address
from .lock import StoreLock
from .metrics import Histogram, make_registry, serve
from .mqtt_forward import Forwarder
from .reach import TICK, Reach, ReachMonitor
from .store import GEN_INDEX, SEG_EVENT, Batch, Store, drain
from .writer import StoreProcess


class Source(NamedTuple):
    """Who sent a message: a device boot (spec 000's sender) and how it reached us."""

    device_id: str
    boot_epoch: int
    transport: str
    address: str


Callback = Callable[[Delivery, int, Source], Any]


def now_us() -> int:
    return time.time_ns() // 1000


IP_RECVERR = getattr(socket, "IP_RECVERR", 11)  # Linux: ICMP errors queued on the socket


class _UdpSocket:
    """The one UDP socket of the bridge: non-blocking, read through the loop's selector.

    A wake-up reads every datagram already queued (up to ``burst``), not one per loop iteration
    as asyncio's datagram transport does; then the requests that became due go out together.

    ICMP errors (a port or host unreachable) are queued on the socket (IP_RECVERR) and read back
    with the address they were for (:meth:`_errors`), so a device with nothing listening on its
    port says so (reach.py). With IP_RECVERR a pending error is also reported by the next sendto,
    whatever its address: :meth:`sendto` then reads the queue and sends once more.
    """

    def __init__(self, bridge: Bridge, host: str, port: int, burst: int = 512) -> None:
        self.bridge = bridge
        self.burst = burst
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setblocking(False)
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, opt, 8 << 20)
            except OSError:
                pass
        try:
            self.sock.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
        except OSError:
            pass
        try:
            self.sock.bind((host, port))
        except OSError:
            self.sock.close()
            raise
        self.unknown = 0
        self.send_errors = 0
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        self._queued = poller.poll
        self.loop = asyncio.get_running_loop()
        self.loop.add_reader(self.sock.fileno(), self._readable)

    def _readable(self) -> None:
        self.drain(self.burst)
        self.bridge.sched.run_ready()

    def drain(self, limit: int, readable: bool = True) -> bool:
        """Hand the datagrams already queued (at most ``limit``) to their devices; True when it
        stopped at the limit (more may be queued).

        After the first datagram (before it too, unless the selector has just said the socket is
        readable) a poll(0) asks whether another is queued before reading: below saturation a
        wake-up finds one datagram, and a read that finds none raises BlockingIOError, ~4-5 us of
        CPU against ~1 us for poll(0) (measured on this 2-core host), per round trip."""
        recv = self.sock.recvfrom
        by_addr = self.bridge.by_addr
        queued = self._queued
        if not readable and not queued(0):
            return False
        for i in range(limit):
            if i == 1 and not queued(0):
                return False
            try:
                data, addr = recv(4096)
            except (BlockingIOError, InterruptedError):
                return False
            except OSError:  # an ICMP error reported on the socket: read the queue
                self._errors()
                continue
            r = by_addr.get(addr)
            if r is None:
                self.unknown += 1
                self.bridge.from_unknown(addr)
                continue
            if r.suspect:
                r.reach.inspect(data)
            r.on_datagram(data)
        return True

    def _errors(self) -> None:
        """Read the queued ICMP errors; each names the address its datagram was sent to."""
        by_addr = self.bridge.by_addr
        for _ in range(self.burst):
            try:
                _, anc, _, addr = self.sock.recvmsg(1, 512, socket.MSG_ERRQUEUE)
            except OSError:
                return
            r = by_addr.get(addr)
            if r is not None and anc and len(anc[0][2]) >= 4:
                r.reach.on_icmp(int.from_bytes(anc[0][2][:4], "little"))  # sock_extended_err.ee_errno

    def sendto(self, data: bytes, addr: tuple[str, int], runner: DeviceRunner) -> None:
        try:
            self.sock.sendto(data, addr)
            return
        except (BlockingIOError, InterruptedError) as e:
            code = e.errno or errno.EAGAIN
        except OSError as e:
            self._errors()  # an ICMP error pending from an earlier datagram, or this send's own
            try:
                self.sock.sendto(data, addr)
                return
            except OSError as e2:
                code = e2.errno or e.errno or 0
        self.send_errors += 1  # lost like a dropped datagram: the timeout handles it
        runner.on_send_error(code)

    def close(self) -> None:
        try:
            self.loop.remove_reader(self.sock.fileno())
        except Exception:
            pass
        self.sock.close()


class _UdpLink:
    def __init__(self, udp: _UdpSocket, addr: tuple[str, int], runner: DeviceRunner) -> None:
        self.udp = udp
        self.addr = addr
        self.runner = runner

    def send(self, data: bytes) -> None:
        self.udp.sendto(data, self.addr, self.runner)

    def close(self) -> None:
        pass


class _SerialLink:
    """A serial port read through the event loop (add_reader on its descriptor), COBS framed."""

    def __init__(self, runner: DeviceRunner, port: str, baud: int, ser: Any = None) -> None:
        self.runner = runner
        self.port = port
        self.baud = baud
        self.ser: Any = None
        self.decoder = framing.StreamDecoder()
        self.loop = asyncio.get_running_loop()
        if ser is not None:
            self._adopt(ser)

    def open(self) -> bool:
        """Open the port again (it vanished: a USB board unplugged); a failure is logged once per
        distinct error, not per attempt."""
        if self.ser is not None:
            return True
        try:
            ser = open_serial(self.port, self.baud)
        except Exception as e:
            reach = self.runner.reach
            reach.open_error = str(e)
            if reach.open_logged != reach.open_error:
                reach.open_logged = reach.open_error
                logs.event(self.runner.bridge.log, logging.WARNING, "serial_open_failed",
                           device=self.runner.client.device_id, port=self.port, error=str(e))  # fmt: skip
            return False
        self.runner.reach.open_error = self.runner.reach.open_logged = None
        self._adopt(ser)
        return True

    def _adopt(self, ser: Any) -> None:
        self.ser = ser
        self.decoder = framing.StreamDecoder()
        self.loop.add_reader(self.ser.fileno(), self._readable)
        self.ser.write(b"\x00")  # flush the device decoder's partial state (docs/protocol.md)

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
        dec = self.decoder
        pos = 0
        end = len(data)
        runner = self.runner
        while pos < end:
            pos = dec.scan(data, pos, end)
            if dec.ready > 0:
                frame = bytes(dec.frame[: dec.ready])  # raw bytes: auth needs them
                if runner.suspect:
                    runner.reach.inspect(frame)
                runner.on_datagram(frame)
            elif dec.ready < 0:
                self.runner.on_bad(-dec.ready)
        self.runner.bridge.sched.run_ready()

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
    """One device's request/answer cycle over its link; the Scheduler decides when it runs."""

    def __init__(self, bridge: Bridge, client: DeviceClient, cfg: DeviceConfig) -> None:
        self.bridge = bridge
        self.client = client
        self.cfg = cfg
        self.link: Any = None
        self.address = "%s:%d" % (cfg.host, cfg.port) if cfg.transport == "udp" else cfg.serial
        self.loop = asyncio.get_running_loop()
        self.waiting = False  # a request is outstanding
        self.gen = 0  # number of the outstanding request: a timeout of an older one is ignored
        self.sent = 0.0  # loop time the outstanding request went out
        self.due = 0.0  # loop time it was due (the timer wakes late: sent >= due)
        self.last_rx = 0.0  # loop time of the last frame received (a burst in progress keeps its deadline)
        self.hello_next = False  # the request due next is the periodic HELLO (Scheduler.answered)
        self.poll_at: float | None = None  # while it is due or out: the due time of the POLL after it
        self.reach = Reach(client.device_id, cfg.transport, self.address, cfg.auth, client.dc)
        self.suspect = True  # no valid answer yet, or silent for a round: what arrives is inspected
        self.faults = 0  # PollStateErrors caught (fault())

    def on_send_error(self, code: int) -> None:
        if self.reach.on_send_error(code):
            logs.event(self.bridge.log, logging.WARNING, "send_failed", device=self.client.device_id,
                       address=self.address, errno=code, error=os.strerror(code))  # fmt: skip

    def probe(self) -> None:
        """A POLL signed under a throwaway key: refused by the board (counted forged, as a wrong key's
        HELLOs are), which answers with its boot HELLO while it has no session (reach.py)."""
        ep = Endpoint(os.urandom(16), TO_DEVICE)
        data = codec.encode(messages.poll_frame(0))
        buf = bytearray(data) + bytes(wire.AUTH_SIZE)
        self.link.send(bytes(buf[: ep.sign_into(buf, len(data))]))

    # -- input -------------------------------------------------------------------------

    def on_datagram(self, data: bytes) -> None:
        c = self.client
        before = c.arrival
        self.last_rx = t = self.loop.time()
        try:
            done = c.receive(data, t, now_us())
        except wire.WireError as e:
            self.on_bad(e.code)
            return
        except PollStateError as e:
            self.fault(e, "answer")
            if self.waiting:  # else its next request is scheduled already
                self.bridge.sched.restart(self)
            return
        self._after(c, before, done)

    def fault(self, e: PollStateError, during: str) -> None:
        """A bug in the device's poll client (an event its state does not allow): one line, counted,
        the client reset to where it is (DeviceClient.reset: nothing stored twice, nothing silent).
        The other devices and the run go on. The caller reschedules the device."""
        c = self.client
        self.faults += 1
        logs.event(self.bridge.log, logging.ERROR, "client_fault", device=c.device_id, during=during,
                   state=c.pc.state, error=str(e), n=c.n)  # fmt: skip
        c.reset()

    def on_bad(self, code: int) -> None:
        self.client.on_bad_frame(code)
        if self.waiting:
            self.bridge.sched.answered(self, False)  # a broken answer is a transport error: poll n again

    def _after(self, c: DeviceClient, before: int, done: bool) -> None:
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
        if done and self.waiting:
            b.sched.answered(self, True)


class Scheduler:
    """When each device sends its next request, for all devices, on the event loop.

    A heap of (due time, runner) for the next requests and a heap of (deadline, runner, request
    number) for the outstanding ones; one timer armed at the earliest of the two. An answer makes
    the device due ``next_delay`` after its request went out (a fixed 100 ms interval is 10 Hz);
    a device due now (a backlog to drain) joins the ``ready`` list, sent after the current burst
    of received datagrams, so back-to-back polling of one device never starves the others.

    The periodic HELLO (DeviceClient.periodic_hello) goes between two POLLs, half the wait before
    the next one is due (or at once, when the answer came later than that), never in a POLL's
    slot: the next POLL keeps its due time (``poll_at``) and goes out when it is due, or when the
    HELLO's answer or timeout comes if that is later (one request out at a time: a POLL never
    overtakes a HELLO, so it cannot reach a device before the HELLO it follows).

    Times at least 8 ``GRID`` steps away wait on a grid (rounded up to the next step, so at most
    1/8 of their wait late, and never more than one step): with many devices each wake-up sends
    every request due within one step and handles every deadline that passed, instead of one
    event-loop iteration per request. Shorter waits (adaptive polling's interval_min, the RTO and
    tail-loss probe of a fast lossy link) keep their exact times. A wake-up that has deadlines to
    handle first reads the datagrams already queued on the UDP socket: after a late wake-up (a
    loaded host) the answers waiting there are answers, not timeouts.
    """

    GRID = 0.001  # s
    SLICE = 64  # datagrams a wake-up reads before its deadlines (then the loop's turn, then the rest)

    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge
        self.loop = asyncio.get_running_loop()
        self.due: list[tuple[float, int, DeviceRunner]] = []
        self.deadlines: list[tuple[float, int, DeviceRunner, int]] = []
        self.ready: list[DeviceRunner] = []
        self._tie = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._soon = False
        self._resume = False  # a wake-up left for the loop's next turn (_wake: a slice read)
        self.paused = False  # backpressure: the store is behind
        self.stopped = False

    def start(self, runners: list[DeviceRunner], spread: float) -> None:
        now = self.loop.time()
        for i, r in enumerate(runners):
            r.due = now + i * spread
            heapq.heappush(self.due, (r.due, next(self._tie), r))
        self._arm()

    def stop(self) -> None:
        self.stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- events ------------------------------------------------------------------------

    def answered(self, r: DeviceRunner, ok: bool) -> None:
        """The outstanding request of r was answered (ok) or failed (a broken answer)."""
        r.waiting = False
        r.gen += 1
        c = r.client
        if not ok:
            try:
                c.on_transport_error()
            except PollStateError as e:
                r.fault(e, "bad answer")
                self.restart(r)
                return
        if r.poll_at is not None:
            # the periodic HELLO answered (or broken): the POLL at its own time (at once if passed)
            at, r.poll_at = r.poll_at, None
            self._schedule(r, at if ok else max(at, r.sent + c.next_delay))
            return
        if ok and c.pc.ahead is not None and not c.next_delay and not self.paused and not self.stopped:
            # a pipelined POLL: out now, not after the rest of this input burst (which holds the
            # rest of the answer it continues from); the device reads it once that is sent
            now = self.loop.time()
            r.due = now
            self._send(r, now)
            self._arm()
            return
        delay = c.next_delay
        at = self._period_base(r, delay) + delay
        if delay > 0:
            now = self.loop.time()
            if now < at and c.periodic_hello(now):
                r.poll_at = at
                r.hello_next = True
                at = max(now, at - delay / 2)
        self._schedule(r, at)

    @staticmethod
    def _period_base(r: DeviceRunner, delay: float) -> float:
        # A fixed interval counts from when the request was due, not from when the timer got to it:
        # otherwise every late wake-up moves all later polls back (1,000 devices at 100 ms made
        # 9.81 Hz, not 10). A request sent later than one interval after its due time starts the
        # count again from its send, so a stall is never followed by a burst of catch-up polls.
        if delay > 0 and r.sent - r.due < delay:
            return r.due
        return r.sent

    def _schedule(self, r: DeviceRunner, at: float) -> None:
        r.due = at
        if at <= self.loop.time():
            self.ready.append(r)
            if not self._soon:
                self._soon = True
                self.loop.call_soon(self.run_ready)
        else:
            key = self._key(at, at - self.loop.time())
            heapq.heappush(self.due, (key, next(self._tie), r))
            if self._timer is None or key < self._timer_at:
                self._arm()

    def restart(self, r: DeviceRunner) -> None:
        """After a client fault (DeviceRunner.fault): nothing outstanding, the device's next request
        (its HELLO) one poll interval from now, so a fault that repeats cannot make a request storm."""
        r.waiting = False
        r.gen += 1  # the outstanding request's deadline, if any, is void
        r.hello_next = False
        r.poll_at = None
        self._schedule(r, self.loop.time() + r.client.poll_cfg.interval)

    def run_ready(self) -> None:
        """Send the requests of the devices due now (called after each burst of input)."""
        self._soon = False
        if not self.ready or self.stopped:
            return
        b = self.bridge
        if not self.paused and b.pending_rows >= 4 * b.cfg.commit_rows:
            self.pause()  # backpressure: the store is behind; the next commit resumes
            b.flush_now.set()
        if self.paused:
            return
        ready = self.ready
        self.ready = []
        now = self.loop.time()
        for r in ready:
            self._send(r, now)
        self._arm()

    def _send(self, r: DeviceRunner, now: float) -> None:
        c = r.client
        hello, r.hello_next = r.hello_next, False
        try:
            data = c.request_bytes(now, hello)
        except PollStateError as e:
            r.fault(e, "request")
            self.restart(r)
            return
        r.waiting = True
        r.sent = now
        r.gen += 1
        # the request's RTO (client.rto: measured on this link, rtt.py; ack_timeout for a SUBSCRIBE)
        heapq.heappush(self.deadlines, (self._key(now + c.rto, c.rto), next(self._tie), r, r.gen))
        r.link.send(data)
        if c.send_copy:
            # a lossy link: the same POLL twice (client.request); the device answers one of them
            c.send_copy = False
            r.link.send(data)
        if c.send_again:
            # a gap repoll with a second POLL from where the held frames' burst ends (leadwire.hold):
            # both in flight; the second is the outstanding request, the gap's answer comes first
            c.send_again = False
            self._send(r, now)

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        if self.paused:
            self.paused = False
            self.run_ready()

    # -- the timer ---------------------------------------------------------------------

    def _key(self, at: float, wait: float) -> float:
        """The heap key of time `at`, `wait` seconds from now: on the grid for a long enough wait."""
        if wait >= 8 * self.GRID:
            return math.ceil(at / self.GRID) * self.GRID
        return at

    def _arm(self) -> None:
        if self.stopped:
            return
        at = min(self.due[0][0] if self.due else float("inf"),
                 self.deadlines[0][0] if self.deadlines else float("inf"))  # fmt: skip
        if at == float("inf"):
            return
        if self._timer is not None:
            if self._timer_at <= at:
                return
            self._timer.cancel()
        self._timer_at = at
        self._timer = self.loop.call_at(at, self._wake)

    def _wake(self) -> None:
        self._timer = None
        self._resume = False
        if self.stopped:
            return
        now = self.loop.time()
        dl = self.deadlines
        udp = self.bridge._udp
        later = False  # deadlines left for the loop's next turn (more datagrams queued)
        while dl and dl[0][0] <= now:
            _, _, r, gen = dl[0]
            if udp is not None and r.waiting and r.gen == gen:
                # a request out past its deadline: first every datagram queued (answers that came
                # while the loop was busy are answers, not timeouts), then look at it again. A
                # slice at a time: with more queued (a stall's worth: thousands of answers, 100+ ms
                # to read), the deadlines wait for the loop's next turn, so no one callback holds
                # the loop for all of them (the reader and the flusher run between); the requests
                # due go out now
                if udp.drain(self.SLICE, False):
                    later = True
                    break
                udp = None
                continue
            heapq.heappop(dl)
            if r.waiting and r.gen == gen:  # no answer in time: a transport error
                if r.last_rx > r.sent and r.last_rx + r.client.rto > now:
                    # frames are still coming (a burst): silence, not the whole answer, is timed
                    at = r.last_rx + r.client.rto
                    heapq.heappush(dl, (self._key(at, at - now), next(self._tie), r, gen))
                    continue
                r.waiting = False
                r.gen += 1
                try:
                    r.client.on_transport_error()
                except PollStateError as e:
                    r.fault(e, "timeout")
                    r.poll_at = None
                    self._schedule_due(r, now + r.client.poll_cfg.interval, now)
                    continue
                at = r.sent + r.client.next_delay
                if r.poll_at is not None:  # the periodic HELLO unanswered: the POLL no earlier than due
                    at, r.poll_at = max(at, r.poll_at), None
                self._schedule_due(r, at, now)
        due = self.due
        while due and due[0][0] <= now:
            self.ready.append(heapq.heappop(due)[2])
        self.run_ready()
        if later:
            if not self._resume:
                self._resume = True
                self.loop.call_soon(self._wake)
            return
        self._arm()

    def _schedule_due(self, r: DeviceRunner, at: float, now: float) -> None:
        r.due = at
        if at <= now:
            self.ready.append(r)
        else:
            heapq.heappush(self.due, (self._key(at, at - now), next(self._tie), r))


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
        self.by_ip: dict[str, list[DeviceRunner]] = {}  # for datagrams from a device's host, another port
        self._subs: dict[int, list[tuple[Callback, bool]]] = {}
        self.store: Store | StoreProcess | None = None
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
        self.sched: Scheduler = None  # type: ignore[assignment]  # made in start() (needs the loop)
        self.store_conflicts = 0
        self._flusher: asyncio.Task[None] | None = None
        self._serial_open: list[Any] = []
        self._metrics_stop: Callable[[], None] | None = None
        self.forwarder: Forwarder | None = None  # [mqtt]: publishes what is committed
        self._udp: _UdpSocket | None = None
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="leadwire-store")
        self._flush_lock: asyncio.Lock | None = None
        self._flushed: asyncio.Event | None = None
        self.flush_now = asyncio.Event()
        self.stopped = asyncio.Event()
        self._stopping = False
        self._settled = False  # heap.settle() called by start(), to be released by stop()
        self._lock: StoreLock | None = None
        self.monitor = ReachMonitor(self.log, cfg.poll.unreachable_rounds)
        self._tick: asyncio.TimerHandle | None = None
        self.seen: list[tuple[int, int]] = []  # (last_seen_us, dev) for the next commit
        self._reach_items: list[tuple[Reach, dict[str, int], DeviceRunner]] = []  # what the monitor looks at

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
        """Take the resources (preflight.py's order: store path and lock, metrics, UDP socket, routes,
        serial ports), then open the store. A resource that fails raises ResourceError (or
        StoreLocked) with everything taken so far released and nothing created."""
        cfg = self.cfg
        loop = asyncio.get_running_loop()
        self._flush_lock = asyncio.Lock()
        self._flushed = asyncio.Event()
        self.sched = Scheduler(self)
        devices = cfg.my_devices()
        try:
            ports = self._take_resources(devices)
            self.store = await self._open_store()
        except BaseException:
            self._release_resources()
            raise
        deliver = bool(self._subs)
        addresses = [(d.id, d.transport, "%s:%d" % (d.host, d.port) if d.transport == "udp" else d.serial)
                     for d in devices]  # fmt: skip
        states = await loop.run_in_executor(self._writer, self.store.register_many, addresses)
        for d, (key, state) in zip(devices, states, strict=True):
            client = DeviceClient(key, d, cfg.poll, state, deliver=deliver)
            r = DeviceRunner(self, client, d)
            if d.transport == "udp":
                ip = ports[d.id]
                assert self._udp is not None
                r.link = _UdpLink(self._udp, ip, r)
                self.by_addr[ip] = r
                self.by_ip.setdefault(ip[0], []).append(r)
            else:
                r.link = _SerialLink(r, d.serial, d.baud, ports[d.id])
            self.clients[d.id] = client
            self.runners[d.id] = r
        if cfg.mqtt is not None:
            self.forwarder = Forwarder(cfg.mqtt, cfg.store, self.log)
            self.forwarder.start()
        logs.event(self.log, logging.INFO, "bridge_started", bridge_id=cfg.bridge_id, devices=len(devices),
                   store=cfg.store, metrics_port=self.metrics_port, shard="%d/%d" % cfg.shard)  # fmt: skip
        self._flusher = loop.create_task(self._flush_loop())
        # spread the first requests over one poll interval so 1,000 devices do not poll in lockstep
        self.sched.start(list(self.runners.values()), cfg.poll.interval / max(1, len(self.runners)))
        self._reach_items = [(r.reach, r.client.dc, r) for r in self.runners.values()]
        self._tick = loop.call_later(TICK, self._look)
        heap.settle()  # the devices are set up: what start built lives as long as the run
        self._settled = True

    def _take_resources(self, devices: list[DeviceConfig]) -> dict[str, Any]:
        """Lock, metrics server, UDP socket, routes and serial ports; returns each device's
        resolved address (UDP) or open port (serial). Raises ResourceError / StoreLocked."""
        cfg = self.cfg
        if cfg.store != ":memory:":
            preflight.check_store(cfg.store)
            self._lock = StoreLock(cfg.store).acquire()
        if cfg.metrics:
            mh, mp = parse_address(cfg.metrics, "bridge.metrics")
            try:
                _, self._metrics_stop, self.metrics_port = serve(make_registry(self), mh, mp)
            except OSError as e:
                raise preflight.metrics_error(cfg.metrics, e) from None
        out: dict[str, Any] = {}
        udp = [d for d in devices if d.transport == "udp"]
        if udp:
            host, port = parse_address(cfg.bind, "bridge.bind")
            try:
                self._udp = _UdpSocket(self, host, port)
            except OSError as e:
                raise preflight.bind_error(cfg.bind, e) from None
        for d in udp:
            warning = preflight.check_route(cfg.bind, d)
            if warning:
                logs.event(self.log, logging.WARNING, "no_route", device=d.id, detail=warning)
            out[d.id] = preflight.resolve_udp(d)
        for d in devices:
            if d.transport == "serial":
                preflight.check_serial(d)
                try:
                    out[d.id] = open_serial(d.serial, d.baud)
                except Exception as e:
                    raise preflight.serial_error(d, e) from None
                self._serial_open.append(out[d.id])
        return out

    def _release_resources(self) -> None:
        """Undo _take_resources (a start that failed, or the end of stop())."""
        for ser in self._serial_open:
            with contextlib.suppress(Exception):
                ser.close()
        self._serial_open = []
        if self._udp is not None:
            self._udp.close()
            self._udp = None
        if self._metrics_stop is not None:
            self._metrics_stop()
            self._metrics_stop = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    async def _open_store(self) -> Store | StoreProcess:
        cfg = self.cfg
        loop = asyncio.get_running_loop()
        if cfg.store_writer == "process":
            # started on the loop's thread (PR_SET_PDEATHSIG follows the thread that forked)
            proc = StoreProcess(cfg.store, cfg.bridge_id, cfg.store_sync)
            try:
                return await loop.run_in_executor(self._writer, proc.wait_ready)
            except BaseException:
                await loop.run_in_executor(self._writer, proc.close)
                raise
        return await loop.run_in_executor(self._writer, _open_store, cfg.store, cfg.bridge_id, cfg.store_sync)

    def from_unknown(self, addr: tuple[str, int]) -> None:
        """A datagram from an address no device has: evidence for the devices on that host."""
        for r in self.by_ip.get(addr[0], ()):
            r.reach.on_other_port(addr[1])

    def _look(self) -> None:
        """Every TICK: which devices answer (reach.py); their last contact goes to the store."""
        if self._stopping:
            return
        self.seen.extend(self.monitor.tick(self._reach_items, now_us()))
        self._tick = asyncio.get_running_loop().call_later(TICK, self._look)

    async def _flush_loop(self) -> None:
        # Wakes on flush_now or after commit_interval. Not asyncio.wait_for around the wait, and
        # stop() does not cancel this task: on CPython 3.11 a cancel that lands as wait_for's inner
        # wait completes or times out can be lost, and stop() then waited for this task forever
        # (seen at 150,000 events/s, where flush_now is set all the time). stop() sets _stopping
        # and flush_now; the loop returns, and stop() commits the last batch itself.
        loop = asyncio.get_running_loop()
        interval = self.cfg.commit_interval
        while not self._stopping:
            wake = loop.call_later(interval, self.flush_now.set)
            try:
                await self.flush_now.wait()
            finally:
                wake.cancel()
            self.flush_now.clear()
            if self._stopping:
                return
            try:
                await self.flush(periodic=True)
            except Exception as e:
                self.failed = e
                self.log.exception("store_failed", extra={"fields": {"store": self.cfg.store}})
                asyncio.get_running_loop().create_task(self.stop())
                return

    async def flush(self, periodic: bool = False) -> int:
        """Commit everything the clients produced so far in one transaction; returns arrival rows.
        The flusher's `periodic` commits leave a devices row whose counters alone changed for a
        later one (store.drain: at most COUNTERS_EVERY old); any other flush writes them all."""
        assert self._flush_lock is not None and self._flushed is not None
        if self.failed is not None or self.store is None:
            return 0
        async with self._flush_lock:
            batch = Batch()
            drain(self.clients.values(), batch, asyncio.get_running_loop().time() if periodic else None)
            batch.seen, self.seen = self.seen, []
            self.pending_rows = 0
            if not batch.devices and not batch.seen:
                self._flushed.set()
                self.sched.resume()
                return 0
            batch.commit_us = now_us()
            t0 = time.perf_counter()
            loop = asyncio.get_running_loop()
            conflicts = await loop.run_in_executor(self._writer, self.store.write, batch)
            done = now_us()
            self.sched.resume()
            if self.forwarder is not None:
                self.forwarder.poke()
            if conflicts:
                self.store_conflicts += conflicts
                logs.event(self.log, logging.WARNING, "store_conflict", rows=conflicts)
            self.commit_time.observe_many([time.perf_counter() - t0])
            self.commits += 1
            self.rows_committed += batch.arrivals
            self.events_committed += batch.events
            # ACKs only now: write() returned, so the transaction holding their reports is committed
            # and, with [store] synchronous = "full" (the default), fsynced (docs/bridge.md)
            for client, session, acks in batch.acks:
                if client.session != session:
                    continue  # a SUBSCRIBE went out since: the device's new session has these numbers
                link = self.runners[client.device_id].link
                for a in acks:
                    link.send(client.sign(a))  # signed now: counters in sending order
            lat: list[int] = []
            for kind, rows in batch.segments:
                if kind == SEG_EVENT:
                    g = GEN_INDEX[kind]
                    lat.extend([done - r[g] for r in rows if r[g] is not None])
            if lat:
                self.latency.observe_many([v / 1e6 for v in lat])
                if self.keep_latencies:
                    self.latencies_us.extend(lat)
            self._flushed.set()
            return batch.arrivals

    async def stop(self) -> None:
        """Stop polling, commit what was received (the in-flight transaction), close everything."""
        if self._stopping:
            await self.stopped.wait()
            return
        self._stopping = True
        if self._tick is not None:
            self._tick.cancel()
        if self.sched is not None:
            self.sched.stop()
        for r in self.runners.values():
            if r.cfg.subscribe and self.failed is None:
                # end the push sessions
                r.link.send(r.client.sign(codec.encode(messages.subscribe_frame([]))))
        if self._flusher is not None and self._flusher is not asyncio.current_task():
            self.flush_now.set()  # the flusher finishes a commit under way, if any, and returns
            await asyncio.gather(self._flusher, return_exceptions=True)
        if self.failed is None and self.store is not None:
            self.seen.extend(self.monitor.unsaved(self._reach_items))
            try:
                await self.flush()
            except Exception as e:
                self.failed = e
                self.log.exception("store_failed", extra={"fields": {"store": self.cfg.store}})
        for r in self.runners.values():
            r.link.close()
        self._serial_open = []  # closed by their links
        if self.store is not None:
            await asyncio.get_running_loop().run_in_executor(self._writer, self.store.close)
        if self.forwarder is not None:  # publishes what the last commit stored, then disconnects
            await asyncio.get_running_loop().run_in_executor(self._writer, self.forwarder.stop)
        self._writer.shutdown(wait=True)
        self._release_resources()
        if self._settled:
            self._settled = False
            heap.release()
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


def _open_store(path: str, bridge_id: str, synchronous: str = "full") -> Store:
    return Store(path, bridge_id, checkpoints=True, synchronous=synchronous)


def open_serial(port: str, baud: int) -> Any:
    import serial

    return serial.serial_for_url(port, baudrate=baud, timeout=0, write_timeout=1)
