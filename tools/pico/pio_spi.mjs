// The CYW43439's gSPI bus as pico-sdk's cyw43_bus_pio_spi.c drives it: a PIO state machine
// (program spi_gap01_sample0: side-set clock on GPIO 29, data out and in on GPIO 24) fed and drained
// by two DMA channels. The bus is cut at the state machine's FIFOs, not the pins: the driver loads
// the bit counts of a transaction (pio_sm_put + `out x, 32` / `out y, 32`, then `jmp` to the
// program), DMA pushes the command and data words into TXF and pulls the answer from RXF. The hooks
// here take those words off the state machine (whose program never runs: its enable bit is kept
// from rp2040js), hand the transaction to the chip at once and queue its answer for the RX DMA
// (DREQ raised while words wait); the TX stall flag the driver waits on after a write reads set
// once the words are in.
//
// Word order: the words pass a byte-swapping DMA, so TXF holds bswap(w) of each driver memory word
// w; the chip sees and answers memory words.

const PIN_DATA = 24, PIN_CLOCK = 29;
const bswap = (v) => (((v & 0xff) << 24) | ((v & 0xff00) << 8) | ((v >>> 8) & 0xff00) | (v >>> 24)) >>> 0;

/** onTransaction(words, rxBytes) -> the words read (rxBytes / 4 of them), or null for a write. */
export class PioSpiBus {
  constructor(mcu, onTransaction) {
    this.mcu = mcu;
    this.onTransaction = onTransaction;
    this.sm = null; // the bus's state machine {pio, index, ...}, found when the driver first uses it
    this.txn = null; // the transaction under way
    this.hookPio();
  }

  hookPio() {
    for (const pio of this.mcu.pio) {
      const read = pio.readUint32.bind(pio), write = pio.writeUint32.bind(pio);
      pio.readUint32 = (off) => this.pioRead(pio, off, read);
      pio.writeUint32 = (off, v) => this.pioWrite(pio, off, v, write);
    }
  }

  isBus(sm) { // the gSPI program's pins: side-set (clock) on 29, OUT on 24
    return sm.sidesetBase === PIN_CLOCK && sm.outBase === PIN_DATA;
  }

  ours(pio, i) { return this.sm && this.sm.pio === pio && this.sm.index === i; }

  pioRead(pio, off, read) {
    if (this.sm && this.sm.pio === pio) {
      const i = this.sm.index;
      if (off === 0x000) return read(off) | (this.sm.enabled ? 1 << i : 0); // CTRL
      if (off === 0x008) return read(off) | (this.txn && this.txn.txDone ? 1 << (24 + i) : 0); // FDEBUG: TXSTALL
      if (off === 0x020 + 4 * i) return this.rxWord(); // RXF
    }
    return read(off);
  }

  /** Machine i of pio is the bus when its pins say so (set by pio_sm_set_config before it is used). */
  claim(pio, i) {
    if (!this.ours(pio, i) && this.isBus(pio.machines[i])) {
      this.sm = { pio, index: i, enabled: false, fifo: [], rx: [], x: 0, y: 0, dreqRx: pio.dreqRx[i] };
    }
  }

  pioWrite(pio, off, v, write) {
    if (off === 0x010 || off === 0x014 || off === 0x018 || off === 0x01c) this.claim(pio, (off - 0x010) >> 2);
    else if (off >= 0x0d8 && off <= 0x0d8 + 0x18 * 3 && (off - 0x0d8) % 0x18 === 0) this.claim(pio, (off - 0x0d8) / 0x18);
    if (off === 0x000) { // CTRL: our machine's enable bit stays here; its program is not run
      for (let i = 0; i < 4; i++) if (v & (1 << i)) this.claim(pio, i);
      if (this.sm && this.sm.pio === pio) {
        this.sm.enabled = !!(v & (1 << this.sm.index));
        v &= ~(1 << this.sm.index);
      }
      return write(off, v);
    }
    if (this.sm && this.sm.pio === pio) {
      const i = this.sm.index;
      if (off === 0x010 + 4 * i) return this.txWord(v >>> 0); // TXF
      if (off === 0x0d8 + 0x18 * i) return this.exec(v & 0xe0ff); // SMi_INSTR (side-set bits off)
    }
    return write(off, v);
  }

  /** An instruction forced into the state machine: the transaction's bit counts. */
  exec(op) {
    const sm = this.sm;
    if (op === 0x6020) sm.x = sm.fifo.shift() ?? 0; // out x, 32: bits to send - 1
    else if (op === 0x6040) sm.y = sm.fifo.shift() ?? 0; // out y, 32: bits to receive - 1
    else if ((op & 0xe0e0) === 0) { // jmp <program start>: a transaction begins
      this.txn = { txWords: (sm.x + 1) >>> 5, rxWords: sm.y ? (sm.y + 1) >>> 5 : 0, words: [], txDone: false };
      sm.rx = [];
      this.mcu.dma.clearDREQ(sm.dreqRx);
    }
  }

  txWord(v) {
    const t = this.txn;
    if (!t || t.txDone) { this.sm.fifo.push(v); return; } // pio_sm_put of a bit count
    t.words.push(bswap(v));
    if (t.words.length < t.txWords) return;
    t.txDone = true;
    const rx = this.onTransaction(t.words, t.rxWords * 4);
    if (t.rxWords) {
      for (let i = 0; i < t.rxWords; i++) this.sm.rx.push(bswap(rx ? rx[i] >>> 0 : 0));
      this.mcu.dma.setDREQ(this.sm.dreqRx);
    }
  }

  rxWord() {
    const rx = this.sm.rx || [];
    const v = rx.length ? rx.shift() : 0;
    if (!rx.length) this.mcu.dma.clearDREQ(this.sm.dreqRx);
    return v;
  }
}
