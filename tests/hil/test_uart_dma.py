"""The UART's transmit DMA request in the emulated Pico (tools/pico/uart.mjs), first on its own, without
a firmware image: a small Node driver programs rp2040js's DMA and the PL011 by their registers, as
pico-sdk would, and reports what leaves on the line and when, on the board's clock. Then on the
official RPI_PICO image: an rp2.DMA channel paced by DREQ_UART0_TX, and the firmware's lwdma, whose
frames arrive on the host side of UART0 byte for byte at the line rate, 0 bytes allocated per frame.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
import tty
from typing import Any

import pytest

from leadwire import framing, messages
from leadwire.tools.board import PICO_DIR, PicoBoard
from leadwire.tools.picohil import RawRepl
from leadwire.u32 import add

from .test_burst import burst, records
from .test_hil import Open, first_range

pytestmark = pytest.mark.timeout(120)

# (rp2040js and uart.mjs resolve from tools/pico: the driver runs there)
DRIVER = """
import { RP2040 } from 'rp2040js';
import { Pl011 } from %s;
const spec = JSON.parse(process.argv[1]);
const m = new RP2040();
const sent = [[], []];
const trace = [];
const uarts = [0, 1].map((i) => new Pl011(m, i, (b) => sent[i].push([m.clock.nanos, b]),
  i === spec.uart ? (line) => trace.push(line) : null));
m.peripherals[0x40034] = uarts[0];
m.peripherals[0x40038] = uarts[1];
const W = (a, v) => m.writeUint32(a, v);
const R = (a) => m.readUint32(a);
const base = [0x40034000, 0x40038000][spec.uart];
const div = 125e6 / (16 * spec.baud); // clk_peri 125 MHz, as uart_set_baudrate() computes it
W(base + 0x24, Math.floor(div));
W(base + 0x28, Math.round((div - Math.floor(div)) * 64));
W(base + 0x2c, 0x70); // 8N1, FIFOs on
W(base + 0x30, 0x301); // UARTEN, TXE, RXE
W(base + 0x48, spec.txdmae ? 3 : 1); // pico-sdk's uart_init sets TXDMAE | RXDMAE
spec.data.forEach((b, i) => m.writeUint8(0x20001000 + i, b));
const ch = 0x50000000 + 0x40 * spec.channel;
W(ch + 0x00, 0x20001000); // READ_ADDR
W(ch + 0x04, base); // WRITE_ADDR: UARTDR
W(ch + 0x08, spec.data.length); // TRANS_COUNT
// CTRL_TRIG: EN, DATA_SIZE byte, INCR_READ, CHAIN_TO itself, TREQ_SEL: the go
W(ch + 0x0c, 1 | (1 << 4) | (spec.channel << 11) | (spec.treq << 15));
const t0 = m.clock.nanos;
if (spec.host) uarts[spec.uart].hostInput(spec.host);
const counts = [];
let done = null;
const step = 1000;
for (let t = 0; t < spec.ns; t += step) {
  if (spec.enable_at !== undefined && t === spec.enable_at) W(base + 0x48, 3);
  if (spec.disable_at !== undefined && t === spec.disable_at) W(base + 0x48, 1);
  m.clock.tick(step);
  if (done === null && R(0x50000400) & (1 << spec.channel)) done = m.clock.nanos - t0;
  if (t %% 100000 === 0) counts.push([m.clock.nanos - t0, R(ch + 0x08), uarts[spec.uart].tx.length]);
}
process.stdout.write(JSON.stringify({
  t0, done, counts, char_ns: uarts[spec.uart].charNanos,
  busy: (R(ch + 0x0c) >>> 24) & 1,
  sent: sent.map((s) => s.map(([t, b]) => [t - t0, b])),
  trace: trace.map((l) => l.split(' ').map((v, i) => (i ? Number(v) - (i === 1 ? t0 : 0) : v))),
}) + '\\n');
""" % json.dumps(str(PICO_DIR / "uart.mjs"))


def drive(**spec: Any) -> dict[str, Any]:
    if shutil.which("node") is None:
        pytest.skip("the emulated UART needs Node.js (`node`)")
    if not (PICO_DIR / "node_modules" / "rp2040js").is_dir():
        pytest.skip("the emulated UART needs its npm packages: npm ci --prefix tools/pico")
    r = subprocess.run(
        ["node", "--input-type=module", "-e", DRIVER, json.dumps(spec)],
        cwd=PICO_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    return out


DATA = [(i * 7 + (i >> 3)) & 0xFF for i in range(300)]


def test_a_channel_paced_by_the_tx_dreq_sends_at_the_line_rate() -> None:
    """300 bytes by DMA to UART0 at 921,600 baud: what leaves is the buffer, byte for byte, one
    character time (10 bits: 10,851 ns) apart from the first; the channel fills the 32-entry FIFO
    at once and then follows the line (its count falls one per character), and completes when its
    last byte enters the FIFO: 32 characters before the line is done."""
    r = drive(uart=0, baud=921600, channel=0, treq=20, txdmae=True, data=DATA, ns=4_000_000)
    c = r["char_ns"]
    assert c == round(10e9 / (125e6 / 16 / (8 + 31 / 64)))  # the divider's rate, not the nominal one
    assert [b for _, b in r["sent"][0]] == DATA and r["sent"][1] == []
    times = [t for t, _ in r["sent"][0]]
    assert times == [c * (i + 1) for i in range(len(DATA))]
    assert r["done"] is not None and abs(r["done"] - c * (len(DATA) - 32)) < 1000
    assert r["busy"] == 0
    # while it runs: the FIFO full, the count = what is not yet in it (sampled every 100 us)
    during = [(t, n, f) for t, n, f in r["counts"] if t < c * (len(DATA) - 33)]
    assert len(during) >= 20
    for t, n, f in during:
        assert f == 32
        assert n == len(DATA) - 32 - t // c


def test_uart1_at_115200_and_its_own_dreq() -> None:
    """UART1 paces its own channel (DREQ 22) at 115,200 baud; UART0 sends nothing."""
    r = drive(uart=1, baud=115200, channel=3, treq=22, txdmae=True, data=DATA[:64], ns=7_000_000)
    c = r["char_ns"]
    assert abs(c - 10e9 / 115200) < 0.001 * c
    assert [b for _, b in r["sent"][1]] == DATA[:64] and r["sent"][0] == []
    assert [t for t, _ in r["sent"][1]] == [c * (i + 1) for i in range(64)]


def test_no_transfer_without_txdmae_and_a_dreq_of_another_uart_moves_nothing() -> None:
    """With UARTDMACR.TXDMAE clear the request stays low: the channel waits, busy, nothing leaves;
    set at 1 ms, the transfer starts then. A channel on UART1's DREQ (22) writing to UART0 never
    moves (UART1's transmitter is not enabled)."""
    r = drive(
        uart=0,
        baud=921600,
        channel=1,
        treq=20,
        txdmae=False,
        enable_at=1_000_000,
        data=DATA[:40],
        ns=2_000_000,
    )
    c = r["char_ns"]
    assert [b for _, b in r["sent"][0]] == DATA[:40]
    assert r["sent"][0][0][0] == 1_000_000 + c  # the first character: one character time after TXDMAE
    r = drive(uart=0, baud=921600, channel=2, treq=22, txdmae=True, data=DATA[:40], ns=1_000_000)
    assert r["sent"] == [[], []] and r["busy"] == 1 and r["counts"][-1][1] == 40


def test_the_line_trace_says_where_the_transmitter_idled() -> None:
    """Pl011's `trace` (what $LEADWIRE_PICO_UART_TRACE writes for UART0): the channel's request
    dropped at 100 us (TXDMAE cleared) after 41 bytes were in the FIFO, raised again at 1 ms: one
    `idle` line at 1 ms for the stretch since the 41st character left; a `sent` line as each 0
    byte finishes leaving; a `received` line as each 0 byte from the host enters the RX FIFO."""
    host = [5, 0, 7, 7, 0]
    pause = {"disable_at": 100_000, "enable_at": 1_000_000, "ns": 5_000_000}
    r = drive(uart=0, baud=921600, channel=0, treq=20, txdmae=True, data=DATA, host=host, **pause)
    c = r["char_ns"]
    assert [b for _, b in r["sent"][0]] == DATA
    left = [c * (i + 1) if i < 41 else 1_000_000 + c * (i - 40) for i in range(len(DATA))]
    assert [t for t, _ in r["sent"][0]] == left
    idle = [x for x in r["trace"] if x[0] == "idle"]
    assert idle == [["idle", 1_000_000, 1_000_000 - 41 * c]]
    zeros = [t for t, b in zip(left, DATA, strict=True) if b == 0]
    assert len(zeros) >= 2
    assert [x for x in r["trace"] if x[0] == "sent"] == [["sent", t] for t in zeros]
    arrived = [c * (j + 1) for j, b in enumerate(host) if b == 0]
    assert [x for x in r["trace"] if x[0] == "received"] == [["received", t] for t in arrived]


# -- on the official RPI_PICO image -------------------------------------------------------------

BOARD_DMA = """
import machine, rp2, time
u = machine.UART(0, baudrate=921600, tx=machine.Pin(0), rx=machine.Pin(1), txbuf=32, timeout=0)
buf = bytes((i * 7 + (i >> 3)) & 0xFF for i in range(%d))
d = rp2.DMA()
c = d.pack_ctrl(size=0, inc_write=0, treq_sel=20)
for k in range(3):
    t0 = time.ticks_us()
    d.config(read=buf, write=0x40034000, count=len(buf), ctrl=c, trigger=True)  # UART0's DR
    while d.active():
        pass
    t1 = time.ticks_us()
    while not u.txdone():
        pass
    t2 = time.ticks_us()
    print('DMA', time.ticks_diff(t1, t0), time.ticks_diff(t2, t0))
d.close()
"""

BOARD_LWDMA = """
import gc, machine, time, lwdma
from micropython import heap_lock, heap_unlock
u = machine.UART(0, baudrate=921600, tx=machine.Pin(0), rx=machine.Pin(1), txbuf=32, timeout=0)
L = [None] * 18  # a link record: its COBS buffer at 13 (lwboot.link's _CB)
L[13] = bytearray(%d)
send = lwdma.attach(0, L[13])  # (its twin made here)
frames = [bytes((i * 31 + j) & 0xFF for j in range(s)) for i, s in enumerate(%r)]
gc.collect()
a = gc.mem_alloc()
for i in range(len(frames)):
    f = frames[i]
    heap_lock()
    try:
        r = send(L, f, len(f))
    finally:
        heap_unlock()
    assert r == 0
print('LWDMA', gc.mem_alloc() - a, lwdma.state[1])
while lwdma.state[0] >= 0 or not u.txdone():
    machine.idle()
print('DONE', list(lwdma.state[:3]))
f = b'\\x01'
best = None
for k in range(3):  # (the least of three: the board is now and then held up for a few ms)
    t0 = time.ticks_us()
    for i in range(100):
        send(L, f, 1)
    t = time.ticks_diff(time.ticks_us(), t0) * 125 // 100
    best = t if best is None or t < best else best
print('SEND', best)
"""


def _uart_reader(port: str) -> int:
    fd = os.open(port, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    tty.setraw(fd)
    while select.select([fd], [], [], 0.3)[0]:  # what the agent sent before the REPL stopped it
        os.read(fd, 65536)
    return fd


def _read(fd: int, n: int, timeout: float) -> bytes:
    got = b""
    end = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < end:
        if select.select([fd], [], [], 0.2)[0]:
            got += os.read(fd, 65536)
    return got


@pytest.mark.micropython
@pytest.mark.timeout(300)
def test_rp2_dma_to_uart0_on_the_rpi_pico_image(pico_board: PicoBoard) -> None:
    """rp2.DMA, paced by DREQ_UART0_TX, sends 2,000 bytes on the official firmware, three times: the
    host side of UART0 receives them in order; on the board's clock the channel is busy until the
    last byte is in the FIFO ((2,000 - 32) character times at 921,600 baud) and the line is done 32
    later (the least of three: the board's polling loops are now and then held up for a few ms)."""
    n = 2000
    fd = _uart_reader(pico_board.port or "")
    repl = RawRepl(pico_board.repl or "")
    try:
        repl.enter()
        out = repl.run(BOARD_DMA % n, timeout=120)
        got = _read(fd, 3 * n, 60)
    finally:
        repl.close()
        os.close(fd)
        pico_board.restart()  # the agent back for the next test
    assert got == 3 * bytes((i * 7 + (i >> 3)) & 0xFF for i in range(n))
    runs = [[int(x) for x in ln.split()[1:]] for ln in out.splitlines() if ln.startswith("DMA")]
    assert len(runs) == 3, out
    active_us, line_us = min(a for a, _ in runs), min(b for _, b in runs)
    char_us = 10e6 / (125e6 / 16 / (8 + 31 / 64))
    assert abs(active_us - (n - 32) * char_us) < 3 * char_us + 100, active_us
    assert abs(line_us - n * char_us) < 3 * char_us + 100, line_us


@pytest.mark.micropython
@pytest.mark.timeout(300)
def test_lwdma_frames_arrive_whole_and_allocate_nothing(pico_board: PicoBoard) -> None:
    """firmware/lwdma on the board: 12 frames of 1..700 bytes sent back to back (the second waits
    behind the first, the third for a buffer): the host side of UART0 receives each COBS-encoded
    and 0-terminated, in order; 0 bytes allocated by the 12 sends, the first included (heap locked:
    attach() made the second buffer).
    Then 3 x 100 one-byte frames, the heap unlocked: under 20,000 cycles a send, interrupt included
    (~12,000; a bytecode frame over 11 words would come from the heap at each call: ~32,000)."""
    sizes = [700, 3, 500, 1, 64, 699, 250, 2, 640, 17, 300, 450]
    frames = [bytes((i * 31 + j) & 0xFF for j in range(s)) for i, s in enumerate(sizes)]
    want = b"".join(framing.encode(f) for f in frames)  # (each with its 0 delimiter)
    fd = _uart_reader(pico_board.port or "")
    repl = RawRepl(pico_board.repl or "")
    try:
        repl.enter()
        out = repl.run(BOARD_LWDMA % (700 + 700 // 254 + 2, sizes), timeout=120)
        got = _read(fd, len(want) + 900, 60)
    finally:
        repl.close()
        os.close(fd)
        pico_board.restart()
    assert got == want + b"\x02\x01\x00" * 300
    lines = dict(ln.split(" ", 1) for ln in out.strip().splitlines())
    assert lines["LWDMA"].split()[0] == "0", out
    assert lines["DONE"].startswith("[-1, -1,"), out  # nothing on the line, nothing waiting
    assert int(lines["SEND"]) < 20_000, out


@pytest.mark.micropython
@pytest.mark.timeout(300)
@pytest.mark.parametrize("dma", [True, False])
def test_the_agent_sends_bursts_by_dma_and_by_uart_write(open_dut: Open, dma: bool) -> None:
    """The agent over UART0 with "serial": {"dma": true} (rp2's default) and false: a burst of 6 frames
    of 1 KB (frames queue behind each other at 115,200 baud: the DMA's second buffer, then its wait)
    carries exactly the next offsets, every frame whole; lwdma sent them, or UART.write."""
    d = open_dut(
        "pico",
        ring=256,
        slot=32,
        sensors=[{"ch": 1, "hz": 50, "size": 32}],
        health={"ms": 0},
        serial={"frame": 1024, "dma": dma},
    )
    assert isinstance(d.board, PicoBoard)
    d.sleep(4.0)  # ~200 events of 35 B: 6 frames of 1 KB
    n0, _ = first_range(d.client, 3 * d.slow)
    frames = burst(d.client, add(n0, -1), 255, 6, 6 * d.slow, 1.0 * d.slow)
    assert [f.index for f in frames] == list(range(6)) and d.client.errors == []
    offsets: list[int] = []
    for f in frames:
        _, recs = records(f)
        assert f.seq == add(n0, len(offsets)) and len(f.payload) > 900
        offsets += [add(f.seq, i) for i in range(len(recs))]
    samples = [messages.decode_sample(data)[0] for f in frames for _, data in records(f)[1]]
    assert samples == [(samples[0] + i) & 0xFFFF for i in range(len(samples))]
    repl = RawRepl(d.board.repl or "")  # which way they went (the agent stops: restarted after)
    try:
        repl.enter()
        assert repl.run("import lwagent\nprint(lwagent._dma is not None)").strip() == str(dma)
    finally:
        repl.close()
        d.board.restart()
