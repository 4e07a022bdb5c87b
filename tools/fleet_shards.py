"""The bridge bench's fleet runs (bench/bridge_bench.py --only fleet): a simulated fleet
(tools/fleetsim.py) polled at a fixed rate by one or more bridge shard processes (``bridge.shard =
"i/k"``, each with its own store), each instrumented from the outside, so that the same run can be
made with another tree's bridge code (``code``: a PYTHONPATH, as ``leadwire.tools.lwbench.before_tree``
lays it out).

Every shard is a process running this file on a JSON spec: it starts its bridge, prints ``ready``,
waits for ``go`` on stdin (so all shards measure the same window), lets the fleet settle for
``warmup`` seconds, then measures for ``seconds``: the CPU of its own process and of its store
writer process, the round trips, timeouts and events of its clients, and the time of every POLL
each device got (the poll intervals; a HELLO is a round trip, not a poll: the periodic one, every
``polling.hello_interval`` for a device without a key, goes between two POLLs). After a clean stop
it writes them as JSON beside its spec (``.out``). The parent measures the simulators' CPU over
the same window and checks every store with this tree's
host/bridge/accounting.py (``silent``: offsets neither stored nor counted lost, plus any stored
twice, counted twice or never generated), whatever code wrote it.

Per device: the mean interval between POLLs sent in the window against the nominal 1 / hz, and
its p99; a device with fewer than two POLLs in the window counts as off on both.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leadwire.tools.fleetsim import Fleet

if TYPE_CHECKING:  # a shard may run another tree's code (--before): only the parent imports these
    from leadwire.bridge.accounting import Ledger
    from leadwire.bridge.store_reader import StoreReader

U32 = 0xFFFFFFFF
PERIODIC = -1  # (per runner, the request sent last:) the periodic HELLO, sent between two POLLs


def polling(hz: float, timeout: float, hello: float | None = None) -> dict[str, Any]:
    """A fixed poll interval of 1 / hz (adaptive polling off), batches of up to 64 events; the
    periodic HELLO every `hello` s (None: the bridge's default)."""
    iv = 1.0 / hz
    return {"adaptive": False, "interval": iv, "interval_min": iv, "interval_max": iv, "batch": 64,
            "timeout": timeout, **({"hello_interval": hello} if hello else {})}  # fmt: skip


def run(tmp: Path, devices: int, hz: float, rate: float, shards: int, writer: str, code: str | None,
        warmup: float, seconds: float, commit: float, auth: bool = True, sim_procs: int = 0,
        payload: int = 64, timeout: float = 0.5, probe: bool = True,
        hello: float | None = None) -> dict[str, Any]:  # fmt: skip
    """One fleet run: `devices` simulated devices (`rate` events/s each) polled at `hz` by `shards`
    bridge processes; the shards' figures added up, the simulators' CPU over the same window."""
    from leadwire.tools.loopprobe import process_schedstat  # the parent's: this tree's

    procs = sim_procs or max(1, min(2, devices // 4000))
    tmp = Path(tempfile.mkdtemp(dir=tmp))  # fresh stores: a run never resumes another's
    with Fleet(devices, rate, procs=procs, capacity=1024, payload=payload, auth=auth) as fleet:
        workers: list[subprocess.Popen[str]] = []
        try:
            for i in range(shards):
                spec = tmp / ("shard-%d.json" % i)
                fd = os.open(spec, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the keys
                with os.fdopen(fd, "w") as f:
                    json.dump({"devices": fleet.devices, "shard": [i, shards], "hz": hz, "writer": writer,
                               "store": str(tmp / ("fleet-%d.db" % i)), "commit": commit, "warmup": warmup,
                               "seconds": seconds, "timeout": timeout, "probe": probe, "hello": hello},
                              f)  # fmt: skip
                env = {**os.environ, "PYTHONPATH": code} if code else None
                workers.append(subprocess.Popen([sys.executable, __file__, str(spec)], stdin=subprocess.PIPE,
                                                stdout=subprocess.PIPE, text=True, env=env))  # fmt: skip
            for w in workers:
                assert w.stdout is not None
                if w.stdout.readline().strip() != "ready":
                    raise RuntimeError("a bridge shard did not start (exit code %s)" % w.wait())
            for w in workers:
                assert w.stdin is not None
                w.stdin.write("go\n")
                w.stdin.flush()
            time.sleep(warmup)
            pids = [p.pid for p in fleet.procs]
            sim0, sched0 = fleet.cpu_seconds(), process_schedstat(pids)
            time.sleep(seconds)
            sim, sched1 = fleet.cpu_seconds() - sim0, process_schedstat(pids)
            outs: list[dict[str, Any]] = []
            for w in workers:
                w.communicate(timeout=seconds + 300)
                if w.returncode:
                    raise RuntimeError("a bridge shard failed (exit code %d)" % w.returncode)
                o = json.loads((tmp / ("shard-%d.out" % len(outs))).read_text())
                led, o["silent_devices"] = account(o["store"])  # this tree's check, whatever code wrote it
                o["silent"] = led.silent + led.twice + led.double + led.phantom
                outs.append(o)
        finally:
            for w in workers:
                if w.poll() is None:
                    w.kill()
                    w.wait()
    out = combine(outs, sim, devices, hz, shards, writer, code, seconds)
    out["sim_runq_wait_ms_per_s"] = 1e3 * (sched1[1] - sched0[1]) / seconds / max(1, len(pids))
    return out


def combine(outs: list[dict[str, Any]], sim: float, devices: int, hz: float, shards: int, writer: str,
            code: str | None, seconds: float) -> dict[str, Any]:  # fmt: skip
    """The shards' figures as one run's."""
    keys = ("cpu", "wcpu", "rt", "to", "events", "silent", "devices", "silent_devices", "mean_off", "p99_off",
            "requests")  # fmt: skip
    tot = {k: sum(o[k] for o in outs) for k in keys}
    # rates over each shard's own window (a starved loop's sleep(seconds) lasts longer), summed
    windows = [max(1e-9, o.get("window", seconds)) for o in outs]
    per_s = ("rt", "requests", "events", "cpu", "wcpu")
    rate = {k: sum(o[k] / w for o, w in zip(outs, windows, strict=True)) for k in per_s}
    sim_rate = sim / seconds  # the simulators' CPU over the parent's window (wall: its own sleep)
    means = sorted(m for o in outs for m in o["mean_ratios"])
    p99s = sorted(p for o in outs for p in o["p99_ratios"])
    rt, ev = max(1, tot["rt"]), max(1, tot["events"])
    return {
        "code": "before" if code else "now",
        "devices": devices,
        "devices_polled": tot["devices"],
        "hz": hz,
        "shards": shards,
        "writer": writer,
        "round_trips_per_s": rate["rt"],
        "polls_per_device_per_s": rate["requests"] / max(1, devices),  # requests sent
        "events_per_s": rate["events"],
        "timeouts": tot["to"],
        "silent": tot["silent"],
        "silent_devices": tot["silent_devices"],
        "devices_mean_off_10pct": tot["mean_off"],
        "devices_p99_off_1_5x": tot["p99_off"],
        "median_mean_ratio": means[len(means) // 2] if means else float("nan"),
        "worst_mean_ratio": max(means, key=lambda m: abs(m - 1.0)) if means else float("nan"),
        "median_p99_ratio": p99s[len(p99s) // 2] if p99s else float("nan"),
        "worst_p99_ratio": p99s[-1] if p99s else float("nan"),
        "bridge_cpu_percent": 100.0 * rate["cpu"],
        "writer_cpu_percent": 100.0 * rate["wcpu"],
        "sim_cpu_percent": 100.0 * sim_rate,
        "bridge_cpu_us_per_rt": 1e6 * tot["cpu"] / rt,
        "writer_cpu_us_per_rt": 1e6 * tot["wcpu"] / rt,
        "sim_cpu_us_per_rt": 1e6 * sim_rate / max(1e-9, rate["rt"]),  # (the windows differ when starved)
        "bridge_cpu_us_per_event": 1e6 * tot["cpu"] / ev,
        "writer_cpu_us_per_event": 1e6 * tot["wcpu"] / ev,
        "round_trips_per_bridge_cpu_s": tot["rt"] / max(1e-9, tot["cpu"]),
        "shard_probes": [{k: o.get(k) for k in ("probe", "send_late_ms", "late_answers", "late_answer_ms",
                                                 "arrivals")} for o in outs if o.get("probe")],
    }  # fmt: skip


# -- one shard (its own process) ---------------------------------------------------------------------


def interval_ratios(sends: dict[Any, list[float]], t0: float, t1: float, nominal: float,
                    n: int) -> tuple[list[float], list[float], int, int, int]:  # fmt: skip
    """Per device: mean and p99 of the intervals between its requests sent in [t0, t1], over the
    nominal interval; how many devices are off (mean by more than 10%, p99 over 1.5x); how many
    requests went out in [t0, t1]."""
    requests = 0
    means: list[float] = []
    p99s: list[float] = []
    mean_off = p99_off = n - len(sends)  # never polled
    for ts in sends.values():
        w = [t for t in ts if t0 <= t <= t1]
        requests += len(w)
        if len(w) < 2:
            mean_off += 1
            p99_off += 1
            continue
        iv = sorted(b - a for a, b in itertools.pairwise(w))
        m = (w[-1] - w[0]) / (len(w) - 1) / nominal
        p = iv[min(len(iv) - 1, int(0.99 * len(iv)))] / nominal
        means.append(m)
        p99s.append(p)
        mean_off += abs(m - 1.0) > 0.1
        p99_off += p > 1.5
    return means, p99s, mean_off, p99_off, requests


class _Devices:
    """A StoreReader whose devices() is read once (check_store looks its device up in it)."""

    def __init__(self, reader: StoreReader) -> None:
        self.reader = reader
        self.rows = reader.devices()

    def devices(self) -> list[Any]:
        return self.rows

    def losses(self, dev: int) -> Any:
        return self.reader.losses(dev)

    def events(self, dev: int) -> Any:
        return self.reader.events(dev)


def account(path: str) -> tuple[Ledger, int]:
    """The accounting check (host/bridge/accounting.py) of every device in a store, the store as its
    own witness: offsets missing inside the span each device's rows cover. And how many devices
    have silent offsets."""
    from leadwire.bridge.accounting import Ledger, check_store
    from leadwire.bridge.store_reader import StoreReader

    total = Ledger()
    bad = 0
    with StoreReader(path) as r:
        db = _Devices(r)
        for d in db.rows:
            led = check_store(db, d.dev)
            bad += not led.ok
            total.add(led)
    return total, bad


async def shard(spec: dict[str, Any]) -> dict[str, Any]:
    from leadwire.bridge import logs
    from leadwire.bridge.client import REQ_POLL
    from leadwire.bridge.config import parse
    from leadwire.bridge.daemon import Bridge, DeviceRunner
    from leadwire.bridge.writer import StoreProcess
    from leadwire.tools.procstat import cpu_seconds

    try:
        from leadwire.tools.loopprobe import Arrivals, LoopProbe, quantiles
    except ImportError:  # --before code older than the probe: this tree's, beside this script
        from loopprobe import Arrivals, LoopProbe, quantiles  # type: ignore[no-redef]

    i, k = spec["shard"]
    doc = {
        "bridge": {"id": "bench-%d" % i, "metrics": "", "shard": "%d/%d" % (i, k)},
        "store": {"path": spec["store"], "commit_interval": spec["commit"],
                  **({"writer": spec["writer"]} if spec["writer"] != "process" else {})},
        "polling": polling(spec["hz"], spec["timeout"], spec.get("hello")),
        "device": [{"id": d["id"], "udp": d["udp"], "timestamp": "prefix_us",
                    **({"key": d["key"]} if "key" in d else {"auth": False})} for d in spec["devices"]],
    }  # fmt: skip
    b = Bridge(parse(doc), logs.setup("error"))
    await b.start()
    sends: dict[Any, list[float]] = {}
    send = b.sched._send
    lateness = array("d")  # per POLL: how long after its due time it went out (s)
    late_answer = array("d")  # the same, for POLLs whose answer before was read after their due time

    kinds: dict[Any, int] = {}  # per runner: the request sent last
    sent_at: dict[Any, float] = {}  # per runner: wall-clock time its outstanding request went out
    probing = spec.get("probe", True)
    arrivals = Arrivals(b._udp.sock) if b._udp is not None and probing else None
    measuring = [False]
    on_datagram = DeviceRunner.on_datagram

    def stamped(r: Any, data: bytes) -> None:
        t = arrivals.stamp() if arrivals is not None and measuring[0] else None
        if t is not None:
            assert arrivals is not None
            if r.waiting and r in sent_at:
                arrivals.answer.append(t - sent_at[r])
            arrivals.read.append(time.time() - t)
        on_datagram(r, data)

    if arrivals is not None:
        DeviceRunner.on_datagram = stamped  # type: ignore[method-assign]

    def timed_send(r: Any, now: float) -> None:
        sent_at[r] = time.time()
        periodic = getattr(r, "hello_next", False)  # the periodic HELLO, between two POLLs
        send(r, now)
        kind = kinds.get(r)
        kinds[r] = PERIODIC if periodic else r.client.outstanding
        if r.client.outstanding != REQ_POLL:
            return  # a HELLO is not a poll
        if kind in (REQ_POLL, PERIODIC):  # (a POLL right after another HELLO is due when that went out)
            (late_answer if r.last_rx > r.due else lateness).append(now - r.due)
        ts = sends.get(r)
        if ts is None:
            sends[r] = ts = []
        if not ts or ts[-1] != now:  # copies and a second POLL go out at the same time: one poll
            ts.append(now)

    b.sched._send = timed_send  # type: ignore[method-assign]
    loop = asyncio.get_running_loop()
    print("ready", flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)
    await asyncio.sleep(spec["warmup"])
    wpid = b.store.proc.pid if isinstance(b.store, StoreProcess) else None
    probe = LoopProbe() if probing else None
    if probe is not None:
        probe.start()
    measuring[0] = True
    del lateness[:], late_answer[:]

    def snap() -> tuple[float, ...]:
        cs = b.clients.values()
        return (time.process_time(), cpu_seconds(wpid) or 0.0, sum(c.dc["round_trips"] for c in cs),
                sum(c.dc["timeouts"] for c in cs), b.events_committed, loop.time())  # fmt: skip

    s0 = snap()
    await asyncio.sleep(spec["seconds"])
    s1 = snap()
    if probe is not None:
        probe.stop()
    measuring[0] = False
    await b.stop()
    if b.failed is not None:
        raise RuntimeError("bridge shard %d failed: %r" % (i, b.failed))
    means, p99s, mean_off, p99_off, requests = interval_ratios(
        sends, s0[5], s1[5], 1.0 / spec["hz"], len(b.clients)
    )
    d = [y - x for x, y in zip(s0, s1, strict=True)]
    return {"cpu": d[0], "wcpu": d[1], "rt": d[2], "to": d[3], "events": d[4], "requests": requests,
            "devices": len(b.clients), "window": d[5],
            "store": spec["store"],
            "mean_ratios": means, "p99_ratios": p99s, "mean_off": mean_off, "p99_off": p99_off,
            "probe": probe.result() if probe is not None else None,
            "send_late_ms": [1e3 * q for q in quantiles(lateness)],
            "late_answers": len(late_answer),
            "late_answer_ms": [1e3 * q for q in quantiles(late_answer)],
            "arrivals": arrivals.result() if arrivals is not None and arrivals.ok else None}  # fmt: skip


# -- the CPU of a round trip's parts, without I/O (its own process: --rt-cost) -------------------------


def rt_cost(
    devices: int, rounds: int, hz: float = 2.0, rate: float = 1.0, commit: float = 0.1
) -> dict[str, Any]:
    """CPU per round trip of the bridge's parts without sockets or event loop, in virtual time: the
    fleet's signed devices (VirtualRing, `rate` events/s, 64 B) answer in this process, each polled
    at `hz`; a commit (drain + Store.write, synchronous "normal": the fsync is not CPU) every
    `commit` s. CPU time (process_time) around each part for a whole slice of devices at a time:
    what the shared machine's load changes little (no preemption counted, the same work every run).
    Runs whatever leadwire is on the path (the --before code too)."""
    import inspect

    from leadwire.bridge.client import DeviceClient
    from leadwire.bridge.config import DeviceConfig, PollConfig
    from leadwire.bridge.store import Batch, Store, drain
    from leadwire.tools.simdevice import VirtualRing

    t0_us = 1_700_000_000_000_000
    poll = PollConfig(**polling(hz, 0.5))
    rings = [VirtualRing(i, rate, 1024, 64, key=os.urandom(32), t0_us=t0_us) for i in range(devices)]
    with tempfile.TemporaryDirectory() as td:
        store = Store(str(Path(td) / "cost.db"), "cost", synchronous="normal")
        states = store.register_many([(r.board_id, "udp", "127.0.0.1:1") for r in rings])
        cfgs = [DeviceConfig(r.board_id, "udp", key=r.key, timestamp="prefix_us") for r in rings]
        clients = [DeviceClient(dev, cfg, poll, st) for cfg, (dev, st) in zip(cfgs, states, strict=True)]
        try:  # the collector as a running bridge has it (Bridge.start), where the code has that
            from leadwire.bridge import heap
        except ImportError:
            heap = None  # type: ignore[assignment]
        if heap is not None:
            heap.settle()
        timed_drain = "now" in inspect.signature(drain).parameters
        slices = max(1, round(1 / hz / commit))
        pt = time.process_time
        parts = dict.fromkeys(("request", "device", "receive", "drain", "write"), 0.0)
        rts = 0
        t = 0.0
        for rnd in range(rounds):
            if rnd == 3:  # HELLOs and first contacts done
                parts = dict.fromkeys(parts, 0.0)
                rts = 0
            for j in range(slices):
                idx = range(j, devices, slices)
                now_us = t0_us + int(t * 1e6)
                a = pt()
                reqs = [clients[i].request_bytes(t) for i in idx]
                b = pt()
                answers = [rings[i].handle(d, now_us) for i, d in zip(idx, reqs, strict=True)]
                c = pt()
                for i, frames in zip(idx, answers, strict=True):
                    for ans in frames:
                        clients[i].receive(ans, t + 0.0005, now_us)
                d = pt()
                t += commit
                batch = Batch()
                drain(clients, batch, t) if timed_drain else drain(clients, batch)
                e = pt()
                batch.commit_us = now_us
                store.write(batch)
                f = pt()
                for k, v in zip(parts, (b - a, c - b, d - c, e - d, f - e), strict=True):
                    parts[k] += v
                rts += len(idx)
        store.close()
        if heap is not None:
            heap.release()
    out: dict[str, Any] = {k + "_us_per_rt": 1e6 * v / max(1, rts) for k, v in parts.items()}
    out["bridge_us_per_rt"] = sum(out[k + "_us_per_rt"] for k in ("request", "receive", "drain"))
    out.update(devices=devices, round_trips=rts)
    return out


def rt_cost_run(devices: int, rounds: int, code: str | None) -> dict[str, Any]:
    """rt_cost in a process of its own, with the bridge code at `code` (a PYTHONPATH) or this tree's."""
    env = {**os.environ, "PYTHONPATH": code} if code else None
    r = subprocess.run([sys.executable, __file__, "--rt-cost", str(devices), str(rounds)], env=env,
                       capture_output=True, text=True, check=True, timeout=600)  # fmt: skip
    out: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    out["code"] = "before" if code else "now"
    return out


def main() -> None:
    from leadwire.tools.simdevice import raise_nofile

    raise_nofile()
    if sys.argv[1] == "--rt-cost":
        print(json.dumps(rt_cost(int(sys.argv[2]), int(sys.argv[3]))))
        return
    path = Path(sys.argv[1])
    out = asyncio.run(shard(json.loads(path.read_text())))
    path.with_suffix(".out").write_text(json.dumps(out))


if __name__ == "__main__":
    main()
