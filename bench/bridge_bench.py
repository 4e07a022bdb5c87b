"""Bridge benchmark: ingest rate into the durable store vs SQLite's own batched inserts, devices per
process at 10 Hz, generation-to-commit latency, and the effect of adaptive polling.

    .venv/bin/python bench/bridge_bench.py            # full run (about 1.5 minutes)
    .venv/bin/python bench/bridge_bench.py --quick    # smaller and shorter

Phases (one run, one machine; the simulated devices run in another process — tools/fleetsim.py —
the bridge in this one, so on 2 cores each side has about one core):

1. SQLite baseline: executemany of the bridge's event rows in 10,000-row transactions into
   (a) one plain events table, and (b) the bridge's own schema through ``Store.write`` (events +
   arrival log + device rows), with no protocol work at all.
2. Ingest: D devices producing events as fast as configured; the bridge polls them (adaptive,
   batches of up to 255 events / 2,047 bytes) and commits. Events committed per second over the
   measurement window, and the p99 of (commit time - generation time carried in each event).
3. Fleet at 10 Hz: 1,000 devices polled every 100 ms (adaptive polling off): round trips per
   second achieved, timeouts, p99 latency.
4. Adaptive polling, in virtual time (sans-I/O client + simulated ring, deterministic): bursty
   traffic against fixed intervals and against the adaptive policy: polls sent and events lost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from leadwire.bridge import logs
from leadwire.bridge.client import DeviceClient
from leadwire.bridge.config import DeviceConfig, PollConfig, parse
from leadwire.bridge.daemon import Bridge
from leadwire.bridge.store import Batch, Store
from leadwire.tools.fleetsim import Fleet
from leadwire.tools.simdevice import EVENT, SimCore, raise_nofile

ROW_BATCH = 10_000


def pct(values: list[int], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] / 1000.0  # us -> ms


# -- 1. SQLite baseline ---------------------------------------------------------------------


def sqlite_baseline(tmp: Path, rows: int) -> dict[str, float]:
    payload = EVENT.pack(0, 0, 0)
    ev = [(1, 7, i, 1 + i % 3, 0, payload, i + 1) for i in range(rows)]
    db = tmp / "plain.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(
        "CREATE TABLE events(dev INTEGER, boot_epoch INTEGER, offset INTEGER, channel INTEGER,"
        " priority INTEGER, data BLOB, arrival INTEGER, PRIMARY KEY(dev, boot_epoch, offset)) WITHOUT ROWID"
    )
    t0 = time.perf_counter()
    for i in range(0, rows, ROW_BATCH):
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO events VALUES (?,?,?,?,?,?,?)", ev[i : i + ROW_BATCH])
        conn.execute("COMMIT")
    plain = rows / (time.perf_counter() - t0)
    conn.close()

    store = Store(str(tmp / "schema.db"), "bench")
    dev, _ = store.register("bench-dev", "sim", "-")
    now = time.time_ns() // 1000
    arr = [
        (dev, i + 1, 0, 7, 1, 1 + i % 3, 0, -1, i, 1, False, False, 0, 16, 19, now, now) for i in range(rows)
    ]
    ev2 = [(dev, *e[1:]) for e in ev]
    snap = (0, 1, 7, 1, None, 0, 0, 0, "", "", "", "{}", dev)
    t0 = time.perf_counter()
    for i in range(0, rows, ROW_BATCH):
        store.write(
            Batch(
                events=ev2[i : i + ROW_BATCH], arrivals=arr[i : i + ROW_BATCH], devices=[snap], commit_us=now
            )
        )
    schema = rows / (time.perf_counter() - t0)
    store.close()
    return {"sqlite_plain_rows_per_s": plain, "sqlite_bridge_schema_events_per_s": schema}


def pipeline(tmp: Path, events: int, devices: int = 100) -> dict[str, float]:
    """Encoded EVENTS answers -> DeviceClient (PollClient, lead, rows) -> Store.write, one thread.

    The answers are made beforehand by simulated devices; what is timed is exactly the bridge's work
    per answer (decode + CRC, the spec 004 client, lead and arrival rows) and the store commits.
    """
    from leadwire import codec
    from leadwire.bridge.store import drain

    store = Store(str(tmp / "pipeline.db"), "bench")
    per = events // devices
    work = []
    clients = []
    for i in range(devices):
        core = SimCore(i, capacity=per + 1, start=1000 * i)
        key, st = store.register("p%d" % i, "sim", "-")
        cl = DeviceClient(
            key,
            DeviceConfig("p%d" % i, "udp", timestamp="prefix_us"),
            PollConfig(batch=100, max_bytes=2047),
            st,
        )
        for out in core.handle(codec.encode(cl.request(0.0))):  # HELLO
            cl.on_frame(codec.decode(out), len(out), 0.0, 1)
        core.write_events(per)
        for out in core.handle(codec.encode(cl.request(0.0))):  # first contact
            cl.on_frame(codec.decode(out), len(out), 0.0, 1)
        frames = []
        n = cl.n
        while True:  # the answers the bridge will get, one per poll
            req = cl.request(0.0)
            (out,) = core.handle(codec.encode(req))
            f = codec.decode(out)
            if f.type != 3:
                break
            frames.append((req, out))
            cl.pc.n = (f.seq + f.payload[0] - 1) & 0xFFFFFFFF
        cl.pc.n = n
        cl.out_events.clear()
        cl.out_arrivals.clear()
        cl.out_losses.clear()
        cl.out_boots.clear()
        clients.append(cl)
        work.append(frames)
    batch = Batch()
    drain(clients, batch)
    store.write(batch)
    total = 0
    t0 = time.perf_counter()
    rounds = max(len(w) for w in work)
    for r in range(rounds):
        for cl, frames in zip(clients, work, strict=True):
            if r < len(frames):
                req, out = frames[r]
                cl.pc.tag = req.message_id  # the request this answer was made for
                cl.outstanding = 3
                cl.on_frame(codec.decode(out), len(out), 0.0, time.time_ns() // 1000)
        if r % 5 == 4 or r == rounds - 1:  # a commit every 5 polls of every device (~10,000 events)
            batch = Batch(commit_us=time.time_ns() // 1000)
            drain(clients, batch)
            total += len(batch.events)
            store.write(batch)
    dt = time.perf_counter() - t0
    store.close()
    return {"pipeline_events_per_s": total / dt, "pipeline_events": total}


# -- 2./3. live runs ------------------------------------------------------------------------


async def live(
    tmp: Path, name: str, fleet: Fleet, polling: dict[str, Any], warmup: float, seconds: float
) -> dict[str, Any]:
    doc = {
        "bridge": {"id": "bench", "metrics": ""},
        "store": {"path": str(tmp / (name + ".db")), "commit_interval": 0.05},
        "polling": polling,
        "device": [{"id": d["id"], "udp": d["udp"], "timestamp": "prefix_us"} for d in fleet.devices],
    }
    b = Bridge(parse(doc), logs.setup("error"), keep_latencies=True)
    await b.start()
    await asyncio.sleep(warmup)
    e0 = b.events_committed
    rt0 = sum(c.dc["round_trips"] for c in b.clients.values())
    to0 = sum(c.dc["timeouts"] for c in b.clients.values())
    lat0 = len(b.latencies_us)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    await asyncio.sleep(seconds)
    dt = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    events = b.events_committed - e0
    rts = sum(c.dc["round_trips"] for c in b.clients.values()) - rt0
    tos = sum(c.dc["timeouts"] for c in b.clients.values()) - to0
    lat = list(b.latencies_us[lat0:])
    lost = sum(c.dc["overrun_lost"] for c in b.clients.values())
    await b.stop()
    return {
        "devices": len(b.clients),
        "events_per_s": events / dt,
        "round_trips_per_s": rts / dt,
        "polls_per_device_per_s": rts / dt / max(1, len(b.clients)),
        "timeouts": tos,
        "overrun_lost": lost,
        "latency_p50_ms": pct(lat, 0.50),
        "latency_p99_ms": pct(lat, 0.99),
        "bridge_cpu_percent": 100.0 * cpu / dt,
    }


# -- 4. adaptive polling in virtual time -----------------------------------------------------


CAPACITY = 1024  # ring of the simulated device in the adaptive demo


def bursty(t: float) -> float:
    """Events per second at time t: idle, a 2 s burst of 2,000/s every 20 s, a steady trickle."""
    return 2000.0 if (t % 20.0) < 2.0 else 5.0


def simulate(poll: PollConfig, horizon: float = 120.0, rtt: float = 0.002) -> dict[str, float]:
    core = SimCore(0, capacity=CAPACITY, start=1000)
    cl = DeviceClient(1, DeviceConfig("sim", "udp"), poll)
    from leadwire import codec

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
        cl.out_events.clear()
        cl.out_arrivals.clear()
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--ingest-devices", type=int, default=100)
    ap.add_argument("--ingest-rate", type=float, default=1500.0, help="events/s per device in the ingest run")
    ap.add_argument("--fleet-devices", type=int, default=1000)
    ap.add_argument("--fleet-rate", type=float, default=20.0, help="events/s per device in the 10 Hz run")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args()
    if args.quick:
        args.seconds = 4.0
        args.fleet_devices = min(args.fleet_devices, 300)
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
    print("leadwire bridge bench --", res["machine"], flush=True)
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        res.update(sqlite_baseline(tmp, 200_000 if args.quick else 500_000))
        res.update(pipeline(tmp, 100_000 if args.quick else 300_000))
        print(
            "bridge pipeline without network (decode, client, lead, rows, commits; one thread): %.0f events/s"
            % res["pipeline_events_per_s"],
            flush=True,
        )
        print(
            "SQLite batched inserts (10k rows/txn): plain table %.0f rows/s; bridge schema %.0f events/s"
            % (res["sqlite_plain_rows_per_s"], res["sqlite_bridge_schema_events_per_s"]),
            flush=True,
        )

        with Fleet(args.ingest_devices, args.ingest_rate, capacity=8192) as fleet:
            ingest = asyncio.run(
                live(
                    tmp,
                    "ingest",
                    fleet,
                    {
                        "batch": 255,
                        "max_bytes": 2047,
                        "interval": 0.02,
                        "interval_min": 0.002,
                        "interval_max": 0.1,
                        "timeout": 0.5,
                    },
                    2.0,
                    args.seconds,
                )
            )
        res["ingest"] = ingest
        print(
            "ingest: %d devices x %.0f ev/s offered -> %.0f events/s committed; p50 %.1f ms, p99 %.1f ms "
            "gen->commit; overrun lost %d; bridge CPU %.0f%%"
            % (
                ingest["devices"],
                args.ingest_rate,
                ingest["events_per_s"],
                ingest["latency_p50_ms"],
                ingest["latency_p99_ms"],
                ingest["overrun_lost"],
                ingest["bridge_cpu_percent"],
            ),
            flush=True,
        )

        with Fleet(args.fleet_devices, args.fleet_rate, capacity=1024) as fleet:
            f10 = asyncio.run(
                live(
                    tmp,
                    "fleet",
                    fleet,
                    {
                        "adaptive": False,
                        "interval": 0.1,
                        "interval_min": 0.1,
                        "interval_max": 0.1,
                        "batch": 64,
                        "timeout": 0.5,
                    },
                    3.0,
                    args.seconds,
                )
            )
        res["fleet_10hz"] = f10
        print(
            "10 Hz fleet: %d devices -> %.0f round trips/s (%.2f Hz per device), %.0f events/s, timeouts %d, "
            "p99 %.1f ms gen->commit; bridge CPU %.0f%%"
            % (
                f10["devices"],
                f10["round_trips_per_s"],
                f10["polls_per_device_per_s"],
                f10["events_per_s"],
                f10["timeouts"],
                f10["latency_p99_ms"],
                f10["bridge_cpu_percent"],
            ),
            flush=True,
        )

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
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
