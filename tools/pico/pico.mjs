#!/usr/bin/env node
// leadwire's emulated Raspberry Pi Pico: an RP2040 (npm rp2040js, pinned in package.json) running an
// unmodified MicroPython rp2 UF2, driven by tools/board.py (`leadwire board --kind pico`).
//
//   node pico.mjs --firmware RPI_PICO.uf2 --bootrom B1.bin --repl-fd 3 --uart0-fd 4
//                 [--fs-image FILE] [--uid HEX16] [--speed 1]
//                 [--wifi-ssid S --wifi-key K [--udp-forward PORT,..] [--lease SECONDS]]
//
// I/O: the launcher passes two connected stream sockets (fds): the USB CDC REPL and UART0 (GP0/GP1,
// as a USB-UART adapter would see them); it joins each to a pty. Nothing here needs socat.
// stdout: one JSON object per line, {"event": "usb", "boot": N} when the USB REPL has enumerated
// after each boot (power-on, machine.reset(), watchdog), {"event": "reset", ...} when the board
// resets itself, answers to commands. stderr: log lines.
// With --wifi-ssid the board is a Pico W: an emulated CYW43439 on its gSPI pins (cyw43.mjs) and an
// access point with a router and a UDP NAT on 127.0.0.1 in this process (wifi_ap.mjs); stdout then
// starts with {"event": "wifi", "forwards": {"<board port>": "127.0.0.1:<host port>"}} and says
// what the AP sees ({"event": "wlan", ...}); the RPI_PICO_W image keeps 848 KiB of littlefs.
// stdin: one command per line: "power" (power cycle: a fresh chip, same flash), "clock" (answers
// {"event": "clock", "nanos", "cycles", "instructions"}: the board's own time and CPU cycles),
// "save" (write --fs-image now), "adc CH V1 V2 ..." (the next reads of ADC channel CH, 0..4 (4: the
// temperature sensor), give the 12-bit values V1, V2, ... in order, the last one from then on;
// answers {"event": "adc", "channel", "queued"}), "speed S" (--speed from now on, also across power
// cycles; answers {"event": "speed", "speed"}), "quit"; Pico W: "ap off", "ap on", "lease-end", "wifi"
// (answers {"event": "wifi-stats", ...}). EOF on stdin, SIGTERM or SIGINT: save and exit 0.
//
// What stock rp2040js lacks for this firmware, and is modelled here: the SPI NOR flash behind the
// SSI (littlefs writes), a PL011 UART with FIFOs, line-rate timing, RX overruns, edge-triggered
// interrupts and the transmit DMA request that paces an rp2.DMA channel by the line (uart.mjs), the
// ring oscillator's random bit (real entropy), the core-1 start-up handshake of a
// soft reset, host NAKs on the USB OUT endpoint, resets that reboot in the process, and a clock that
// never runs ahead of the wall clock (an idle board costs no host CPU).

import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import readline from 'node:readline';
import { BasePeripheral, ConsoleLogger, LogLevel, RP2040, USBCDC } from 'rp2040js';
import { Cyw43 } from './cyw43.mjs';
import { Pl011 } from './uart.mjs';
import { WifiAp } from './wifi_ap.mjs';

const FLASH_BYTES = 2 * 1024 * 1024; // RPI_PICO: W25Q16JV, 2 MiB
// the littlefs region: the last 1408 KiB on RPI_PICO, 848 KiB on RPI_PICO_W (MICROPY_HW_FLASH_STORAGE_BYTES)
let FS_OFFSET = FLASH_BYTES - 1408 * 1024;

function parseArgs(argv) {
  const o = { firmware: null, bootrom: null, replFd: null, uart0Fd: null, fsImage: null, uid: null, speed: 1,
    wifiSsid: null, wifiKey: '', udpForward: '', lease: 3600 };
  const names = { '--firmware': 'firmware', '--bootrom': 'bootrom', '--repl-fd': 'replFd',
    '--uart0-fd': 'uart0Fd', '--fs-image': 'fsImage', '--uid': 'uid', '--speed': 'speed',
    '--wifi-ssid': 'wifiSsid', '--wifi-key': 'wifiKey', '--udp-forward': 'udpForward', '--lease': 'lease' };
  for (let i = 0; i < argv.length; i += 2) {
    const k = names[argv[i]];
    if (!k || i + 1 >= argv.length) throw new Error(`bad argument ${argv[i]}`);
    o[k] = argv[i + 1];
  }
  for (const k of ['firmware', 'bootrom', 'replFd', 'uart0Fd']) {
    if (o[k] === null) throw new Error(`--${k.replace(/[A-Z0-9]+/g, (c) => '-' + c.toLowerCase())} is required`);
  }
  o.replFd = Number(o.replFd);
  o.uart0Fd = Number(o.uart0Fd);
  o.speed = Number(o.speed);
  o.lease = Number(o.lease);
  o.udpForward = o.udpForward ? o.udpForward.split(',').map(Number) : [];
  o.uid = o.uid ? Buffer.from(o.uid, 'hex') : crypto.randomBytes(8);
  if (o.uid.length !== 8) throw new Error('--uid: 16 hex digits');
  return o;
}

const log = (msg) => process.stderr.write(`pico: ${msg}\n`);
// $LEADWIRE_PICO_UART_TRACE: a file that receives UART0's line events (uart.mjs, Pl011's `trace`:
// idle stretches of the transmitter, frame delimiters sent and received, on the board's clock),
// one line each, appended across power cycles: where a serial link's line idles and why
const uartTrace = process.env.LEADWIRE_PICO_UART_TRACE
  ? ((fd) => (line) => fs.writeSync(fd, line + '\n'))(fs.openSync(process.env.LEADWIRE_PICO_UART_TRACE, 'a'))
  : null;
const emit = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');

// ------------------------------------------------------------------ firmware files

/** The payload blocks of a UF2 file (format: github.com/microsoft/uf2) written into `flash`. */
function loadUf2(flash, data) {
  let blocks = 0;
  for (let off = 0; off + 512 <= data.length; off += 512) {
    const w = (i) => data.readUInt32LE(off + 4 * i);
    if (w(0) !== 0x0a324655 || w(1) !== 0x9e5d5157 || data.readUInt32LE(off + 508) !== 0x0ab16f30) {
      throw new Error(`not a UF2 block at byte ${off}`);
    }
    const flags = w(2), addr = w(3), size = w(4);
    if (flags & 1) continue; // "not main flash"
    if (addr < 0x10000000 || addr + size > 0x10000000 + FLASH_BYTES || size > 476) {
      throw new Error(`UF2 block at byte ${off}: address 0x${addr.toString(16)} outside the 2 MiB flash`);
    }
    flash.set(data.subarray(off + 32, off + 32 + size), addr - 0x10000000);
    blocks++;
  }
  if (!blocks) throw new Error('no flash blocks in the UF2 file');
  return blocks;
}

// ------------------------------------------------------------------ SPI NOR flash behind the SSI

/** The flash chip's command interface (what the boot ROM's flash routines and
 * flash_get_unique_id() send with chip select forced low through IO_QSPI). XIP reads go straight to
 * rp2040.flash, which erase/program change here. Erase and program complete at once (never busy). */
class NorFlash {
  constructor(mcu, uid, onChange) {
    this.mcu = mcu;
    this.uid = uid;
    this.onChange = onChange;
    this.writeEnabled = false;
    this.cmd = null; // the command in progress: {op, n (bytes so far), addr}
  }
  select() { this.cmd = { op: -1, n: 0, addr: 0 }; }
  deselect() {
    const c = this.cmd;
    this.cmd = null;
    if (!c || !this.writeEnabled) return;
    const sizes = { 0x20: 4096, 0x52: 32768, 0xd8: 65536, 0x60: FLASH_BYTES, 0xc7: FLASH_BYTES };
    if (sizes[c.op] && (c.n >= 4 || c.op === 0x60 || c.op === 0xc7)) {
      const size = sizes[c.op];
      const start = c.op === 0x60 || c.op === 0xc7 ? 0 : (c.addr & ~(size - 1)) % FLASH_BYTES;
      this.mcu.flash.fill(0xff, start, start + size);
      this.onChange(start, size);
      this.writeEnabled = false;
    } else if (c.op === 0x02 && c.n > 4) {
      this.onChange(c.addr & ~0xff, 256);
      this.writeEnabled = false;
    }
  }
  /** One byte out on MOSI; returns the byte in on MISO. */
  transfer(b) {
    const c = this.cmd;
    if (!c) return 0xff;
    const i = c.n++;
    if (i === 0) {
      c.op = b;
      if (b === 0x06) this.writeEnabled = true;
      if (b === 0x04) this.writeEnabled = false;
      return 0xff;
    }
    const addressed = c.op === 0x02 || c.op === 0x03 || c.op === 0x0b || c.op === 0x20 || c.op === 0x52 || c.op === 0xd8;
    if (addressed && i <= 3) {
      c.addr = ((c.addr << 8) | b) & 0xffffff;
      return 0xff;
    }
    const flash = this.mcu.flash;
    switch (c.op) {
      case 0x05: return this.writeEnabled ? 0x02 : 0x00; // status 1: WEL, never BUSY
      case 0x35: return 0x02; // status 2: QE
      case 0x9f: return [0xef, 0x40, 0x15][(i - 1) % 3]; // JEDEC id: Winbond W25Q16JV
      case 0x4b: return i >= 5 ? this.uid[(i - 5) % 8] : 0xff; // unique id after 4 dummy bytes
      case 0x03: return flash[(c.addr + i - 4) % FLASH_BYTES];
      case 0x0b: return i >= 5 ? flash[(c.addr + i - 5) % FLASH_BYTES] : 0xff;
      case 0x02:
        if (this.writeEnabled) { // programming clears bits only; wraps inside the 256-byte page
          const a = (c.addr & ~0xff) | ((c.addr + i - 4) & 0xff);
          flash[a % FLASH_BYTES] &= b;
        }
        return 0xff;
      default: return 0xff;
    }
  }
}

/** IO_QSPI: only the chip select override matters (GPIO_QSPI_SS_CTRL.OUTOVER = 2: driven low). */
class IoQspi extends BasePeripheral {
  constructor(mcu, chip) {
    super(mcu, 'IO_QSPI');
    this.chip = chip;
    this.regs = new Uint32Array(0x1000 >> 2);
    this.csLow = false;
  }
  readUint32(offset) { return this.regs[offset >> 2]; }
  writeUint32(offset, value) {
    this.regs[offset >> 2] = value;
    if (offset !== 0x0c) return;
    const low = ((value >>> 8) & 3) === 2;
    if (low && !this.csLow) this.chip.select();
    if (!low && this.csLow) this.chip.deselect();
    this.csLow = low;
  }
}

/** SSI in standard SPI mode: a DR0 write clocks one byte through the chip when its select is forced
 * low (the ROM's flash routines); otherwise (boot2 setting up XIP) it answers 0: "not busy". */
class Ssi extends BasePeripheral {
  constructor(mcu, chip, ioqspi) {
    super(mcu, 'SSI');
    this.chip = chip;
    this.ioqspi = ioqspi;
    this.regs = new Uint32Array(0x100 >> 2);
    this.rx = [];
  }
  readUint32(offset) {
    switch (offset) {
      case 0x20: return 0; // TXFLR: transfers are instant
      case 0x24: return this.rx.length; // RXFLR
      case 0x28: return 0x6 | (this.rx.length ? 0x8 : 0); // SR: TFNF | TFE | RFNE
      case 0x58: return 0x51535049; // IDR
      case 0x5c: return 0x3430312a; // SSI_VERSION_ID
      case 0x60: return this.rx.length ? this.rx.shift() : 0; // DR0
      default: return this.regs[(offset & 0xff) >> 2];
    }
  }
  writeUint32(offset, value) {
    if (offset === 0x60) {
      const miso = this.ioqspi.csLow ? this.chip.transfer(value & 0xff) : 0;
      if (this.rx.length < 16) this.rx.push(miso);
      return;
    }
    if (offset === 0x08 && !(value & 1)) this.rx.length = 0; // SSIENR = 0 empties the FIFOs
    this.regs[(offset & 0xff) >> 2] = value;
  }
}

// ------------------------------------------------------------------ ring oscillator

/** ROSC: RANDOMBIT (0x1c) is one bit of real entropy per read (the silicon's is jitter), so
 * os.urandom() and MicroPython's random seed differ on every boot, as on a real board. */
class Rosc extends BasePeripheral {
  constructor(mcu) {
    super(mcu, 'ROSC');
    this.regs = new Uint32Array(0x24 >> 2);
    this.regs[0] = 0x00fabaa0; // CTRL: enabled, 1 to 3 stages
    this.regs[4] = 0x20; // DIV
    this.pool = Buffer.alloc(0);
    this.bit = 0;
  }
  randomBit() {
    if (this.bit >= this.pool.length * 8) { this.pool = crypto.randomBytes(64); this.bit = 0; }
    const b = (this.pool[this.bit >> 3] >> (this.bit & 7)) & 1;
    this.bit++;
    return b;
  }
  readUint32(offset) {
    if (offset === 0x18) return 0x80001000; // STATUS: STABLE | ENABLED
    if (offset === 0x1c) return this.randomBit();
    if (offset === 0x20) return 0; // COUNT: done
    return offset < 0x24 ? this.regs[offset >> 2] : 0;
  }
  writeUint32(offset, value) { if (offset < 0x24) this.regs[offset >> 2] = value; }
}

// ------------------------------------------------------------------ the board

class Board {
  constructor(opts, replSock, uartSock) {
    this.opts = opts;
    this.replSock = replSock;
    this.uartSock = uartSock;
    this.bootrom = (() => {
      const b = fs.readFileSync(opts.bootrom);
      if (b.length !== 16384) throw new Error(`boot ROM ${opts.bootrom}: ${b.length} bytes, expected 16384`);
      return new Uint32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.length));
    })();
    this.firmware = fs.readFileSync(opts.firmware);
    this.flash = null; // the flash contents, kept across resets and power cycles
    this.boots = 0;
    this.instructions = 0;
    this.adcQueue = [[], [], [], [], []]; // values the next ADC reads give, per channel ("adc" command)
    this.cyclesBefore = 0; // CPU cycles of earlier boots (core.cycles restarts with each chip)
    this.replIn = []; // host -> board bytes for the USB OUT endpoint
    this.outArmed = 0; // the size of the OUT buffer the firmware armed (0: none)
    this.uartOut = [];
    this.fsDirty = false;
    this.timer = null;
    this.idle = false;
    this.ap = opts.wifiSsid === null ? null : new WifiAp({ ssid: opts.wifiSsid, key: opts.wifiKey,
      lease: opts.lease, forwards: opts.udpForward, log, emit });
    if (this.ap) FS_OFFSET = FLASH_BYTES - 848 * 1024;
  }

  loadFlash() {
    const flash = new Uint8Array(FLASH_BYTES).fill(0xff);
    loadUf2(flash, this.firmware);
    const img = this.opts.fsImage;
    if (img && fs.existsSync(img)) flash.set(fs.readFileSync(img).subarray(0, FLASH_BYTES - FS_OFFSET), FS_OFFSET);
    return flash;
  }

  saveFs() {
    if (!this.opts.fsImage || !this.fsDirty || !this.flash) return;
    const tmp = this.opts.fsImage + '.tmp';
    fs.writeFileSync(tmp, this.flash.subarray(FS_OFFSET));
    fs.renameSync(tmp, this.opts.fsImage);
    this.fsDirty = false;
  }

  /** Power on (or reset): a fresh chip on the same flash; `keep` carries watchdog state a reset keeps. */
  boot(keep = null) {
    this.stop();
    if (this.mcu) this.cyclesBefore += this.mcu.core.cycles;
    if (!this.flash) this.flash = this.loadFlash();
    const m = new RP2040();
    m.logger = new ConsoleLogger(LogLevel.Error);
    m.loadBootrom(this.bootrom); // resets the chip and erases rp2040.flash
    m.flash.set(this.flash);
    this.flash = m.flash.subarray(0, FLASH_BYTES); // one copy: the chip's own array
    this.boots++;
    this.mcu = m;

    const chip = new NorFlash(m, this.opts.uid, (start) => { if (start + 4096 > FS_OFFSET) this.fsDirty = true; });
    const ioqspi = new IoQspi(m, chip);
    m.peripherals[0x40018] = ioqspi;
    m.peripherals[0x18000] = new Ssi(m, chip, ioqspi);
    m.peripherals[0x40060] = new Rosc(m);
    const uarts = [0, 1].map((i) => new Pl011(m, i, i === 0 ? (b) => this.uartOut.push(b) : () => {},
      i === 0 ? uartTrace : null));
    m.uart = uarts;
    m.peripherals[0x40034] = uarts[0];
    m.peripherals[0x40038] = uarts[1];
    uarts[0].onHostDrained = () => this.uartSock.resume();
    this.core1Handshake(m);
    if (this.ap) { // the MAC from the board's unique id, under the Raspberry Pi OUI of real Pico Ws
      const mac = [0x28, 0xcd, 0xc1, ...this.opts.uid.subarray(5, 8)];
      this.radio = new Cyw43(m, { radio: this.ap, mac, onWake: () => this.wake(), log });
    }
    this.watchdog(m, keep);
    this.usb(m);
    this.adcValues(m);
    m.core.PC = 0x10000000; // boot2 first, as the boot ROM would run it
    this.start();
  }

  /** Each ADC read of a channel takes the next queued value (then keeps the last one). */
  adcValues(m) {
    const read = m.adc.onADCRead;
    m.adc.onADCRead = (ch) => {
      const q = this.adcQueue[ch];
      if (q && q.length) m.adc.channelValues[ch] = q.shift();
      read(ch);
    };
  }

  /** Core 1 is not emulated. A soft reset calls multicore_reset_core1(): it holds core 1 in reset
   * through the PSM, releases it and waits for the word core 1's boot ROM pushes into the inter-core
   * FIFO (0). Answer that handshake; FIFO writes towards core 1 go nowhere. */
  core1Handshake(m) {
    const fromCore1 = [];
    const sioRead = m.sio.readUint32.bind(m.sio), sioWrite = m.sio.writeUint32.bind(m.sio);
    m.sio.readUint32 = (off) => {
      if (off === 0x50) return 0x2 | (fromCore1.length ? 0x1 : 0); // FIFO_ST: RDY, VLD
      if (off === 0x58) return fromCore1.length ? fromCore1.shift() : 0; // FIFO_RD
      return sioRead(off);
    };
    m.sio.writeUint32 = (off, v) => { if (off !== 0x50 && off !== 0x54) sioWrite(off, v); };
    const psm = m.peripherals[0x40010];
    const psmWrite = psm.writeUint32.bind(psm);
    psm.writeUint32 = (off, v) => {
      const heldBefore = psm.frceOff & (1 << 16); // PROC1
      psmWrite(off, v);
      if (off === 0x04 && heldBefore && !(psm.frceOff & (1 << 16))) {
        fromCore1.push(0);
        m.core.eventRegistered = true; // core 1's SEV: core 0's WFE returns
      }
    };
  }

  /** machine.reset() and the watchdog reboot the board in this process (the ptys stay); the
   * watchdog's reason and scratch registers survive, as on the chip. */
  watchdog(m, keep) {
    const wd = m.peripherals[0x40058];
    if (keep) { wd.reason = keep.reason; wd.scratchData.set(keep.scratch); }
    wd.onWatchdogTrigger = () => {
      const state = { reason: wd.reason, scratch: wd.scratchData.slice() };
      emit({ event: 'reset', cause: 'watchdog', boot: this.boots });
      this.stop();
      setImmediate(() => this.boot(state));
    };
  }

  /** The USB host: rp2040js enumerates the CDC device; the OUT endpoint is NAKed while the host has
   * nothing to send (answering with empty packets would keep the firmware busy forever). */
  usb(m) {
    this.outArmed = 0;
    const cdc = new USBCDC(m.usbCtrl);
    this.cdc = cdc;
    cdc.onDeviceConnected = () => {
      emit({ event: 'usb', boot: this.boots });
      this.feedRepl();
    };
    cdc.onSerialData = (buf) => this.replSock.write(Buffer.from(buf));
    m.usbCtrl.onEndpointRead = (ep, size) => {
      if (ep !== cdc.outEndpoint) return;
      this.outArmed = size;
      this.feedRepl();
    };
  }

  feedRepl() {
    if (!this.outArmed || !this.replIn.length || !this.mcu) return;
    const n = Math.min(this.outArmed, this.replIn.length);
    const chunk = Uint8Array.from(this.replIn.splice(0, n));
    this.outArmed = 0;
    this.mcu.usbCtrl.endpointReadDone(this.cdc.outEndpoint, chunk);
    if (this.replIn.length < 4096) this.replSock.resume();
  }

  replInput(data) {
    for (const b of data) this.replIn.push(b);
    if (this.replIn.length > 65536) this.replSock.pause(); // the host waits, as on a USB cable
    this.feedRepl();
    this.wake();
  }

  uartInput(data) {
    this.mcu.uart[0].hostInput(data);
    if (this.mcu.uart[0].hostQueue.length > 4096) this.uartSock.pause(); // an adapter's buffer
    this.wake();
  }

  // -- the run loop: emulated time never ahead of wall time x speed
  start() {
    this.wall0 = process.hrtime.bigint();
    this.virt0 = this.mcu.clock.nanos;
    this.timer = setImmediate(() => this.run());
  }

  stop() {
    // (clearImmediate() given a Timeout object corrupts Node's immediate queue: clear by kind)
    if (this.timer) (this.idle ? clearTimeout : clearImmediate)(this.timer);
    this.timer = null;
  }

  setSpeed(speed) { // from now on: emulated time at most wall time x speed (0: as fast as it runs)
    this.wall0 = process.hrtime.bigint();
    this.virt0 = this.mcu.clock.nanos;
    this.opts.speed = speed;
    this.wake();
  }

  wake() { // host input during an idle sleep: run now
    if (this.idle && this.timer) { this.stop(); this.idle = false; this.timer = setImmediate(() => this.run()); }
  }

  run() {
    this.timer = null;
    this.idle = false;
    const m = this.mcu, core = m.core, clock = m.clock;
    const speed = this.opts.speed;
    const wall = () => Number(process.hrtime.bigint() - this.wall0);
    const limit = speed > 0 ? this.virt0 + wall() * speed : Infinity;
    const t0 = Date.now();
    let sleepMs = 0;
    for (let n = 1; ; n++) {
      if (core.waiting) { // WFI/WFE: jump to the next event, unless it lies ahead of the wall clock
        const dt = clock.nanosToNextAlarm;
        if (dt <= 0 || clock.nanos + dt > limit) {
          if (limit === Infinity) { sleepMs = 1; break; }
          if (limit > clock.nanos) clock.tick(limit - clock.nanos);
          sleepMs = dt > 0 ? Math.min(10, Math.max(1, (clock.nanos + dt - limit) / 1e6)) : 10;
          break;
        }
        clock.tick(dt);
      } else {
        clock.tick(core.executeInstruction() * (1e9 / m.clkSys));
        this.instructions++;
      }
      if ((n & 0x3fff) === 0 && (Date.now() - t0 > 20 || this.mcu !== m)) break;
    }
    if (this.mcu !== m) return; // rebooted inside the slice
    if (speed > 0) { // behind the wall clock after a busy stretch: never catch up by more than 100 ms
      const behind = this.virt0 + wall() * speed - clock.nanos;
      if (behind > 100e6) this.virt0 -= behind - 100e6;
    }
    if (this.uartOut.length) { this.uartSock.write(Buffer.from(this.uartOut)); this.uartOut.length = 0; }
    this.feedRepl();
    this.idle = sleepMs > 0;
    this.timer = sleepMs ? setTimeout(() => this.run(), sleepMs) : setImmediate(() => this.run());
  }

  clock() {
    const m = this.mcu;
    return { event: 'clock', nanos: m.clock.nanos, cycles: this.cyclesBefore + m.core.cycles,
      instructions: this.instructions, boot: this.boots, uart0_overruns: m.uart[0].overruns };
  }
}

// ------------------------------------------------------------------ main

function main() {
  const opts = parseArgs(process.argv.slice(2));
  const replSock = new net.Socket({ fd: opts.replFd, readable: true, writable: true });
  const uartSock = new net.Socket({ fd: opts.uart0Fd, readable: true, writable: true });
  const board = new Board(opts, replSock, uartSock);
  if (board.ap) {
    board.ap.ready.then((ports) => emit({ event: 'wifi', ssid: opts.wifiSsid,
      forwards: Object.fromEntries(opts.udpForward.map((p, i) => [p, `127.0.0.1:${ports[i]}`])) }));
  }
  let saver = null;
  let stopping = false;
  const quit = () => {
    if (stopping) return;
    stopping = true;
    board.stop();
    try { board.saveFs(); } catch (e) { log(`cannot save ${opts.fsImage}: ${e.message}`); }
    process.exit(0);
  };
  replSock.on('data', (d) => board.replInput(d));
  uartSock.on('data', (d) => board.uartInput(d));
  for (const s of [replSock, uartSock]) s.on('error', (e) => { log(`socket: ${e.message}`); quit(); });
  replSock.on('end', quit);
  process.on('SIGTERM', quit);
  process.on('SIGINT', quit);
  const rl = readline.createInterface({ input: process.stdin });
  rl.on('line', (line) => {
    const cmd = line.trim();
    if (cmd === 'power') { emit({ event: 'reset', cause: 'power', boot: board.boots }); board.boot(); }
    else if (cmd === 'clock') emit(board.clock());
    else if (/^speed \d+(\.\d+)?$/.test(cmd)) { board.setSpeed(Number(cmd.slice(6))); emit({ event: 'speed', speed: board.opts.speed }); }
    else if (cmd === 'save') { board.saveFs(); emit({ event: 'saved' }); }
    else if (cmd === 'quit') quit();
    else if (cmd.startsWith('adc ')) {
      const [ch, ...vs] = cmd.split(/\s+/).slice(1).map(Number);
      if (!(ch >= 0 && ch <= 4) || vs.some((v) => !(v >= 0 && v <= 4095))) log(`bad adc command ${JSON.stringify(cmd)}`);
      else { board.adcQueue[ch].push(...vs); emit({ event: 'adc', channel: ch, queued: board.adcQueue[ch].length }); }
    }
    else if (board.ap && (cmd === 'ap off' || cmd === 'ap on')) board.ap.setOn(cmd === 'ap on');
    else if (board.ap && cmd === 'lease-end') board.ap.endLeases();
    else if (board.ap && cmd === 'wifi') emit({ event: 'wifi-stats', ap: board.ap.stats, chip: board.radio.stats });
    else log(`unknown command ${JSON.stringify(cmd)}`);
  });
  rl.on('close', quit); // the launcher is gone
  // littlefs writes reach the image file within a second (and at exit)
  saver = setInterval(() => { try { board.saveFs(); } catch (e) { log(`cannot save: ${e.message}`); } }, 1000);
  saver.unref();
  board.boot();
}

try {
  main();
} catch (e) {
  log(`error: ${e.message}`);
  process.exit(2);
}
