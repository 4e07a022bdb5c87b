"""Bridge benchmark: ingest rate into the durable store vs SQLite's own batched inserts, devices per
process at 10 Hz, generation-to-commit latency, the effect of adaptive polling, and the cost of
authentication (signed vs unsigned side by side in phases 2 and 3; phase 4 signed unless
--fleet-no-auth).

    .venv/bin/python bench/bridge_bench.py              # full run (about 3 minutes + 4 for phase 6)
    .venv/bin/python bench/bridge_bench.py --quick      # smaller and shorter
    .venv/bin/python bench/bridge_bench.py --repeat 3   # offline phases 3 times, interleaved: medians

Phases (one run, one machine):

1. SQLite alone, 64 B events in 10,000-row transactions, rows made beforehand: (a) a plain events
   table keyed (dev, boot_epoch, offset), the yardstick; (b) schema 1's layout (events table +
   arrival log, two rows per event), for reference; (c) the bridge's store (schema 2, one arrival
   row per event with its payload, the partial unique index) through ``Store.write``.
2. The bridge pipeline without network: answers made beforehand by the simulated devices; timed is
   all the bridge does per answer (request + encode, decode + CRC, the core's PollClient, lead,
   rows) and the commits, (a) on one thread, (b) with the store on its own thread as in the daemon.
3. Live ingest: D devices (tools/fleetsim.py, light simulator, another process) producing 64 B
   events; the bridge polls them (adaptive, up to 2,047-byte answers = 30 events) and commits.
   Events committed per second, p50/p99 of (commit time - generation time carried in each event),
   the CPU of the bridge process and of the simulator process.
4. Fleet at a fixed rate (tools/fleet_shards.py): 1,000 devices polled every 100 ms (adaptive
   polling off) by ``--fleet-shards`` bridge processes; with ``--goal`` also 10,000 devices at 2 Hz
   over ``--goal-shards`` processes. Requests per device per second, how many devices' mean interval
   is off by more than 10% and p99 over 1.5x, timeouts, silent offsets in the stores, and the CPU
   per round trip and per event of the bridge, its store writer and the simulators (process CPU
   seconds: far less at the mercy of other load than wall time). ``--before REF`` runs every fleet
   with REF's bridge code too, back to back, and prints the ratios.
   ``--only rtcost``: the CPU per round trip of one goal shard's parts without I/O (virtual time,
   one process: tools/fleet_shards.rt_cost), with ``--before REF`` paired; the load of a shared
   machine moves it far less than the live fleet's figures.
5. Adaptive polling, in virtual time (sans-I/O client + simulated ring, deterministic): bursty
   traffic against fixed intervals and against the adaptive policy: polls sent and events lost.
6. Durable ACKs (``--only durable``): the live ingest of 3. with push sessions beside it
   (simulated devices in this process, 3 channels each, a new report as soon as the last one is
   confirmed), ``[store] synchronous = "normal"`` (the old default: a power loss can lose ACKed
   reports) and ``"full"`` (the default: every commit fsynced before its ACKs go out) run in turn,
   interleaved per repetition: events/s and generation -> commit latency, and the ACK latency the
   devices see (report sent -> its ACK received) p50/p99, with the ratios full / normal.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click

from leadwire import codec, messages, wire
from leadwire.bridge import logs
from leadwire.bridge.client import DeviceClient
from leadwire.bridge.config import DeviceConfig, PollConfig, parse
from leadwire.bridge.daemon import Bridge
from leadwire.bridge.store import SEG_EVENT, Batch, Store, drain
from leadwire.bridge.store_baseline import PlainEvents, Schema1
from leadwire.bridge.writer import StoreProcess
from leadwire.tools import fleet_shards, loopprobe
from leadwire.tools.fleetsim import Fleet
from leadwire.tools.lwbench import before_tree
from leadwire.tools.procstat import cpu_seconds
from leadwire.tools.simdevice import SimCore, SimFleet, VirtualRing, raise_nofile

ROW_BATCH = 10_000
PAYLOAD = 64  # bytes per event: 16 (generation time, device, number) + 48 of padding
PER_ANSWER = (2047 - 3) // (3 + PAYLOAD)  # 30 events of 64 B in the largest answer


def pct(values: list[int], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] / 1000.0  # us -> ms


def fresh(path: Path) -> str:
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    return str(path)


def order(rows: int, devices: int = 100) -> list[tuple[int, int]]:
    """(device, offset) in the order a bridge receives them: answers of 30 events, devices in turn."""
    out: list[tuple[int, int]] = []
    offs = [0] * devices
    i = 0
    while len(out) < rows:
        d = i % devices
        out.extend((d + 1, offs[d] + k) for k in range(PER_ANSWER))
        offs[d] += PER_ANSWER
        i += 1
    return out[:rows]


# -- 1. SQLite alone --------------------------------------------------------------------------


def sqlite_plain(tmp: Path, rows: int) -> float:
    data = bytes(PAYLOAD)
    ev = [(d, 7, o, 1 + i % 3, 0, data, i + 1) for i, (d, o) in enumerate(order(rows))]
    store = PlainEvents(fresh(tmp / "plain.db"))
    t0 = time.perf_counter()
    for i in range(0, rows, ROW_BATCH):
        store.write(ev[i : i + ROW_BATCH])
    rate = rows / (time.perf_counter() - t0)
    store.close()
    return rate


def sqlite_schema1(tmp: Path, rows: int) -> float:
    """Schema 1 (store_baseline.py): an events row and an arrival row per event, same transaction."""
    data = bytes(PAYLOAD)
    now = time.time_ns() // 1000
    o = order(rows)
    ev = [(d, 7, off, 1 + i % 3, 0, data, i + 1) for i, (d, off) in enumerate(o)]
    arr = [
        (d, i + 1, 0, 7, 1, 1 + i % 3, 0, -1, off, 1, 0, 0, 0, 64, 67, now, now)
        for i, (d, off) in enumerate(o)
    ]
    store = Schema1(fresh(tmp / "schema1.db"))
    t0 = time.perf_counter()
    for i in range(0, rows, ROW_BATCH):
        store.write(ev[i : i + ROW_BATCH], arr[i : i + ROW_BATCH], now)
    rate = rows / (time.perf_counter() - t0)
    store.close()
    return rate


def sqlite_store(tmp: Path, rows: int) -> float:
    """The bridge's store (schema 2) through Store.write, rows as DeviceClient makes them."""
    data = bytes(PAYLOAD)
    store = Store(fresh(tmp / "schema2.db"), "bench", checkpoints=True)
    keys = {d: store.register("bench-%d" % d, "sim", "-")[0] for d in range(1, 101)}
    now = time.time_ns() // 1000
    rws = [
        (keys[d], i + 1, 7, 1, 1 + i % 3, off, 1, 0, 3, now, now, data)
        for i, (d, off) in enumerate(order(rows))
    ]
    snaps = [(0, 1, 7, 1, None, 0, 0, 0, "", "", "", "{}", k) for k in keys.values()]
    t0 = time.perf_counter()
    for i in range(0, rows, ROW_BATCH):
        part = rws[i : i + ROW_BATCH]
        store.write(
            Batch(
                segments=[(SEG_EVENT, part)],
                devices=snaps,
                commit_us=now,
                arrivals=len(part),
                events=len(part),
            )
        )
    rate = rows / (time.perf_counter() - t0)
    store.close()
    return rate


# -- 2. the pipeline without network -----------------------------------------------------------


def prepare(
    store: Store | StoreProcess, events: int, devices: int, signed: bool = False
) -> tuple[list[DeviceClient], list[list[bytes]]]:
    """Clients past their handshake, and for each the answers its next polls will get (signed: each
    device has a key; the answers carry tags the client checks, in order)."""
    per = events // devices
    clients: list[DeviceClient] = []
    work: list[list[bytes]] = []
    t0 = 1_700_000_000_000_000
    poll = PollConfig(batch=255, max_bytes=2047)
    for i in range(devices):
        k = os.urandom(32) if signed else None
        vr = VirtualRing(
            i, 1000.0, capacity=min(65535, per + 1), payload_size=PAYLOAD, t0_us=t0, start=1000 * i, key=k
        )
        key, st = store.register("p%d" % i, "sim", "-")
        cl = DeviceClient(key, DeviceConfig("p%d" % i, "udp", timestamp="prefix_us", key=k), poll, st)
        now = vr.gen_us(per - 1)
        for _ in range(2):  # HELLO, then first contact (RECOVERY)
            (out,) = vr.handle(cl.request_bytes(0.0), now)
            assert cl.receive(out, 0.0, 1)
        # the answers to the polls this client will send: same n and tags as it will use
        n, tag, frames = cl.n, cl.pc.tag, []
        while True:
            tag = (tag + 1) & 0xFF
            req = cl.sign(codec.encode(messages.poll_frame(n, poll.batch, poll.max_bytes, tag)))
            (out,) = vr.handle(req, now)
            f = codec.decode(out)
            if f.type != 3:
                break
            frames.append(out)
            n = (f.seq + f.payload[0] - 1) & 0xFFFFFFFF
        clients.append(cl)
        work.append(frames)
    batch = Batch()
    drain(clients, batch)
    store.write(batch)
    return clients, work


def pipeline(
    tmp: Path,
    events: int,
    threaded: bool,
    devices: int = 100,
    signed: bool = False,
    stats: Any = None,
    process: bool = False,
) -> float:
    """Events/s through request -> encode (+ sign) -> decode + CRC (+ tag check) -> DeviceClient ->
    Store.write (process: through the store writer process, from the store thread as in the daemon)."""
    store: Store | StoreProcess
    if process:
        store = StoreProcess(fresh(tmp / "pipeline.db"), "bench").wait_ready()
        threaded = True
    else:
        store = Store(fresh(tmp / "pipeline.db"), "bench", checkpoints=True)
    clients, work = prepare(store, events, devices, signed)
    writer = concurrent.futures.ThreadPoolExecutor(1) if threaded else None
    wcpu0 = (cpu_seconds(store.proc.pid) or 0.0) if isinstance(store, StoreProcess) else 0.0
    pending: concurrent.futures.Future[int] | None = None
    base = sum(c.dc["events_stored"] for c in clients)
    total = 0
    rows = 0
    t0 = time.perf_counter()
    c0 = time.process_time()
    rounds = max(len(w) for w in work)
    for r in range(rounds):
        rx = time.time_ns() // 1000
        for cl, frames in zip(clients, work, strict=True):
            if r < len(frames):
                cl.request_bytes(0.0)  # what the daemon sends
                out = frames[r]
                assert cl.receive(out, 0.0, rx)
                rows += len(out) // (3 + PAYLOAD)
        if rows >= ROW_BATCH or r == rounds - 1:  # a commit every ~10,000 events
            rows = 0
            batch = Batch(commit_us=time.time_ns() // 1000)
            drain(clients, batch)
            total += batch.events
            if writer is None:
                store.write(batch)
            else:
                if pending is not None:
                    pending.result()  # one transaction in flight, as in the daemon
                pending = writer.submit(store.write, batch)
    if pending is not None:
        pending.result()
    dt = time.perf_counter() - t0
    if stats is not None:  # CPU time of the process (all threads): less at the mercy of the load
        stats["cpu_us_per_event"] = (time.process_time() - c0) / max(1, total) * 1e6
        wcpu = (cpu_seconds(store.proc.pid) or 0.0) - wcpu0 if isinstance(store, StoreProcess) else 0.0
        stats["writer_cpu_us_per_event"] = wcpu / max(1, total) * 1e6
    if writer is not None:
        writer.shutdown()
    store.close()
    assert total == sum(c.dc["events_stored"] for c in clients) - base
    return total / dt


# -- 3./4. live runs ------------------------------------------------------------------------


async def live(
    tmp: Path,
    name: str,
    fleet: Fleet,
    polling: dict[str, Any],
    warmup: float,
    seconds: float,
    commit: float,
    writer: str = "process",
    sync: str = "",
    pushers: SimFleet | None = None,
) -> dict[str, Any]:
    doc = {
        "bridge": {"id": "bench", "metrics": ""},
        "store": {"path": fresh(tmp / (name + ".db")), "commit_interval": commit,
                  **({"writer": writer} if writer != "process" else {}),
                  **({"synchronous": sync} if sync else {})},
        "polling": polling,
            "device": [{"id": d["id"], "udp": d["udp"], "timestamp": "prefix_us",
                    **({"key": d["key"]} if "key" in d else {"auth": False})} for d in fleet.devices],
    }  # fmt: skip
    if pushers is not None:
        doc["device"] += [{**d, "subscribe": [1, 2, 3]} for d in pushers.describe()]  # type: ignore[operator]
    b = Bridge(parse(doc), logs.setup("error"), keep_latencies=True)
    await b.start()
    signed = all(c.auth is not None for c in b.clients.values())
    await asyncio.sleep(warmup)
    wpid = b.store.proc.pid if isinstance(b.store, StoreProcess) else None
    s0 = snapshot(b, fleet, pushers, wpid)
    t0 = time.perf_counter()
    await asyncio.sleep(seconds)
    dt = time.perf_counter() - t0
    s1 = snapshot(b, fleet, pushers, wpid)
    lat = list(b.latencies_us[s0["latencies"] :])
    ack_us: list[int] = []
    if pushers is not None:
        for c, k in zip(pushers.cores, s0["acks"], strict=True):
            ack_us.extend(int(v * 1e6) for v in c.ack_s[k:])  # type: ignore[attr-defined]
    await b.stop()
    d = {k: s1[k] - s0[k] for k in ("cpu", "wcpu", "sim", "events", "rt", "to", "polls", "lost")}
    return live_result(b, d, dt, warmup, writer, signed, lat, ack_us)


def snapshot(b: Bridge, fleet: Fleet, pushers: SimFleet | None, wpid: int | None) -> dict[str, Any]:
    """The counters a live run measures the difference of: CPU (this process, the store writer's,
    the simulator's), events committed, round trips, timeouts, polls, overrun losses."""
    cs = b.clients.values()
    return {
        "events": b.events_committed,
        "rt": sum(c.dc["round_trips"] for c in cs),
        "to": sum(c.dc["timeouts"] for c in cs),
        "polls": sum(c.dc["polls"] for c in cs),
        "lost": sum(c.dc["overrun_lost"] for c in cs),
        "latencies": len(b.latencies_us),
        "acks": [len(c.ack_s) for c in pushers.cores] if pushers is not None else [],  # type: ignore[attr-defined]
        "cpu": time.process_time(),
        "wcpu": cpu_seconds(wpid) or 0.0,
        "sim": fleet.cpu_seconds(),
    }


def live_result(
    b: Bridge, d: dict[str, Any], dt: float, warmup: float, writer: str, signed: bool, lat: list[int],
    ack_us: list[int],
) -> dict[str, Any]:  # fmt: skip
    """A live run's figures from the differences `d` of its counters over `dt` seconds."""
    n = max(1, len(b.clients))
    cs = b.clients.values()
    cpu, wcpu, events, rt = d["cpu"], d["wcpu"], d["events"], d["rt"]
    return {
        "devices": len(b.clients),
        "writer": writer,
        "signed": signed and bool(cs),
        "auth_rejects": sum(c.dc["auth_forged"] + c.dc["auth_replayed"] + c.dc["auth_unsigned"] for c in cs),
        "auth_forged": sum(c.dc["auth_forged"] for c in cs),
        "auth_replayed": sum(c.dc["auth_replayed"] for c in cs),
        "auth_unsigned": sum(c.dc["auth_unsigned"] for c in cs),
        "events_per_s": events / dt,
        "polls_per_s": d["polls"] / dt,
        "round_trips_per_s": rt / dt,
        "polls_per_device_per_s": rt / dt / n,
        "timeouts": d["to"],
        "overrun_lost": d["lost"],
        "latency_p50_ms": pct(lat, 0.50),
        "latency_p99_ms": pct(lat, 0.99),
        "bridge_cpu_percent": 100.0 * cpu / dt,  # the bridge process (with its store thread, if any)
        "writer_cpu_percent": 100.0 * wcpu / dt,  # the store writer process, if any
        "total_cpu_percent": 100.0 * (cpu + wcpu) / dt,
        "bridge_cpu_us_per_event": cpu / max(1, events) * 1e6,
        "total_cpu_us_per_event": (cpu + wcpu) / max(1, events) * 1e6,
        "events_per_total_cpu_s": events / max(1e-9, cpu + wcpu),
        "round_trips_per_bridge_cpu_s": rt / max(1e-9, cpu),
        "sim_cpu_percent": 100.0 * d["sim"] / dt,
        "acks_per_s": len(ack_us) / dt,
        "ack_p50_ms": pct(ack_us, 0.50),
        "ack_p99_ms": pct(ack_us, 0.99),
        "commits_per_s": b.commits / max(1e-9, dt + warmup),
    }


class AckTimedCore(SimCore):
    """A simulated device that times each report from its first send to the ACK that confirms it."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        self.ack_s: list[float] = []
        self._sent: dict[int, float] = {}
        super().__init__(*a, **kw)

    def report_tick(self, now_s: float, ack_timeout: float = 0.5, t_us: int | None = None) -> list[bytes]:
        out = super().report_tick(now_s, ack_timeout, t_us)
        t = time.perf_counter()
        for ch in self.pending:
            self._sent.setdefault(ch, t)  # a retransmission keeps the first send's time
        return out

    def _handle(self, f: codec.Frame) -> list[bytes]:
        if f.type == wire.ACK:
            rs = self.sessions.get(f.channel)
            if rs is not None and rs.pending is not None and messages.decode_ack(f)[0] == rs.number:
                t = self._sent.pop(f.channel, None)
                if t is not None:
                    self.ack_s.append(time.perf_counter() - t)
        return super()._handle(f)


async def durable_run(
    tmp: Path, fleet: Fleet, sync: str, seconds: float, pushers: int, polling: dict[str, Any]
) -> dict[str, Any]:
    """Phase 6: one live ingest with `pushers` push-session devices beside it, one sync mode."""
    push = SimFleet(pushers, rate=0.0, channels=3, ack_timeout=1.0)
    push.cores = [AckTimedCore(1_000_000 + i, channels=3) for i in range(pushers)]  # ids apart from the Fleet
    await push.start()
    try:
        return await live(tmp, "durable", fleet, polling, 2.0, seconds, 0.05, "process", sync, push)
    finally:
        await push.stop()


def auth_cost(blocks: int = 40, per: int = 200, events: int = PER_ANSWER) -> dict[str, float]:
    """The bridge's per-answer authentication work alone, in CPU time, interleaved with the unsigned
    work it adds to (decode + CRC of a full 2,047-byte answer of 30 events, encode of the POLL):
    blocks of `per` answers, alternating, medians. Signed adds: signing the POLL (HMAC, CRC again)
    and checking the answer's tag (HMAC over 2 KB)."""
    from leadwire import auth, auth_host

    key = os.urandom(32)
    dev = auth.Endpoint(key, auth.TO_HOST)
    host = auth_host.HostEndpoint(key)
    dev.live = host.live = 1  # a session (zero contexts): the costs do not depend on its values
    body = messages.encode_records([(1, bytes(PAYLOAD))] * events)
    plain = codec.encode(codec.Frame(3, 1, body))
    answers = []
    for _ in range(per):
        b = bytearray(plain) + bytes(auth.AUTH_SIZE)
        answers.append(bytes(b[: dev.sign_into(b, len(plain))]))
    poll = messages.poll_frame(1, 255, 2047, 1)
    un: list[float] = []
    sg: list[float] = []
    for _ in range(blocks):
        c0 = time.process_time()
        for _a in answers:
            codec.encode(poll)
            codec.decode(plain)
        un.append((time.process_time() - c0) / per)
        c0 = time.process_time()
        for a in answers:
            b = bytearray(codec.encode(poll)) + bytes(auth.AUTH_SIZE)
            host.sign_into(b, len(b) - auth.AUTH_SIZE)
            codec.decode(a)
            host.verify(a, len(a))
        sg.append((time.process_time() - c0) / per)
    u = statistics.median(un) * 1e6
    g = statistics.median(sg) * 1e6
    return {"unsigned_us_per_answer": u, "signed_us_per_answer": g, "auth_us_per_answer": g - u,
            "auth_us_per_event": (g - u) / events, "events": events}  # fmt: skip


def loadavg() -> str:
    try:
        return "%.1f" % os.getloadavg()[0]
    except OSError:
        return "?"


# -- 5. adaptive polling in virtual time -----------------------------------------------------


CAPACITY = 1024  # ring of the simulated device in the adaptive demo


def bursty(t: float) -> float:
    """Events per second at time t: idle, a 2 s burst of 2,000/s every 20 s, a steady trickle."""
    return 2000.0 if (t % 20.0) < 2.0 else 5.0


def simulate(poll: PollConfig, horizon: float = 120.0, rtt: float = 0.002) -> dict[str, float]:
    core = SimCore(0, capacity=CAPACITY, start=1000)
    cl = DeviceClient(1, DeviceConfig("sim", "udp"), poll)

    t = 0.0
    acc = 0.0
    polls = 0
    last = 0.0
    while t < horizon:
        # events generated since the last step
        acc += bursty(t) * (t - last)
        k = int(acc)
        acc -= k
        last = t
        if k:
            core.write_events(k, 0)
        req = cl.request(t)
        if req.type == 2:
            polls += 1
        for out in core.handle(codec.encode(req)):
            cl.on_frame(codec.decode(out), len(out), t + rtt, 0)
        cl.clear_outputs()
        # fixed policies are strictly periodic (one poll per interval, whatever the backlog)
        t += rtt + (max(cl.next_delay, 0.0) if poll.adaptive else poll.interval)
    return {
        "polls": polls,
        "lost": cl.dc["overrun_lost"],
        "generated": core.generated,
        "polls_per_s": polls / horizon,
    }


def adaptive_demo() -> list[dict[str, Any]]:
    out = []
    for label, p in (
        ("fixed 1 s", PollConfig(batch=64, adaptive=False, interval=1.0, interval_min=1.0)),
        ("fixed 400 ms", PollConfig(batch=64, adaptive=False, interval=0.4, interval_min=0.4)),
        ("fixed 100 ms", PollConfig(batch=64, adaptive=False, interval=0.1, interval_min=0.1)),
        ("fixed 20 ms", PollConfig(batch=64, adaptive=False, interval=0.02, interval_min=0.02)),
        # interval_max = 0.4 s: a ring of 1,024 fills in 0.51 s at the 2,000 ev/s peak
        (
            "adaptive 5..400 ms",
            PollConfig(batch=64, adaptive=True, interval=0.1, interval_min=0.005, interval_max=0.4),
        ),
    ):
        r = simulate(p)
        r["policy"] = label
        out.append(r)
    return out


def med(rs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rs)


def show(rs: list[dict[str, Any]], key: str, fmt: str = "%.0f") -> str:
    m = fmt % med(rs, key)
    return m if len(rs) == 1 else "%s (runs: %s)" % (m, ", ".join(fmt % r[key] for r in rs))


def commit_cost(tmp: Path, commits: int = 200, rows: int = 500) -> dict[str, float]:
    """Store.write alone, synchronous = normal vs full, interleaved commit by commit: the time of one
    commit of `rows` events and 100 devices rows (10,000 ev/s in a 50 ms commit), medians and p99."""
    data = bytes(PAYLOAD)
    now = time.time_ns() // 1000
    offs = order(rows * commits)
    stores: dict[str, tuple[Store, dict[int, int], list[tuple[Any, ...]]]] = {}
    for sync in ("normal", "full"):
        st = Store(fresh(tmp / ("commit-%s.db" % sync)), "bench", checkpoints=True, synchronous=sync)
        keys = {d: st.register("bench-%d" % d, "sim", "-")[0] for d in range(1, 101)}
        stores[sync] = (st, keys, [(0, 1, 7, 1, None, 0, 0, 0, "", "", "", "{}", k) for k in keys.values()])
    times: dict[str, list[int]] = {s: [] for s in stores}
    for c in range(commits):
        for sync, (st, keys, snaps) in stores.items():
            part = [(keys[d], i + 1, 7, 1, 1 + i % 3, off, 1, 0, 3, now, now, data)
                    for i, (d, off) in enumerate(offs[c * rows : (c + 1) * rows], c * rows)]  # fmt: skip
            b = Batch(segments=[(SEG_EVENT, part)], devices=snaps, commit_us=now, arrivals=rows, events=rows)
            t0 = time.perf_counter_ns()
            st.write(b)
            times[sync].append((time.perf_counter_ns() - t0) // 1000)
    for st, _, _ in stores.values():
        st.close()
    qs = (("p50", 0.5), ("p99", 0.99))
    return {"%s_%s_ms" % (s, q): pct(v, x) for s, v in times.items() for q, x in qs}


def durable_phase(args: SimpleNamespace) -> dict[str, Any]:
    """Phase 6: synchronous = normal vs full side by side (interleaved per repetition), at each
    offered rate of --durable-rates (one below what the bridge commits, one above: saturated)."""
    polling = {"batch": 255, "max_bytes": 2047, "interval": 0.02, "interval_min": 0.002, "interval_max": 0.1,
               "timeout": 0.5}  # fmt: skip
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as td:
        cc = out["commit"] = commit_cost(Path(td))
    print(
        "durable ACKs: one Store.write of 500 events + 100 devices rows, interleaved (200 each): synchronous"
        " = normal p50 %.2f ms p99 %.2f ms, full p50 %.2f ms p99 %.2f ms (the fsync: +%.2f ms p50), load %s"
        % (cc["normal_p50_ms"], cc["normal_p99_ms"], cc["full_p50_ms"], cc["full_p99_ms"],
           cc["full_p50_ms"] - cc["normal_p50_ms"], loadavg()),
        flush=True,
    )  # fmt: skip
    for rate in [float(x) for x in args.durable_rates.split(",")]:
        runs: dict[str, list[dict[str, Any]]] = {"normal": [], "full": []}
        with tempfile.TemporaryDirectory() as td:
            for _ in range(args.repeat):
                for sync in ("normal", "full"):
                    with Fleet(args.durable_devices, rate, capacity=16384, payload=PAYLOAD) as fleet:
                        r = asyncio.run(
                            durable_run(Path(td), fleet, sync, args.seconds, args.durable_pushers, polling)
                        )
                    r["load"] = loadavg()
                    runs[sync].append(r)
                    print(
                        "  durable run (%.0f ev/s offered, synchronous = %s): %.0f events/s, %.0f ACKs/s, ACK"
                        " p50 %.1f p99 %.1f ms, load %s"
                        % (args.durable_devices * rate, sync, r["events_per_s"], r["acks_per_s"],
                           r["ack_p50_ms"], r["ack_p99_ms"], r["load"]),
                        flush=True,
                    )  # fmt: skip
        print(
            "durable ACKs: %d devices x %.0f ev/s of %d B polled (%.0f/s offered) + %d devices with push"
            " sessions (3 channels), commit_interval 50 ms, writer process:"
            % (args.durable_devices, rate, PAYLOAD, args.durable_devices * rate, args.durable_pushers)
        )
        for sync, rs in runs.items():
            print(
                "  synchronous = %-6s %s events/s (p50 %s / p99 %s ms generation -> commit); ACKs %s/s,"
                " ACK latency p50 %s ms, p99 %s ms; writer CPU %s%%"
                % (sync, show(rs, "events_per_s"), show(rs, "latency_p50_ms", "%.1f"),
                   show(rs, "latency_p99_ms", "%.1f"), show(rs, "acks_per_s"), show(rs, "ack_p50_ms", "%.1f"),
                   show(rs, "ack_p99_ms", "%.1f"), show(rs, "writer_cpu_percent"))
            )  # fmt: skip
        o: dict[str, Any] = {"runs": runs}
        keys = ("events_per_s", "acks_per_s", "ack_p50_ms", "ack_p99_ms", "latency_p50_ms", "latency_p99_ms")
        for k in keys:
            o["full_vs_normal_" + k] = statistics.median(
                [f[k] / n[k] for f, n in zip(runs["full"], runs["normal"], strict=True)]
            )
        print(
            "  ratio full / normal: events/s %.2f, ACKs/s %.2f, ACK p50 %.2f, ACK p99 %.2f, commit latency"
            " p50 %.2f, p99 %.2f"
            % tuple(o["full_vs_normal_" + k] for k in keys),
            flush=True,
        )  # fmt: skip
        out["%.0f" % rate] = o
    return out


def offline_phases(tmp: Path, args: SimpleNamespace, only: set[str], rows: int, res: dict[str, Any]) -> None:
    """SQLite alone and the bridge pipeline, offline: every variant once per repetition."""
    runs = [offline_run(tmp, only, rows) for _ in range(args.repeat)]  # each measures every variant
    res["offline_runs"] = runs
    print("offline, %d events of %d B, 10,000 per transaction (events/s):" % (rows, PAYLOAD))
    if "sqlite" in only:
        for label, key in (
            ("SQLite alone, plain events table (the yardstick):   ", "sqlite_plain_rows_per_s"),
            ("SQLite alone, schema 1 layout (events + arrivals):  ", "sqlite_schema1_events_per_s"),
            ("the bridge's store, schema 2, Store.write:          ", "store_events_per_s"),
        ):
            print(" ", label, show(runs, key))
    if "pipeline" in only:
        print_pipeline(runs, res)
    if "sqlite" in only and "pipeline" in only:
        ratios = [r["pipeline_threaded_events_per_s"] / r["sqlite_plain_rows_per_s"] for r in runs]
        res["pipeline_vs_sqlite"] = statistics.median(ratios)
        print("  ratio bridge pipeline (threaded) / SQLite plain:     %.2f" % res["pipeline_vs_sqlite"])
        ratios = [r["pipeline_process_events_per_s"] / r["sqlite_plain_rows_per_s"] for r in runs]
        res["pipeline_process_vs_sqlite"] = statistics.median(ratios)
        print("  ratio bridge pipeline (writer process) / SQLite:   %.2f"
              % res["pipeline_process_vs_sqlite"])  # fmt: skip
    sys.stdout.flush()


def offline_run(tmp: Path, only: set[str], rows: int) -> dict[str, Any]:
    """One repetition of the offline phases: SQLite alone, then the pipeline's six variants."""
    r: dict[str, Any] = {}
    if "sqlite" in only:
        r["sqlite_plain_rows_per_s"] = sqlite_plain(tmp, rows)
        r["sqlite_schema1_events_per_s"] = sqlite_schema1(tmp, rows)
        r["store_events_per_s"] = sqlite_store(tmp, rows)
    if "pipeline" in only:
        su: dict[str, float] = {}
        ss: dict[str, float] = {}
        r["pipeline_events_per_s"] = pipeline(tmp, rows, threaded=False, stats=su)
        r["pipeline_threaded_events_per_s"] = pipeline(tmp, rows, threaded=True)
        r["pipeline_signed_events_per_s"] = pipeline(tmp, rows, False, signed=True, stats=ss)
        r["pipeline_threaded_signed_events_per_s"] = pipeline(tmp, rows, True, signed=True)
        sp: dict[str, float] = {}
        r["pipeline_process_events_per_s"] = pipeline(tmp, rows, True, process=True, stats=sp)
        r["pipeline_process_signed_events_per_s"] = pipeline(tmp, rows, True, signed=True, process=True)
        r["pipeline_process_cpu_us_per_event"] = sp["cpu_us_per_event"]
        r["pipeline_process_writer_cpu_us_per_event"] = sp["writer_cpu_us_per_event"]
        r["pipeline_cpu_us_per_event"] = su["cpu_us_per_event"]
        r["pipeline_signed_cpu_us_per_event"] = ss["cpu_us_per_event"]
    return r


def print_pipeline(runs: list[dict[str, Any]], res: dict[str, Any]) -> None:
    """The pipeline's figures: unsigned then signed, each writer; the ratios into res."""
    print("  bridge pipeline, one thread:                        ", show(runs, "pipeline_events_per_s"))
    print("  bridge pipeline, store on its own thread (daemon):  ",
          show(runs, "pipeline_threaded_events_per_s"))  # fmt: skip
    print("  bridge pipeline, store writer process (daemon):     ",
          show(runs, "pipeline_process_events_per_s"))  # fmt: skip
    res["pipeline_process_vs_thread"] = statistics.median(
        [r["pipeline_process_events_per_s"] / r["pipeline_threaded_events_per_s"] for r in runs]
    )
    print("  ratio writer process / store thread (events/s):     %.2f"
          % res["pipeline_process_vs_thread"])  # fmt: skip
    print("  CPU us per event, writer process: bridge %s + writer %s"
          % (show(runs, "pipeline_process_cpu_us_per_event", "%.1f"),
             show(runs, "pipeline_process_writer_cpu_us_per_event", "%.1f")))  # fmt: skip
    print("  the same, signed (auth: every request signed, every answer's tag checked):")
    print("  bridge pipeline, one thread, signed:                ",
          show(runs, "pipeline_signed_events_per_s"))  # fmt: skip
    print("  bridge pipeline, store on its own thread, signed:   ",
          show(runs, "pipeline_threaded_signed_events_per_s"))  # fmt: skip
    print("  bridge pipeline, store writer process, signed:      ",
          show(runs, "pipeline_process_signed_events_per_s"))  # fmt: skip
    for a, b in (
        ("pipeline_signed_events_per_s", "pipeline_events_per_s"),
        ("pipeline_threaded_signed_events_per_s", "pipeline_threaded_events_per_s"),
    ):
        res[a.replace("events_per_s", "ratio")] = statistics.median([r[a] / r[b] for r in runs])
    print("  ratio signed / unsigned (events/s): one thread %.3f, threaded %.3f"
          % (res["pipeline_signed_ratio"], res["pipeline_threaded_signed_ratio"]))  # fmt: skip
    res["pipeline_signed_cpu_ratio"] = statistics.median(
        [r["pipeline_signed_cpu_us_per_event"] / r["pipeline_cpu_us_per_event"] for r in runs]
    )
    print("  CPU us per event, one thread: unsigned %s, signed %s; ratio signed / unsigned %.3f"
          % (show(runs, "pipeline_cpu_us_per_event", "%.1f"),
             show(runs, "pipeline_signed_cpu_us_per_event", "%.1f"),
             res["pipeline_signed_cpu_ratio"]))  # fmt: skip


Ingest = dict[tuple[str, bool], list[dict[str, Any]]]


def ingest_phase(tmp: Path, args: SimpleNamespace, writers: list[str], res: dict[str, Any]) -> None:
    """Live ingest: a simulated fleet polled as fast as it fills, each writer signed and unsigned."""
    ingest: Ingest = {}
    for _ in range(args.repeat):  # every variant once per repetition, interleaved
        for writer in writers:
            for signed in (False, True):
                r = ingest_run(tmp, args, writer, signed)
                ingest.setdefault((writer, signed), []).append(r)
                how = "signed" if signed else "unsigned"
                print("  ingest run (writer %s, %s): %.0f events/s, CPU bridge %.0f%% + writer %.0f%%,"
                      " load %s"
                      % (writer, how, r["events_per_s"], r["bridge_cpu_percent"], r["writer_cpu_percent"],
                         loadavg()), flush=True)  # fmt: skip
    res["ingest"] = {"%s_%s" % (w, "signed" if s_ else "unsigned"): v for (w, s_), v in ingest.items()}
    offered = args.ingest_devices * args.ingest_rate
    print(
        "live ingest: %d devices x %.0f ev/s of %d B offered (%.0f/s), committed:"
        % (args.ingest_devices, args.ingest_rate, PAYLOAD, offered)
    )
    for (writer, signed), ing in ingest.items():
        print(
            "  writer %-7s %-8s %s events/s; p50 %s ms, p99 %s ms generation -> commit; overrun lost"
            " %d; CPU bridge %s%% + writer %s%%, sim %s%%; per CPU-second (bridge + writer) %s"
            " events;"
            " auth rejects %d"
            % (writer, "signed" if signed else "unsigned", show(ing, "events_per_s"),
               show(ing, "latency_p50_ms", "%.1f"), show(ing, "latency_p99_ms", "%.1f"),
               sum(r["overrun_lost"] for r in ing), show(ing, "bridge_cpu_percent"),
               show(ing, "writer_cpu_percent"), show(ing, "sim_cpu_percent"),
               show(ing, "events_per_total_cpu_s"), sum(r["auth_rejects"] for r in ing)),
            flush=True,
        )  # fmt: skip
    ingest_ratios(ingest, writers, res)


def ingest_run(tmp: Path, args: SimpleNamespace, writer: str, signed: bool) -> dict[str, Any]:
    """One live ingest run: a fresh simulated fleet, polled adaptively up to full answers."""
    with Fleet(args.ingest_devices, args.ingest_rate, capacity=16384, payload=PAYLOAD, auth=signed) as fleet:
        polling = {
            "batch": 255,
            "max_bytes": 2047,
            "interval": 0.02,
            "interval_min": 0.002,
            "interval_max": 0.1,
            "timeout": 0.5,
        }
        return asyncio.run(live(tmp, "ingest", fleet, polling, 2.0, args.seconds, 0.05, writer))


def ingest_ratios(ingest: Ingest, writers: list[str], res: dict[str, Any]) -> None:
    """Writer process / thread, signed / unsigned: medians of the paired runs."""

    def median_ratio(a: list[dict[str, Any]], b: list[dict[str, Any]], key: str) -> float:
        return statistics.median([x[key] / y[key] for x, y in zip(a, b, strict=True)])

    for signed in (False, True):
        if ("thread", signed) in ingest and ("process", signed) in ingest:
            a, b = ingest[("process", signed)], ingest[("thread", signed)]
            k = "ingest_process_vs_thread_%s" % ("signed" if signed else "unsigned")
            res[k] = median_ratio(a, b, "events_per_s")
            res[k + "_per_cpu"] = median_ratio(a, b, "events_per_total_cpu_s")
            print(
                "  ratio writer process / thread (%s): events/s %.2f, events per CPU-second %.2f"
                % ("signed" if signed else "unsigned", res[k], res[k + "_per_cpu"])
            )
    for writer in writers:
        if (writer, False) in ingest and (writer, True) in ingest:
            a, b = ingest[(writer, True)], ingest[(writer, False)]
            print(
                "  ratio signed / unsigned (writer %s): events/s %.2f, CPU per event %.2f"
                % (writer, median_ratio(a, b, "events_per_s"), median_ratio(a, b, "total_cpu_us_per_event"))
            )


def fleet_phase(tmp: Path, args: SimpleNamespace, writers: list[str], res: dict[str, Any]) -> None:
    """Fixed-rate polling of many slow devices (tools/fleet_shards.py): the 1,000-device fleet at
    10 Hz and, with --goal, 10,000 devices at 2 Hz over --goal-shards bridge processes; every run
    with each writer and, with --before, with that ref's bridge code back to back (paired: the load
    of a shared machine drifts)."""
    codes: list[str | None] = [None]
    if args.before:
        codes = [before_tree(args.before, tmp / "before"), None]
    sizes = [(args.fleet_devices, args.fleet_hz, args.fleet_rate, args.fleet_shards)]
    if args.goal:
        sizes.append((args.goal_devices, args.goal_hz, args.goal_rate, args.goal_shards))
    runs: list[dict[str, Any]] = []
    for devices, hz, rate, shards in sizes:
        for i in range(args.repeat):
            for writer in writers:
                for code in codes if i % 2 == 0 else codes[::-1]:
                    r = fleet_shards.run(tmp, devices, hz, rate, shards, writer, code, 3.0, args.seconds,
                                         args.fleet_commit, auth=not args.fleet_no_auth,
                                         probe=args.fleet_probe, hello=args.fleet_hello_interval)  # fmt: skip
                    r["load"] = loadavg()
                    r["rate"] = rate
                    runs.append(r)
                    print(fleet_line(r), flush=True)
                    for j, sp in enumerate(r.get("shard_probes", ())):
                        print(probe_line(j, sp), flush=True)
                    if "sim_runq_wait_ms_per_s" in r:
                        print("    simulators: run-queue wait %.0f ms/s per process"
                              % r["sim_runq_wait_ms_per_s"], flush=True)  # fmt: skip
    res["fleet"] = runs
    fleet_summary(runs, args)


def fleet_line(r: dict[str, Any]) -> str:
    return (
        "  %s %5d devices x %g Hz (%g ev/s each), %d shard(s), writer %-7s: %.2f polls/s per device"
        " (%.0f round trips/s), timeouts %d, silent %d; mean interval / nominal: median %.3f, worst %.3f;"
        " p99 / nominal: median %.2f, worst %.2f; devices off: mean >10%% %d, p99 >1.5x %d -> %s;"
        " CPU us per round trip: bridge %.1f + writer %.1f, simulator %.1f; per event: bridge %.1f + writer"
        " %.1f; CPU bridge %.0f%% writer %.0f%% sim %.0f%%; load %s"
        % (r["code"], r["devices"], r["hz"], r["rate"], r["shards"], r["writer"], r["polls_per_device_per_s"],
           r["round_trips_per_s"], r["timeouts"], r["silent"], r["median_mean_ratio"], r["worst_mean_ratio"],
           r["median_p99_ratio"], r["worst_p99_ratio"], r["devices_mean_off_10pct"],
           r["devices_p99_off_1_5x"], "criteria met" if criteria_met(r) else "criteria NOT met",
           r["bridge_cpu_us_per_rt"],
           r["writer_cpu_us_per_rt"], r["sim_cpu_us_per_rt"], r["bridge_cpu_us_per_event"],
           r["writer_cpu_us_per_event"], r["bridge_cpu_percent"], r["writer_cpu_percent"],
           r["sim_cpu_percent"], r["load"])
    )  # fmt: skip


def probe_line(i: int, sp: dict[str, Any]) -> str:
    """Where shard i's poll timers lost time (tools/loopprobe.py): the POLLs' lateness past their due
    time (apart: those whose answer before was read only after it), then the loop's own figures."""
    arr = sp.get("arrivals")
    arrivals = ("; answers in the kernel after the request p50/p99/p99.9/max %.1f/%.1f/%.1f/%.0f ms (the"
                " simulator), read after that %.1f/%.1f/%.1f/%.0f ms (this loop)"
                % (*arr["answer_ms"], *arr["read_ms"]) if arr else "")  # fmt: skip
    return ("    shard %d: POLL sent late p50/p99/p99.9/max %.1f/%.1f/%.1f/%.0f ms (%d after an answer read"
            " late, max %.0f ms)%s; %s"
            % (i, *sp["send_late_ms"], sp["late_answers"], sp["late_answer_ms"][3], arrivals,
               loopprobe.describe(sp["probe"])))  # fmt: skip


def criteria_met(r: dict[str, Any]) -> bool:
    """The issue's criteria for a fleet run: every device's mean poll interval within 10% of
    nominal and its p99 within 1.5x (a device polled fewer than twice counts as off), 0 silent."""
    return r["devices_mean_off_10pct"] == 0 and r["devices_p99_off_1_5x"] == 0 and r["silent"] == 0


def fleet_summary(runs: list[dict[str, Any]], args: SimpleNamespace) -> None:
    """Medians per (fleet size, writer, code); this tree's CPU per round trip over --before's; what
    the goal (goal devices x goal Hz) costs in cores at these figures."""
    groups: dict[tuple[int, float, int, str], dict[str, list[dict[str, Any]]]] = {}
    for r in runs:
        groups.setdefault((r["devices"], r["hz"], r["shards"], r["writer"]), {}).setdefault(
            r["code"], []
        ).append(r)
    print("fleet (%s), medians:" % ("unsigned" if args.fleet_no_auth else "signed"))
    for (devices, hz, shards, writer), by in groups.items():
        for code, rs in by.items():
            print("  %-6s %5d x %g Hz, %d shard(s), writer %-7s: %s polls/s per device, CPU us per round"
                  " trip: bridge %s + writer %s, simulator %s; silent %d; criteria met in %d of %d runs"
                  % (code, devices, hz, shards, writer, show(rs, "polls_per_device_per_s", "%.2f"),
                     show(rs, "bridge_cpu_us_per_rt", "%.1f"), show(rs, "writer_cpu_us_per_rt", "%.1f"),
                     show(rs, "sim_cpu_us_per_rt", "%.1f"), sum(r["silent"] for r in rs),
                     sum(criteria_met(r) for r in rs), len(rs)))  # fmt: skip
        if "before" in by and "now" in by:
            pairs = list(zip(by["now"], by["before"], strict=True))
            for key in ("bridge_cpu_us_per_rt", "writer_cpu_us_per_rt"):
                ratio = statistics.median([a[key] / max(1e-9, b[key]) for a, b in pairs])
                print("  ratio now / before, %s: %.2f" % (key, ratio))
    rt_s = args.goal_devices * args.goal_hz
    for (devices, hz, _, writer), by in groups.items():
        rs = by.get("now", [])
        if not rs:
            continue
        us = med(rs, "bridge_cpu_us_per_rt") + med(rs, "writer_cpu_us_per_rt") + med(rs, "sim_cpu_us_per_rt")
        print("  the goal at these figures (%d x %g Hz, writer %s): %d round trips/s x %.1f us (bridge +"
              " writer + simulator) = %.2f cores of 2"
              % (devices, hz, writer, rt_s, us, rt_s * us / 1e6))  # fmt: skip


def rtcost_phase(tmp: Path, args: SimpleNamespace, res: dict[str, Any]) -> None:
    """CPU per round trip of the bridge's parts without I/O (tools/fleet_shards.rt_cost): the goal's
    shard (--rtcost-devices signed devices at 2 Hz, 1 ev/s) in virtual time, paired with --before's
    code, the order swapped every other repetition."""
    codes: list[str | None] = [None]
    if args.before:
        codes = [before_tree(args.before, tmp / "before-rtcost"), None]
    runs: list[dict[str, Any]] = []
    for i in range(args.repeat):
        for code in codes if i % 2 == 0 else codes[::-1]:
            r = fleet_shards.rt_cost_run(args.rtcost_devices, 12, code)
            runs.append(r)
            print("  %-6s %d devices x 2 Hz, CPU us per round trip without I/O: request + sign %.2f, receive"
                  " %.2f, drain %.2f = bridge %.2f; store write %.2f; the device's answer %.2f"
                  % (r["code"], r["devices"], r["request_us_per_rt"], r["receive_us_per_rt"],
                     r["drain_us_per_rt"], r["bridge_us_per_rt"], r["write_us_per_rt"],
                     r["device_us_per_rt"]), flush=True)  # fmt: skip
    res["rtcost"] = runs
    now = [r for r in runs if r["code"] == "now"]
    before = [r for r in runs if r["code"] == "before"]
    for key in ("bridge_us_per_rt", "write_us_per_rt") if before else ():
        ratio = statistics.median([a[key] / max(1e-9, b[key]) for a, b in zip(now, before, strict=True)])
        print("  ratio now / before, %s: %.2f" % (key, ratio))


def authcost_phase(res: dict[str, Any]) -> None:
    res["auth_cost"] = [auth_cost(events=k) for k in (PER_ANSWER, 1)]
    for ac in res["auth_cost"]:
        print(
            "auth cost per answer of %d event(s) (CPU, interleaved blocks, medians): decode + encode"
            " POLL %.1f us, the same signed and checked %.1f us: +%.1f us per round trip = +%.2f us"
            " per event"
            % (ac["events"], ac["unsigned_us_per_answer"], ac["signed_us_per_answer"],
               ac["auth_us_per_answer"], ac["auth_us_per_event"]),
            flush=True,
        )  # fmt: skip


def adaptive_phase(res: dict[str, Any]) -> None:
    res["adaptive"] = adaptive_demo()
    print(
        "adaptive polling (virtual time, 120 s, ring of 1,024, batches of 64, 5 ev/s with bursts of"
        " 2,000 ev/s for 2 s every 20 s):"
    )
    for r in res["adaptive"]:
        print(
            "  %-20s polls %6d (%6.1f/s)  lost %6d of %d"
            % (r["policy"], r["polls"], r["polls_per_s"], r["lost"], r["generated"])
        )


@click.command(help=__doc__.split("\n")[0])
@click.option("--quick", is_flag=True)
@click.option("--repeat", type=int, default=1, help="run every measured phase this many times: medians")
@click.option(
    "--only", default="sqlite,pipeline,ingest,fleet,authcost,adaptive,durable", help="phases to run"
)
@click.option("--durable-devices", type=int, default=100, help="polled devices in the durable phase")
@click.option(
    "--durable-rates",
    default="100,1500",
    help="events/s per device in the durable phase, one run pair per rate",
)
@click.option("--durable-pushers", type=int, default=20, help="push-session devices (3 channels each)")
@click.option("--ingest-devices", type=int, default=100)
@click.option("--ingest-rate", type=float, default=1500.0, help="events/s per device in the ingest run")
@click.option("--fleet-devices", type=int, default=1000)
@click.option("--fleet-rate", type=float, default=5.0, help="events/s per device in the 10 Hz run")
@click.option("--fleet-hz", type=float, default=10.0, help="polls/s per device in the fleet run")
@click.option("--fleet-shards", type=int, default=1, help="bridge processes (bridge.shard) in the fleet run")
@click.option("--goal", is_flag=True, help="also the big fleet: --goal-devices at --goal-hz")
@click.option("--goal-devices", type=int, default=10_000)
@click.option("--goal-hz", type=float, default=2.0)
@click.option("--goal-rate", type=float, default=1.0, help="events/s per device in the big fleet")
@click.option("--goal-shards", type=int, default=2, help="bridge processes for the big fleet")
@click.option("--before", default="", help="git ref: every fleet run also with that ref's bridge code")
@click.option("--rtcost-devices", type=int, default=5000, help="devices in the rtcost phase (one goal shard)")
@click.option("--fleet-commit", type=float, default=0.1, help="commit_interval of the 10 Hz run (s)")
@click.option("--fleet-no-auth", is_flag=True, help="the 10 Hz fleet with auth = false")
@click.option(
    "--fleet-hello-interval",
    type=float,
    default=None,
    help="polling.hello_interval of the fleet runs (s; default: the bridge's, 10 s); only devices without"
    " a key get a periodic HELLO (--fleet-no-auth)",
)
@click.option(
    "--fleet-probe/--no-fleet-probe",
    default=True,
    show_default=True,
    help="per shard, where the poll timers lose time (tools/loopprobe.py; costs some CPU)",
)
@click.option("--seconds", type=float, default=10.0)
@click.option(
    "--writers",
    default="thread,process",
    help="store writers side by side in the live phases ([store] writer)",
)
@click.option(
    "--json",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="also write the results here",
)
def main(**kw: Any) -> None:
    sys.exit(bench(SimpleNamespace(**kw)))


def bench(args: SimpleNamespace) -> int:
    only = set(args.only.split(","))
    rows = 300_000
    if args.quick:
        args.seconds = 5.0
        rows = 100_000
    raise_nofile()
    res: dict[str, Any] = {
        "machine": "%s, %d cores, Python %s, SQLite %s"
        % (
            platform.platform(terse=True),
            os.cpu_count() or 0,
            platform.python_version(),
            sqlite3.sqlite_version,
        )
    }
    print("leadwire bridge bench --", res["machine"], "-- load average", loadavg(), flush=True)
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        if "sqlite" in only or "pipeline" in only:
            offline_phases(tmp, args, only, rows, res)
        writers = args.writers.split(",")
        if "ingest" in only:
            ingest_phase(tmp, args, writers, res)
        if "fleet" in only:
            fleet_phase(tmp, args, writers, res)
        if "rtcost" in only:
            rtcost_phase(tmp, args, res)
    if "authcost" in only:
        authcost_phase(res)
    if "adaptive" in only:
        adaptive_phase(res)
    if "durable" in only:
        res["durable"] = durable_phase(args)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    main()
