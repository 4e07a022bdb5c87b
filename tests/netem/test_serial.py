"""The serial (pty) impairer: byte-level and frame-level impairments, baud pacing, the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from typing import Any

import pytest

from leadwire import codec, framing, messages, wire
from leadwire.tools.netem import Impairment, SerialImpairer, _StreamDirection

from .util import FakeBoard, collect, netem_process, open_port, read_fd

CLEAN = Impairment()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def frames(n: int) -> bytes:
    """n COBS-framed NO_EVENT frames, as the board sends them."""
    return b"".join(framing.encode(codec.encode(codec.Frame(wire.NO_EVENT, i))) for i in range(n))


async def direction_output(prof: Impairment, data: bytes, chunk: int) -> tuple[bytes, dict[str, int]]:
    """One direction fed `data` in reads of `chunk` bytes; what it writes (into a pipe) and counts."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    loop = asyncio.get_running_loop()
    d = _StreamDirection("up", prof, loop, loop.time(), w)
    for i in range(0, len(data), chunk):
        d.push(data[i : i + chunk])
    await asyncio.sleep(0.05)
    out = read_fd(r)
    d.close()
    os.close(r)
    os.close(w)
    return out, d.counts


@pytest.mark.timeout(60)
def test_decisions_do_not_depend_on_how_reads_are_chunked() -> None:
    data = frames(200)
    prof = Impairment(loss=0.002, corrupt=0.003, dup=0.1, seed=5)

    async def go() -> list[tuple[bytes, dict[str, int]]]:
        return [await direction_output(prof, data, c) for c in (1, 7, 64, len(data))]

    results = run(go())
    out0, c0 = results[0]
    for out, c in results[1:]:
        assert out == out0
        assert c == c0
    assert c0["loss_runs"] > 0 and c0["corrupted"] > 0 and c0["duplicated"] > 0
    assert c0["in_bytes"] == len(data)
    # pinned (seed 5, this stream); a change here changes every replay
    assert (c0["loss_runs"], c0["lost_bytes"], c0["corrupted"], c0["duplicated"]) == PINNED_SEED_5


PINNED_SEED_5 = (8, 55, 7, 19)  # loss runs, bytes lost, bits flipped, frames doubled


@pytest.mark.timeout(60)
def test_corrupt_1_flips_one_bit_in_every_byte_and_the_decoder_rejects_every_frame() -> None:
    data = frames(20)
    out, c = run(direction_output(Impairment(corrupt=1.0, seed=1), data, 50))
    # flipped bits may create or remove 0x00 delimiters, so compare byte by byte
    assert len(out) == len(data) and c["corrupted"] == len(data)
    assert all(bin(x ^ y).count("1") == 1 for x, y in zip(out, data, strict=True))
    got = framing.StreamDecoder().feed(out)
    assert not [x for x in got if isinstance(x, codec.Frame)]


@pytest.mark.timeout(60)
def test_loss_drops_byte_runs_and_the_decoder_resynchronises() -> None:
    data = frames(300)
    out, c = run(direction_output(Impairment(loss=0.002, loss_run=4, seed=2), data, 100))
    assert len(out) == len(data) - c["lost_bytes"] and c["loss_runs"] > 0
    assert c["loss_runs"] <= c["lost_bytes"] <= 4 * c["loss_runs"]
    dec = framing.StreamDecoder()
    got = dec.feed(out)
    good = [x for x in got if isinstance(x, codec.Frame)]
    # each run damages at most the two frames it touches; the rest arrive
    assert 300 - 2 * c["loss_runs"] <= len(good) < 300
    assert dec.errors >= 1


@pytest.mark.timeout(60)
def test_dup_1_sends_every_frame_twice() -> None:
    data = frames(10)
    out, c = run(direction_output(Impairment(dup=1.0), data, 13))
    want = b"".join(f + b"\x00" + f + b"\x00" for f in data.split(b"\x00")[:-1])
    assert out == want and c["duplicated"] == c["frames"] == 10


@pytest.mark.timeout(60)
def test_reorder_1_swaps_frames_in_pairs() -> None:
    data = frames(6)
    out, c = run(direction_output(Impairment(reorder=1.0, reorder_ms=1000), data, len(data)))
    fs = [f + b"\x00" for f in data.split(b"\x00")[:-1]]
    assert out == fs[1] + fs[0] + fs[3] + fs[2] + fs[5] + fs[4]
    assert c["held"] == c["reordered"] == 3


@pytest.mark.timeout(60)
def test_a_held_frame_goes_on_alone_after_reorder_ms() -> None:
    async def go() -> tuple[bytes, dict[str, int]]:
        return await direction_output(Impairment(reorder=1.0, reorder_ms=10), frames(1), 100)

    out, c = run(go())
    assert out == frames(1) and c["held"] == 1 and c["reordered"] == 0


@pytest.mark.timeout(60)
def test_through_ptys_both_ways_with_baud_pacing() -> None:
    async def go() -> None:
        board = FakeBoard()
        try:
            async with SerialImpairer(board.target, Impairment(rate=9600)) as imp:
                assert imp.port is not None and imp.port.startswith("/dev/")
                host = open_port(imp.port)
                try:
                    data = frames(40)  # 560 bytes: 0.58 s at 9600 baud (960 bytes/s)
                    t = time.monotonic()
                    os.write(host, data)
                    got = await collect(board.read, len(data), timeout=5, settle=0)
                    took = time.monotonic() - t
                    assert got == data
                    assert 0.5 <= took < 3.0, took
                    board.write(b"no delimiter yet")  # flushed after a short wait, not held forever
                    back = await collect(lambda: read_fd(host), 16, timeout=2, settle=0)
                    assert back == b"no delimiter yet"
                finally:
                    os.close(host)
                c = imp.snapshot()
                assert c["up"]["in_bytes"] == c["up"]["out_bytes"] == len(data) and c["up"]["frames"] == 40
                assert c["down"]["out_bytes"] == 16 and c["down"]["frames"] == 0
        finally:
            board.close()

    run(go())


@pytest.mark.timeout(60)
def test_blackout_drops_bytes_in_the_window() -> None:
    async def go() -> dict[str, Any]:
        board = FakeBoard()
        try:
            async with SerialImpairer(board.target, Impairment(blackouts=[(0, 0.3)])) as imp:
                assert imp.port is not None
                host = open_port(imp.port)
                try:
                    os.write(host, frames(3))
                    await asyncio.sleep(0.4)
                    os.write(host, frames(2))
                    got = await collect(board.read, len(frames(2)), timeout=3)
                finally:
                    os.close(host)
                assert got == frames(2)
                return imp.snapshot()
        finally:
            board.close()

    c = run(go())
    assert c["up"]["blackout_bytes"] == len(frames(3)) and c["up"]["out_bytes"] == len(frames(2))


@pytest.mark.timeout(60)
def test_cli_serial_ready_line_and_counts() -> None:
    board = FakeBoard()
    try:
        with netem_process("serial", "--target", board.target, "--dup", "1", "--direction", "down") as proc:
            assert proc.stdout is not None
            ready = json.loads(proc.stdout.readline())
            assert ready["pid"] == proc.pid and ready["target"] == board.target
            host = open_port(ready["port"])
            try:
                hello = framing.encode(codec.encode(messages.hello_request(3)))
                os.write(host, hello)
                got = run(collect(board.read, len(hello), timeout=5))
                assert got == hello  # up is clean
                board.write(frames(2))
                back = run(collect(lambda: read_fd(host), 2 * len(frames(2)), timeout=5))
                f = frames(2).split(b"\x00")
                assert back == f[0] + b"\x00" + f[0] + b"\x00" + f[1] + b"\x00" + f[1] + b"\x00"
            finally:
                os.close(host)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(10) == 0
            out = json.loads(proc.stdout.readline())
        assert out["counts"]["up"]["out_bytes"] == len(hello)
        assert out["counts"]["down"]["duplicated"] == 2
    finally:
        board.close()


@pytest.mark.timeout(60)
def test_cli_serial_missing_target_is_one_line() -> None:
    with netem_process("serial", "--target", "/dev/pts/does-not-exist") as proc:
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 2 and "cannot open /dev/pts/does-not-exist" in err
    assert len(err.splitlines()) == 1
