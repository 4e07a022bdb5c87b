"""leadwire side by side with MQTT (mosquitto + umqtt.simple + paho), one run, one machine.

    .venv/bin/python bench/peer_mqtt_bench.py            # full run (several minutes)
    .venv/bin/python bench/peer_mqtt_bench.py --quick    # fewer events, shorter caps

The same workload for both systems: one MicroPython board (the unix port, 64 KB heap) generating
events of 64 B (then 256 B) on one channel; a CPython receiver on the host that stores them in
SQLite (WAL, batched transactions every 50 ms). Measured per run:

* acknowledged events/s: events durably committed on the host per second (from the first to the
  last commit). MQTT QoS 0 has no acknowledgement: "acknowledged" = committed by the subscriber.
  QoS 1: umqtt.simple's publish blocks for each PUBACK. leadwire: committed in the bridge's store.
* wire bytes (and packets) per delivered event on the board's link, both directions, counted by
  nftables at the IP layer (headers, ACKs and retransmissions included); loopback MTU set to 1500.
* board heap: live after setup and the low-water of free heap during the run (both boards collect
  after 4 KB of garbage); MQTT's bytes allocated per event.
* what the receiver is told about loss, duplication and reordering, against ground truth (a u32
  sequence number in every MQTT payload; ring offsets and sample numbers for leadwire).

MQTT runs: QoS 0 and QoS 1, each as shipped (Nagle on) and with TCP_NODELAY on the board's socket.
leadwire runs: the bridge polling the board over UDP in batches; the board's generator is paced
(events/s offered), so leadwire runs a ladder of offered rates and reports the best committed rate
(and the highest rate it carried without any loss). Then both again with 5% packet loss in each
direction of the board's link (nftables `numgen random` drops: real TCP retransmission for MQTT).

Everything runs in a private network namespace (`unshare -n`): only loopback exists there, so the
impairment and the counters touch no other traffic on the machine. The script installs no system
package: without mosquitto, nftables or a private network namespace it says in one line what is
missing and exits 2. umqtt.simple comes by `micropython -m mip install umqtt.simple` into bench/out/
(never committed), from PyPI's sdist where micropython-lib's index cannot be reached. It starts its
own mosquitto on a free port and stops everything it started.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import platform
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click

from leadwire.tools import testbed
from leadwire.tools.benchkit import Proc, fmt, ratio, table
from leadwire.tools.lwbench import before_tree, best, commit_rate, loss_report, lw_host, netns_usable
from leadwire.tools.procstat import cpu_seconds
from leadwire.tools.testbed import need_tool as tool  # a missing one: what to install, exit 2

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "bench" / "peer_mqtt"
OUT = ROOT / "bench" / "out" / "peer_mqtt"
UMQTT = "micropython-umqtt.simple"
HEAP = "64K"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- setup (before the namespace: needs the network) ------------------------------------------


def fetch_umqtt() -> tuple[Path, str]:
    """umqtt/simple.py, cached in bench/out/. Returns (path, version).

    `micropython -m mip install umqtt.simple` first. mip reads micropython-lib's own index
    (micropython.org/pi/v2), not PyPI: where only package registries are reachable (this project's
    build machines: mip ends in `OSError: [addrinfo error -2]`), PyPI's sdist of the same file instead,
    fetched by hand because `pip download micropython-umqtt.simple` fails (the sdist has neither
    setup.py nor pyproject.toml, so pip cannot prepare its metadata).
    """
    dest = OUT / "umqtt" / "simple.py"
    meta = OUT / "umqtt" / "VERSION"
    if dest.exists() and meta.exists():
        return dest, meta.read_text().strip()
    version = umqtt_by_mip(OUT) or umqtt_from_pypi(dest)
    meta.write_text(version + "\n")
    return dest, version


def umqtt_by_mip(target: Path) -> str | None:
    """umqtt.simple (source, not .mpy: build_publisher compiles it) by mip under target; its version
    ("latest", as mip installs it), or None when mip could not reach micropython-lib's index."""
    log("peer_mqtt_bench: micropython -m mip install umqtt.simple")
    cmd = [tool("micropython"), "-m", "mip", "install", "--target", str(target), "--no-mpy", "umqtt.simple"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        log("peer_mqtt_bench: mip timed out")
        return None
    if r.returncode == 0 and (target / "umqtt" / "simple.py").exists():
        return "latest (mip)"
    log("peer_mqtt_bench: mip failed (%s)" % ((r.stdout + r.stderr).strip().splitlines() or ["?"])[-1])
    return None


def umqtt_from_pypi(dest: Path) -> str:
    """umqtt/simple.py out of PyPI's sdist: the JSON API names it and its sha256, the file host
    serves it. Returns its version."""
    log("peer_mqtt_bench: fetching %s from PyPI (JSON API + files.pythonhosted.org)" % UMQTT)
    with urllib.request.urlopen("https://pypi.org/pypi/%s/json" % UMQTT, timeout=60) as r:
        info = json.load(r)
    sdists = [u for u in info["urls"] if u["packagetype"] == "sdist"]
    if not sdists:
        raise SystemExit("PyPI lists no sdist for %s %s" % (UMQTT, info["info"]["version"]))
    u = sdists[0]
    with urllib.request.urlopen(u["url"], timeout=60) as r:
        blob = r.read()
    if hashlib.sha256(blob).hexdigest() != u["digests"]["sha256"]:
        raise SystemExit("sha256 mismatch for %s" % u["url"])
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tf:
        member = next((m for m in tf.getmembers() if m.name.endswith("umqtt/simple.py")), None)
        if member is None:
            raise SystemExit("no umqtt/simple.py in %s" % u["filename"])
        f = tf.extractfile(member)
        assert f is not None
        data = f.read()
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    return str(info["info"]["version"])


def build_publisher(simple: Path, out: Path) -> None:
    """umqtt.simple and the publisher compiled to .mpy (a 64 KB heap cannot compile them)."""
    cross = tool("mpy-cross")
    (out / "umqtt").mkdir(parents=True, exist_ok=True)
    for src, dst in ((simple, out / "umqtt" / "simple.mpy"), (HERE / "mqtt_pub.py", out / "mqtt_pub.mpy")):
        subprocess.run([cross, "-march=x64", "-o", str(dst), str(src)], check=True, timeout=60)


# -- inside the namespace: links, counters, impairment ----------------------------------------


def sh(*cmd: str, inp: str | None = None) -> str:
    return subprocess.run(cmd, input=inp, check=True, capture_output=True, text=True).stdout


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Wire:
    """nftables on the board's link: IP bytes and packets each way, and random drops (loss)."""

    TABLE = "lwbench"

    def __init__(self, proto: str, board_side: str, port: int, loss: float) -> None:
        # board_side: which port field names the board's link on packets *from* the board
        # (MQTT: dport = the broker's board listener; leadwire: sport = the board's UDP port)
        other = "sport" if board_side == "dport" else "dport"
        up = "%s %s %d" % (proto, board_side, port)
        down = "%s %s %d" % (proto, other, port)
        rules = [
            "add table inet %s" % self.TABLE,
            "add counter inet %s up" % self.TABLE,
            "add counter inet %s down" % self.TABLE,
            "add chain inet %s input { type filter hook input priority 0; policy accept; }" % self.TABLE,
            "add rule inet %s input %s counter name up" % (self.TABLE, up),
            "add rule inet %s input %s counter name down" % (self.TABLE, down),
        ]
        if loss > 0:
            k = round(loss * 10000)
            rules += [
                "add rule inet %s input %s numgen random mod 10000 < %d drop" % (self.TABLE, m, k)
                for m in (up, down)
            ]
        sh("nft", "-f", "-", inp="\n".join(rules) + "\n")

    def read(self) -> dict[str, int]:
        doc = json.loads(sh("nft", "-j", "list", "counters", "table", "inet", self.TABLE))
        out = {}
        for item in doc["nftables"]:
            c = item.get("counter")
            if c:
                out[c["name"] + "_bytes"] = c["bytes"]
                out[c["name"] + "_packets"] = c["packets"]
        return out

    def close(self) -> None:
        subprocess.run(["nft", "delete", "table", "inet", self.TABLE], capture_output=True)


class Broker:
    """mosquitto on 127.0.0.1 with two listeners: the board's (impaired, counted) and the host's."""

    def __init__(self, tmp: Path) -> None:
        self.board_port = free_port()
        self.host_port = free_port()
        while self.host_port == self.board_port:
            self.host_port = free_port()
        conf = tmp / "mosquitto.conf"
        conf.write_text(
            "per_listener_settings false\nallow_anonymous true\npersistence false\nsys_interval 1\n"
            "log_dest stderr\nlog_type error\nlog_type warning\n"
            "listener %d 127.0.0.1\nlistener %d 127.0.0.1\n" % (self.board_port, self.host_port)
        )
        self.log = (tmp / "mosquitto.log").open("wb")
        exe = testbed.need_command("mosquitto", "mosquitto")
        self.p = subprocess.Popen(
            [exe, "-c", str(conf)], stdout=self.log, stderr=self.log, start_new_session=True
        )
        end = time.monotonic() + 10
        while time.monotonic() < end:
            try:
                socket.create_connection(("127.0.0.1", self.board_port), 0.2).close()
                return
            except OSError:
                if self.p.poll() is not None:
                    break
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("mosquitto did not start: see %s" % (tmp / "mosquitto.log"))

    def stop(self) -> None:
        testbed.stop_group(self.p, signal.SIGTERM, 5.0)  # SIGKILL after 5 s
        self.log.close()


def mqtt_run(
    tmp: Path, pubdir: Path, size: int, qos: int, nodelay: bool, n: int, seconds: float, loss: float
) -> dict[str, Any]:
    label = "MQTT QoS %d%s" % (qos, " nodelay" if nodelay else "")
    run = tmp / ("mqtt-%d-%d-%d-%g" % (size, qos, nodelay, loss))
    run.mkdir()
    broker = Broker(run)
    wire = None
    procs: list[Proc] = []
    try:
        wire = Wire("tcp", "dport", broker.board_port, loss)
        sub = Proc([sys.executable, str(HERE / "subscriber.py"), "--port", str(broker.host_port),
                    "--qos", str(qos), "--store", str(run / "sub.db")], stdin=True)  # fmt: skip
        procs.append(sub)
        sub.wait_line("ready", 15)
        pub = Proc([tool("micropython"), "-X", "heapsize=" + HEAP, "-m", "mqtt_pub", "127.0.0.1",
                    str(broker.board_port), str(qos), str(int(nodelay)), str(n), str(size), str(seconds)],
                   env={"MICROPYPATH": str(pubdir), "PATH": "/usr/bin:/bin"})  # fmt: skip
        procs.append(pub)
        pub.wait_line("ready", 15)
        done = pub.wait_line("sent", seconds + 60)
        wait_received(sub, done["sent"])
        broker_cpu = cpu_seconds(broker.p.pid)
        sub.close_stdin()
        s = sub.wait_line("received", 30)
        counters = wire.read()
    finally:
        for p in procs:
            p.kill()
        if wire is not None:
            wire.close()
        broker.stop()
    return mqtt_result(label, size, loss, done, s, broker_cpu) | counters


def wait_received(sub: Proc, sent: int) -> None:
    """Until the subscriber has all `sent`, or nothing more arrives for 2 s (cap: 30 s)."""
    end = time.monotonic() + 30
    while time.monotonic() < end and sub.progress < sent:
        if time.monotonic() - sub.progress_t > 2.0:
            break
        time.sleep(0.02)


def mqtt_result(
    label: str, size: int, loss: float, done: dict[str, Any], s: dict[str, Any], broker_cpu: float | None
) -> dict[str, Any]:
    """One MQTT run's row: the publisher's `done` line, the subscriber's summary `s`."""
    got = s["distinct"]
    return {
        "system": label,
        "size": size,
        "loss": loss,
        "generated": done["sent"],
        "pub_ms": done["ms"],
        "timed_out": bool(done["timed_out"]),
        "received": got,
        "arrivals": s["received"],
        "known_lost": 0,  # MQTT tells the receiver nothing about loss
        "silent_lost": done["sent"] - got,
        "duplicates": s["duplicates"],
        "dup_signalled": s["dup_flags"],
        "reordered": s["reordered"],
        "reorder_signalled": 0,
        "broker_dropped": s["broker_dropped"],
        "rate": commit_rate(s["commits"]),
        "heap_total": done["heap_total"],
        "heap_live": done["heap_live"],
        "heap_low_free": done["heap_low_free"],
        "alloc_per_event": done["alloc_per_event"],
        "receiver_cpu_s": s["cpu_s"],
        "broker_cpu_s": broker_cpu,
    }


def lw_run(
    tmp: Path,
    size: int,
    hz: int,
    ring: int,
    n: int,
    seconds: float,
    loss: float,
    timeout: float,
    tick: int,
    frames: int,
    pipeline: bool = True,
    code: str | None = None,
    rto_min: float = 0.002,
) -> dict[str, Any]:
    """One leadwire run; `code`: a directory whose `leadwire` package the bridge runs (--before)."""
    run = tmp / ("lw-%d-%d-%g-%s" % (size, hz, loss, "before" if code else "now"))
    run.mkdir()
    board, ring = lw_board(run, size, hz, ring, tick)
    t_board = time.monotonic()
    wire = None
    host = None
    try:
        assert board.address is not None
        wire = Wire("udp", "sport", board.address[1], loss)
        link = ["--board", "%s:%d" % board.address]
        host = lw_host(link, run / "lw.db", n, seconds, timeout, frames, pipeline, code, rto_min)
        res = host.wait_line("store", seconds + 60)
        board_cpu = cpu_seconds(board.pid)
        board_wall = time.monotonic() - t_board
        counters = wire.read()
        console = board.console()
    finally:
        if host is not None:
            host.kill()
        if wire is not None:
            wire.close()
        board.close()
    row = lw_result(res, console, size, loss, hz, ring)
    row["board_cpu_pct"] = 100 * board_cpu / board_wall if board_cpu is not None else None
    row |= {"rtt_ms": res["rtt_ms"], "bridge_gap_ms": res["bridge_gap_ms"], "rto": res.get("rto"),
            "code": "before" if code else "now"}  # fmt: skip
    return row | counters


def lw_board(run: Path, size: int, hz: int, ring: int, tick: int) -> tuple[Any, int]:
    """The board of a leadwire run, with the largest ring (<= `ring` slots of `size` B) that fits."""
    from leadwire.tools.board import start_board

    cfg = {
        "ring": ring,
        "slot": size,
        "tick": tick,
        "health": {"ms": 1000},
        "sensors": [{"ch": 1, "hz": hz, "size": size}],
        "udp": {"frame": 1472},
    }
    while True:
        board = start_board("udp", config=cfg, board_dir=run / "board")
        if "ring %dx%d," % (ring, size) in board.console():
            return board, ring
        # the boot fell back to 256 x 16 (the free heap at boot varies by a few hundred bytes
        # from run to run): a smaller ring, said on stderr and in the results (ring)
        text = board.console()
        board.close()
        if ring <= 16:
            raise RuntimeError("the board made no %d B ring (64 KB heap):\n%s" % (size, text))
        ring -= max(1, ring // 32)
        cfg["ring"] = ring
        log("  leadwire: ring did not fit at boot; trying %d x %d B" % (ring, size))


def lw_result(
    res: dict[str, Any], console: str, size: int, loss: float, hz: int, ring: int
) -> dict[str, Any]:
    """A leadwire run's row from lw_host's summary `res` and the board's console (its heap at boot)."""
    st = res["store"]
    ready = [ln for ln in console.splitlines() if "leadwire: ready" in ln]
    used = free = None
    if ready:
        w = ready[-1].split()
        used, free = int(w[w.index("used") + 1]), int(w[w.index("free") + 1])
    total = used + free if used is not None and free is not None else None
    return {
        "system": "leadwire",
        "size": size,
        "loss": loss,
        "offered_hz": hz,
        "ring": ring,
        "generated": st.get("offset_span", 0),
        "received": st.get("events_all_channels", 0),
        "events": st.get("events", 0),
        "arrivals": st.get("events_all_channels", 0),
        "known_lost": st.get("counted_lost", 0),
        "unknown_losses": st.get("unknown_losses", 0),
        "silent_lost": st.get("silent_lost", 0),
        "accounting_ok": st.get("accounting_ok", True),
        "ledger": st.get("ledger", ""),
        "ch1_missing_by_samples": st.get("ch1_missing_by_samples"),
        "duplicates": st.get("duplicates_flagged", 0),
        "dup_signalled": st.get("duplicates_flagged", 0),
        "reordered": st.get("late_flagged", 0),
        "reorder_signalled": st.get("late_flagged", 0),
        "rate": commit_rate(res["commits"]),
        "heap_total": total,
        "heap_live": total - st["heap_free_live"] if total and "heap_free_live" in st else used,
        "heap_low_free": st.get("heap_min_free"),
        "alloc_per_event": None,
        "counters": res["counters"],
        "failed": res.get("failed"),
        "receiver_cpu_s": res["bridge_cpu_s"],
        "writer_cpu_s": res.get("writer_cpu_s"),
        "committed_in_window": res.get("committed_in_window"),
        "lw_seconds": res["wall_s"],
    }


def lw_ladders(res: dict[str, Any], args: SimpleNamespace, tmp: Path, codes: list[str | None],
               note: Any) -> None:  # fmt: skip
    """leadwire's ladder of offered rates per size, lossless then at each loss of --losses; with
    several codes (--before) each point runs with each code back to back (the load on a shared
    machine drifts: paired runs minutes apart, not ladders 10 minutes apart)."""
    for size in args.sizes:
        for loss in [0.0, *args.losses]:
            for hz in args.lw_rates[size]:
                for code in codes:
                    r = lw_run(tmp, size, hz, args.ring[size], args.events, args.lw_seconds, loss,
                               args.timeout, args.tick, args.frames, not args.no_pipeline, code,
                               args.rto_min)  # fmt: skip
                    note(r)
                    res["ladders"].append(r)


# -- report ------------------------------------------------------------------------------------


def per_event(r: dict[str, Any], key: str, delivered: bool = False) -> float:
    """Board-link bytes (or packets) per event it carried: MQTT carries every event published to the
    broker (even those the broker drops later); leadwire carries the events it delivers (the ones
    overwritten in the ring never leave the board). delivered=True: per event the host stored."""
    if r["system"] == "leadwire" or delivered:
        d = r.get("events", r.get("received", 0))
    else:
        d = r["generated"]
    tot = r.get("up_" + key, 0) + r.get("down_" + key, 0)
    return tot / d if d else float("nan")


def cpu_per_event(r: dict[str, Any]) -> tuple[float, tuple[float, float, float]] | None:
    """CPU microseconds per committed event of a leadwire run: (total, (board, bridge, writer)).
    The board's share is its CPU fraction over its life times the bridge's measuring window."""
    n = r.get("committed_in_window")
    if not n or r.get("writer_cpu_s") is None or r.get("board_cpu_pct") is None:
        return None
    parts = (
        r["board_cpu_pct"] / 100 * r["lw_seconds"] * 1e6 / n,
        r["receiver_cpu_s"] * 1e6 / n,
        r["writer_cpu_s"] * 1e6 / n,
    )
    return sum(parts), parts


def report(res: dict[str, Any]) -> str:
    lines: list[str] = []
    for size in res["sizes"]:
        lines += clean_section(res, size)
    if res.get("impaired"):
        lines += impaired_section(res)
    return "\n".join(lines)


def clean_section(res: dict[str, Any], size: int) -> list[str]:
    """The report on `size`-byte events without impairment: the table, leadwire's ladder, the goals."""
    runs = [r for r in res["clean"] if r["size"] == size]
    mq = [r for r in runs if r["system"] != "leadwire"]
    lws = [r for r in runs if r["system"] == "leadwire"]
    lw = max(lws, key=lambda r: r["rate"] if not math.isnan(r["rate"]) else -1)
    best0 = max((r for r in mq if "QoS 0" in r["system"]), key=lambda r: r["rate"])
    best1 = max((r for r in mq if "QoS 1" in r["system"]), key=lambda r: r["rate"])
    # health records can be overwritten in the ring at high offered rates: use the lowest seen
    lows = [r["heap_low_free"] for r in lws if r["heap_low_free"] is not None]
    lw_low = {**lw, "heap_low_free": min(lows) if lows else None}
    return [
        "### %d-byte events, no impairment\n" % size,
        clean_table(lw_low, mq, best0, best1),
        ladder_line(lws, lw, size),
        mqtt_line(mq, best0, best1),
        where_time_line(lws),
        *goal_lines(lw, mq, best0, best1),
        "",
    ]


Run = dict[str, Any]


def clean_table(lw: Run, mq: list[Run], best0: Run, best1: Run) -> str:
    """leadwire's best run beside every MQTT run, metric by metric, and its ratios to the best QoS 0 / 1."""
    rows = [["metric", "leadwire", *[r["system"] for r in mq], "lw / best QoS 0", "lw / best QoS 1"]]
    metrics: list[tuple[str, Any, int]] = [
        ("acknowledged events/s", lambda r: r["rate"], 0),
        ("events delivered", lambda r: r.get("events", r["received"]), 0),
        ("wire bytes / event carried (IP, both ways)", lambda r: per_event(r, "bytes"), 1),
        ("packets / event carried", lambda r: per_event(r, "packets"), 3),
        ("wire bytes / event delivered to the host", lambda r: per_event(r, "bytes", True), 1),
        ("board heap live, B", lambda r: r["heap_live"], 0),
        ("board heap free low-water, B", lambda r: r["heap_low_free"], 0),
        ("board bytes allocated / event", lambda r: r["alloc_per_event"], 1),
    ]
    for name, f, digits in metrics:
        vals = [fmt(f(r), digits) for r in [lw, *mq]]
        rows.append([name, *vals, ratio(f(lw), f(best0)), ratio(f(lw), f(best1))])
    return table(rows)


def ladder_line(lws: list[dict[str, Any]], lw: dict[str, Any], size: int) -> str:
    """leadwire's ladder: offered and committed rates, counted losses, the highest loss-free rate."""
    lossless = [r for r in lws if r["known_lost"] == 0 and r["silent_lost"] == 0]
    return (
        "\nleadwire: offered rates %s events/s -> committed %s/s; counted losses %s; best shown "
        "(offered %s/s, ring %d x %d B). Highest offered rate with no loss at all: %s."
        % (
            ", ".join(fmt(r["offered_hz"]) for r in lws),
            ", ".join(fmt(r["rate"]) for r in lws),
            ", ".join(fmt(r["known_lost"]) for r in lws),
            fmt(lw["offered_hz"]),
            lw["ring"],
            size,
            fmt(max(r["offered_hz"] for r in lossless)) if lossless else "none",
        )
    )


def mqtt_line(mq: list[Run], best0: Run, best1: Run) -> str:
    """The best MQTT runs, and how long QoS 1 as shipped took."""
    shipped = next(
        ((fmt(r["generated"]), r["pub_ms"] / 1000, " (time cap)" if r["timed_out"] else "")
         for r in mq if r["system"] == "MQTT QoS 1"),
        ("-", 0.0, ""),
    )  # fmt: skip
    return "Best MQTT: QoS 0 = %s, QoS 1 = %s. MQTT QoS 1 as shipped ran %s events in %.1f s%s.\n" % (
        best0["system"],
        best1["system"],
        *shipped,
    )


def where_time_line(lws: list[dict[str, Any]]) -> str:
    """Per offered rate: events per round trip, the board's answer times, CPU, pipelining."""
    return (
        "Where the time goes (leadwire, per offered rate): "
        + "; ".join(
            "%s/s: %.1f events per round trip, board answer p50 %.2f / p90 %.2f / mean %.2f ms, "
            "bridge gap mean %.2f ms, board CPU %.0f%%, bridge CPU %.0f%% of the run, "
            "%d of %d POLLs pipelined (%d mispredicted)"
            % (
                fmt(r["offered_hz"]),
                r["counters"]["events_stored"] / max(1, r["counters"]["round_trips"]),
                r["rtt_ms"].get("p50", math.nan),
                r["rtt_ms"].get("p90", math.nan),
                r["rtt_ms"].get("mean", math.nan),
                r["bridge_gap_ms"].get("mean", math.nan),
                r["board_cpu_pct"] or math.nan,
                100 * r["receiver_cpu_s"] / max(1e-9, r["lw_seconds"]),
                r["counters"].get("pipelined", 0),
                r["counters"]["polls"],
                r["counters"].get("mispredicted", 0),
            )
            for r in lws
        )
        + "."
    )


def goal_lines(lw: Run, mq: list[Run], best0: Run, best1: Run) -> list[str]:
    """The goals against MQTT, met or not, and what CPU one committed event costs."""
    goals = [
        ("acknowledged events/s >= 10x MQTT QoS 1 (best)", lw["rate"] >= 10 * best1["rate"]),
        ("acknowledged events/s >= 2.5x MQTT QoS 0 (best)", lw["rate"] >= 2.5 * best0["rate"]),
        (
            "fewer wire bytes per event than every MQTT run",
            all(per_event(lw, "bytes") < per_event(r, "bytes") for r in mq),
        ),
    ]
    lines = ["- goal %s: %s" % (name, "MET" if ok else "NOT MET") for name, ok in goals]
    cost = cpu_per_event(lw)
    if cost is not None:
        us, parts = cost
        cores = os.cpu_count() or 1
        need1, need0 = fmt(10 * best1["rate"]), fmt(2.5 * best0["rate"])
        lines.append(
            "- CPU per committed event at the best rate: board %.2f + bridge %.2f + store writer %.2f"
            " = %.2f us; at that cost %d cores carry at most %s events/s (all of them busy, nothing"
            " else running); 10x MQTT QoS 1 needs %s/s, 2.5x MQTT QoS 0 needs %s/s"
            % (*parts, us, cores, fmt(cores * 1e6 / us), need1, need0)
        )
    return lines


def impaired_section(res: dict[str, Any]) -> list[str]:
    """The report on the lossy link: what each receiver got, knew lost and lost silently."""
    lines: list[str] = []
    lines.append("### %.0f%% packet loss each way on the board's link\n" % (100 * res["loss"]))
    rows = [
        [
            "system",
            "size",
            "generated",
            "receiver got",
            "receiver knows lost",
            "lost silently",
            "duplicates (signalled)",
            "reordered (signalled)",
            "acknowledged events/s",
            "wire bytes / event",
        ]
    ]
    for r in res["impaired"]:
        rows.append(
            [
                r["system"] + (" @%s/s" % fmt(r["offered_hz"]) if "offered_hz" in r else ""),
                str(r["size"]),
                fmt(r["generated"]),
                fmt(r["received"]),
                fmt(r["known_lost"]),
                fmt(r["silent_lost"]),
                "%s (%s)" % (fmt(r["duplicates"]), fmt(r["dup_signalled"])),
                "%s (%s)" % (fmt(r["reordered"]), fmt(r["reorder_signalled"])),
                fmt(r["rate"]),
                fmt(per_event(r, "bytes"), 1),
            ]
        )
    lines.append(table(rows))
    q0 = [r for r in res["impaired"] if "QoS 0" in r["system"]]
    lwi = [r for r in res["impaired"] if r["system"] == "leadwire"]
    lines.append("")
    lines.append(
        "- goal zero silent loss where MQTT QoS 0 has some: leadwire silent %s, MQTT QoS 0 silent %s"
        % (fmt(sum(r["silent_lost"] for r in lwi)), fmt(sum(r["silent_lost"] for r in q0)))
    )
    lines.append(
        "  (leadwire rows count ring offsets, all channels: generated = offsets spanned, received = "
        "stored, knows lost = counted by recoveries; MQTT rows count the payload sequence numbers; "
        "MQTT gives the receiver no loss signal, only the DUP flag of a QoS 1 redelivery; "
        "broker $SYS dropped counter: %s)"
        % ", ".join(
            "%s %d B: %s" % (r["system"], r["size"], fmt(r["broker_dropped"]))
            for r in res["impaired"]
            if "broker_dropped" in r
        )
    )
    return lines


# -- main --------------------------------------------------------------------------------------


def inside(args: SimpleNamespace) -> int:
    if [name for _, name in socket.if_nameindex()] != ["lo"]:
        raise SystemExit(
            "peer_mqtt_bench --inside: not in a private network namespace; run it without --inside"
        )
    sh("ip", "link", "set", "lo", "up")
    sh("ip", "link", "set", "lo", "mtu", "1500")  # like Ethernet / WiFi: MQTT segments <= 1460 B
    res: dict[str, Any] = {
        "machine": machine(),
        "sizes": args.sizes,
        "loss": args.loss,
        "clean": [],
        "impaired": [],
        "ladders": [],
        "losses": args.losses,
        "events": args.events,
    }
    log("peer_mqtt_bench: " + res["machine"])
    with tempfile.TemporaryDirectory(prefix="peer-mqtt-") as td:
        tmp = Path(td)
        pubdir = tmp / "pub"
        build_publisher(OUT / "umqtt" / "simple.py", pubdir)
        codes = [before_tree(args.before, tmp / "before"), None] if args.before else [None]
        lw_ladders(res, args, tmp, codes, note)
        res["clean"] += [r for r in res["ladders"] if r["code"] == "now" and r["loss"] == 0]
        if not args.only_lw:
            mqtt_runs(res, args, tmp, pubdir)
    write_results(res, args)
    # every leadwire run ends with the one accounting check (leadwire.bridge.accounting, lw_host.py)
    bad = [r for r in res["ladders"] if not r.get("accounting_ok", True)]
    for r in bad:
        log(
            "peer_mqtt_bench: leadwire %d B loss %g @%d: %s"
            % (r["size"], r["loss"], r["offered_hz"], r["ledger"])
        )
    return 1 if bad else 0


def machine() -> str:
    return "%s, %d cores, Python %s, MicroPython unix port (heap %s), mosquitto %s, umqtt.simple %s" % (
        platform.platform(terse=True),
        os.cpu_count() or 0,
        platform.python_version(),
        HEAP,
        sh("sh", "-c", "mosquitto -h | head -1").split()[-1],
        (OUT / "umqtt" / "VERSION").read_text().strip(),
    )


def note(r: dict[str, Any]) -> None:
    """One run, one line on stderr."""
    log(
        "  %-22s %4d B loss %g: %s events/s, got %s of %s, known lost %s, silent %s, %.1f wire B/ev%s"
        % (
            r["system"]
            + (" @%d" % r["offered_hz"] if "offered_hz" in r else "")
            + (" (%s)" % r["code"] if "code" in r else ""),
            r["size"],
            r["loss"],
            fmt(r["rate"]),
            fmt(r["received"]),
            fmt(r["generated"]),
            fmt(r["known_lost"]),
            fmt(r["silent_lost"]),
            per_event(r, "bytes"),
            " (time cap)" if r.get("timed_out") else "",
        )
    )


def mqtt_runs(res: dict[str, Any], args: SimpleNamespace, tmp: Path, pubdir: Path) -> None:
    """The MQTT runs: four per size without loss; QoS 0 and QoS 1 nodelay per size at --loss, each
    beside leadwire's lossy run at the offered rate that was its best without loss."""
    for size in args.sizes:
        for qos, nodelay, cap in (
            (0, False, args.seconds),
            (0, True, args.seconds),
            (1, True, args.seconds),
            (1, False, args.nagle_seconds),
        ):
            r = mqtt_run(tmp, pubdir, size, qos, nodelay, args.events, cap, 0.0)
            note(r)
            res["clean"].append(r)
    if args.loss <= 0:
        return
    for size in args.sizes:
        for qos, nodelay in ((0, False), (1, True)):
            r = mqtt_run(tmp, pubdir, size, qos, nodelay, args.events, args.seconds, args.loss)
            note(r)
            res["impaired"].append(r)
        lws = [r for r in res["ladders"] if r["code"] == "now" and r["size"] == size]
        at = [r for r in lws if r["loss"] == args.loss]
        if at:  # the lossy run at the offered rate that was best without loss
            hz = best([r for r in lws if r["loss"] == 0])["offered_hz"]  # type: ignore[index]
            res["impaired"].append(next(r for r in at if r["offered_hz"] == hz))


def write_results(res: dict[str, Any], args: SimpleNamespace) -> None:
    """The report on stdout; results.json and results.md in --out."""
    text = "" if args.only_lw else report(res) + "\n\n"
    text += "### Lossy links (leadwire)\n\n" + loss_report(res)
    print("\nleadwire vs MQTT -- %s\n" % res["machine"])
    print(text, flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=1, default=str))
    (out / "results.md").write_text(text + "\n")
    log("peer_mqtt_bench: results in %s" % (out / "results.json"))


def parse_lists(args: SimpleNamespace) -> SimpleNamespace:
    """The comma lists of the options as lists and maps; --quick's shorter counts and caps."""
    args.sizes = [int(s) for s in args.sizes.split(",")]
    args.losses = [float(x) for x in args.losses.split(",") if x]
    args.lw_rates = {
        int(k): [int(x) for x in v.split("/")] for k, v in (p.split(":") for p in args.lw_rates.split(","))
    }
    args.ring = {int(k): int(v) for k, v in (p.split(":") for p in args.ring.split(","))}
    if args.quick:
        args.events = min(args.events, 20_000)
        args.seconds = min(args.seconds, 10.0)
        args.nagle_seconds = min(args.nagle_seconds, 3.0)
        args.lw_seconds = min(args.lw_seconds, 4.0)
    if args.quick and args.sizes == [64, 256]:
        args.sizes = [64]
    if args.quick and args.losses == [0.01, 0.05]:
        args.losses = [args.loss]  # one lossy ladder: the smoke test's run stays short
    return args


@click.command(help=__doc__.split("\n")[0])
@click.option("--quick", is_flag=True, help="20,000 events, short caps, 64 B, 5% loss")
@click.option("--events", type=int, default=200_000, help="N events per run (default 200,000)")
@click.option("--sizes", default="64,256", help="event sizes, bytes")
@click.option("--seconds", type=float, default=30.0, help="time cap of an MQTT run")
@click.option("--nagle-seconds", type=float, default=10.0, help="time cap of MQTT QoS 1 as shipped")
@click.option("--lw-seconds", type=float, default=8.0, help="time cap of a leadwire run")
@click.option(
    "--lw-rates",
    default="64:20000/60000/150000/300000,256:10000/40000/100000/200000",
    help="leadwire offered events/s per size (the ladder)",
)
@click.option(
    "--ring", default="64:264,256:66", help="leadwire ring capacity per size (the most a 64 KB heap fits)"
)
@click.option(
    "--frames", type=int, default=16, help="leadwire answer frames per POLL (a burst; 1 = one frame)"
)
@click.option("--no-pipeline", is_flag=True, help="leadwire without pipelined POLLs (polling.pipeline)")
@click.option("--tick", type=int, default=0, help="leadwire board tick, ms (0: busy, as the MQTT loop)")
@click.option("--timeout", type=float, default=0.02, help="bridge poll timeout, s (loopback RTT < 1 ms)")
@click.option("--loss", type=float, default=0.05, help="packet loss each way in the impaired MQTT runs")
@click.option("--rto-min", type=float, default=0.002, help="bridge polling.rto_min (loopback: 2 ms)")
@click.option("--losses", default="0.01,0.05", help="leadwire ladders at these losses each way, too")
@click.option("--before", default="", help="git ref: also run the leadwire ladders with that code")
@click.option("--only-lw", is_flag=True, help="leadwire ladders only (no MQTT runs)")
@click.option("--out", default=str(OUT), help="where results.json and results.md go")
@click.option("--inside", is_flag=True, hidden=True)
def main(**kw: Any) -> None:
    args = parse_lists(SimpleNamespace(**kw))
    if args.inside:
        sys.exit(inside(args))
    testbed.need_command("mosquitto", "mosquitto")
    testbed.need_command("nft", "nftables")
    why = netns_usable()
    if why is not None:
        # the counters and the drops must touch only this benchmark's traffic: no namespace, no run
        testbed.cannot_run("needs a private network namespace with nftables: %s" % why)
    fetch_umqtt()
    argv = [sys.executable, str(Path(__file__).resolve()), "--inside", *sys.argv[1:]]
    sys.exit(subprocess.run(["unshare", "-n", *argv]).returncode)


if __name__ == "__main__":
    main()
