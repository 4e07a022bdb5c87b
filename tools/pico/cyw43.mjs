// An emulated Infineon CYW43439 (the Pico W's Wi-Fi chip) as the host driver sees it: the gSPI bus
// that the RP2040 drives through a PIO state machine and two DMA channels (pico-sdk's
// cyw43_bus_pio_spi.c), the chip's bus registers (F0), its backplane (F1: the firmware and NVRAM
// download, the cores' reset and clock handshakes) and the F2 data channel carrying SDPCM packets:
// ioctls/iovars answered here, asynchronous events, and Ethernet frames to and from a radio peer
// (wifi_ap.mjs). The radio firmware the driver downloads is kept in the emulated RAM and never run:
// what it would do is modelled in this file.
//
// The bus is cut at the PIO FIFOs (pio_spi.mjs), which hands this file each transaction as the
// driver's memory words. Until the driver switches the bus to 32-bit words it writes rev16(cmd)
// (SWAP32 in its source) and reads rev16(value).
//
// Host-wake: GPIO 24 is the data line during a transaction and the chip's interrupt line (active
// high, level-triggered in MicroPython's port) otherwise: it is high while an enabled bus interrupt
// (F2 packet available) is pending.

import { PioSpiBus } from './pio_spi.mjs';

const PIN_ON = 23, PIN_DATA = 24;
const TEST_PATTERN = 0xfeedbead;
const RAM_SIZE = 512 * 1024;
// F0 bus registers
const BUS_CONTROL = 0x00, INT_STATUS = 0x04, INT_ENABLE = 0x06, STATUS = 0x08, READ_TEST = 0x14;
const F2_PACKET_AVAILABLE = 0x20;
const STATUS_F2_RX_READY = 0x20, STATUS_F2_PKT_AVAILABLE = 0x100;
// F1 local (SDIO core) registers
const SDIO_WINDOW_LOW = 0x1000a, SDIO_WINDOW_MID = 0x1000b, SDIO_WINDOW_HIGH = 0x1000c;
const SDIO_CHIP_CLOCK_CSR = 0x1000e, SDIO_SLEEP_CSR = 0x1001f;
const ALP_AVAIL = 0x40, HT_AVAIL = 0x80;
// backplane: the cores' wrapper registers (AI_RESETCTRL: bit 0 = in reset)
const ARM_RESETCTRL = 0x18103800, SOCRAM_RESETCTRL = 0x18104800;
// SDPCM channels and ioctls
const CONTROL = 0, EVENT = 1, DATA = 2;
const WLC_UP = 2, WLC_GET_BSSID = 23, WLC_GET_SSID = 25, WLC_SET_SSID = 26, WLC_DISASSOC = 52;
const WLC_GET_RSSI = 127, WLC_GET_VAR = 262, WLC_SET_VAR = 263, WLC_SET_WSEC_PMK = 268;
// async events (wl_event_msg_t) the driver acts on
export const EV = { SET_SSID: 0, AUTH: 3, DEAUTH_IND: 6, DISASSOC: 11, LINK: 16, PSK_SUP: 46, ESCAN_RESULT: 69 };
const SUP_KEYED = 6;

const rev16 = (v) => (((v & 0x00ff00ff) << 8) | ((v >>> 8) & 0x00ff00ff)) >>> 0;
const align4 = (n) => (n + 3) & ~3;

/** The chip. `radio` is the access point side (wifi_ap.mjs: join, leave, send); `onWake` is called
 * when the chip raises its interrupt line (the board's run loop should run). A fresh chip per
 * boot: WL_ON low resets it to its power-on state as well. */
export class Cyw43 {
  constructor(mcu, { radio, mac, onWake = () => {}, log = () => {} }) {
    this.mcu = mcu;
    this.otpMac = Uint8Array.from(mac); // what the chip's OTP holds (a real Pico W's: 28:cd:c1:..)
    this.radio = radio;
    this.onWake = onWake;
    this.log = log;
    this.stats = { txFrames: 0, rxFrames: 0, ioctls: 0, events: 0, transactions: 0 };
    this.station = null;
    this.alarm = mcu.clock.createAlarm(() => { this.alarm.scheduled = false; this.runAlarms(); });
    this.powerOn();
    this.bus = new PioSpiBus(mcu, (words, rxBytes) => {
      this.stats.transactions++;
      const rx = this.transaction(words, rxBytes);
      this.setIrqPin();
      return rx;
    });
    mcu.gpio[PIN_ON].addListener(() => {
      const on = mcu.gpio[PIN_ON].outputValue;
      if (on !== this.poweredPin) { this.poweredPin = on; if (!on) this.powerOn(); }
    });
    this.poweredPin = false;
  }

  powerOn() {
    if (this.station) this.radio.leave(this.station);
    this.word32 = false; // 16-bit swapped words until BUS_CONTROL says WORD_LENGTH_32
    this.f0 = new Uint8Array(0x20);
    this.intStatus = 0;
    this.intEnable = 0;
    this.f1 = new Map(); // local SDIO registers
    this.window = 0;
    this.ram = new Uint8Array(RAM_SIZE);
    this.regs = new Map([[ARM_RESETCTRL, 1], [SOCRAM_RESETCTRL, 1]]);
    this.rxq = []; // SDPCM packets waiting for the host (Uint8Array each)
    this.rxSeq = 0;
    this.hostSeq = 0; // the next sequence number expected from the host
    this.credit = 0; // the last credit given: host may send while its seq != credit
    this.mac = Uint8Array.from(this.otpMac);
    this.vars = new Map(); // iovars set by the host (name -> payload)
    this.pmk = null; // passphrase from WLC_SET_WSEC_PMK
    this.station = null; // the association with the AP (wifi_ap.mjs), null when not joined
    this.wantSsid = null; // the SSID the host asked for: rejoined when the AP comes back
    this.alarms = [];
    this.setIrqPin();
  }

  // ---------------------------------------------------------------- time
  /** fn after `ms` of the board's time. */
  after(ms, fn) {
    const at = this.mcu.clock.nanos + ms * 1e6;
    this.alarms.push({ at, fn });
    this.alarms.sort((a, b) => a.at - b.at);
    this.alarm.schedule(Math.max(0, this.alarms[0].at - this.mcu.clock.nanos));
  }

  runAlarms() {
    const now = this.mcu.clock.nanos;
    while (this.alarms.length && this.alarms[0].at <= now) this.alarms.shift().fn();
    if (this.alarms.length) this.alarm.schedule(Math.max(0, this.alarms[0].at - now));
  }

  setIrqPin() {
    const high = !!(this.intStatus & this.intEnable);
    const pin = this.mcu.gpio[PIN_DATA];
    if (pin.rawInputValue !== high) {
      pin.setInputValue(high);
      if (high) this.onWake();
    }
  }

  // ---------------------------------------------------------------- gSPI transactions
  /** One bus transaction: the command word and the data words written (driver memory words);
   * returns the words read (rxBytes / 4 of them) or null for a write. */
  transaction(words, rxBytes) {
    let cmd = words[0];
    if (!this.word32) cmd = rev16(cmd);
    const write = cmd >>> 31, fn = (cmd >>> 28) & 3, addr = (cmd >>> 11) & 0x1ffff;
    let size = cmd & 0x7ff;
    if (size === 0) size = 2048;
    if (write) {
      const data = new Uint8Array(align4(size));
      const dv = new DataView(data.buffer);
      for (let i = 1; i < words.length && (i - 1) * 4 < data.length; i++) {
        dv.setUint32((i - 1) * 4, this.word32 ? words[i] : rev16(words[i]), true);
      }
      this.write(fn, addr, data.subarray(0, size));
      return null;
    }
    const out = new Uint8Array(rxBytes);
    const data = this.read(fn, addr, size);
    // a backplane read answers after the response delay (the driver's padding words): data last
    const at = fn === 1 ? Math.max(0, rxBytes - align4(size)) : 0;
    out.set(data.subarray(0, Math.min(data.length, rxBytes - at)), at);
    const dv = new DataView(out.buffer);
    const res = [];
    for (let i = 0; i + 4 <= rxBytes; i += 4) {
      const w = dv.getUint32(i, true);
      res.push(this.word32 ? w : rev16(w));
    }
    return res;
  }

  write(fn, addr, data) {
    if (fn === 0) {
      for (let i = 0; i < data.length && addr + i < 0x20; i++) {
        const a = addr + i;
        if (a === INT_STATUS || a === INT_STATUS + 1) this.intStatus &= ~(data[i] << ((a - INT_STATUS) * 8));
        else if (a === INT_ENABLE || a === INT_ENABLE + 1) {
          this.intEnable = (this.intEnable & ~(0xff << ((a - INT_ENABLE) * 8))) | (data[i] << ((a - INT_ENABLE) * 8));
        } else this.f0[a] = data[i];
      }
      if (addr === BUS_CONTROL) this.word32 = !!(data[0] & 1);
    } else if (fn === 1) {
      if (addr >= 0x10000) { this.f1Write(addr, data[0]); return; }
      this.backplaneWrite(this.window + (addr & 0x7fff), data);
    } else if (fn === 2) {
      this.fromHost(data);
    }
  }

  read(fn, addr, size) {
    const out = new Uint8Array(align4(size));
    if (fn === 0) {
      if (addr === READ_TEST) new DataView(out.buffer).setUint32(0, TEST_PATTERN, true);
      else {
        const regs = this.f0.slice();
        new DataView(regs.buffer).setUint16(INT_STATUS, this.intStatus, true);
        new DataView(regs.buffer).setUint16(INT_ENABLE, this.intEnable, true);
        new DataView(regs.buffer).setUint32(STATUS, this.status(), true);
        for (let i = 0; i < size && addr + i < 0x20; i++) out[i] = regs[addr + i];
      }
    } else if (fn === 1) {
      if (addr >= 0x10000) out[0] = this.f1Read(addr);
      else this.backplaneRead(this.window + (addr & 0x7fff), out.subarray(0, size));
    } else if (fn === 2) {
      const p = this.rxq.shift();
      if (p) {
        p[9] = this.credit = (this.hostSeq + 8) & 0xff; // the credit as it is now, not when queued
        out.set(p.subarray(0, Math.min(p.length, out.length)));
      }
      if (!this.rxq.length) this.intStatus &= ~F2_PACKET_AVAILABLE;
    }
    return out;
  }

  status() {
    let s = this.regs.get(ARM_RESETCTRL) === 0 ? STATUS_F2_RX_READY : 0;
    if (this.rxq.length) s |= STATUS_F2_PKT_AVAILABLE | ((this.rxq[0].length & 0x7ff) << 9);
    return s;
  }

  f1Write(addr, v) {
    this.f1.set(addr, v);
    if (addr >= SDIO_WINDOW_LOW && addr <= SDIO_WINDOW_HIGH) {
      const b = [SDIO_WINDOW_LOW, SDIO_WINDOW_MID, SDIO_WINDOW_HIGH].map((a) => this.f1.get(a) || 0);
      this.window = ((b[2] << 24) | (b[1] << 16) | ((b[0] & 0x80) << 8)) >>> 0;
    }
  }

  f1Read(addr) {
    const v = this.f1.get(addr) || 0;
    if (addr === SDIO_CHIP_CLOCK_CSR) return (v & 0x3f) | ALP_AVAIL | HT_AVAIL; // clocks always there
    if (addr === SDIO_SLEEP_CSR) return v | (v & 1 ? 2 : 0); // KEEP_SDIO_ON -> DEVICE_ON
    return v;
  }

  backplaneWrite(a, data) {
    if (a + data.length <= RAM_SIZE) { this.ram.set(data, a); return; }
    let v = 0;
    for (let i = data.length - 1; i >= 0; i--) v = (v << 8) | data[i];
    this.regs.set(a, v >>> 0);
  }

  backplaneRead(a, out) {
    if (a + out.length <= RAM_SIZE) { out.set(this.ram.subarray(a, a + out.length)); return; }
    const v = this.regs.get(a) || 0;
    for (let i = 0; i < out.length && i < 4; i++) out[i] = (v >>> (8 * i)) & 0xff;
  }

  // ---------------------------------------------------------------- SDPCM
  fromHost(data) {
    const dv = new DataView(data.buffer, data.byteOffset, data.length);
    if (data.length < 12) return;
    const size = dv.getUint16(0, true);
    if ((size ^ dv.getUint16(2, true)) !== 0xffff || size < 12 || size > data.length) {
      this.log(`cyw43: bad SDPCM header from the host (size ${size})`);
      return;
    }
    this.hostSeq = (data[4] + 1) & 0xff;
    const chan = data[5] & 0x0f, hlen = data[7];
    const body = data.subarray(hlen, size);
    if (chan === CONTROL) this.ioctl(body);
    else if (chan === DATA) {
      const bdc = body;
      const frame = bdc.subarray(4 + bdc[3] * 4);
      this.stats.txFrames++;
      if (this.station) this.radio.send(this.station, Uint8Array.from(frame));
    }
    // credit: the host may send while its sequence number differs from the credit; keep it 8
    // ahead, telling it with a header-only packet when nothing else is on its way (a queued
    // packet carries the credit of the moment the host reads it)
    if (((this.credit - this.hostSeq) & 0xff) < 4 && !this.rxq.length) this.queue(CONTROL, new Uint8Array(0), 12);
  }

  /** An SDPCM packet for the host on `chan` with `payload` after a header of `hlen` bytes (12 for
   * control, 14 for events and data: their payloads then sit where the driver's parsing expects
   * them, 2 bytes past a word boundary). */
  queue(chan, payload, hlen) {
    const size = hlen + payload.length;
    const p = new Uint8Array(align4(size));
    const dv = new DataView(p.buffer);
    dv.setUint16(0, size, true);
    dv.setUint16(2, ~size & 0xffff, true);
    p[4] = this.rxSeq; this.rxSeq = (this.rxSeq + 1) & 0xff;
    p[5] = chan; p[6] = 0; p[7] = hlen; p[8] = 0; // p[9], the bus credit: set when the host reads it
    p.set(payload, hlen);
    this.rxq.push(p.subarray(0, size));
    this.intStatus |= F2_PACKET_AVAILABLE;
    this.setIrqPin();
  }

  ioctl(body) {
    const dv = new DataView(body.buffer, body.byteOffset, body.length);
    const cmd = dv.getUint32(0, true), len = dv.getUint32(4, true) & 0xffff, flags = dv.getUint32(8, true);
    const data = Uint8Array.from(body.subarray(16, 16 + len));
    const set = (flags & 2) !== 0;
    this.stats.ioctls++;
    const answer = this.answer(cmd, set, data) ?? data;
    const out = new Uint8Array(16 + answer.length);
    const odv = new DataView(out.buffer);
    odv.setUint32(0, cmd, true);
    odv.setUint32(4, answer.length, true);
    odv.setUint32(8, flags, true); // the request's id (top 16 bits) comes back
    odv.setUint32(12, 0, true);
    out.set(answer, 16);
    this.queue(CONTROL, out, 12);
  }

  /** What an ioctl answers (null: its own payload back). Side effects: join, leave, iovars. */
  answer(cmd, set, data) {
    const name = () => { const z = data.indexOf(0); return Buffer.from(data.subarray(0, z < 0 ? data.length : z)).toString(); };
    if (cmd === WLC_SET_VAR) {
      const n = name();
      const val = data.subarray(n.length + 1);
      this.vars.set(n, Uint8Array.from(val));
      if (n === 'cur_etheraddr' && val.length >= 6) this.mac = Uint8Array.from(val.subarray(0, 6));
      if (n === 'escan') this.after(100, () => this.event(EV.ESCAN_RESULT, 0, 0)); // a scan: done, no results
      return null;
    }
    if (cmd === WLC_GET_VAR) {
      const n = name();
      const out = new Uint8Array(data.length);
      if (n === 'cur_etheraddr') out.set(this.mac);
      else if (n === 'clmver') out.set(Buffer.from('leadwire emulated CYW43439 CLM\0'));
      else if (this.vars.has(n)) out.set(this.vars.get(n).subarray(0, out.length));
      return out; // clmload_status, ccgpioin, mcast_list ...: 0
    }
    if (cmd === WLC_SET_WSEC_PMK && data.length >= 4) {
      const n = data[0] | (data[1] << 8);
      this.pmk = Buffer.from(data.subarray(4, 4 + n)).toString();
      return null;
    }
    if (cmd === WLC_SET_SSID && data.length >= 4) {
      const n = Math.min(32, data[0] | (data[1] << 8));
      this.join(Buffer.from(data.subarray(4, 4 + n)).toString());
      return null;
    }
    if (cmd === WLC_DISASSOC) { this.leave(); return null; }
    if (cmd === WLC_GET_BSSID) return this.station ? Uint8Array.from(this.station.bssid) : new Uint8Array(6);
    if (cmd === WLC_GET_RSSI) return Uint8Array.from([0xd8, 0xff, 0xff, 0xff]); // -40 dBm
    if (cmd === WLC_GET_SSID) return new Uint8Array(data.length);
    if (cmd === WLC_UP) return null;
    return set ? null : new Uint8Array(data.length);
  }

  // ---------------------------------------------------------------- joining (what the radio firmware does)
  join(ssid) {
    if (this.station) this.radio.leave(this.station);
    this.station = null;
    this.wantSsid = ssid;
    this.attempt();
  }

  /** One association attempt with the AP: the events a real join gives, after a radio's delays. */
  attempt() {
    const ssid = this.wantSsid;
    if (ssid === null) return;
    const r = this.radio.join({ ssid, key: this.pmk, mac: this.mac, deliver: (f) => this.deliver(f), lost: () => this.apLost() });
    if (r.result === 'nonet') {
      this.after(400, () => { if (this.wantSsid === ssid) this.event(EV.SET_SSID, 3, 0); });
      return;
    }
    const bssid = r.bssid;
    this.after(30, () => this.event(EV.AUTH, 0, 0, bssid));
    if (r.result === 'badauth') { // the 4-way handshake fails: the key is wrong
      this.after(60, () => this.event(EV.LINK, 0, 0, bssid, 1));
      this.after(150, () => { this.event(EV.PSK_SUP, 1, 0, bssid); this.event(EV.LINK, 0, 0, bssid, 0); });
      this.wantSsid = null;
      return;
    }
    this.after(60, () => this.event(EV.LINK, 0, 0, bssid, 1));
    this.after(90, () => {
      if (this.wantSsid !== ssid) return;
      this.station = r.station;
      this.event(EV.PSK_SUP, SUP_KEYED, 0, bssid);
      this.event(EV.SET_SSID, 0, 0, bssid);
    });
  }

  leave() {
    const was = this.station || this.wantSsid !== null;
    if (this.station) this.radio.leave(this.station);
    this.station = null;
    this.wantSsid = null;
    if (was) { this.event(EV.LINK, 0, 0, null, 0); this.event(EV.DISASSOC, 0, 0); }
  }

  /** The AP went away (beacons lost): link down, then the firmware keeps trying the same network
   * every second and comes back up by itself when it answers again (the driver's join state stays
   * "joining": its link-up needs AUTH, LINK and PSK_SUP again). */
  apLost() {
    if (!this.station) return;
    this.station = null;
    this.event(EV.LINK, 0, 1, null, 0);
    const ssid = this.wantSsid;
    const retry = () => {
      if (this.wantSsid !== ssid || this.station) return;
      if (this.radio.present(ssid)) this.attempt();
      else this.after(1000, retry);
    };
    this.after(1000, retry);
  }

  /** An Ethernet frame from the radio for the host. */
  deliver(frame) {
    if (!this.station) return;
    this.stats.rxFrames++;
    const p = new Uint8Array(4 + frame.length);
    p[0] = 0x20; // BDC version 2
    p.set(frame, 4);
    this.queue(DATA, p, 14);
    this.onWake();
  }

  /** An asynchronous event (wl_event_msg_t, big-endian) in its Ethernet frame (type 0x886c). */
  event(type, status, reason, addr = null, flags = 0) {
    const p = new Uint8Array(4 + 14 + 10 + 48);
    const dv = new DataView(p.buffer);
    p[0] = 0x20; // BDC
    p.set(this.mac, 4); // Ethernet: to us, from the BSS
    if (addr) p.set(addr, 10);
    dv.setUint16(16, 0x886c);
    dv.setUint16(18, 0x8001); // Broadcom subtype
    dv.setUint16(20, 48 + 10);
    p[22] = 0; p[23] = 0x00; p[24] = 0x10; p[25] = 0x18; // version, OUI 00:10:18
    dv.setUint16(26, 1); // usr_subtype
    const e = 28;
    dv.setUint16(e, 2); // version
    dv.setUint16(e + 2, flags);
    dv.setUint32(e + 4, type);
    dv.setUint32(e + 8, status);
    dv.setUint32(e + 12, reason);
    dv.setUint32(e + 16, 0); // auth type
    dv.setUint32(e + 20, 0); // data length
    if (addr) p.set(addr, e + 24);
    p.set(Buffer.from('wlan0'), e + 30);
    p[e + 46] = 0; // interface: STA
    this.stats.events++;
    this.queue(EVENT, p, 14);
    this.onWake();
  }
}
