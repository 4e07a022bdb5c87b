# The serial link's transmit by DMA on rp2 (config.json "serial": {"dma": true}, the default where
# the port has rp2.DMA: boards/rp2.py attaches it; docs/firmware.md). Each frame goes from RAM to
# the UART's TX FIFO through one DMA channel paced by the UART's TX DREQ (20: UART0, 22: UART1):
# the CPU moves none of its bytes (the UART driver's write() costs ~240 cycles a byte on an
# RP2040: its ring buffer, then the TX interrupt byte by byte).
#
# Two frame buffers: one the DMA reads (on the line), the next frame COBS-encoded into the other
# meanwhile; the channel's completion interrupt (hard: it allocates nothing) starts the waiting one
# at once, so the line does not idle between the frames of a burst. The link's COBS buffer slot
# (L[_CB]) always names the one free to build in: the ring builds its answers there COBS-encoded
# (device.respond, EventRing.answer_cobs), which send() then hands over as they are. send() waits
# only when both are taken (a burst the CPU builds faster than the line carries it), before it
# returns (the next frame is built in the one on the line), and then in WFE (the core
# sleeps; the channel's interrupt ends the wait; machine.idle() would wake every ms at ~10k
# cycles a wake): not an asyncio wait, because a burst is one snapshot of the ring with no await
# in it (ring.respond). A wait longer than _WAIT ms (a line that does not move: the UART disabled)
# aborts the channel: the waiting frame is counted dropped.
#
# Allocates: 0 bytes per frame; the second buffer once, at attach() (the boot: the heap the agent
# keeps is the same whatever frames it sent), the size of the link's COBS buffer.
#
# The UART is then the agent's alone: a UART.write from elsewhere while a frame goes would
# interleave with it in the FIFO. attach() refuses when the console is on a UART (os.dupterm).
#
# Names: every name a board loads is a qstr kept for good (past 300 of them the interpreter adds a
# pool: tests/firmware/test_qstr_budget.py; an rp2 board pushing with DMA was at 300), so the
# functions, globals and arguments here are names the rp2 image has anyway (done, wait, idle,
# event, channel, registers, buf, state, write, array): this module adds only its file's.
import time
from array import array

import machine
import micropython
import rp2
from micropython import const
from uctypes import addressof

from leadwire.framing import encode_into

_COUNT = const(14)  # the channel's registers (words): AL3_TRANS_COUNT
_GO = const(15)  # AL3_READ_ADDR_TRIG: the read address, which starts the channel
_WAIT = const(5000)  # ms: a 2,078-byte frame takes 2.2 s at 9,600 baud
# state (array "i": write() reads it): the buffer on the line (-1: none), the one waiting (-1:
# none), its length, the buffers' addresses (state[_A + i]), the channel's registers' address
_ON = const(0)
_NEXT_BUF = const(1)
_NEXT_LEN = const(2)
_A = const(3)
_R = const(5)
_CB = const(13)  # a link's COBS buffer (lwagent's, lwboot's slot)

channel = None  # the rp2.DMA channel (kept: its finaliser frees the channel)
registers = memoryview(b"")  # its registers
buf: list = [None, None]  # the two frame buffers: the link's COBS buffer and its twin
state = array("i", (-1, -1, 0, 0, 0, 0))


def attach(n, b):
    """UART n (0 or 1) sends by DMA from now on: send() is the serial link's transmit, b the
    link's COBS buffer (L[_CB] at its first frame: the frames are built in it and its twin, made
    here); None when the port has no rp2.DMA or the console is on a UART (it would interleave).
    OSError: no free channel."""
    global channel, registers
    import os

    p = os.dupterm(None)
    os.dupterm(p)
    if isinstance(p, machine.UART) or not hasattr(rp2, "DMA"):
        return None
    d = rp2.DMA()
    # bytes from the buffer (incrementing) to the UART's DR (fixed), one per DREQ, and an
    # interrupt at the end (pack_ctrl's default is quiet)
    d.config(
        write=0x40034000 + 0x4000 * n,
        ctrl=d.pack_ctrl(size=0, inc_write=False, treq_sel=20 + 2 * n, irq_quiet=0),
    )
    d.irq(done, True)
    channel = d
    registers = d.registers  # type: ignore[attr-defined]  # (not in the stubs)
    buf[0] = b
    buf[1] = bytearray(len(b))
    state[_A] = addressof(b)
    state[_A + 1] = addressof(buf[1])
    state[_R] = addressof(registers)
    return send


@micropython.asm_thumb
def idle():
    # WFE: sleep until an event, unless one came since the last WFE (then return at once)
    data(2, 0xBF20)  # type: ignore  # noqa: F821


@micropython.asm_thumb
def event():
    # SEV: an event (pico-sdk's own waits pair their WFE with a SEV in the interrupt the same way)
    data(2, 0xBF40)  # type: ignore  # noqa: F821


@micropython.asm_thumb
def write(r0, r1, r2):
    # send()'s hand-over, interrupts off: frame r2 (0, 1; r1 bytes) goes now when the line is free
    # (the channel's count, then its read address, which starts it: state[_ON] = r2), else after
    # the one on it (done: state[_NEXT_LEN], state[_NEXT_BUF]). r0: state. Returns 1 when it waits
    # (~3,000 cycles a frame less than the same in bytecode, between machine.disable_irq and
    # enable_irq)
    cpsid(i)  # type: ignore  # noqa: F821
    ldr(r3, [r0, 0])  # type: ignore  # noqa: F821
    cmp(r3, 0)  # type: ignore  # noqa: F821
    bge(LATER)  # type: ignore  # noqa: F821
    ldr(r3, [r0, 20])  # type: ignore  # noqa: F821
    str(r1, [r3, 56])  # type: ignore  # noqa: F821
    add(r1, r2, 3)  # type: ignore  # noqa: F821
    lsl(r1, r1, 2)  # type: ignore  # noqa: F821
    add(r1, r1, r0)  # type: ignore  # noqa: F821
    ldr(r1, [r1, 0])  # type: ignore  # noqa: F821
    str(r1, [r3, 60])  # type: ignore  # noqa: F821
    str(r2, [r0, 0])  # type: ignore
    mov(r0, 0)  # type: ignore  # noqa: F821
    b(END)  # type: ignore  # noqa: F821
    label(LATER)  # type: ignore  # noqa: F821
    str(r1, [r0, 8])  # type: ignore
    str(r2, [r0, 4])  # type: ignore
    mov(r0, 1)  # type: ignore  # noqa: F821
    label(END)  # type: ignore  # noqa: F821
    cpsie(i)  # type: ignore  # noqa: F821


def done(d):
    # the channel has put its frame's last byte in the FIFO (hard IRQ): the waiting one goes on;
    # the event ends wait()'s WFE, even one entered just after this ran
    i = state[_NEXT_BUF]
    if i >= 0:
        registers[_COUNT] = state[_NEXT_LEN]
        registers[_GO] = state[_A + i]
        state[_NEXT_BUF] = -1
    state[_ON] = i
    event()


def wait():
    # send()'s slow path, both buffers taken: sleep until the line takes the waiting one (the
    # channel's interrupt sends an event: WFE returns). Returns the frames dropped (1 after a line
    # that did not move for _WAIT ms).
    t = time.ticks_ms()
    while state[_NEXT_BUF] >= 0:
        if time.ticks_diff(time.ticks_ms(), t) > _WAIT:
            s = machine.disable_irq()  # (an abort may raise the completion interrupt)
            channel.active(0)  # type: ignore[union-attr]
            state[_ON] = state[_NEXT_BUF] = -1
            machine.enable_irq(s)
            return 1
        idle()
    return 0


def send(L, b, n, a=None):
    """b[:n] down link L's line by DMA, COBS-encoded and 0-terminated first unless b is the link's
    COBS buffer (L[_CB]: a frame the ring built there, n its encoded size). Returns the frames
    dropped (0, or 1 after a stuck line). On return L[_CB] is a buffer free to build the next
    frame in: the other of the two, after the line took the one on it when both were taken. L[_CB]
    is attach()'s b or its twin. a: unused (the core's responder calls its sender d(L, b, n, a):
    lwagent's io loop hands it send itself)."""
    # (few locals: a bytecode frame over 11 words comes from the GC heap at every call, ~20k
    # cycles on a Pico's heap, unless the heap is locked)
    cb = L[_CB]
    i = 0 if cb is buf[0] else 1
    if b is not cb:
        n = encode_into(b, n, cb, 0) + 1
        cb[n - 1] = 0
    L[_CB] = buf[1 - i]
    return wait() if write(state, n, i) else 0
