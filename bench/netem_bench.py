"""netem benchmark: the UDP proxy's own rate, and a poll session with a virtual board through it.

Run: .venv/bin/python bench/netem_bench.py [--seconds 10] [--seed 1]

1. rate: datagrams per second the clean proxy carries (client -> proxy -> echo -> proxy -> client,
   a window of 32 in flight), against the same echo without the proxy.
2. session: a virtual board (sensors 1 x 50 Hz) polled through a proxy impairing both directions
   (loss 0.1, dup 0.05, reorder 0.05, delay 2 +- 1 ms, corrupt 0.01, seed 1) by the core's PollClient.
   Cross-checks: the board's bad-frame counter (health channel) equals the corrupted POLL copies
   netem sent it; the client's undecodable answers equal the corrupted copies netem sent down;
   nothing the board generated is lost (the protocol retries each lost poll).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from leadwire import client, codec, messages, wire
from leadwire.tools.board import start_board
from leadwire.tools.netem import Impairment, UdpImpairer

HEALTH_CH = 8


class Endpoint(asyncio.DatagramProtocol):
    def __init__(self, echo: bool = False) -> None:
        self.echo = echo
        self.q: asyncio.Queue[bytes] = asyncio.Queue()
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if self.echo:
            self.transport.sendto(data, addr)
        else:
            self.q.put_nowait(data)


async def rate(seconds: float, through_proxy: bool) -> float:
    loop = asyncio.get_running_loop()
    _, echo = await loop.create_datagram_endpoint(lambda: Endpoint(True), local_addr=("127.0.0.1", 0))
    _, cl = await loop.create_datagram_endpoint(Endpoint, local_addr=("127.0.0.1", 0))
    target = echo.transport.get_extra_info("sockname")[:2]
    imp = None
    if through_proxy:
        imp = await UdpImpairer(("127.0.0.1", 0), target, Impairment()).start()
        target = imp.address
    n = 0
    end = time.monotonic() + seconds
    t0 = time.monotonic()
    while time.monotonic() < end:
        for _ in range(32):
            cl.transport.sendto(b"x" * 64, target)
        for _ in range(32):
            await asyncio.wait_for(cl.q.get(), 2)
        n += 32
    dt = time.monotonic() - t0
    if imp is not None:
        await imp.stop()
    echo.transport.close()
    cl.transport.close()
    return n / dt


async def session(address: tuple[str, int], seconds: float, seed: int) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    prof = Impairment(loss=0.1, dup=0.05, reorder=0.05, reorder_ms=20, delay_ms=2, jitter_ms=1, corrupt=0.01,
                      seed=seed)  # fmt: skip
    imp = await UdpImpairer(("127.0.0.1", 0), address, prof).start()
    _, cl = await loop.create_datagram_endpoint(Endpoint, local_addr=("127.0.0.1", 0))
    pc = client.PollClient()
    undecodable = 0
    health: list[tuple[int, int]] = []  # (offset, bad frames)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        req = pc.next_request(64, 1000)
        cl.transport.sendto(codec.encode(req), imp.address)
        deadline = loop.time() + 0.05
        answered = False
        while not answered:
            try:
                data = await asyncio.wait_for(cl.q.get(), max(deadline - loop.time(), 0.0001))
            except TimeoutError:
                break
            try:
                f = codec.decode(data)
            except wire.WireError:
                undecodable += 1
                continue
            kind, out = pc.on_frame(f)
            if kind == client.EVENTS:
                health += [
                    (o, messages.decode_health(d)["bad_frames"]) for o, ch, d in out if ch == HEALTH_CH
                ]
            answered = kind not in (client.STALE, client.OTHER)
        if not answered:
            pc.on_timeout()
    # drain: no impairment left in flight, then read the board's counters without netem's help
    await asyncio.sleep(0.2)
    while not cl.q.empty():
        try:
            codec.decode(cl.q.get_nowait())
        except wire.WireError:
            undecodable += 1
    await imp.stop()
    counts = imp.snapshot()
    cl.transport.close()
    return {"netem": counts, "client": {"received": pc.received, "lost": pc.lost, "restarts": pc.restarts,
            "transport_errors": pc.transport_errors, "stale": pc.stale, "undecodable": undecodable},
            "health": health}  # fmt: skip


def last_bad_frames(address: tuple[str, int], after: float) -> int:
    """Poll the board directly (no netem) until a health record written `after` s from now."""
    import socket

    time.sleep(after)
    pc = client.PollClient()
    last = -1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(1)
        for _ in range(200):
            s.sendto(codec.encode(pc.next_request(255, 1400)), address)
            try:
                kind, out = pc.on_frame(codec.decode(s.recv(4096)))
            except TimeoutError:
                pc.on_timeout()
                continue
            if kind == client.EVENTS:
                for _, ch, d in out:
                    if ch == HEALTH_CH:
                        last = messages.decode_health(d)["bad_frames"]
            elif kind == client.NOTHING:
                break
    return last


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    res: dict[str, Any] = {}
    res["echo_round_trips_per_s"] = round(asyncio.run(rate(a.seconds / 4, False)))
    res["through_proxy_round_trips_per_s"] = round(asyncio.run(rate(a.seconds / 4, True)))
    print(json.dumps(res), flush=True)
    # health every 100 ms; a ring of 1024 so the board keeps everything the session has not polled yet
    cfg = {
        "sensors": [{"ch": 1, "hz": 50, "size": 16}],
        "health": {"ms": 100},
        "ring": 1024,
        "alarm": {"gap": 0},
    }
    with start_board("udp", config=cfg) as b:
        assert b.address is not None
        s = asyncio.run(session(b.address, a.seconds, a.seed))
        bad = last_bad_frames(b.address, 0.3)
    up, down = s["netem"]["up"], s["netem"]["down"]
    s["board_bad_frames"] = bad
    s["checks"] = {
        "board bad frames == corrupted POLL copies sent up": bad == up["corrupted_out"],
        "client undecodable == corrupted answer copies sent down": s["client"]["undecodable"]
        == down["corrupted_out"],
        "no event lost": s["client"]["lost"] == 0 and s["client"]["restarts"] == 0,
    }
    del s["health"]
    print(json.dumps(s, indent=1))
    ok = all(s["checks"].values())
    print("result: %s" % ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
