"""The emulated Pico W's access point and router (tools/pico/wifi_ap.mjs) on its own, without a
board or firmware image: a station's frames go in through a small Node driver, what the AP delivers
comes back, byte for byte. Joins (right key, wrong key, unknown SSID), DHCP (DISCOVER/OFFER,
REQUEST/ACK, a lease ended: NAK), ARP and ICMP echo for the router, the UDP NAT to 127.0.0.1 both
ways, nothing for other addresses, the AP off (the station loses the link)."""

from __future__ import annotations

import json
import shutil
import socket
import struct
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from leadwire.tools.board import PICO_DIR

pytestmark = pytest.mark.timeout(30)

STA = bytes.fromhex("28cdc1000009")
BCAST = b"\xff" * 6
GW, IP = bytes([192, 168, 4, 1]), bytes([192, 168, 4, 16])

DRIVER = """
import readline from 'node:readline';
import { WifiAp } from %s;
const emit = (o) => process.stdout.write(JSON.stringify(o) + '\\n');
const ap = new WifiAp({ ssid: 'net', key: 'good-key', forwards: [4210], emit });
const ports = await ap.ready;
emit({ event: 'ready', port: ports[0] });
let st = null;
const deliver = (f) => emit({ event: 'frame', hex: Buffer.from(f).toString('hex') });
const station = () => ({ mac: Buffer.from('%s', 'hex'), deliver, lost: () => emit({ event: 'lost' }) });
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  const [cmd, a, b] = line.split(' ');
  if (cmd === 'join') {
    const r = ap.join({ ...station(), ssid: a, key: b });
    if (r.station) st = r.station;
    emit({ event: 'joined', result: r.result });
  } else if (cmd === 'send') ap.send(st, Buffer.from(a, 'hex'));
  else if (cmd === 'off') ap.setOn(false);
  else if (cmd === 'lease-end') ap.endLeases();
  else if (cmd === 'stats') emit({ event: 'stats', ...ap.stats });
  else if (cmd === 'quit') { ap.close(); process.exit(0); }
});
""" % (json.dumps(str(PICO_DIR / "wifi_ap.mjs")), STA.hex())


def csum(b: bytes) -> int:
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ipv4(src: bytes, dst: bytes, proto: int, body: bytes) -> bytes:
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(body), 1, 0, 64, proto, 0, src, dst)
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    return b"\x02\x1e\xad\x00\x00\x01" + STA + b"\x08\x00" + h + body


def udp(src: bytes, dst: bytes, sport: int, dport: int, data: bytes) -> bytes:
    return ipv4(src, dst, 17, struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data)


def dhcp(kind: int, xid: int, want: bytes | None = None) -> bytes:
    m = struct.pack(
        "!BBBBIHH4s4s4s4s16s", 1, 1, 6, 0, xid, 0, 0x8000, b"\0" * 4, b"\0" * 4, b"\0" * 4, b"\0" * 4, STA
    )
    m += (
        b"\0" * 192
        + b"\x63\x82\x53\x63"
        + bytes([53, 1, kind])
        + (bytes([50, 4]) + want if want else b"")
        + b"\xff"
    )
    return udp(b"\0" * 4, b"\xff" * 4, 68, 67, m)


def dhcp_options(frame: bytes) -> dict[int, bytes]:
    m = frame[14 + 20 + 8 :]
    out, i = {}, 240
    while m[i] != 255:
        out[m[i]] = m[i + 2 : i + 2 + m[i + 1]]
        i += 2 + m[i + 1]
    return out


class Ap:
    def __init__(self) -> None:
        self.p = subprocess.Popen(
            ["node", "--input-type=module", "-e", DRIVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.skipped: list[dict[str, Any]] = []  # what next() passed over, in order
        self.port = self.next("ready")["port"]

    def cmd(self, line: str) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def next(self, event: str | None = None) -> dict[str, Any]:
        assert self.p.stdout is not None
        for i, ev in enumerate(self.skipped):
            if event is None or ev["event"] == event:
                return self.skipped.pop(i)
        while True:
            ev = json.loads(self.p.stdout.readline())
            if event is None or ev["event"] == event:
                return ev
            self.skipped.append(ev)

    def frame(self) -> bytes:
        return bytes.fromhex(self.next("frame")["hex"])

    def send(self, f: bytes) -> None:
        self.cmd("send " + f.hex())


@pytest.fixture
def ap() -> Iterator[Ap]:
    if shutil.which("node") is None:
        pytest.skip("the emulated access point needs Node.js (`node`)")
    a = Ap()
    try:
        yield a
    finally:
        a.cmd("quit")
        a.p.wait(5)


def test_joins_dhcp_arp_icmp_and_the_udp_nat(ap: Ap) -> None:
    for line, result in (
        ("join other good-key", "nonet"),
        ("join net bad-key", "badauth"),
        ("join net good-key", "ok"),
    ):
        ap.cmd(line)
        assert ap.next("joined")["result"] == result
    ap.send(dhcp(1, 0x1234))  # DISCOVER -> OFFER of 192.168.4.16, broadcast
    offer = ap.frame()
    assert (
        offer[:6] == BCAST
        and offer[14 + 16 : 14 + 20] == b"\xff" * 4
        and offer[14 + 28 + 16 : 14 + 28 + 20] == IP
    )
    opts = dhcp_options(offer)
    assert (opts[53], opts[54], opts[1], opts[3], opts[51]) == (
        b"\x02",
        GW,
        b"\xff\xff\xff\x00",
        GW,
        (3600).to_bytes(4, "big"),
    )
    assert csum(offer[14:34]) == 0
    ap.send(dhcp(3, 0x1235, IP))  # REQUEST -> ACK
    ack = ap.frame()
    assert dhcp_options(ack)[53] == b"\x05" and ack[14 + 28 + 4 : 14 + 28 + 8] == (0x1235).to_bytes(4, "big")
    seen = [ap.next("wlan") for _ in range(3)]  # what the AP says on the emulator's stdout
    assert [e["what"] for e in seen] == ["badauth", "join", "dhcp-ack"] and seen[2]["ip"] == "192.168.4.16"
    # ARP for the router
    arp = b"\xff" * 6 + STA + b"\x08\x06" + bytes.fromhex("0001080006040001") + STA + IP + b"\0" * 6 + GW
    ap.send(arp)
    assert ap.frame() == STA + b"\x02\x1e\xad\x00\x00\x01\x08\x06" + bytes.fromhex("0001080006040002") + (
        b"\x02\x1e\xad\x00\x00\x01" + GW + STA + IP
    )
    # ICMP echo to the router
    ping = bytearray(b"\x08\x00\x00\x00\x00\x07\x00\x01abcd")
    ping[2:4] = struct.pack("!H", csum(bytes(ping)))
    ap.send(ipv4(IP, GW, 1, bytes(ping)))
    pong = ap.frame()
    assert (
        pong[14 + 12 : 14 + 20] == GW + IP
        and pong[34] == 0
        and pong[38:] == bytes(ping[4:])
        and csum(pong[34:]) == 0
    )
    # UDP: board -> router:P leaves for 127.0.0.1:P from the host port standing for the board's 4210
    host = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    host.bind(("127.0.0.1", 0))
    host.settimeout(5)
    try:
        hp = host.getsockname()[1]
        ap.send(udp(IP, GW, 4210, hp, b"hello"))
        data, peer = host.recvfrom(100)
        assert (data, peer) == (b"hello", ("127.0.0.1", ap.port))
        host.sendto(b"answer", ("127.0.0.1", ap.port))  # ... and back, from the router's address
        f = ap.frame()
        assert (
            f[14 + 12 : 14 + 20] == GW + IP
            and struct.unpack("!HH", f[34:38]) == (hp, 4210)
            and f[42:] == b"answer"
        )
        pseudo = GW + IP + struct.pack("!BBH", 0, 17, len(f) - 34)
        assert csum(pseudo + f[34:]) == 0
        # another host's address: dropped, nothing leaves
        ap.send(udp(IP, bytes([10, 0, 0, 1]), 4210, hp, b"elsewhere"))
        ap.cmd("stats")
        stats = ap.next("stats")
        assert (stats["udpOut"], stats["udpIn"], stats["dropped"], stats["badauth"]) == (1, 1, 1, 1)
        with pytest.raises(TimeoutError):
            host.settimeout(0.3)
            host.recvfrom(100)
    finally:
        host.close()


def test_lease_end_and_ap_off(ap: Ap) -> None:
    ap.cmd("join net good-key")
    ap.next("joined")
    ap.send(dhcp(3, 1, IP))
    assert dhcp_options(ap.frame())[53] == b"\x05"
    ap.cmd("lease-end")
    ap.send(dhcp(3, 2, IP))  # the renewal after the lease ended: NAK, no address
    nak = ap.frame()
    assert dhcp_options(nak)[53] == b"\x06" and nak[14 + 28 + 16 : 14 + 28 + 20] == b"\0" * 4
    ap.send(dhcp(3, 3, IP))  # asked again (DHCP from the start): the same address back
    assert dhcp_options(ap.frame())[53] == b"\x05"
    ap.cmd("off")
    assert ap.next("lost") == {"event": "lost"}
    ap.cmd("join net good-key")
    assert ap.next("joined")["result"] == "nonet"
