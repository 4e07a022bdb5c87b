"""What makes an asyncio event loop late, measured from inside its process (the fleet bench's shards).

A poll timer that fires late delays every request due in that wake-up. The causes differ in what
they leave behind, so the probe records each:

* **heartbeat lateness**: a callback due every ``period`` s on an absolute schedule; how late each
  one ran is the loop's lateness. For each stall longer than ``stall`` s the loop thread's own CPU
  time and run-queue wait over it say whether the loop was busy (CPU about the stall's length: a
  long callback, a garbage collection), waited for a core (run-queue wait about its length), or
  neither (the GIL held by another thread, or a blocking system call);
* **callbacks**: every ``asyncio.Handle`` run is timed (count, total, longest per callback name,
  collections taken out), and each one longer than ``stall`` s is kept with its start. Wall time:
  the CPU clock of a thread is a system call (1.2 us here), two per callback cost more than the
  rest of the probe; on a loaded machine a callback's time includes waits for a core, which the
  stalls' run-queue figures show;
* **garbage collections**: ``gc.callbacks``, count, total and longest pause per generation;
* **run-queue wait** of the loop thread (``/proc/self/task/TID/schedstat``, Linux): the time it was
  ready to run but had no core, the direct measure of CPU contention between processes.

Standard library only, so that a shard running another tree's bridge code (``--before``) can load
this file from beside its script. ``start`` and ``stop`` bound the measured window; ``result`` is
a JSON-able dict. Cost: about 0.3 us per callback, a system call per heartbeat.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import gc
import os
import socket
import struct
import threading
import time
from array import array
from typing import Any


def schedstat(pid: int | str = "self", tid: int | None = None) -> tuple[float, float] | None:
    """(CPU seconds, seconds waiting on a run queue) of a task from Linux /proc, or None."""
    path = "/proc/%s/task/%d/schedstat" % (pid, tid) if tid is not None else "/proc/%s/schedstat" % pid
    try:
        with open(path) as f:
            cpu, wait = f.read().split()[:2]
    except (OSError, ValueError):
        return None
    return int(cpu) / 1e9, int(wait) / 1e9


def quantiles(values: list[float] | array[float], qs: tuple[float, ...] = (0.5, 0.99, 0.999)) -> list[float]:
    """The values at quantiles qs (nearest rank) and the maximum; zeros for no values."""
    if not values:
        return [0.0] * (len(qs) + 1)
    s = sorted(values)
    return [s[min(len(s) - 1, int(q * len(s)))] for q in qs] + [s[-1]]


def _name(handle: asyncio.Handle) -> str:
    cb = handle._callback  # type: ignore[attr-defined]
    task = getattr(cb, "__self__", None)
    if isinstance(task, asyncio.Task):
        return "task " + getattr(task.get_coro(), "__qualname__", "?")
    return getattr(cb, "__qualname__", None) or type(cb).__name__


class LoopProbe:
    """Heartbeat, callback, GC and run-queue figures of the running loop between start and stop."""

    def __init__(self, period: float = 0.005, stall: float = 0.05) -> None:
        self.period = period
        self.stall = stall
        self.loop = asyncio.get_running_loop()
        self.tid = threading.get_native_id()
        self.late = array("d")  # heartbeat lateness, s
        self.stalls: list[dict[str, float]] = []
        self.gcs: list[tuple[float, int, float, float]] = []  # (start, generation, pause s, CPU s)
        self.gc_wall = 0.0  # time in collections so far (taken out of the callbacks they ran in)
        self._gc_cpu = 0.0
        self.slow: list[tuple[float, float, str]] = []  # (start, s, callback) over `stall`
        self.callbacks: dict[str, list[float]] = {}  # name: [count, s, longest s], collections apart
        self._gc_start = 0.0
        self._running = False
        self._beat: asyncio.TimerHandle | None = None
        self._orig_run: Any = None
        self._t0 = self._t1 = 0.0
        self._sched0: tuple[float, float] | None = None
        self._sched1: tuple[float, float] | None = None

    # -- the window ----------------------------------------------------------------------------

    def start(self) -> None:
        self._running = True
        gc.callbacks.append(self._on_gc)
        self._orig_run = orig = asyncio.Handle._run
        probe = self
        clock = time.perf_counter

        def timed_run(handle: asyncio.Handle) -> None:
            t = clock()
            g = probe.gc_wall
            orig(handle)
            d = clock() - t - (probe.gc_wall - g)
            name = _name(handle)
            c = probe.callbacks.get(name)
            if c is None:
                probe.callbacks[name] = [1, d, d]
            else:
                c[0] += 1
                c[1] += d
                if d > c[2]:
                    c[2] = d
            if d > probe.stall:
                probe.slow.append((t, d, name))

        asyncio.Handle._run = timed_run  # type: ignore[method-assign]
        self._t0 = time.perf_counter()
        self._sched0 = schedstat(tid=self.tid)
        self._next = self.loop.time() + self.period
        self._cpu = time.thread_time()
        try:
            self._stat_fd: int | None = os.open("/proc/self/task/%d/schedstat" % self.tid, os.O_RDONLY)
        except OSError:
            self._stat_fd = None
        self._wait = self._runq()
        self._beat = self.loop.call_at(self._next, self._tick)

    def stop(self) -> None:
        if not self._running:
            return
        self._running = False
        self._t1 = time.perf_counter()
        self._sched1 = schedstat(tid=self.tid)
        if self._beat is not None:
            self._beat.cancel()
        if self._stat_fd is not None:
            os.close(self._stat_fd)
            self._stat_fd = None
        asyncio.Handle._run = self._orig_run  # type: ignore[method-assign]
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
            self._gc_cpu = time.thread_time()
        else:
            cpu = time.thread_time() - self._gc_cpu
            wall = time.perf_counter() - self._gc_start
            self.gc_wall += wall
            self.gcs.append((self._gc_start, info["generation"], wall, cpu))

    def _runq(self) -> float:
        """The loop thread's run-queue wait so far (s), 0 without /proc."""
        if self._stat_fd is None:
            return 0.0
        return int(os.pread(self._stat_fd, 96, 0).split()[1]) / 1e9

    def _tick(self) -> None:
        now = self.loop.time()
        cpu = time.thread_time()
        wait = self._runq()
        late = now - self._next
        self.late.append(late)
        if late > self.stall:
            t = time.perf_counter()
            span = self.period + late  # since the previous beat ran
            in_gc = sum(d for s, _, d, _ in self.gcs if s >= t - span)
            self.stalls.append({"at": t - self._t0, "late": late, "cpu": cpu - self._cpu, "gc": in_gc,
                                "runq": wait - self._wait})  # fmt: skip
        self._cpu = cpu
        self._wait = wait
        # the next beat on the schedule, or a period from now after a stall (no burst of beats)
        self._next = self._next + self.period if late < self.period else now + self.period
        if self._running:
            self._beat = self.loop.call_at(self._next, self._tick)

    # -- the figures ------------------------------------------------------------------------------

    def result(self) -> dict[str, Any]:
        span = max(1e-9, (self._t1 or time.perf_counter()) - self._t0)
        gens: dict[str, dict[str, float]] = {}
        for s, g, d, u in self.gcs:
            if s < self._t0:
                continue
            e = gens.setdefault(str(g), {"count": 0, "total_ms": 0.0, "max_ms": 0.0, "cpu_max_ms": 0.0,
                                         "cpu_total_ms": 0.0})  # fmt: skip
            e["count"] += 1
            e["total_ms"] += 1e3 * d
            e["max_ms"] = max(e["max_ms"], 1e3 * d)
            e["cpu_total_ms"] += 1e3 * u
            e["cpu_max_ms"] = max(e["cpu_max_ms"], 1e3 * u)
        p50, p99, p999, mx = quantiles(self.late)
        busy = [s for s in self.stalls if s["cpu"] >= 0.5 * (s["late"] + self.period)]
        queued = [s for s in self.stalls if s["runq"] >= 0.5 * (s["late"] + self.period)]
        top = sorted(self.callbacks.items(), key=lambda kv: -kv[1][2])[:6]
        wait = None
        if self._sched0 is not None and self._sched1 is not None:
            wait = 1e3 * (self._sched1[1] - self._sched0[1]) / span
        return {
            "late_ms": [1e3 * p50, 1e3 * p99, 1e3 * p999, 1e3 * mx],
            "stalls": len(self.stalls),
            "stalls_busy": len(busy),
            "stalls_runq": len(queued),
            "stalls_gc": sum(1 for s in self.stalls if s["gc"] >= 0.5 * s["late"]),
            "stall_list": self.stalls[:50],
            "gc": gens,
            "slow_callbacks": [(round(s - self._t0, 3), round(1e3 * d, 1), n) for s, d, n in self.slow[:50]],
            "callbacks": [(n, int(c), round(1e3 * t, 1), round(1e3 * m, 1)) for n, (c, t, m) in top],
            "runq_wait_ms_per_s": wait,
            "stall_ms": 1e3 * self.stall,
            "seconds": span,
        }


def describe(r: dict[str, Any]) -> str:
    """One line of a probe's result for the bench's output."""
    none = {"count": 0, "total_ms": 0.0, "max_ms": 0.0, "cpu_max_ms": 0.0, "cpu_total_ms": 0.0}
    g2 = r["gc"].get("2", none)
    g01 = [r["gc"].get(str(g), none) for g in (0, 1)]
    wait = r["runq_wait_ms_per_s"]
    cb = ", ".join("%s %.0f ms" % (n.rsplit(".", 1)[-1], m) for n, _, _, m in r["callbacks"][:3])
    return (
        "loop late p50/p99/p99.9/max %.1f/%.1f/%.1f/%.0f ms; stalls >%.0f ms %d (loop busy %d, in GC %d,"
        " waiting for a core %d; neither: the GIL or a system call); GC gen2 %d x max %.0f ms (CPU max"
        " %.0f, total %.0f ms), gen0/1 CPU max %.1f/%.1f ms, all GC CPU %.0f ms/s; run-queue wait %s;"
        " longest callbacks (without GC): %s"
        % (*r["late_ms"], r["stall_ms"], r["stalls"], r["stalls_busy"], r["stalls_gc"], r["stalls_runq"],
           g2["count"], g2["max_ms"], g2["cpu_max_ms"], g2["cpu_total_ms"], g01[0]["cpu_max_ms"],
           g01[1]["cpu_max_ms"], sum(g["cpu_total_ms"] for g in r["gc"].values()) / r["seconds"],
           "-" if wait is None else "%.0f ms/s" % wait, cb)
    )  # fmt: skip


class Arrivals:
    """When each datagram of a UDP socket reached the kernel (Linux SIOCGSTAMP, asked right after
    each read): the answer's delay from the request's send to its arrival is the device side's
    (its process, its scheduling, loopback), the delay from arrival to the read the loop's own. So a
    simulator answering late and a bridge reading late are told apart. Cost: an ioctl per datagram
    (under 1 us)."""

    SIOCGSTAMP = 0x8906  # struct timeval of the last datagram read (64-bit Linux)

    def __init__(self, sock: socket.socket) -> None:
        self.fd = sock.fileno()
        self.buf = bytearray(16)
        self.answer = array("d")  # request sent -> answer in the kernel, s
        self.read = array("d")  # answer in the kernel -> read by the loop, s
        self.ok = True
        self.stamp()  # the first ask turns stamping on (SO_TIMESTAMP would move the stamp to recvmsg)

    def stamp(self) -> float | None:
        """Wall-clock time the datagram just read reached the kernel, or None (not Linux)."""
        if not self.ok:
            return None
        try:
            fcntl.ioctl(self.fd, self.SIOCGSTAMP, self.buf)
        except OSError as e:
            if e.errno != errno.ENOENT:  # (ENOENT: nothing read yet)
                self.ok = False
            return None
        sec, usec = struct.unpack("qq", self.buf)
        return sec + usec / 1e6

    def result(self) -> dict[str, list[float]]:
        return {"answer_ms": [1e3 * q for q in quantiles(self.answer)],
                "read_ms": [1e3 * q for q in quantiles(self.read)]}  # fmt: skip


def process_schedstat(pids: list[int]) -> tuple[float, float]:
    """Summed (CPU s, run-queue wait s) of every thread of the processes (Linux /proc)."""
    cpu = wait = 0.0
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir("/proc/%d/task" % pid)]
        except OSError:
            continue
        for tid in tids:
            s = schedstat(pid, tid)
            if s is not None:
                cpu += s[0]
                wait += s[1]
    return cpu, wait
