"""Fuzzing benchmark: >= 1M mutated inputs through the host decoders, >= 100k bad frames to a board.

Run: .venv/bin/python bench/fuzz_bench.py            (about 2-4 minutes on one core)
     .venv/bin/python bench/fuzz_bench.py --quick    (a tenth of it)
     .venv/bin/python bench/fuzz_bench.py --only-board   (the two virtual-board runs: UDP, serial)

Targets (the mutators and oracles are in tools/fuzz_mutate.py, shared with tests/fuzz):
  frames    codec.decode on mutated frames and random bytes; each valid result must re-encode to the
            input, each error must be the WireError wire.check() names; valid frames then go through
            every messages.decode_* and PollClient.on_frame (only WireError(E_PAYLOAD) allowed)
  payloads  every messages.decode_* on mutated valid payloads (canonical re-encoding when accepted)
  streams   StreamDecoder.feed on damaged COBS streams in random chunks, host (cobs package) and
            device (own unstuffing) decoders compared item by item, intact frames all out
  huge      codec.decode on inputs up to 256 KB
  board     bad frames to a virtual board over UDP with POLLs interleaved (tools/fuzz_board.py)
  serial    the same over the board's serial link: 0x00-ended units of COBS bytes (mutated frames,
            damaged stuffing, oversize runs at the exact limit and past it), each counted by a
            model of the agent's decoder (fuzz_board.serial_items)

Hang guard: SIGALRM fires if one batch of inputs takes more than 60 s and reports the input being
decoded; the slowest single input is printed. Any finding stops the run with the input in hex.
"""

from __future__ import annotations

import json
import platform
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click

from leadwire import client, codec, framing, wire
from leadwire.tools.fuzz_board import BoardFuzzer, SerialBoardFuzzer, board_config
from leadwire.tools.fuzz_mutate import (
    Finding,
    Mutator,
    check_client,
    check_decode,
    check_payloads,
    check_stream,
    corpus,
    stream,
)

BATCH = 1000
BATCH_LIMIT_S = 60


class Hang(Exception):
    pass


class Guard:
    """SIGALRM per batch: a decoder that does not return is stopped and its input shown."""

    def __init__(self) -> None:
        self.current: bytes = b""
        self.worst = 0.0
        signal.signal(signal.SIGALRM, self._fire)

    def _fire(self, *_: object) -> None:
        raise Hang("no result after %d s; input (%d bytes): %s" % (BATCH_LIMIT_S, len(self.current),
                                                                 self.current[:200].hex()))  # fmt: skip

    def arm(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, BATCH_LIMIT_S)

    def disarm(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)


def fuzz_frames(n: int, seed: int, g: Guard) -> dict[str, Any]:
    m = Mutator(corpus(seed), random.Random(seed))
    pc = client.PollClient(n=5, epoch=1, fresh=False)
    codes: Counter[str] = Counter()
    payload: Counter[str] = Counter()
    t0 = time.perf_counter()
    for i in range(n):
        if i % BATCH == 0:
            g.arm()
        data = m.one() if i % 8 else m.raw()
        g.current = data
        t = time.perf_counter()
        r = check_decode(data)
        if r == "ok":
            f = codec.decode(data)
            payload.update(check_payloads(f).values())
            if i % 2:
                f.message_id = pc.tag
            check_client(pc, f)
            if i % 50 == 0:
                pc.next_request()
        g.worst = max(g.worst, time.perf_counter() - t)
        codes[r] += 1
    g.disarm()
    dt = time.perf_counter() - t0
    return {"inputs": n, "seconds": round(dt, 1), "per_s": round(n / dt),
            "outcomes": dict(codes.most_common()), "payload_decoder_calls": dict(payload)}  # fmt: skip


def decode_rate(n: int, seed: int) -> dict[str, Any]:
    """codec.decode and StreamDecoder.feed alone (no mutation, no oracle): inputs per second."""
    m = Mutator(corpus(seed), random.Random(seed + 4))
    inputs = [m.one() if i % 8 else m.raw() for i in range(n)]
    t = time.perf_counter()
    for d in inputs:
        try:
            codec.decode(d)
        except wire.WireError:
            pass
    decode_s = time.perf_counter() - t
    data = b"".join(stream(m, 20)[0] for _ in range(max(1, n // 1000)))
    dec = framing.StreamDecoder()
    t = time.perf_counter()
    items = dec.feed(data)
    feed_s = time.perf_counter() - t
    return {"codec_decode_per_s": round(n / decode_s), "stream_feed_bytes_per_s": round(len(data) / feed_s),
            "stream_items": len(items)}  # fmt: skip


def fuzz_payloads(n: int, seed: int, g: Guard) -> dict[str, Any]:
    m = Mutator(corpus(seed), random.Random(seed + 1))
    seen: Counter[str] = Counter()
    t0 = time.perf_counter()
    for i in range(n):
        if i % BATCH == 0:
            g.arm()
        f = m.payload()
        g.current = f.payload
        t = time.perf_counter()
        for k, v in check_payloads(f).items():
            seen["%s:%s" % (k, v)] += 1
        g.worst = max(g.worst, time.perf_counter() - t)
    g.disarm()
    dt = time.perf_counter() - t0
    per: dict[str, dict[str, int]] = {}
    for key, cnt in seen.items():
        name, outcome = key.split(":")
        per.setdefault(name, {})[outcome] = cnt
    return {"inputs": n, "seconds": round(dt, 1), "per_s": round(n / dt), "per_decoder": per}


def fuzz_streams(n: int, seed: int, g: Guard) -> dict[str, Any]:
    m = Mutator(corpus(seed), random.Random(seed + 2))
    codes: Counter[str] = Counter()
    frames = 0
    nbytes = 0
    t0 = time.perf_counter()
    for i in range(n):
        if i % 100 == 0:
            g.arm()
        data, must = stream(m, 20)
        g.current = data
        chunks = [m.rng.choice([1, 2, 7, 64, 1000, len(data) or 1]) for _ in range(4)]
        t = time.perf_counter()
        for x in check_stream(data, must, chunks):
            if isinstance(x, wire.WireError):
                codes[codec.error_name(x.code)] += 1
            else:
                codes["frame"] += 1
        g.worst = max(g.worst, time.perf_counter() - t)
        frames += 20
        nbytes += len(data)
    g.disarm()
    dt = time.perf_counter() - t0
    return {"streams": n, "frames_in_streams": frames, "bytes": nbytes, "seconds": round(dt, 1),
            "streams_per_s": round(n / dt), "items": dict(codes.most_common())}  # fmt: skip


def fuzz_huge(n: int, seed: int, g: Guard) -> dict[str, Any]:
    m = Mutator(corpus(seed), random.Random(seed + 3))
    codes: Counter[str] = Counter()
    t0 = time.perf_counter()
    g.arm()
    for _ in range(n):
        data = m.huge()
        g.current = data
        t = time.perf_counter()
        codes[check_decode(data)] += 1
        g.worst = max(g.worst, time.perf_counter() - t)
    g.disarm()
    dt = time.perf_counter() - t0
    return {"inputs": n, "seconds": round(dt, 1), "outcomes": dict(codes)}


def fuzz_board(n: int, seed: int, transport: str = "udp") -> dict[str, Any]:
    from leadwire.tools.board import start_board

    with start_board(transport, config=board_config(health_ms=200, alarm_gap_ms=100)) as b:
        f: BoardFuzzer
        if transport == "serial":
            assert b.port is not None
            f = SerialBoardFuzzer(b.port, seed=seed, window=16)
        else:
            assert b.address is not None
            f = BoardFuzzer(b.address, seed=seed, window=16)
        try:
            r = f.run(n)
            f.settle(0.1, 0.2)
        finally:
            f.close()
        alive = b.alive()
        console = b.console()
    out = r.summary()
    if isinstance(f, SerialBoardFuzzer):  # units of bytes, each ending with a 0x00: 0..n frames each
        out["units"] = f.units
        out["bytes"] = f.bytes_sent
    out["board_alive"] = alive
    out["agent_exceptions"] = console.count("agent:")
    out["poll_client"] = {"received": f.pc.received, "lost": f.pc.lost, "restarts": f.pc.restarts}
    out["wrong"] = r.wrong[:5]
    out["exact"] = r.final_alarm == r.total and r.final_health == min(r.total, 0xFFFF)
    return out


@click.command(help=__doc__.split("\n")[0])
@click.option("--quick", is_flag=True, help="a tenth of every count")
@click.option("--frames", type=int, default=1_000_000)
@click.option("--payloads", type=int, default=300_000)
@click.option("--streams", type=int, default=10_000, help="streams of 20 frames each")
@click.option("--huge", type=int, default=2_000)
@click.option("--board", type=int, default=100_000, help="bad frames to the virtual board (0: skip)")
@click.option("--serial", type=int, default=100_000, help="bad inputs over serial (0x00-ended units)")
@click.option("--only-board", is_flag=True, help="skip the host decoders")
@click.option("--seed", type=int, default=1)
@click.option("--json", type=click.Path(dir_okay=False, path_type=Path), help="also write the results here")
def main(**kw: Any) -> None:
    sys.exit(bench(SimpleNamespace(**kw)))


def bench(a: SimpleNamespace) -> int:
    k = 10 if a.quick else 1
    g = Guard()
    res: dict[str, Any] = {"python": platform.python_version(), "seed": a.seed}
    if not a.only_board:
        try:
            host_decoders(a, k, g, res)
        except (Finding, Hang) as e:
            print("FINDING: %s" % e, flush=True)
            return 1
    ok = True
    for name, transport, count in (("board", "udp", a.board), ("board_serial", "serial", a.serial)):
        if not count:
            continue
        n = count // k
        print("fuzz %s: %d bad inputs ..." % (name, n), file=sys.stderr, flush=True)
        b = res[name] = fuzz_board(n, a.seed, transport)
        print(json.dumps({name: b}), flush=True)
        ok = ok and (b["exact"] and not b["wrong"] and b["board_alive"] and not b["unanswered"]
                     and not b["agent_exceptions"])  # fmt: skip
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    print("result: %s" % ("OK" if ok else "FAILED"))
    return 0 if ok else 1


def host_decoders(a: SimpleNamespace, k: int, g: Guard, res: dict[str, Any]) -> None:
    """The four host targets (a k-th of each count), their total, the slowest input, raw rates."""
    for name, fn, n in (
        ("frames", fuzz_frames, a.frames // k),
        ("payloads", fuzz_payloads, a.payloads // k),
        ("streams", fuzz_streams, a.streams // k),
        ("huge", fuzz_huge, a.huge // k),
    ):
        print("fuzz %s: %d ..." % (name, n), file=sys.stderr, flush=True)
        res[name] = fn(n, a.seed, g)
        print(json.dumps({name: res[name]}), flush=True)
    res["host_inputs_total"] = sum(
        (res["frames"]["inputs"], res["payloads"]["inputs"], res["streams"]["frames_in_streams"],
         res["huge"]["inputs"])
    )  # fmt: skip
    res["slowest_input_ms"] = round(g.worst * 1000, 2)
    res["raw_rates"] = decode_rate(200_000 // k, a.seed)
    print(json.dumps({key: res[key] for key in ("host_inputs_total", "slowest_input_ms", "raw_rates")}))


if __name__ == "__main__":
    main()
