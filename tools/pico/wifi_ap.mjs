// The emulated Pico W's Wi-Fi network: one WPA2 access point and the router behind it, in the
// emulator's process. Stations (cyw43.mjs) join with the SSID and passphrase (a wrong key fails the
// join as a real AP's 4-way handshake does); the router answers ARP for its own address, serves
// DHCP (one address per station MAC), echoes ICMP pings to itself, and forwards UDP like a NAT:
// a datagram from the board to the router's address and port P leaves as a real datagram to
// 127.0.0.1:P from a host socket that stands for the board's port, and what comes back to that
// socket reaches the board from the router's address and the sender's port. Nothing is ever sent
// to any other address: frames for other hosts are counted and dropped.
//
// The board's UDP ports that are forwarded before the board sends anything (a server: leadwire's
// agent) are given up front (`forwards`); their host sockets exist from the start so a bridge
// can be pointed at them. Faults on command: the AP off and on (stations lose the link; the chip
// rejoins), leases ended (the next renewal is refused: the station starts DHCP again).
// WIFI_TRACE=1 in the environment: each frame a station sends, on stderr.

import dgram from 'node:dgram';

const AP_MAC = Uint8Array.from([0x02, 0x1e, 0xad, 0x00, 0x00, 0x01]);
const ip4 = (s) => s.split('.').map(Number);
const ipStr = (b, o = 0) => `${b[o]}.${b[o + 1]}.${b[o + 2]}.${b[o + 3]}`;
const macStr = (m) => Array.from(m, (b) => b.toString(16).padStart(2, '0')).join(':');
const BROADCAST_MAC = new Uint8Array(6).fill(0xff);
const MAX_UDP = 1472; // an Ethernet MTU, no fragments

/** The Internet checksum of `b` (with `sum` carried in: a pseudo-header's). */
function checksum(b, sum = 0) {
  for (let i = 0; i + 1 < b.length; i += 2) sum += (b[i] << 8) | b[i + 1];
  if (b.length & 1) sum += b[b.length - 1] << 8;
  while (sum >>> 16) sum = (sum & 0xffff) + (sum >>> 16);
  return ~sum & 0xffff;
}

export class WifiAp {
  constructor({ ssid, key, subnet = '192.168.4', lease = 3600, forwards = [], log = () => {}, emit = () => {} }) {
    this.ssid = ssid;
    this.key = key;
    this.gw = ip4(`${subnet}.1`);
    this.subnet = subnet;
    this.lease = lease;
    this.log = log;
    this.emit = emit;
    this.on = true;
    this.stations = new Set();
    this.leases = new Map(); // station MAC string -> {ip: [4], ended: bool}
    this.nextHost = 16;
    this.sockets = new Map(); // board UDP port -> host dgram socket
    this.stats = { udpOut: 0, udpIn: 0, dropped: 0, arp: 0, dhcp: 0, icmp: 0, joins: 0, badauth: 0 };
    this.ready = Promise.all(forwards.map((p) => this.socketFor(p).ready));
  }

  // ---------------------------------------------------------------- the radio side (cyw43.mjs)
  present(ssid) { return this.on && ssid === this.ssid; }

  /** A station's association attempt: {result: 'ok' | 'nonet' | 'badauth', bssid, station}. */
  join({ ssid, key, mac, deliver, lost }) {
    if (!this.present(ssid)) return { result: 'nonet' };
    if (this.key && key !== this.key) {
      this.stats.badauth++;
      this.emit({ event: 'wlan', what: 'badauth', mac: macStr(mac) });
      return { result: 'badauth', bssid: AP_MAC };
    }
    const station = { mac: Uint8Array.from(mac), deliver, lost, bssid: AP_MAC, ip: null };
    for (const s of this.stations) if (macStr(s.mac) === macStr(mac)) this.stations.delete(s); // a reset chip
    this.stations.add(station);
    this.stats.joins++;
    this.emit({ event: 'wlan', what: 'join', mac: macStr(mac) });
    return { result: 'ok', bssid: AP_MAC, station };
  }

  leave(station) { this.stations.delete(station); }

  /** The AP's power: off drops every station (each sees its link go down). */
  setOn(on) {
    if (on === this.on) return;
    this.on = on;
    this.emit({ event: 'wlan', what: on ? 'ap-on' : 'ap-off' });
    if (!on) {
      const lost = [...this.stations];
      this.stations.clear();
      for (const s of lost) s.lost();
    }
  }

  /** Every lease ends now: renewals are refused (DHCPNAK) and the stations start over. */
  endLeases() {
    for (const l of this.leases.values()) l.ended = true;
    this.emit({ event: 'wlan', what: 'leases-ended', count: this.leases.size });
  }

  /** An Ethernet frame a station sent. */
  send(station, f) {
    if (!this.stations.has(station) || f.length < 14) return;
    const type = (f[12] << 8) | f[13];
    if (process.env.WIFI_TRACE) this.log(`ap <- ${f.length} B type ${type.toString(16)} ${Buffer.from(f.subarray(0, 48)).toString('hex')}`);
    if (type === 0x0806) this.arp(station, f);
    else if (type === 0x0800) this.ipv4(station, f);
    else this.stats.dropped++;
  }

  // ---------------------------------------------------------------- ARP, IPv4, ICMP
  arp(station, f) {
    const a = f.subarray(14);
    if (a.length < 28 || ((a[6] << 8) | a[7]) !== 1) return; // requests only
    if (ipStr(a, 24) !== ipStr(this.gw)) return;
    this.stats.arp++;
    const r = new Uint8Array(42);
    r.set(a.subarray(8, 14), 0); r.set(AP_MAC, 6); r[12] = 0x08; r[13] = 0x06;
    r.set([0, 1, 8, 0, 6, 4, 0, 2], 14);
    r.set(AP_MAC, 22); r.set(this.gw, 28); r.set(a.subarray(8, 14), 32); r.set(a.subarray(14, 18), 38);
    station.deliver(r);
  }

  ipv4(station, f) {
    const p = f.subarray(14);
    if (p.length < 20 || p[0] >> 4 !== 4) return;
    const ihl = (p[0] & 15) * 4, total = (p[2] << 8) | p[3], proto = p[9];
    if (total > p.length || checksum(p.subarray(0, ihl)) !== 0) { this.stats.dropped++; return; }
    const src = p.subarray(12, 16), dst = ipStr(p, 16);
    const body = p.subarray(ihl, total);
    if (proto === 17 && body.length >= 8) {
      const sport = (body[0] << 8) | body[1], dport = (body[2] << 8) | body[3];
      const data = body.subarray(8, (body[4] << 8) | body[5]);
      if (dport === 67) return this.dhcp(station, data);
      if (dst === ipStr(this.gw)) return this.forward(station, sport, dport, data);
    } else if (proto === 1 && dst === ipStr(this.gw) && body.length >= 8 && body[0] === 8) {
      this.stats.icmp++;
      const reply = Uint8Array.from(body);
      reply[0] = 0; reply[2] = 0; reply[3] = 0;
      const c = checksum(reply);
      reply[2] = c >> 8; reply[3] = c & 0xff;
      return station.deliver(this.ipFrame(station.mac, this.gw, src, 1, reply));
    }
    this.stats.dropped++; // another host, another protocol: nowhere to go
  }

  ipFrame(dstMac, src, dst, proto, body) {
    const f = new Uint8Array(14 + 20 + body.length);
    f.set(dstMac, 0); f.set(AP_MAC, 6); f[12] = 0x08; f[13] = 0x00;
    const h = f.subarray(14, 34);
    const total = 20 + body.length;
    h.set([0x45, 0, total >> 8, total & 0xff, 0, 0, 0x40, 0, 64, proto, 0, 0]);
    h.set(src, 12); h.set(dst, 16);
    const c = checksum(h);
    h[10] = c >> 8; h[11] = c & 0xff;
    f.set(body, 34);
    return f;
  }

  udpFrame(dstMac, src, dst, sport, dport, data) {
    const u = new Uint8Array(8 + data.length);
    u[0] = sport >> 8; u[1] = sport & 0xff; u[2] = dport >> 8; u[3] = dport & 0xff;
    u[4] = u.length >> 8; u[5] = u.length & 0xff;
    u.set(data, 8);
    let pseudo = ((src[0] << 8) | src[1]) + ((src[2] << 8) | src[3]) + ((dst[0] << 8) | dst[1]) + ((dst[2] << 8) | dst[3]);
    pseudo += 17 + u.length;
    const c = checksum(u, pseudo) || 0xffff;
    u[6] = c >> 8; u[7] = c & 0xff;
    return this.ipFrame(dstMac, src, dst, 17, u);
  }

  // ---------------------------------------------------------------- UDP through the NAT
  socketFor(boardPort) {
    let s = this.sockets.get(boardPort);
    if (s) return s;
    s = dgram.createSocket('udp4');
    s.ready = new Promise((resolve, reject) => {
      s.once('error', reject);
      s.bind(0, '127.0.0.1', () => { s.off('error', reject); resolve(s.address().port); });
    });
    s.on('error', (e) => this.log(`wifi: udp socket for board port ${boardPort}: ${e.message}`));
    s.on('message', (msg, rinfo) => this.fromHost(boardPort, msg, rinfo));
    this.sockets.set(boardPort, s);
    return s;
  }

  /** The host address that stands for the board's UDP port (created on first use). */
  hostPort(boardPort) { return this.socketFor(boardPort).ready; }

  forward(station, sport, dport, data) {
    this.stats.udpOut++;
    this.socketFor(sport).send(Buffer.from(data), dport, '127.0.0.1');
  }

  fromHost(boardPort, msg, rinfo) {
    const st = [...this.stations].find((s) => s.ip);
    if (!st || rinfo.address !== '127.0.0.1' || msg.length > MAX_UDP) { this.stats.dropped++; return; }
    this.stats.udpIn++;
    st.deliver(this.udpFrame(st.mac, this.gw, st.ip, rinfo.port, boardPort, msg));
  }

  // ---------------------------------------------------------------- DHCP (RFC 2131, the server's part)
  dhcp(station, m) {
    if (m.length < 240 || m[0] !== 1) return;
    const dv = new DataView(m.buffer, m.byteOffset, m.length);
    if (dv.getUint32(236) !== 0x63825363) return;
    const opts = new Map();
    for (let i = 240; i < m.length && m[i] !== 255;) {
      if (m[i] === 0) { i++; continue; }
      opts.set(m[i], m.subarray(i + 2, i + 2 + m[i + 1]));
      i += 2 + m[i + 1];
    }
    const type = opts.get(53)?.[0];
    const mac = macStr(m.subarray(28, 34));
    let l = this.leases.get(mac);
    if (!l) {
      l = { ip: [...this.gw.slice(0, 3), this.nextHost++], ended: false };
      this.leases.set(mac, l);
    }
    this.stats.dhcp++;
    if (type === 1) return this.dhcpReply(station, m, 2, l.ip); // DISCOVER -> OFFER
    if (type === 3) { // REQUEST -> ACK, or NAK for an ended lease or another address
      const want = opts.get(50) ? ipStr(opts.get(50)) : ipStr(m, 12);
      if (l.ended || want !== ipStr(l.ip)) {
        l.ended = false;
        this.emit({ event: 'wlan', what: 'dhcp-nak', mac, ip: want });
        return this.dhcpReply(station, m, 6, [0, 0, 0, 0]);
      }
      station.ip = Uint8Array.from(l.ip);
      this.emit({ event: 'wlan', what: 'dhcp-ack', mac, ip: ipStr(l.ip) });
      return this.dhcpReply(station, m, 5, l.ip);
    }
    if (type === 7) station.ip = null; // RELEASE
  }

  dhcpReply(station, req, type, yiaddr) {
    const r = new Uint8Array(300);
    r[0] = 2; r[1] = 1; r[2] = 6;
    r.set(req.subarray(4, 8), 4); // xid
    r.set(req.subarray(10, 12), 10); // flags
    r.set(yiaddr, 16);
    r.set(this.gw, 20);
    r.set(req.subarray(28, 44), 28); // chaddr
    r.set([0x63, 0x82, 0x53, 0x63], 236);
    const o = [53, 1, type, 54, 4, ...this.gw];
    if (type !== 6) {
      const t = (n) => [(n >>> 24) & 255, (n >>> 16) & 255, (n >>> 8) & 255, n & 255];
      o.push(51, 4, ...t(this.lease), 58, 4, ...t(this.lease >>> 1), 59, 4, ...t(Math.floor(this.lease * 7 / 8)));
      o.push(1, 4, 255, 255, 255, 0, 3, 4, ...this.gw, 6, 4, ...this.gw);
    }
    o.push(255);
    r.set(o, 240);
    station.deliver(this.udpFrame(BROADCAST_MAC, this.gw, [255, 255, 255, 255], 67, 68, r));
  }

  close() { for (const s of this.sockets.values()) s.close(); }
}
