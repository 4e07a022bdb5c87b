"""Goodput: event payload bytes stored per second, against what the link itself carries.

    .venv/bin/python bench/goodput_bench.py            # full run (~2-3 min)
    .venv/bin/python bench/goodput_bench.py --quick    # one repetition, short windows (~45 s)

Measured side by side in one run, on 127.0.0.1 only:

1. UDP. Raw: bench/goodput_raw.py on the MicroPython unix port (`micropython -X heapsize=64K`, the
   boards' interpreter and heap) sends datagrams as fast as one loop can to a plain CPython receiver
   (this process, `recv_into` in a loop) that counts bytes; raw rate = received payload bytes/s.
   The datagram size is the event payload the leadwire board put in each EVENTS datagram of the
   leadwire run just before it (measured), and 64 B (one event per datagram: the per-event figure).
   leadwire: a virtual board (tools/board.py, the real firmware) with one sensor of 64 B events,
   polled with burst POLLs by the bridge (host/bridge, unchanged, in this process) into its SQLite
   store; goodput = event payload bytes committed per second. Ratio = leadwire / raw (goal >= 0.7).
   The sensor runs at a ladder of rates (hz 0 = flat out among them); the best row is the figure.
2. Serial. The virtual board over its pty through `leadwire netem serial --rate BAUD` (a separate
   process: 10 bits per byte, each direction paced on its own, i.e. full duplex) to the bridge;
   goodput = stored event payload bytes/s; ratio = goodput / (baud / 10) (goal >= 0.85), at 115200
   and 921600 baud. The sensor offers about twice what the line can carry, so the line is the
   bottleneck and the ring overruns (every lost event counted by the bridge, none silent). Printed
   beside it: the emulated line's own rate with a continuous byte stream (no protocol), the
   framing ceiling of a full frame, and the ceiling of the frames this run actually sent.
3. Signed (auth; not with --quick): the board with a random key, the bridge with it, each
   beside an unsigned run with the same ring (a keyed board has less heap for its ring): UDP at
   10,000 ev/s (`repeat` pairs: CPU per event), serial at each baud (one pair: goodput).

Everything the bench starts (boards, netem, raw senders) is stopped before it exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import pty
import re
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
import tty
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click

from leadwire import codec, framing, messages, wire
from leadwire.bridge.accounting import Ledger, check_store
from leadwire.bridge.store_reader import StoreReader
from leadwire.ring import EventRing
from leadwire.tools.benchbridge import FRAMES, bridge_doc, run_bridge
from leadwire.tools.benchkit import Proc, fmt, table
from leadwire.tools.board import BoardError, start_board
from leadwire.tools.firmware_build import build
from leadwire.tools.testbed import tool

ROOT = Path(__file__).resolve().parents[1]

EVENT = 64  # event payload bytes (the sensor's size)
CH = 1
HEAP = "64K"
UDP_FRAME = 1472  # the board's UDP frame (one datagram, no IP fragmentation)
UDP_MAX_BYTES = 1460  # the bridge's max answer payload over UDP
UDP_RING = 280  # 280 x (4 + 64) B: what fits the 64 KB heap beside the UDP link (auth code included)
SERIAL_FRAME = wire.MAX_FRAME  # 2,059 B: the largest frame; fewer headers per event on a slow line
SERIAL_RING = 200  # fits beside the serial buffers of a 2,059 B frame (checked at boot below)
OVER = 2.0  # serial: the sensor offers this x what the line can carry (64 B events)
# signed UDP runs: a rate a keyed board's ring (~110 events: auth takes heap) holds ~11 ms of, so
# both runs of a pair store what is offered and the comparison is CPU per event, not overruns
SIGNED_UDP_HZ = 10_000
POLL_WIRE = len(framing.encode(codec.encode(messages.poll_frame(0, 255, 2047, 1, FRAMES))))


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- the bridge ---------------------------------------------------------------------------------


def stored(db: Path, window: tuple[float, float]) -> dict[str, Any]:
    """Event payload bytes durably committed in the window: from the last commit before it (or the
    first in it; that one's events excluded) to the last commit in it, by the store's own commit
    times. (From the first commit in the window only, a window with one commit read as 0: at 64 B
    and ~300,000 events/s a 1 s window sometimes held a single commit.)"""
    with StoreReader(db) as r:
        rows = r.commits(int((window[0] - 5.0) * 1e6), int(window[1] * 1e6))
    t0 = int(window[0] * 1e6)
    before = [x for x in rows if x[0] < t0]
    rows = before[-1:] + [x for x in rows if x[0] >= t0]
    if len(rows) < 2:
        return {"goodput": 0.0, "events_s": 0.0, "commits": len(rows)}
    dt = (rows[-1][0] - rows[0][0]) / 1e6
    return {
        "goodput": sum(r[2] for r in rows[1:]) / dt,
        "events_s": sum(r[1] for r in rows[1:]) / dt,
        "commits": len(rows),
    }


def boot(transport: str, board_dir: Path, cfg: dict[str, Any], signed: bool) -> Any:
    """The board with this config; signed: a random key (its frames signed), else auth off.

    A ring that does not fit the heap is shrunk to what the board says fits, or by a third when
    the boot fails outright (auth takes heap); the ring used is in cfg["ring"] afterwards."""
    for _ in range(6):
        try:
            b = start_board(
                transport,
                heap=HEAP,
                config=cfg,
                board_dir=board_dir,
                build_firmware=False,
                key="auto" if signed else None,
            )
        except (BoardError, TypeError) as e:  # TypeError: start_board's retry check on a serial board
            why = str(e).strip().splitlines()[-1]
            cfg["ring"] = cfg["ring"] * 2 // 3
        else:
            m = re.search(r"(\d+) B free, the agent needs (\d+) B besides", b.console())
            if not m:
                return b
            b.close()
            why = "ring does not fit"
            # a slot is 4 + the event
            cfg["ring"] = min(cfg["ring"] - 8, (int(m.group(1)) - int(m.group(2))) // (4 + EVENT) - 2)
        if cfg["ring"] < 32:
            break
        log(
            "goodput_bench: %s%s: %s; ring of %d" % (transport, " signed" if signed else "", why, cfg["ring"])
        )
    raise BoardError("%s board%s does not boot with a ring of 64 B events" % (transport, " signed" * signed))


def sensor_cfg(hz: int, ring: int, tick: int) -> dict[str, Any]:
    # report bodies of 64 B: polled only, the smallest push-session reserve leaves room for the ring
    return {
        "ring": ring,
        "slot": EVENT,
        "tick": tick,
        "health": {"ms": 0},
        "report": {"bytes": 64},
        "sensors": [{"ch": CH, "hz": hz, "size": EVENT}],
    }


def finish(res: dict[str, Any], db: Path, seconds: float) -> dict[str, Any]:
    res.update(stored(db, res["window"]))
    res["seconds"] = seconds
    res["lost_s"] = res["counters"].get("overrun_lost", 0) / seconds
    for who in ("board", "bridge"):  # CPU microseconds per stored event
        cpu = res[who + "_cpu"]
        res[who + "_us"] = 1e6 * cpu / res["events_s"] if cpu is not None and res["events_s"] else None
    with StoreReader(db) as r:  # the one accounting check, the store its own witness
        led = Ledger()
        for d in r.devices():
            led.add(check_store(r, d.dev))
    res["silent_lost"] = led.silent
    res["counted_lost"] = led.lost
    res["accounting_ok"] = led.ok
    res["ledger"] = led.line()
    ef = res["rx"]["events_frames"]
    res["events_per_frame"] = res["counters"].get("events_stored", 0) / ef if ef else 0.0
    return res


# -- UDP -----------------------------------------------------------------------------------------


def lw_udp(
    board_dir: Path,
    tmp: Path,
    hz: int,
    warmup: float,
    seconds: float,
    signed: bool = False,
    ring: int = UDP_RING,
) -> dict[str, Any]:
    cfg = sensor_cfg(hz, ring, 0) | {"udp": {"frame": UDP_FRAME}}
    db = tmp / ("udp-%d-%d.db" % (hz, time.monotonic_ns()))
    board = boot("udp", board_dir, cfg, signed)
    try:
        assert board.address is not None
        doc = bridge_doc(db, {"udp": "%s:%d" % board.address}, UDP_MAX_BYTES, 0.25, board.key)
        res = asyncio.run(run_bridge(doc, board.pid, warmup, seconds))
    finally:
        board.close()
    res = finish(res, db, seconds)
    res.update(hz=hz, signed=signed, ring=cfg["ring"])
    return res


def raw_udp(size: int, seconds: float) -> dict[str, Any]:
    """bench/goodput_raw.py on MicroPython -> this process, which counts what it receives."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(0.5)
    port = s.getsockname()[1]
    env = {"PATH": "/usr/bin:/bin", "MICROPYPATH": ""}
    cmd = [
        tool("micropython"),
        "-X",
        "heapsize=" + HEAP,
        str(ROOT / "bench" / "goodput_raw.py"),
        "127.0.0.1",
        str(port),
        str(size),
        str(seconds),
    ]
    sender = Proc(cmd, env=env)
    buf = bytearray(65536)
    n = got = 0
    t_first = t_last = 0.0
    cpu0 = time.process_time()
    try:
        sender.wait_line("ready", 15)
        quiet = 0
        while quiet < 2:  # until the sender is done and the socket has been quiet for 1 s
            try:
                k = s.recv_into(buf)
            except TimeoutError:
                quiet += 1 if sender.p.poll() is not None else 0
                continue
            t_last = time.monotonic()
            if not n:
                t_first = t_last
            n += 1
            got += k
        done = sender.wait_line("sent", 5)
    finally:
        sender.kill()
        s.close()
    dt = t_last - t_first
    return {
        "size": size,
        "sent": done["sent"],
        "refused": done["refused"],
        "sent_rate": done["sent"] * size / (done["ms"] / 1000),
        "received": n,
        "rate": got / dt if dt > 0 else 0.0,
        "receiver_cpu": (time.process_time() - cpu0) / dt if dt > 0 else 0.0,
    }


# -- serial ----------------------------------------------------------------------------------------


class Netem:
    """`leadwire netem serial` in its own process: the emulated line at `baud`, both directions."""

    def __init__(self, target: str, baud: int) -> None:
        self.proc = Proc([tool("leadwire"), "netem", "serial", "--target", target, "--rate", str(baud)])
        self.port = str(self.proc.wait_line("port", 15)["port"])

    def snapshot(self) -> dict[str, Any]:
        n = sum(1 for d in self.proc.lines if "counts" in d)
        os.kill(self.proc.p.pid, signal.SIGUSR1)
        end = time.monotonic() + 5
        while time.monotonic() < end:
            lines = [d for d in self.proc.lines if "counts" in d]
            if len(lines) > n:
                return dict(lines[-1]["counts"])
            time.sleep(0.005)
        raise RuntimeError("netem gave no counts")

    def close(self) -> None:
        self.proc.kill()


def lw_serial(
    board_dir: Path,
    tmp: Path,
    baud: int,
    warmup: float,
    seconds: float,
    signed: bool = False,
    ring: int = SERIAL_RING,
    over: float = OVER,
    tick: int = 1,
) -> dict[str, Any]:
    line = baud / 10  # bytes/s
    hz = int(over * line / EVENT)  # more than the line can carry: the line is the bottleneck
    cfg = sensor_cfg(hz, ring, tick) | {"serial": {"frame": SERIAL_FRAME}}
    db = tmp / ("serial-%d-%d.db" % (baud, time.monotonic_ns()))
    board = boot("serial", board_dir, cfg, signed)
    net = None
    try:
        assert board.port is not None
        net = Netem(board.port, baud)
        # a burst is at most the ring: its time on the line, with margin, is the answer timeout
        burst_s = cfg["ring"] * (EVENT + 3) * 1.05 * 10 / baud
        doc = bridge_doc(
            db, {"serial": net.port, "baud": baud}, wire.MAX_PAYLOAD, round(2 * burst_s + 0.5, 2), board.key
        )
        snaps: list[dict[str, Any]] = []
        res = asyncio.run(
            run_bridge(doc, board.pid, warmup, seconds, lambda start: snaps.append(net.snapshot()))
        )
    finally:
        if net is not None:
            net.close()
        board.close()
    res = finish(res, db, seconds)
    a, b = snaps
    dt = b["elapsed_s"] - a["elapsed_s"]
    down = b["down"]["out_bytes"] - a["down"]["out_bytes"]
    up = b["up"]["out_bytes"] - a["up"]["out_bytes"]
    # the ceiling of the frames this run sent: stored payload per byte on the down line (as if the
    # line never idled); goodput / line = that x the share of time the down line was busy
    res.update(
        baud=baud,
        hz=hz,
        signed=signed,
        ring=cfg["ring"],
        line=line,
        down_bytes=down,
        up_bytes=up,
        down_busy=down / dt / line,
        up_busy=up / dt / line,
        sent_ceiling=sent_ceiling(res),
    )
    return res


def sent_ceiling(res: dict[str, Any]) -> float:
    """Stored payload per byte the frames of the window took on the down line: frame bytes + 2 (the
    COBS code byte and the delimiter: every record has a zero byte, so no COBS run reaches 254)."""
    rx = res["rx"]
    wire_bytes = rx["bytes"] + 2 * rx["frames"]
    return res["counters"].get("events_stored", 0) * EVENT / wire_bytes if wire_bytes else 0.0


def line_rate(baud: int, seconds: float, frame: int) -> float:
    """The emulated line's own rate: a continuous stream of `frame`-byte frames (the size leadwire
    sends, as netem paces frame by frame) through netem, no protocol."""
    m, s = pty.openpty()
    tty.setraw(s)
    os.set_blocking(m, False)
    net = Netem(os.ttyname(s), baud)
    fd = os.open(net.port, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    tty.setraw(fd)
    stop = threading.Event()
    chunk = b"\x01" * (frame - 1) + b"\x00"

    def feed() -> None:  # ~1.5 x the line rate, so netem always has bytes queued
        per = len(chunk) / (1.5 * baud / 10)
        t = time.monotonic()
        while not stop.is_set():
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(m, chunk)
            t += per
            time.sleep(max(0.0, t - time.monotonic()))

    th = threading.Thread(target=feed, daemon=True)
    th.start()
    got = 0
    t0 = t1 = 0.0
    end = time.monotonic() + seconds + 0.5
    try:
        while time.monotonic() < end:
            try:
                k = len(os.read(fd, 65536))
            except BlockingIOError:
                time.sleep(0.002)
                continue
            now = time.monotonic()
            if now - (end - seconds - 0.5) < 0.5:  # the first 0.5 s: warm-up
                continue
            if not t0:
                t0 = now
            else:
                got += k
            t1 = now
    finally:
        stop.set()
        th.join(2)
        net.close()
        for f in (fd, m, s):
            with contextlib.suppress(OSError):
                os.close(f)
    return got / (t1 - t0) if t1 > t0 else 0.0


def ceiling(frame: int, max_bytes: int) -> dict[str, Any]:
    """A full EVENTS frame of 64 B events, made by the core's ring: its bytes on the wire."""
    ring = EventRing(64, 0, EVENT, 1)
    p = bytearray([0, 0] + [CH] * (EVENT - 2))
    for i in range(64):
        p[1] = i
        ring.write(p, CH, EVENT)
    buf = bytearray(frame)
    n = ring.answer_into(buf, 0xFFFF, 0xFFFF, 255, max_bytes, 0, 0)
    k = len(codec.decode(bytes(buf[:n])).payload)
    events = (k - wire.BATCH_HEAD) // (wire.RECORD_HEAD + EVENT)
    return {
        "events": events,
        "payload": events * EVENT,
        "frame": n,
        "cobs": len(framing.encode(bytes(buf[:n]))),
    }


# -- report ------------------------------------------------------------------------------------------


def med(rs: list[dict[str, Any]], key: str) -> float:
    v = [r[key] for r in rs if r.get(key) is not None]
    return statistics.median(v) if v else float("nan")


def pct(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else "%.0f%%" % (100 * x)


def report(res: dict[str, Any]) -> str:
    """The three tables of the run: UDP, serial, signed (when run)."""
    out = [*_report_udp(res), "", *_report_serial(res)]
    if res["signed"]:
        out += ["", *_report_signed(res)]
    return "\n".join(out)


def _report_udp(res: dict[str, Any]) -> list[str]:
    out: list[str] = []
    lw = res["udp_lw"]
    rates = sorted({r["hz"] for r in lw}, key=lambda h: (h == 0, h))
    best_hz = max(rates, key=lambda h: med([r for r in lw if r["hz"] == h], "goodput"))
    best = [r for r in lw if r["hz"] == best_hz]
    size = res["raw_size"]
    raw = [r for r in res["udp_raw"] if r["size"] == size]
    raw64 = [r for r in res["udp_raw"] if r["size"] == EVENT]
    g, rr, r64 = med(best, "goodput"), med(raw, "rate"), med(raw64, "rate")
    n = len(best)
    out.append(
        "UDP, 64 B events (medians of %d; leadwire at its best sensor rate, %s):"
        % (n, "%s ev/s" % fmt(best_hz) if best_hz else "flat out")
    )
    rows = [["", "payload bytes/s", "events/s (64 B)", "ratio leadwire / raw"]]
    rows.append(["leadwire: board -> bridge -> SQLite, stored", fmt(g), fmt(g / EVENT), "-"])
    rows.append(
        [
            "raw MicroPython -> CPython, %d B datagrams (= leadwire's per datagram)" % size,
            fmt(rr),
            fmt(rr / EVENT),
            "**%.3f**" % (g / rr),
        ]
    )
    rows.append(["raw, 64 B datagrams (one event each)", fmt(r64), fmt(r64 / EVENT), "%.3f" % (g / r64)])
    out.append(table(rows))
    per = ["%.3f" % (x["goodput"] / y["rate"]) for x, y in zip(best, raw, strict=False) if y["rate"]]
    out.append("ratio per repetition (same repetition's runs): %s" % " / ".join(per))
    out.append("")
    rows = [
        [
            "leadwire sensor rate",
            "stored payload B/s",
            "events/s",
            "events / datagram",
            "lost (counted) / s",
            "silent",
            "board CPU",
            "bridge CPU",
            "CPU us / stored event: board, bridge",
        ]
    ]
    for h in rates:
        rs = [r for r in lw if r["hz"] == h]
        lost = med(rs, "lost_s")
        rows.append(
            [
                "flat out (hz 0)" if h == 0 else "%s ev/s" % fmt(h),
                fmt(med(rs, "goodput")),
                fmt(med(rs, "events_s")),
                fmt(med(rs, "events_per_frame"), 1),
                fmt(lost),
                fmt(sum(r["silent_lost"] for r in rs)),
                pct(med(rs, "board_cpu")),
                pct(med(rs, "bridge_cpu")),
                "%s, %s" % (fmt(med(rs, "board_us"), 1), fmt(med(rs, "bridge_us"), 1)),
            ]
        )
    out.append(table(rows))
    out.append("")
    rows = [["raw datagram size", "sent B/s", "received B/s", "received / sent", "receiver CPU"]]
    for s in sorted({r["size"] for r in res["udp_raw"]}, reverse=True):
        rs = [r for r in res["udp_raw"] if r["size"] == s]
        rows.append(
            [
                "%d B" % s,
                fmt(med(rs, "sent_rate")),
                fmt(med(rs, "rate")),
                "%.2f" % (med(rs, "rate") / med(rs, "sent_rate")),
                pct(med(rs, "receiver_cpu")),
            ]
        )
    out.append(table(rows))
    return out


def _report_serial(res: dict[str, Any]) -> list[str]:
    out: list[str] = []
    c = res["ceiling"]
    out.append(
        "Serial, 64 B events, frames of %d B (%d events = %d B payload; %d B with COBS + delimiter), "
        "bursts of %d, POLL %d B on the wire:"
        % (c["frame"], c["events"], c["payload"], c["cobs"], FRAMES, POLL_WIRE)
    )
    rows = [
        [
            "baud",
            "line payload B/s (baud/10)",
            "emulated line, measured B/s",
            "stored payload B/s",
            "ratio goodput / (baud/10)",
            "per run",
            "goodput / emulated line",
            "framing ceiling (full frames)",
            "ceiling of the frames sent",
            "expected here: that x emulated line / (baud/10)",
            "down line busy",
            "events / frame",
            "lost (counted) / s",
            "silent",
            "board CPU",
            "bridge CPU",
        ]
    ]
    for baud in res["bauds"]:
        rs = [r for r in res["serial"] if r["baud"] == baud]
        line = baud / 10
        sent_ceiling, lost = med(rs, "sent_ceiling"), med(rs, "lost_s")
        rows.append(
            [
                fmt(baud),
                fmt(line),
                fmt(res["line"].get(str(baud), float("nan"))),
                fmt(med(rs, "goodput")),
                "**%.3f**" % (med(rs, "goodput") / line),
                " / ".join("%.3f" % (r["goodput"] / line) for r in rs),
                "%.3f" % (med(rs, "goodput") / res["line"][str(baud)]) if res["line"].get(str(baud)) else "-",
                "%.3f" % (c["payload"] / c["cobs"]),
                "%.3f" % sent_ceiling,
                "%.3f" % (sent_ceiling * res["line"][str(baud)] / line)
                if res["line"].get(str(baud))
                else "-",
                pct(med(rs, "down_busy")),
                fmt(med(rs, "events_per_frame"), 1),
                fmt(lost),
                fmt(sum(r["silent_lost"] for r in rs)),
                pct(med(rs, "board_cpu")),
                pct(med(rs, "bridge_cpu")),
            ]
        )
    out.append(table(rows))
    return out


def _report_signed(res: dict[str, Any]) -> list[str]:
    out: list[str] = []
    out.append(
        "Signed frames (auth: HMAC-SHA256 tag, 8 B trailer a frame), beside unsigned with the same ring:"
    )
    rows = [
        [
            "link",
            "frames",
            "ring (events)",
            "stored payload B/s",
            "signed / unsigned",
            "events / frame",
            "board CPU",
            "bridge CPU",
            "CPU us / stored event: board, bridge",
        ]
    ]
    by: dict[str, dict[bool, list[dict[str, Any]]]] = {}
    for r in res["signed"]:
        by.setdefault(r["link"], {}).setdefault(r["signed"], []).append(r)
    for link, d in by.items():
        u = med([r for r in d.get(False, []) if "error" not in r], "goodput")
        for signed in (True, False):
            rs = d.get(signed, [])
            if not rs:
                continue
            if any("error" in r for r in rs):
                rows.append(
                    [
                        link,
                        "signed" if signed else "unsigned",
                        "-",
                        "did not boot",
                        "-",
                        "-",
                        "-",
                        "-",
                        "-",
                    ]
                )
                continue
            g = med(rs, "goodput")
            ratio = "%.3f" % (g / u) if signed and u and not math.isnan(u) else "-"
            if rs[0]["line"]:
                ratio += " (%.3f of baud/10)" % (g / rs[0]["line"])
            rows.append(
                [
                    link,
                    "signed" if signed else "unsigned",
                    fmt(rs[0]["ring"]),
                    fmt(g) + (" (%s)" % " / ".join(fmt(r["goodput"]) for r in rs) if len(rs) > 1 else ""),
                    ratio,
                    fmt(med(rs, "events_per_frame"), 1),
                    pct(med(rs, "board_cpu")),
                    pct(med(rs, "bridge_cpu")),
                    "%s, %s" % (fmt(med(rs, "board_us"), 1), fmt(med(rs, "bridge_us"), 1)),
                ]
            )
    out.append(table(rows))
    return out


def label(link: str, x: int) -> str:
    if link == "serial":
        return "serial %s baud" % fmt(x)
    return "udp, sensor %s" % ("flat out" if x == 0 else "%s ev/s" % fmt(x))


def signed_runs(
    res: dict[str, Any],
    board_dir: Path,
    tmp: Path,
    bauds: list[int],
    warmup: float,
    seconds: float,
    repeat: int,
) -> None:
    """Signed frames (auth) beside unsigned ones with the same ring: a signed board has
    less heap for its ring, so the unsigned run repeats with the signed run's ring."""
    # UDP at SIGNED_UDP_HZ, `repeat` pairs (a keyed board's small ring makes single runs noisy);
    # serial once per baud (line-bound)
    cases: list[tuple[str, int]] = [("udp", SIGNED_UDP_HZ)] * repeat + [("serial", b) for b in bauds]
    failed: dict[str, Any] | None = None
    for link, x in cases:
        pair: list[dict[str, Any]] = []
        if failed is not None:  # the signed board did not boot: the same heap, the same outcome
            res["signed"].append(failed | {"link": label(link, x), "line": None})
            continue
        ring = UDP_RING if link == "udp" else SERIAL_RING
        if link == "udp" and any(r.get("link") == label(link, x) and "ring" in r for r in res["signed"]):
            ring = next(r["ring"] for r in res["signed"] if r.get("link") == label(link, x) and "ring" in r)
        for signed in (True, False):
            try:
                if link == "udp":
                    r = lw_udp(board_dir, tmp, x, warmup, seconds, signed, ring)
                else:
                    r = lw_serial(board_dir, tmp, x, warmup + 1.0, seconds, signed, ring)
            except BoardError as e:
                log("goodput_bench: %s" % e)
                failed = {"error": str(e), "signed": signed}
                pair.append(failed)
                break
            ring = r["ring"]
            pair.append(r)
        for r in pair:
            r["link"] = label(link, x)
            r["line"] = x / 10 if link == "serial" else None
        res["signed"] += pair


@click.command(help=__doc__.split("\n")[0])
@click.option("--quick", is_flag=True, help="one repetition, short windows, no signed runs (~45 s)")
@click.option("--repeat", type=int, default=2, show_default=True, help="repetitions, interleaved")
@click.option("--seconds", type=float, default=6.0, show_default=True, help="measurement window per run")
@click.option("--rates", default="100000,150000,0", show_default=True,
              help="leadwire UDP sensor rates, ev/s (0: flat out)")  # fmt: skip
@click.option("--bauds", default="115200,921600", show_default=True)
@click.option("--no-signed", "signed", is_flag=True, flag_value=False, default=True,
              help="skip the signed (auth) runs")  # fmt: skip
@click.option("--json", type=click.Path(dir_okay=False, path_type=Path), help="write all results here")
def main(**kw: Any) -> None:
    sys.exit(bench(SimpleNamespace(**kw)))


def bench(a: Any) -> int:
    if a.quick:
        a.repeat, a.seconds, a.rates = 1, 3.0, "100000,0"
    rates = [int(x) for x in a.rates.split(",")]
    bauds = [int(x) for x in a.bauds.split(",")]
    warmup = 1.0
    tmp = Path(tempfile.mkdtemp(prefix="leadwire-goodput-"))
    res: dict[str, Any] = {
        "bauds": bauds,
        "udp_lw": [],
        "udp_raw": [],
        "serial": [],
        "signed": [],
        "line": {},
        "ceiling": ceiling(SERIAL_FRAME, wire.MAX_PAYLOAD),
    }
    t_start = time.monotonic()
    try:
        board_dir = tmp / "board"
        build("unix", board_dir)  # once: every run boots this flash with its own config
        for rep in range(a.repeat):
            for hz in rates:
                r = lw_udp(board_dir, tmp, hz, warmup, a.seconds)
                log(
                    "udp leadwire hz %d: %.0f B/s stored, %.1f events/datagram, board CPU %s"
                    % (hz, r["goodput"], r["events_per_frame"], pct(r["board_cpu"]))
                )
                res["udp_lw"].append(r)
            if rep == 0:  # the raw datagram size: what the leadwire runs put in an EVENTS datagram
                epf = statistics.median(r["events_per_frame"] for r in res["udp_lw"] if r["events_per_frame"])
                res["raw_size"] = round(epf) * EVENT
            for size in (res["raw_size"], EVENT):
                r = raw_udp(size, a.seconds)
                log("udp raw %d B: %.0f B/s received (%.0f sent)" % (size, r["rate"], r["sent_rate"]))
                res["udp_raw"].append(r)
            for baud in bauds:
                if rep == 0:
                    res["line"][str(baud)] = line_rate(baud, min(a.seconds, 3.0), res["ceiling"]["cobs"])
                r = lw_serial(board_dir, tmp, baud, warmup + 1.0, a.seconds * (1.5 if baud < 200000 else 1))
                log(
                    "serial %d: %.0f B/s stored (%.3f of baud/10), down line busy %s"
                    % (baud, r["goodput"], r["goodput"] / (baud / 10), pct(r["down_busy"]))
                )
                res["serial"].append(r)
        if a.signed and not a.quick:  # --quick: no signed runs (~60 s more)
            signed_runs(res, board_dir, tmp, bauds, warmup, a.seconds, a.repeat)
        print(report(res))
        print("(%.0f s, load average %.1f %.1f %.1f)" % (time.monotonic() - t_start, *os.getloadavg()))
        if a.json:
            a.json.write_text(json.dumps(res, indent=1, default=str))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    bad = [
        r
        for r in res["udp_lw"] + res["serial"] + res["signed"]
        if r.get("silent_lost") or r.get("failed") or not r.get("accounting_ok", True)
    ]
    if bad:
        log("goodput_bench: silent loss or a failed bridge: %s" % bad)
        return 1
    return 0


if __name__ == "__main__":
    main()
