"""The agent on an emulated Raspberry Pi Pico: cycle counts on the board's clock.

    .venv/bin/python bench/pico_bench.py            # ~6-10 min on a loaded 2-core machine
    .venv/bin/python bench/pico_bench.py --quick    # shorter windows
    .venv/bin/python bench/pico_bench.py --frames 16   # the goodput runs' bridge asks 16-frame bursts

The board is the official MicroPython v1.26.1 RPI_PICO firmware on rp2040js (tools/pico,
`leadwire board --kind pico`), flashed with `leadwire flash --board rp2` as a real Pico. rp2040js
advances the board's clock by the CPU cycles each instruction takes (125 MHz), so every figure here
is on the board's clock and does not depend on how loaded the host is (the emulator only runs
slower in wall time). What rp2040js does not model: flash wait states and XIP cache misses (a real
Pico runs code from flash through a 16 KB cache: somewhat slower), and nothing but core 0.

1. Per event, measured on the board (ticks_us x 125 cycles, in tight loops of the core's calls as
   the agent makes them, each ring call with the heap locked, with the agent stopped): the ring
   write (EventRing.write, 64-byte events; batched: write_samples, 20 a call);
   answering a batch (EventRing.answer_into, 1 event, 15 = a 1 KB frame; answer_cobs: built, CRC'd
   and COBS-encoded, as the agent answers over a serial link);
   the whole poll-to-answer path (COBS scan of the POLL, wire.check, the fields, answer_cobs, the
   send: by DMA where the agent attached lwdma, rp2's default) against the ring write alone (goal:
   <= 3x); the same path as cycles executed (read from the emulator around the runs), each POLL
   after the line drained, its interrupts included (poll_fixed: a POLL is now quicker than its
   frame on the line, so timed back to back it waits); machine.UART.write alone carrying 2 KB
   answers at 921,600 baud (uart_write_per_event_921600: the driver's share of the whole agent's
   cycles with "dma": false, beside the DMA run's, which is the rest of the agent).
2. Serial goodput of the real bridge (host/bridge, in this process, unchanged, pipelined burst
   POLLs of 32 frames, or --frames) polling UART0 at 115,200 and 921,600 baud: event payload
   bytes (64-byte events, as bench/goodput_bench.py) stored per second of the board's clock
   against the line rate (baud / 10); the sensor offers 1.2x what the line carries (a backlog the
   ring holds), and 2x (overload); at
   921,600 baud twice, the frames sent by UART.write ("serial": {"dma": false}) and by DMA (lwdma,
   rp2's default: the _dma keys). Beside it the
   board's CPU cycles per stored event (all of the agent: asyncio
   loop, sensors, answers, UART driver), so where the line is not reached the CPU ceiling shows.
3. Heap with auth on (a random key; a signed client): free after boot (the agent's "ready" line),
   then heap free and low-water from its health records under load.
4. The events/s a real 125 MHz Pico sustains, from the cycle counts.
5. Idle: the board's CPU busy (cycles executed / cycles elapsed: rp2040js counts none while the core
   sleeps in WFE) with the default config and with no sensors (health off), nobody polling; the
   POLL answer latency at idle (round trip of a one-event POLL over UART0 at 115,200 baud, median of
   40, wall clock: the emulator runs at real time while the board idles); the agent's heap (used at
   "ready", ring excluded: the interpreter's own ~4.6 KB included) with auth off and on, and the
   heap free at ready with the default ring.

--json prints one JSON object (the keys of docs/design/pico-agent-cost.md) instead of the tables.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from leadwire import codec, framing, messages, wire
from leadwire.tools.board import PicoBoard, pico_files, pico_missing
from leadwire.tools.picobench import FRAME, HZ, goodput, heap_auth
from leadwire.tools.picohil import RawRepl, configure, flashed_pico
from leadwire.tools.wireclient import Client, SerialLink

EVENT = 64  # event payload bytes
START = 0x3FFFF000  # the ring's first offset: the micro-benchmark crosses 2^30 (the small-int limit)

BOARD_CODE = """
import time, gc, machine, sys
for m in ('leadwire.ring', 'leadwire.framing'):  # anew: the agent frees their constructors once booted
    sys.modules.pop(m, None)
from micropython import heap_lock, heap_unlock
from leadwire.ring import EventRing
from leadwire.framing import StreamDecoder, scan

from leadwire.device import respond
import lwagent, lwdma
from lwagent import _send
from leadwire import wire
u = machine.UART(0, baudrate=7812500, tx=machine.Pin(0), rx=machine.Pin(1), txbuf=1024, timeout=0)
def bench(P, k, N, M):
    r = EventRing(256, %d, %d)
    pl = bytearray(%d)
    buf = bytearray(1100)
    cb = bytearray(1200)
    d = StreamDecoder(64)
    gc.collect()
    t = time.ticks_us()
    for i in range(N):
        heap_lock()
        r.write(pl, 1, %d)
        heap_unlock()
    tw = time.ticks_diff(time.ticks_us(), t)
    t = time.ticks_us()
    for i in range(N // 20):
        heap_lock()
        r.write_samples(pl, 1, %d, 20, i)
        heap_unlock()
    tb = time.ticks_diff(time.ticks_us(), t)
    d.scan(P, 0, len(P))
    f = d.frame
    hi = wire.seq_hi(f)
    lo = wire.seq_lo(f)
    t = time.ticks_us()
    for j in range(M):
        heap_lock()
        r.answer_into(buf, hi, lo, k, 2047, 0, 0)
        heap_unlock()
    ta = time.ticks_diff(time.ticks_us(), t)
    t = time.ticks_us()
    for j in range(M):
        heap_lock()
        r.answer_cobs(buf, cb, hi, lo, k, 2047, 0, 0, 0)
        heap_unlock()
    te = time.ticks_diff(time.ticks_us(), t)
    got = buf[10]
    end = len(P)
    # the POLL's whole path as lwagent.io runs it on a serial link with auth off: the scan (one
    # native call: COBS decode, wire.check), the core's responder (device.respond: the copy rule,
    # the ring's burst loop, the native answer built COBS-framed in the link's buffer), the send
    # (lwdma.send itself where the agent attached lwdma, rp2's default, else lwagent._send), all
    # with the heap locked; every POLL here is the same one, so the copy record is cleared each time
    L = [None] * 18
    L[0] = u
    L[1] = False
    L[2] = buf
    L[13] = cb
    L[16] = len(buf) - 12
    f = d.frame
    st = d.st
    tx = _send
    if lwagent._dma is not None:  # the agent sent by DMA (rp2's default): from cb and its twin,
        tx = lwagent._dma = lwdma.attach(0, cb)  # lwdma.send the responder's sender (lwagent.io)
    t = time.ticks_us()
    for j in range(M):
        L[17] = -1
        p = 0
        while p < end:
            heap_lock()
            st[4] = end
            p = scan(P, p, f, st)
            k = st[2]
            m = respond(L, f, k, None, r, tx) if k > 0 else k
            heap_unlock()
            if m:
                raise ValueError('bad poll %%d' %% m)
    tp = time.ticks_diff(time.ticks_us(), t)
    t = time.ticks_us()
    for j in range(M):  # the loop and the lock pair alone (taken off answer_cobs' turns: net)
        heap_lock()
        heap_unlock()
    tl = time.ticks_diff(time.ticks_us(), t)
    global _P
    _P = (L, f, st, r, tx, P, end)
    print('BENCH', tw, ta, tp, got, tb, te, tl)
def polls(M, q):
    # M POLLs' whole path as bench()'s loop (q 1), each after the line drained (a 1 ms sleep: its
    # frame takes ~0.1 ms at 7.8 Mbaud), or the same loop without them (q 0); the host reads the
    # cycles the board executed around each (WFE, asleep, counts none): the difference is the
    # POLLs', the interrupts at the end of each frame included, and no wait for the line
    L, f, st, r, tx, P, end = _P
    gc.collect()
    gc.disable()  # (no collection in one run and not the other)
    for j in range(M):
        heap_lock()
        if q:
            L[17] = -1
            p = 0
            st[4] = end
            while p < end:
                p = scan(P, p, f, st)
                k = st[2]
                m = respond(L, f, k, None, r, tx) if k > 0 else k
        heap_unlock()
        time.sleep_ms(1)
    gc.enable()
def uart_frames(N, n):
    # machine.UART.write alone (the driver as the agent's serial link has it with "dma": false:
    # boards/rp2.py's TX ring of 1 KB, timeout 0) carrying N COBS-framed answers of n bytes at
    # 921,600 baud, by lwagent._send's loop (write(buf, off, len) until the whole frame is taken,
    # 1 ms sleeps when nothing went); then until the line is idle
    global uw
    if uw is None:
        uw = machine.UART(0, baudrate=921600, tx=machine.Pin(0), rx=machine.Pin(1), rxbuf=256,
                          txbuf=1024, timeout=0)
    cb = bytearray(n)
    for j in range(n):
        cb[j] = 0x55
    cb[n - 1] = 0
    gc.collect()
    gc.disable()
    for j in range(N):
        p = 0
        while p < n:
            w = uw.write(cb, p, n - p)
            if w:
                p += w
            else:
                time.sleep_ms(1)
    while not uw.txdone():
        time.sleep_ms(1)
    gc.enable()
uw = None
""" % (START, EVENT, EVENT, EVENT, EVENT)

UART_FRAME = 2035  # a 2 KB answer COBS-framed: 30 events of 67 B on the line (12 + 3 + 30 x 67, + 9)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def poll_bytes(n: int, k: int) -> bytes:
    """A POLL for k events after offset n, COBS framed as the host sends it (0 before and after)."""
    return b"\x00" + framing.encode(codec.encode(messages.poll_frame(n, k, wire.MAX_PAYLOAD, 7))) + b"\x00"


def cycles_per_event(board: PicoBoard, quick: bool) -> list[dict[str, Any]]:
    """Section 1 on the board (the agent stopped at the REPL)."""
    repl = RawRepl(board.repl or "")
    out = []
    try:
        repl.enter()
        repl.run(BOARD_CODE, timeout=120)
        n_writes = 600 if quick else 2000
        for k in (1, 15):  # one event a POLL; 15 x 67 B = a 1 KB frame
            m = (60 if quick else 200) if k == 1 else (10 if quick else 40)
            newest = (START + n_writes + n_writes // 20 * 20 - 1) & 0xFFFFFFFF  # write() and write_samples()
            p = poll_bytes((newest - k) & 0xFFFFFFFF, k)  # the k newest events
            text = repl.run("bench(%r, %d, %d, %d)" % (p, k, n_writes, m), timeout=900)
            tw, ta, tp, got, tb, te, tl = (int(x) for x in text.split("BENCH")[1].split())
            assert got == k, (got, k)
            write = tw * HZ / 1e6 / n_writes
            answer = ta * HZ / 1e6 / (m * k)
            path = tp * HZ / 1e6 / (m * k)
            samples = tb * HZ / 1e6 / (n_writes // 20 * 20)
            out.append(
                {
                    "batch": k,
                    "write": write,
                    "samples": samples,
                    "answer": answer,
                    "answer_cobs": te * HZ / 1e6 / (m * k),  # answer_cobs: answer, CRC and COBS
                    "path": path,
                    "ratio": path / write,
                    "loop": tl * HZ / 1e6 / m,  # a turn of the loop and the lock pair
                    "path_cycles": executed(board, repl, "polls(%d, %%d)" % m) / (m * k),
                }
            )
            log(
                "pico_bench: batch %d: write %.0f, answer %.0f, path %.0f cycles/event"
                % (k, write, answer, path)
            )
        n = 4 if quick else 10
        repl.run("uart_frames(0, %d)" % UART_FRAME)  # the UART made (outside the measure)
        out[0]["uart_write"] = executed(board, repl, "uart_frames(%d * %%d, %d)" % (n, UART_FRAME)) / (
            n * UART_FRAME / (EVENT + 3)
        )
        log("pico_bench: UART.write alone %.0f cycles per 67 B on the line" % out[0]["uart_write"])
    finally:
        repl.close()
    board.restart(agent=True)
    return out


def executed(board: PicoBoard, repl: RawRepl, call: str) -> float:
    """CPU cycles the board executes in `call` % 1 beyond `call` % 0, twice each (rp2040js counts
    none while the core sleeps in WFE: the line's time is not in them, its interrupts are)."""
    c = []
    for q in (0, 1, 0, 1):
        c0 = board.clock()
        repl.run(call % q, timeout=900)
        c.append(board.clock()["cycles"] - c0["cycles"])
    return (c[1] + c[3] - c[0] - c[2]) / 2


DEFAULT = {"id": "bench", "auth": False, "udp": False}  # the default sensors, health and ring
QUIET = {**DEFAULT, "sensors": [], "health": {"ms": 0}}


def ready_heap(board: PicoBoard) -> tuple[int, int]:
    """(heap used, heap free) of the agent's "leadwire: ready" line of this boot."""
    ready = [ln for ln in board.console().splitlines() if "leadwire: ready" in ln][-1]
    used = int(ready.split("used", 1)[1].split()[0])
    return used, int(ready.rsplit("free", 1)[1])


def idle(board: PicoBoard, config: dict[str, Any], seconds: float) -> dict[str, Any]:
    """Section 5: CPU busy of the board running `config`, nobody polling; heap at ready."""
    configure(board, config)
    used, free = ready_heap(board)
    t = board.clock()["nanos"]
    while board.clock()["nanos"] - t < 1e9:  # past the boot
        time.sleep(0.05)
    c0 = board.clock()
    while board.clock()["nanos"] - c0["nanos"] < seconds * 1e9:
        time.sleep(0.1)
    c1 = board.clock()
    busy = (c1["cycles"] - c0["cycles"]) / ((c1["nanos"] - c0["nanos"]) * HZ / 1e9)
    r = {"busy_pct": 100 * busy, "used": used, "free": free}
    log("pico_bench: idle %s: %s" % (json.dumps(config.get("sensors", "default")), json.dumps(r)))
    return r


def poll_latency(board: PicoBoard, n: int = 40) -> float:
    """Median ms from a one-event POLL written to UART0 to its answer, the board idle (QUIET)."""
    configure(board, QUIET)
    link = SerialLink(board.port or "")
    c = Client(link)
    try:
        c.drain(0.3)
        times = []
        for _ in range(n):
            t = time.monotonic()
            c.poll(0, 1)
            times.append(1000 * (time.monotonic() - t))
    finally:
        c.close()
    return statistics.median(times)


def agent_heap(board: PicoBoard, key: bool) -> int:
    """The agent's heap at ready, ring (256 x 16 B, the default) excluded, auth on or off."""
    cfg = dict(QUIET)
    if key:
        cfg = {k: v for k, v in cfg.items() if k != "auth"}
        cfg["key"] = os.urandom(32).hex()
    configure(board, cfg)
    return ready_heap(board)[0] - 256 * (3 + 16)


def report(cyc: list[dict[str, Any]], gp: list[dict[str, Any]], heap: dict[str, Any]) -> str:
    lines = [
        "",
        "1. cycles per event on the board's clock (64-byte events; ring write = EventRing.write)",
        "",
    ]
    lines.append(
        "| batch | ring write | sensor batch write (20 per call) | answer_into | whole poll-to-answer path "
        "| path / write |"
    )
    lines.append("|---|---|---|---|---|---|")
    for c in cyc:
        lines.append(
            "| %d events | %.0f | %.0f | %.0f | %.0f | %.2fx |"
            % (c["batch"], c["write"], c["samples"], c["answer"], c["path"], c["ratio"])
        )
    one = cyc[0]
    lines.append(
        "\none-event POLL's whole path as cycles executed, the line drained before each (its interrupts "
        "included): %.0f; less answer_cobs' turn (net): poll_fixed %.0f"
        % (one["path_cycles"], one["path_cycles"] - (one["answer_cobs"] - one["loop"]))
    )
    lines += ["", "2. serial goodput of the bridge over UART0, on the board's clock", ""]
    lines.append(
        "| baud | frame B | sent by | offered / line | offered ev/s | stored | lost (counted) | goodput B/s "
        "| / line | CPU busy | cycles per stored event | CPU ceiling ev/s |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for g in gp:
        cpe = g["cycles_per_event"]
        lines.append(
            "| %d | %d | %s | %.1fx | %d | %d | %d | %.0f | %.3f | %.2f | %s | %s |"
            % (
                g["baud"],
                g["frame"],
                "DMA" if g["dma"] else "UART.write",
                g["offer"],
                g["hz"],
                g["stored"],
                g["lost"],
                g["goodput"],
                g["ratio"],
                g["busy"],
                "%.0f" % cpe if cpe else "-",
                "%.0f" % (HZ / cpe) if cpe else "-",
            )
        )
    lines.append(
        "\nmachine.UART.write alone carrying 2 KB answers at 921,600 baud at line rate: %.0f cycles per 67 B "
        "on the line (the driver's share of the UART.write row's cycles per stored event; the DMA row "
        "is the rest of the agent)" % one["uart_write"]
    )
    lines += ["", "3. heap with auth on (RPI_PICO: 246,016-byte GC heap)", ""]
    lines.append(
        "free after boot %s B; under load (%d events polled, %d health records): heap free >= %s B, "
        "low-water %s B"
        % (
            heap["free_after_boot"],
            heap["received"],
            heap["health"],
            heap["heap_free_min"],
            heap["low_water"],
        )
    )
    best = min(cyc, key=lambda c: c["path"])
    lines += [
        "",
        "4. a real 125 MHz Pico, from the cycle counts: ring writes alone %.0f ev/s; write + answer "
        "path (batches of %d) %.0f ev/s; the whole agent at the CPU ceiling measured in 2: %s ev/s"
        % (
            HZ / best["write"],
            best["batch"],
            HZ / (best["write"] + best["path"]),
            ", ".join("%.0f" % (HZ / g["cycles_per_event"]) for g in gp if g["cycles_per_event"]),
        ),
    ]
    return "\n".join(lines)


def summary(
    cyc: list[dict[str, Any]], gp: list[dict[str, Any]], extra: dict[str, Any], sha: str
) -> dict[str, Any]:
    """The keys docs/design/pico-agent-cost.md tabulates: cycles unless named, 64-byte events."""
    one, many = cyc
    g = {x["baud"]: x for x in gp if x["offer"] < 1.5 and not x["dma"]}  # UART.write ("dma": false)
    gd = {x["baud"]: x for x in gp if x["offer"] < 1.5 and x["dma"]}  # lwdma (rp2's default)
    return {
        "idle_default_pct": round(extra["idle_default"]["busy_pct"], 3),
        "idle_no_sensors_pct": round(extra["idle_quiet"]["busy_pct"], 3),
        "ring_write_one": round(one["write"]),
        "ring_write_batched": round(one["samples"]),
        "answer_per_event": round(many["answer_cobs"]),
        # a one-event POLL's whole path (scan, check, fields, answer, COBS, the send: by DMA, as
        # the agent sends on rp2, its interrupts included: cycles executed, the line drained before
        # each) less the answer and its COBS encode (answer_cobs' turn less the loop's)
        "poll_fixed": round(one["path_cycles"] - (one["answer_cobs"] - one["loop"])),
        "agent_per_event_921600": round(g[921600]["cycles_per_event"] or 0),
        # machine.UART.write alone carrying 2 KB answers at 921,600 baud at line rate (the driver:
        # its ring, its TX interrupts, its waits), per 67 B event on the line: the share of
        # agent_per_event_921600 that agent_per_event_921600_dma (the rest of the agent) has not
        "uart_write_per_event_921600": round(one["uart_write"]),
        "goodput_921600": round(g[921600]["ratio"], 3),
        "agent_per_event_921600_dma": round(gd[921600]["cycles_per_event"] or 0),
        "goodput_921600_dma": round(gd[921600]["ratio"], 3),
        "goodput_115200": round(g[115200]["ratio"], 3),
        "agent_heap_auth_off": extra["heap_off"],
        "agent_heap_auth_on": extra["heap_on"],
        "heap_free_default_ring": extra["idle_default"]["free"],
        "firmware_sha256": sha,
        "poll_latency_ms": round(extra["latency_ms"], 2),
    }


@click.command()
@click.option("--quick", is_flag=True, help="Shorter loops and windows.")
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON object with the keys of docs/design/pico-agent-cost.md."
)
@click.option(
    "--frames",
    type=click.IntRange(1, wire.MAX_INDEX + 1),
    default=wire.MAX_INDEX + 1,
    show_default=True,
    help="Frames a burst POLL of the goodput runs' bridge asks for (polling.frames).",
)
def main(quick: bool, as_json: bool, frames: int) -> None:
    why = pico_missing()
    if why:  # nothing to measure here (make bench goes on): say what to get
        print("pico_bench: skipped: " + why)
        return
    with tempfile.TemporaryDirectory(prefix="pico-bench-") as tmp:
        t0 = time.monotonic()
        board = flashed_pico(Path(tmp) / "board", {"id": "bench", "auth": False, "udp": False})
        try:
            log("pico_bench: flashed in %.0f s" % (time.monotonic() - t0))
            cyc = cycles_per_event(board, quick)
            secs = 8.0 if quick else 20.0
            # 1.2x the line: a backlog the whole window that the 512-event ring holds (no overrun);
            # 2 KB frames (the serial link's largest): 1.3% header against 2.6% at 1 KB. The last
            # row is sustained overload (2x): the ring overruns and the client recovers.
            # dma: the serial link's "dma" (rp2's default: on, lwdma), beside UART.write (off)
            gp = [
                goodput(board, Path(tmp), baud, 4.0, secs, offer, FRAME, dma, frames)
                for baud, offer, dma in (
                    (115200, 1.2, False),
                    (921600, 1.2, False),
                    (921600, 1.2, True),
                    (115200, 2.0, False),
                )
            ]
            heap = heap_auth(board, 3.0 if quick else 8.0)
            extra = {
                "idle_default": idle(board, DEFAULT, 5.0 if quick else 10.0),
                "idle_quiet": idle(board, QUIET, 5.0 if quick else 10.0),
                "latency_ms": poll_latency(board),
                "heap_off": agent_heap(board, False),
                "heap_on": agent_heap(board, True),
            }
        finally:
            board.close()
    sha = hashlib.sha256(pico_files()[0].read_bytes()).hexdigest()
    if as_json:
        print(json.dumps(summary(cyc, gp, extra, sha)))
        return
    print(report(cyc, gp, heap))
    print(
        "\n5. idle CPU busy: default config %.3f%%, no sensors %.3f%%; POLL answer latency at idle %.2f ms "
        "(median); agent heap at ready (ring excluded) auth off %d B, on %d B; heap free at ready "
        "(default ring) %d B; firmware sha256 %s"
        % (
            extra["idle_default"]["busy_pct"],
            extra["idle_quiet"]["busy_pct"],
            extra["latency_ms"],
            extra["heap_off"],
            extra["heap_on"],
            extra["idle_default"]["free"],
            sha,
        )
    )
    print(
        "\n(load average %s; %.0f s of wall time)"
        % (open("/proc/loadavg").read().split()[0], time.monotonic() - t0)
    )


if __name__ == "__main__":
    main()
