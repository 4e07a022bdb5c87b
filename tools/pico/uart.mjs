// The RP2040's two PL011 UARTs as leadwire's emulated Pico runs them (pico.mjs), with their transmit
// DMA request: a module of its own so that tests drive it without a firmware image
// (tests/hil/test_uart_dma.py).
//
// Stock rp2040js 1.4.1 models a UART with no transmit FIFO and no line time (a byte written is out
// at once) and holds its TX DREQ high whenever the UART is enabled, so a DMA channel paced by it
// would empty its buffer in a few instructions. Here the TX FIFO drains one character per character
// time at the programmed baud rate, and DREQ_UARTn_TX (20, 22) is high while the transmit DMA is
// enabled (UARTDMACR.TXDMAE, which pico-sdk's uart_init sets), the UART and its transmitter are
// enabled (UARTCR.UARTEN, TXE) and the TX FIFO has a free entry (the PL011's single-character
// request): a channel with TREQ_SEL 20 keeps the FIFO full and is paced by the line from then on,
// so what the host side receives arrives at the baud rate, byte for byte what the buffer held.
// rp2040js's DMA (RPDMA: the channels, their DREQ wait, chaining, the completion interrupt) does the
// transfers; each takes no time on the board's clock (a real one takes a few bus cycles) and the
// CPU executes meanwhile. Not modelled: the receive DMA request (UARTDMACR.RXDMAE, DREQ 21/23),
// the PL011's burst requests (UARTTXDMABREQ, at the FIFO level; the RP2040's DMA counts single
// requests), DMAONERR, and a shift register apart from the FIFO (the character being sent holds
// one of the 32 entries).
import { BasePeripheral } from 'rp2040js';

const UART_IRQ = [20, 21];
const DREQ_TX = [20, 22]; // DREQ_UART0_TX, DREQ_UART1_TX (rp2040 hardware/regs/dreq.h)
const I_RX = 1 << 4, I_TX = 1 << 5, I_RT = 1 << 6, I_OE = 1 << 10;
const FIFO_LEVELS = [4, 8, 16, 24, 28]; // IFLS: 1/8 .. 7/8 of 32
const TXDMAE = 1 << 1;

/** A PL011 as MicroPython's interrupt-driven UART driver uses it: 32-byte FIFOs, characters moving
 * at the programmed baud rate on the board's clock, the TX interrupt on the FIFO level passing the
 * trigger (an edge: cleared by ICR or by filling above it), RX level and receive-timeout interrupts,
 * and honest overruns: a character arriving with the RX FIFO full is lost (OE set); the TX DMA
 * request (above). The host's side is a byte queue fed by the launcher; `out` receives what the
 * board sends. `trace` (optional) receives one line per line event, times in ns on the board's
 * clock: `idle T NS` (a character went out at T after the line was idle NS: the transmitter
 * had nothing to send), `sent T` (a 0 byte, a COBS frame's delimiter, finished leaving at T),
 * `received T` (a 0 byte arrived in the RX FIFO at T). */
export class Pl011 extends BasePeripheral {
  constructor(mcu, index, out, trace = null) {
    super(mcu, `UART${index}`);
    this.irq = UART_IRQ[index];
    this.dreqTx = DREQ_TX[index];
    this.dreqTxOn = false;
    this.out = out;
    this.rx = []; // the RX FIFO: [byte, error bits]
    this.tx = [];
    this.hostQueue = []; // bytes on the wire towards the board, not yet received
    this.onHostDrained = null;
    this.ris = 0; this.imsc = 0; this.ifls = 0x12; this.lcr = 0; this.cr = 0x300;
    this.ibrd = 0; this.fbrd = 0; this.dmacr = 0; this.ilpr = 0;
    this.overruns = 0;
    this.trace = trace;
    this.idleSince = -1; // when the line went idle (the TX FIFO empty), for `trace`
    this.txWrites = 0; // characters written to DR (by the CPU or a DMA channel): tests count them
    // (rp2040js leaves an alarm's `scheduled` set after it fires: each callback clears it first)
    const alarm = (f) => { const a = mcu.clock.createAlarm(() => { a.scheduled = false; f(); }); return a; };
    this.txAlarm = alarm(() => this.txDone());
    this.rxAlarm = alarm(() => this.rxArrive());
    this.rtAlarm = alarm(() => { if (this.rx.length) { this.ris |= I_RT; this.update(); } });
  }
  get fifoDepth() { return this.lcr & 0x10 ? 32 : 1; }
  get baud() {
    const div = this.ibrd + this.fbrd / 64;
    return div > 0 ? this.rp2040.clkPeri / (16 * div) : 115200;
  }
  get charNanos() { // start + data + parity + stop bits
    const bits = 1 + 5 + ((this.lcr >> 5) & 3) + (this.lcr & 2 ? 1 : 0) + (this.lcr & 8 ? 2 : 1);
    return Math.round((bits * 1e9) / this.baud);
  }
  get baudRate() { return Math.round(this.baud); }
  clkPeriChanged() {} // the rate is computed from clkPeri at each character
  enabled(bit) { return (this.cr & 1) && (this.cr & bit); }
  rxTrigger() { return this.lcr & 0x10 ? FIFO_LEVELS[(this.ifls >> 3) & 7] ?? 16 : 1; }
  txTrigger() { return this.lcr & 0x10 ? FIFO_LEVELS[this.ifls & 7] ?? 16 : 0; }
  update() {
    if (this.rx.length < this.rxTrigger()) this.ris &= ~I_RX;
    if (!this.rx.length) this.ris &= ~I_RT;
    this.rp2040.setInterrupt(this.irq, !!(this.ris & this.imsc));
    // the TX DMA request follows the FIFO: a channel waiting on it runs when it rises (RPDMA.setDREQ
    // schedules the channels paced by it); a transfer that fills the FIFO lowers it, and the
    // channel then waits for the line to take a character
    const dreq = !!(this.dmacr & TXDMAE) && !!this.enabled(1 << 8) && this.tx.length < this.fifoDepth;
    if (dreq !== this.dreqTxOn) {
      this.dreqTxOn = dreq;
      if (dreq) this.rp2040.dma.setDREQ(this.dreqTx);
      else this.rp2040.dma.clearDREQ(this.dreqTx);
    }
  }
  /** Host bytes queued (launcher): start receiving them at the line rate. */
  hostInput(bytes) {
    for (const b of bytes) this.hostQueue.push(b);
    if (!this.rxAlarm.scheduled) this.rxAlarm.schedule(this.charNanos);
  }
  rxArrive() {
    if (!this.hostQueue.length) return;
    const b = this.hostQueue.shift();
    if (this.enabled(1 << 9)) { // a disabled receiver ignores the line
      if (this.rx.length < this.fifoDepth) {
        this.rx.push(b);
        if (this.trace && b === 0) this.trace(`received ${this.rp2040.clock.nanos}`);
        if (this.rx.length === this.rxTrigger()) this.ris |= I_RX;
      } else {
        this.overruns++; // lost: the FIFO was full (the next read carries OE)
        this.ris |= I_OE;
        if (this.rx.length) this.rx[this.rx.length - 1] |= 0x800;
      }
      this.rtAlarm.schedule(Math.round(32e9 / this.baud)); // receive timeout: 32 bit periods idle
      this.update();
    }
    if (this.hostQueue.length) this.rxAlarm.schedule(this.charNanos);
    else if (this.onHostDrained) this.onHostDrained();
  }
  txDone() {
    if (!this.tx.length) return;
    const before = this.tx.length;
    const b = this.tx.shift();
    this.out(b);
    if (this.trace) {
      if (b === 0) this.trace(`sent ${this.rp2040.clock.nanos}`);
      if (!this.tx.length) this.idleSince = this.rp2040.clock.nanos;
    }
    const trig = this.txTrigger();
    if (before > trig && this.tx.length <= trig) this.ris |= I_TX;
    this.update();
    if (this.tx.length) this.txAlarm.schedule(this.charNanos);
  }
  get flags() {
    const n = this.tx.length, depth = this.fifoDepth;
    return (n === 0 ? 0x80 : 0) | (this.rx.length >= depth ? 0x40 : 0) | (n >= depth ? 0x20 : 0) |
      (this.rx.length === 0 ? 0x10 : 0) | (n > 0 ? 0x08 : 0);
  }
  readUint32(offset) {
    switch (offset) {
      case 0x00: { // DR
        const v = this.rx.length ? this.rx.shift() : 0;
        this.update();
        return v;
      }
      case 0x04: return 0; // RSR
      case 0x18: return this.flags;
      case 0x20: return this.ilpr;
      case 0x24: return this.ibrd;
      case 0x28: return this.fbrd;
      case 0x2c: return this.lcr;
      case 0x30: return this.cr;
      case 0x34: return this.ifls;
      case 0x38: return this.imsc;
      case 0x3c: return this.ris;
      case 0x40: return this.ris & this.imsc;
      case 0x48: return this.dmacr;
      default: // peripheral and PrimeCell ids
        return { 0xfe0: 0x11, 0xfe4: 0x10, 0xfe8: 0x34, 0xfec: 0, 0xff0: 0x0d, 0xff4: 0xf0, 0xff8: 0x05, 0xffc: 0xb1 }[offset] ?? 0;
    }
  }
  writeUint32(offset, value) {
    switch (offset) {
      case 0x00: // DR: a byte write (the DMA's 8-bit transfers) arrives replicated on every lane
        if (this.enabled(1 << 8) && this.tx.length < this.fifoDepth) {
          if (this.trace && !this.tx.length && this.idleSince >= 0) {
            const now = this.rp2040.clock.nanos;
            this.trace(`idle ${now} ${now - this.idleSince}`);
            this.idleSince = -1;
          }
          this.tx.push(value & 0xff);
          this.txWrites++;
          if (this.tx.length > this.txTrigger()) this.ris &= ~I_TX;
          if (!this.txAlarm.scheduled) this.txAlarm.schedule(this.charNanos);
        }
        break;
      case 0x20: this.ilpr = value & 0xff; break;
      case 0x24: this.ibrd = value & 0xffff; break;
      case 0x28: this.fbrd = value & 0x3f; break;
      case 0x2c:
        this.lcr = value & 0xff;
        if (!(this.lcr & 0x10)) this.rx.length = Math.min(this.rx.length, 1);
        break;
      case 0x30: this.cr = value & 0xffff; break;
      case 0x34: this.ifls = value & 0x3f; break;
      case 0x38: this.imsc = value & 0x7ff; break;
      case 0x44: this.ris &= ~(this.rawWriteValue & 0x7ff); break; // ICR: the bits written
      case 0x48: this.dmacr = value & 7; break;
      default: break;
    }
    this.update();
  }
}
