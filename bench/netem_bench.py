"""netem benchmark: the UDP proxy's own rate, a poll session through it, and lossy links.

Run: .venv/bin/python bench/netem_bench.py [--seconds 10] [--seed 1] [--before REF] [--skip ...]

1. rate: datagrams per second the clean proxy carries (client -> proxy -> echo -> proxy -> client,
   a window of 32 in flight), against the same echo without the proxy.
2. session: a virtual board (sensors 1 x 50 Hz) polled through a proxy impairing both directions
   (loss 0.1, dup 0.05, reorder 0.05, delay 2 +- 1 ms, corrupt 0.01, seed 1) by the core's PollClient.
   Cross-checks: the board's bad-frame counter (health channel) equals the corrupted POLL copies
   netem sent it; the client's undecodable answers equal the corrupted copies netem sent down;
   nothing the board generated is lost (the protocol retries each lost poll).
3. lossy (UDP): the bridge (bench/peer_mqtt/lw_host.py, a process) polling a virtual board (the
   firmware, 64 KB heap, busy tick) through the proxy at 0, 1% and 5% loss each way, a ladder of
   offered rates per event size: per size the lossy/lossless ratio of acknowledged events/s, the
   highest offered rate with no counted loss, and the RTO statistics (host/bridge/rtt.py).
4. serial: the same over a pty at 1 Mbaud (netem's line rate), byte loss (runs of 1..16 bytes)
   at the per-byte rate that loses 1% and 5% of 1,000-byte frames.
5. fleet: 1,000 simulated devices (tools/simdevice.py) at 10 Hz fixed polling, 1% of the datagrams
   dropped each way by nftables in a private network namespace (as root; 1,000 netem proxies in
   one Python process carry only ~5 polls/s per device here: --fleet-proxies), the bridge in a
   process: polls answered per second per device (mean, lowest) and timeouts, and without loss.
With --before REF every leadwire run is made twice, with the bridge code of git ref REF (same
board, same proxy) and with this tree's: before/after from one run.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click

from leadwire import client, codec, messages, wire
from leadwire.tools import lwbench  # the benches' shared leadwire harness
from leadwire.tools.benchkit import fmt, table
from leadwire.tools.board import start_board
from leadwire.tools.netem import Impairment, SerialImpairer, UdpImpairer, in_thread

HEALTH_CH = 8


class Endpoint(asyncio.DatagramProtocol):
    def __init__(self, echo: bool = False) -> None:
        self.echo = echo
        self.q: asyncio.Queue[bytes] = asyncio.Queue()
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if self.echo:
            self.transport.sendto(data, addr)
        else:
            self.q.put_nowait(data)


async def rate(seconds: float, through_proxy: bool) -> float:
    loop = asyncio.get_running_loop()
    _, echo = await loop.create_datagram_endpoint(lambda: Endpoint(True), local_addr=("127.0.0.1", 0))
    _, cl = await loop.create_datagram_endpoint(Endpoint, local_addr=("127.0.0.1", 0))
    target = echo.transport.get_extra_info("sockname")[:2]
    imp = None
    if through_proxy:
        imp = await UdpImpairer(("127.0.0.1", 0), target, Impairment()).start()
        target = imp.address
    n = 0
    end = time.monotonic() + seconds
    t0 = time.monotonic()
    while time.monotonic() < end:
        for _ in range(32):
            cl.transport.sendto(b"x" * 64, target)
        for _ in range(32):
            await asyncio.wait_for(cl.q.get(), 2)
        n += 32
    dt = time.monotonic() - t0
    if imp is not None:
        await imp.stop()
    echo.transport.close()
    cl.transport.close()
    return n / dt


async def session(address: tuple[str, int], seconds: float, seed: int) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    prof = Impairment(loss=0.1, dup=0.05, reorder=0.05, reorder_ms=20, delay_ms=2, jitter_ms=1, corrupt=0.01,
                      seed=seed)  # fmt: skip
    imp = await UdpImpairer(("127.0.0.1", 0), address, prof).start()
    _, cl = await loop.create_datagram_endpoint(Endpoint, local_addr=("127.0.0.1", 0))
    pc = client.PollClient()
    undecodable = 0
    health: list[tuple[int, int]] = []  # (offset, bad frames)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        req = pc.next_request(64, 1000)
        cl.transport.sendto(codec.encode(req), imp.address)
        deadline = loop.time() + 0.05
        answered = False
        while not answered:
            try:
                data = await asyncio.wait_for(cl.q.get(), max(deadline - loop.time(), 0.0001))
            except TimeoutError:
                break
            try:
                f = codec.decode(data)
            except wire.WireError:
                undecodable += 1
                continue
            kind, out = pc.on_frame(f)
            if kind == client.EVENTS:
                health += [
                    (o, messages.decode_health(d)["bad_frames"]) for o, ch, d in out if ch == HEALTH_CH
                ]
            answered = kind not in (client.STALE, client.OTHER)
        if not answered:
            pc.on_timeout()
    # drain: no impairment left in flight, then read the board's counters without netem's help
    await asyncio.sleep(0.2)
    while not cl.q.empty():
        try:
            codec.decode(cl.q.get_nowait())
        except wire.WireError:
            undecodable += 1
    await imp.stop()
    counts = imp.snapshot()
    cl.transport.close()
    return {"netem": counts, "client": {"received": pc.received, "lost": pc.lost, "restarts": pc.restarts,
            "transport_errors": pc.transport_errors, "stale": pc.stale, "undecodable": undecodable},
            "health": health}  # fmt: skip


def last_bad_frames(address: tuple[str, int], after: float) -> int:
    """Poll the board directly (no netem) until a health record written `after` s from now."""
    import socket

    time.sleep(after)
    pc = client.PollClient()
    last = -1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(1)
        for _ in range(200):
            s.sendto(codec.encode(pc.next_request(255, 1400)), address)
            try:
                kind, out = pc.on_frame(codec.decode(s.recv(4096)))
            except TimeoutError:
                pc.on_timeout()
                continue
            if kind == client.EVENTS:
                for _, ch, d in out:
                    if ch == HEALTH_CH:
                        last = messages.decode_health(d)["bad_frames"]
            elif kind == client.NOTHING:
                break
    return last


# -- 3./4. lossy links: the bridge (a process) and a virtual board through netem ---------------------


def frame_loss_to_byte(p: float, frame: int = 1000) -> float:
    """Per-byte loss start probability that loses a fraction p of `frame`-byte frames."""
    return 1.0 - (1.0 - p) ** (1.0 / frame)


def lw_netem(tmp: Path, transport: str, size: int, hz: int, loss: float, seconds: float,
             code: str | None, seed: int, pipeline: bool = True) -> dict[str, Any]:  # fmt: skip
    """One leadwire run through netem (loss each way); the fields of peer_mqtt_bench.lw_run that the
    loss report reads."""
    run = Path(tempfile.mkdtemp(prefix="lw-%s-%d-%d-" % (transport, size, hz), dir=tmp))
    ring = {64: 264, 256: 60}.get(size, 128)
    cfg: dict[str, Any] = {"ring": ring, "slot": size, "tick": 0, "health": {"ms": 1000},
                           "sensors": [{"ch": 1, "hz": hz, "size": size}]}  # fmt: skip
    if transport == "udp":
        cfg["udp"] = {"frame": 1472}
        prof = Impairment(loss=loss, seed=seed)
    else:
        cfg["serial"] = {"frame": 1024}
        prof = Impairment(loss=frame_loss_to_byte(loss), rate=1_000_000, seed=seed)
    while True:
        board = start_board(transport, config=cfg, board_dir=run / "board")
        if "ring %dx%d," % (ring, size) in board.console():
            break
        board.close()  # the boot fell back to safe defaults (the free heap varies): a smaller ring
        if ring <= 16:
            raise RuntimeError("the board made no %d B ring (64 KB heap)" % size)
        ring -= max(1, ring // 32)
        cfg["ring"] = ring
    host = None
    try:
        imp: Any = UdpImpairer(("127.0.0.1", 0), board.address, prof) if transport == "udp" else (
            SerialImpairer(board.port, prof))  # fmt: skip
        with in_thread(imp) as imp:
            link = (["--board", "%s:%d" % imp.address] if transport == "udp"
                    else ["--serial", imp.port, "--baud", "1000000"])  # fmt: skip
            # rto_min: loopback, a 2 ms floor
            host = lwbench.lw_host(link, run / "lw.db", 10_000_000, seconds, 0.25, 16, pipeline, code, 0.002,
                               max_bytes=1460 if transport == "udp" else 1000)  # fmt: skip
            res = host.wait_line("store", seconds + 90)
            counts = imp.snapshot()
    finally:
        if host is not None:
            host.kill()
        board.close()
    st = res["store"]
    return {"system": "leadwire", "transport": transport, "size": size, "loss": loss, "offered_hz": hz,
            "code": "before" if code else "now", "rate": lwbench.commit_rate(res["commits"]),
            "known_lost": st.get("counted_lost", 0), "silent_lost": st.get("silent_lost", 0),
            "accounting_ok": st.get("accounting_ok", True), "ledger": st.get("ledger", ""),
            "received": st.get("events_all_channels", 0), "counters": res["counters"], "rto": res.get("rto"),
            "bridge_cpu_s": res["bridge_cpu_s"], "committed_in_window": res.get("committed_in_window"),
            "wall_s": res["wall_s"], "pipeline": pipeline, "ring": ring,
            "netem": {d: {k: v for k, v in counts[d].items() if k in ("in", "lost", "in_bytes", "loss_runs")}
                      for d in ("up", "down")}}  # fmt: skip


def ladders(tmp: Path, transport: str, sizes: dict[int, list[int]], losses: list[float], seconds: float,
            codes: list[str | None], seed: int, repeat: int = 1) -> list[dict[str, Any]]:  # fmt: skip
    """Each point with each code back to back (paired: the load of a shared machine drifts); with
    repeat > 1 each point `repeat` times per code, the codes' order swapped on every other one."""
    out = []
    for size, rates in sizes.items():
        for loss in [0.0, *losses]:
            for hz in rates:
                for i in range(repeat):
                    for code in codes if i % 2 == 0 else codes[::-1]:
                        r = lw_netem(tmp, transport, size, hz, loss, seconds, code, seed + i)
                        r["repeat"] = i
                        say_run(r)
                        out.append(r)
    return out


def say_run(r: dict[str, Any]) -> None:
    print("  %s %s %d B loss %g @%d/s: %s events/s, counted lost %s, silent %s, timeouts %s"
          % (r["code"], r["transport"], r["size"], r["loss"], r["offered_hz"], fmt(r["rate"]),
             fmt(r["known_lost"]), fmt(r["silent_lost"]), r["counters"].get("timeouts")),
          file=sys.stderr, flush=True)  # fmt: skip


def mean_runs(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The repeats of each point (code, transport, size, loss, offered rate) as one row: mean events/s
    and timeouts, the most events counted (and silently) lost of any repeat (a point is loss-free only
    when every repeat was), the RTO statistics of the first."""
    by: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in runs:
        by.setdefault((r["code"], r["transport"], r["size"], r["loss"], r["offered_hz"]), []).append(r)
    out = []
    for rs in by.values():
        m = dict(rs[0])
        m["rate"] = sum(r["rate"] for r in rs) / len(rs)
        m["known_lost"] = max(r["known_lost"] for r in rs)
        m["silent_lost"] = max(r["silent_lost"] for r in rs)
        m["counters"] = dict(rs[0]["counters"], timeouts=round(sum(r["counters"].get("timeouts") or 0
                                                                   for r in rs) / len(rs)))  # fmt: skip
        m["repeats"] = len(rs)
        out.append(m)
    return out


# -- 5. a fleet of 1,000 devices at 10 Hz, each behind its own proxy --------------------------------


async def fleet_run(devices: int, hz: float, loss: float, seconds: float, code: str | None,
                    tmp: Path, kernel: bool = False) -> dict[str, Any]:  # fmt: skip
    """kernel: no proxies, the loss is nftables' (in a private network namespace, fleet_inside)."""
    from leadwire.tools.simdevice import SimFleet

    fleet = await SimFleet(devices, rate=1.0, capacity=256, seed=3, channels=1).start()
    imps = []
    try:
        if kernel:
            devs = [{"id": d["id"], "udp": d["udp"], "auth": False} for d in fleet.describe()]
        else:
            for i, link in enumerate(fleet.links):
                imp = UdpImpairer(("127.0.0.1", 0), link.address, Impairment(loss=loss, seed=i))
                imps.append(await imp.start())
            devs = [{"id": d["id"], "udp": "%s:%d" % imp.address, "auth": False}
                    for d, imp in zip(fleet.describe(), imps, strict=True)]  # fmt: skip
        cfg = Path(tempfile.mkdtemp(dir=tmp)) / "fleet.json"
        cfg.write_text(json.dumps({"devices": devs, "hz": hz, "seconds": seconds}))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(Path(__file__).resolve()), "--fleet-bridge", str(cfg),
            stdout=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONPATH": code} if code else None,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(proc.communicate(), seconds + 120)
    finally:
        for imp in imps:
            await imp.stop()
        await fleet.stop()
    res = json.loads(out.decode().strip().splitlines()[-1])
    res.update(code="before" if code else "now", loss=loss, devices=devices, hz=hz)
    return res


def nft_loss(loss: float) -> None:
    """Every UDP datagram on lo dropped with probability `loss` (each way: requests and answers)."""
    import subprocess

    subprocess.run(["nft", "delete", "table", "inet", "lwfleet"], capture_output=True)
    chain = "add chain inet lwfleet input { type filter hook input priority 0; policy accept; }"
    rules = ["add table inet lwfleet", chain]
    if loss > 0:
        rules.append("add rule inet lwfleet input meta l4proto udp numgen random mod 10000 < %d drop"
                     % round(loss * 10000))  # fmt: skip
    subprocess.run(["nft", "-f", "-"], input="\n".join(rules) + "\n", text=True, check=True)


def fleet_table(a: SimpleNamespace, codes: list[str | None], tmp: Path, kernel: bool) -> str:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 4 * a.fleet + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    rows = [["code", "loss each way", "answered polls/s per device (mean)", "lowest device",
             "devices < 9/s", "polls sent/s per device", "timeouts", "spurious", "median SRTT ms",
             "bridge CPU %"]]  # fmt: skip
    for loss in (0.0, 0.01):
        if kernel:
            nft_loss(loss)
        for code in codes:
            f = asyncio.run(fleet_run(a.fleet, 10.0, loss, a.fleet_seconds, code, tmp, kernel))
            rows.append([f["code"], "%g%%" % (100 * loss), "%.2f" % f["answered_per_device_s"],
                         "%.2f" % f["lowest_device_s"], str(f["below_9"]),
                         "%.2f" % f["polls_per_device_s"], str(f["timeouts"]), fmt(f["spurious"]),
                         "%.2f" % f["srtt_ms_median"] if f["srtt_ms_median"] else "-",
                         "%.0f" % f["bridge_cpu_pct"]])  # fmt: skip
    how = "nftables drops in a private network namespace" if kernel else "each behind its own netem proxy"
    return "\n### fleet: %d devices at 10 Hz, %s (load average now %s)\n\n%s" % (
        a.fleet,
        how,
        loadavg(),
        table(rows),
    )


async def fleet_bridge(cfg_path: str) -> dict[str, Any]:
    """Child: the bridge polling the fleet at a fixed interval; per-device answered polls per second."""
    from leadwire.bridge import logs
    from leadwire.bridge.config import parse
    from leadwire.bridge.daemon import Bridge

    spec = json.loads(Path(cfg_path).read_text())
    doc = {"bridge": {"id": "fleet", "metrics": ""},
           "store": {"path": str(Path(cfg_path).parent / "fleet.db"), "commit_interval": 0.2},
           "polling": {"interval": 1.0 / spec["hz"], "adaptive": False, "batch": 64},
           "device": spec["devices"]}  # fmt: skip
    b = Bridge(parse(doc), logs.setup("error"))
    await b.start()
    await asyncio.sleep(3.0)  # first contact for every device, spread over one interval
    cs = list(b.clients.values())
    rt0 = [c.dc["round_trips"] for c in cs]
    p0 = sum(c.dc["polls"] for c in cs)
    to0 = sum(c.dc["timeouts"] for c in cs)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    await asyncio.sleep(spec["seconds"])
    dt = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    per = sorted((c.dc["round_trips"] - r) / dt for c, r in zip(cs, rt0, strict=True))
    rto = [c.rtt.stats() for c in cs if hasattr(c, "rtt")]
    await b.stop()
    srtts = sorted(r["srtt"] for r in rto if r["srtt"] is not None)
    return {
        "answered_per_device_s": sum(per) / len(per),
        "lowest_device_s": per[0],
        "p1_device_s": per[len(per) // 100],
        "below_9": sum(1 for v in per if v < 9.0),
        "polls_per_device_s": (sum(c.dc["polls"] for c in cs) - p0) / dt / len(cs),
        "timeouts": sum(c.dc["timeouts"] for c in cs) - to0,
        "bridge_cpu_pct": 100 * cpu / dt,
        "srtt_ms_median": 1e3 * srtts[len(srtts) // 2] if srtts else None,
        "spurious": sum(r["spurious"] for r in rto) if rto else None,
        "rto_samples": sum(r["samples"] for r in rto) if rto else None,
    }


def loadavg() -> str:
    return "%.1f %.1f %.1f" % os.getloadavg()


def _rates(text: str) -> dict[int, list[int]]:
    """ "64:500/1000,256:10000" -> {64: [500, 1000], 256: [10000]} (payload size: offered rates)."""
    pairs = (p.split(":") for p in text.split(",") if p)
    return {int(k): [int(x) for x in v.split("/")] for k, v in pairs}


def pipeline_phase(tmp: Path, a: SimpleNamespace) -> None:
    """Pipelined POLLs on / off on a clean link, interleaved A/B."""
    # the cost that kept pipelining opt-in: bridge CPU per committed event at low rates, A/B
    rows = [["size", "offered/s", "pipelined: events/s", "CPU us/event", "POLLs pipelined",
             "not pipelined: events/s", "CPU us/event", "on / off: events/s", "CPU"]]  # fmt: skip
    for size, rs in _rates(a.pipeline_rates).items():
        for hz in rs:
            ab = {}
            for pipe in (True, False, True, False):  # interleaved, two of each: the better one
                r = lw_netem(tmp, "udp", size, hz, 0.0, a.lw_seconds, None, a.seed, pipe)
                r["cpu_us"] = 1e6 * r["bridge_cpu_s"] / max(1, r["committed_in_window"] or 0)
                if pipe not in ab or r["cpu_us"] < ab[pipe]["cpu_us"]:
                    ab[pipe] = r
            on, off = ab[True], ab[False]
            rows.append([str(size), fmt(hz), fmt(on["rate"]), "%.1f" % on["cpu_us"],
                         fmt(on["counters"].get("pipelined")), fmt(off["rate"]),
                         "%.1f" % off["cpu_us"], "%.2f" % (on["rate"] / off["rate"]),
                         "%.2f" % (on["cpu_us"] / off["cpu_us"])])  # fmt: skip
    print("\n### pipelined POLLs on / off, clean link (load average now %s)\n" % loadavg())
    print(table(rows), flush=True)


def loss_phases(
    tmp: Path, a: SimpleNamespace, skip: set[str], codes: list[str | None], losses: list[float]
) -> bool:
    """The loss ladders per transport; True when no event was lost silently."""
    ok = True
    lw: dict[str, Any] = {"sizes": [], "ladders": []}
    for transport, text in (("udp", a.udp_rates), ("serial", a.serial_rates)):
        if transport in skip:
            continue
        lw["ladders"] += ladders(tmp, transport, _rates(text), losses, a.lw_seconds, codes, a.seed, a.repeat)
        sizes = _rates(text)
        print("\n### %s, loss each way (load average now %s)\n" % (transport, loadavg()))
        runs = [r for r in lw["ladders"] if r["transport"] == transport]
        sub = {"sizes": list(sizes), "ladders": mean_runs(runs) if a.repeat > 1 else runs}
        if a.repeat > 1:
            print("(each point: the mean of %d runs per code, the codes' order swapped between them)\n"
                  % a.repeat)  # fmt: skip
        print(lwbench.loss_report(sub), flush=True)
        ok &= all(r["silent_lost"] == 0 and r.get("accounting_ok", True) for r in runs)
        for r in runs:
            if not r.get("accounting_ok", True):
                print("accounting failed: %s" % r["ledger"], file=sys.stderr, flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(lw["ladders"], indent=1, default=str))
    return ok


def fleet_phase(tmp: Path, a: SimpleNamespace, codes: list[str | None]) -> None:
    """The fleet run: through netem proxies, or in a private network namespace."""
    # 1,000 Python proxies cannot carry 10,000 round trips/s on two cores (the proxies, not
    # the bridge, made ~5 polls/s per device): the kernel drops the datagrams instead, in a
    # private network namespace, when root may make one (--fleet-proxies: tools/netem)
    if a.fleet_proxies or lwbench.netns_usable() is not None:
        print(fleet_table(a, codes, tmp, False), flush=True)
    else:
        import subprocess

        argv = [sys.executable, str(Path(__file__).resolve()), "--fleet-inside",
                "--fleet", str(a.fleet), "--fleet-seconds", str(a.fleet_seconds),
                "--before-tree", (codes[0] or "") if a.before else ""]  # fmt: skip
        subprocess.run(["unshare", "-n", *argv], check=False)


def session_phase(a: SimpleNamespace) -> bool:
    """One session through netem against a real board; True when its checks hold."""
    # health every 100 ms; a ring of 1024 so the board keeps everything the session has not polled yet
    cfg = {
        "sensors": [{"ch": 1, "hz": 50, "size": 16}],
        "health": {"ms": 100},
        "ring": 1024,
        "alarm": {"gap": 0},
    }
    with start_board("udp", config=cfg) as b:
        assert b.address is not None
        s = asyncio.run(session(b.address, a.seconds, a.seed))
        bad = last_bad_frames(b.address, 0.3)
    up, down = s["netem"]["up"], s["netem"]["down"]
    s["board_bad_frames"] = bad
    s["checks"] = {
        "board bad frames == corrupted POLL copies sent up": bad == up["corrupted_out"],
        "client undecodable == corrupted answer copies sent down": s["client"]["undecodable"]
        == down["corrupted_out"],
        "no event lost": s["client"]["lost"] == 0 and s["client"]["restarts"] == 0,
    }
    del s["health"]
    print(json.dumps(s, indent=1))
    return all(s["checks"].values())


@click.command(help=__doc__.split("\n")[0])
@click.option("--seconds", type=float, default=10.0)
@click.option("--seed", type=int, default=1)
@click.option("--lw-seconds", type=float, default=5.0, help="length of one leadwire run")
@click.option("--udp-rates", default="64:20000/60000/150000,256:10000/40000/100000")
@click.option("--serial-rates", default="64:500/1000/2000")
@click.option("--losses", default="0.01,0.05")
@click.option("--fleet", type=int, default=1000, help="devices in the fleet run")
@click.option("--fleet-seconds", type=float, default=10.0)
@click.option("--before", default="", help="git ref: every leadwire run also with that bridge code")
@click.option("--skip", default="", help="comma list of: proxy, session, pipeline, udp, serial, fleet")
@click.option("--pipeline-rates", default="64:500/2000/20000/100000", help="pipelining A/B, no loss")
@click.option("--fleet-proxies", is_flag=True, help="fleet through 1,000 netem proxies")
@click.option("--repeat", type=int, default=1, help="runs per point and code (order swapped); means reported")
@click.option("--out", default="", help="write every leadwire run's row here (JSON)")
@click.option("--fleet-bridge", default="", hidden=True)
@click.option("--fleet-inside", is_flag=True, hidden=True)
@click.option("--before-tree", default="", hidden=True)
def main(**kw: Any) -> None:
    sys.exit(bench(SimpleNamespace(**kw)))


def bench(a: SimpleNamespace) -> int:
    if a.fleet_inside:
        import subprocess

        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        with tempfile.TemporaryDirectory(prefix="netem-fleet-") as td:
            fcodes: list[str | None] = [a.before_tree, None] if a.before_tree else [None]
            print(fleet_table(a, fcodes, Path(td), True), flush=True)
        return 0
    if a.fleet_bridge:
        print(json.dumps(asyncio.run(fleet_bridge(a.fleet_bridge))), flush=True)
        return 0
    skip = set(a.skip.split(","))
    losses = [float(x) for x in a.losses.split(",") if x]
    print("load average at start: %s" % loadavg(), flush=True)
    with tempfile.TemporaryDirectory(prefix="netem-bench-") as td:
        tmp = Path(td)
        codes = [lwbench.before_tree(a.before, tmp / "before"), None] if a.before else [None]
        if "pipeline" not in skip:
            pipeline_phase(tmp, a)
        ok = loss_phases(tmp, a, skip, codes, losses)
        if "fleet" not in skip:
            fleet_phase(tmp, a, codes)
    if "proxy" in skip and "session" in skip:
        return 0 if ok else 1
    res: dict[str, Any] = {}
    if "proxy" not in skip:
        res["echo_round_trips_per_s"] = round(asyncio.run(rate(a.seconds / 4, False)))
        res["through_proxy_round_trips_per_s"] = round(asyncio.run(rate(a.seconds / 4, True)))
        print(json.dumps(res), flush=True)
    if "session" in skip:
        return 0 if ok else 1
    ok &= session_phase(a)
    print("result: %s" % ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    main()
