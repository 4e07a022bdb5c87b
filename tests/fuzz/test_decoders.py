"""Mutation fuzzing of the host decoders (small runs; bench/fuzz_bench.py runs >= 1M inputs).

tests/core/test_wire.py has the generative properties (random bytes, single bit flips, garbage
between frames); these start from valid frames and damage them the way links and peers do (see
mutate.py), check an oracle per target, and bound the time per input (the hang guard).
"""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leadwire import client, codec, framing, wire
from leadwire.tools.fuzz_mutate import (
    Finding,
    Mutator,
    check_client,
    check_decode,
    check_payloads,
    check_stream,
    corpus,
    decode_stream,
    stream,
)

SEEDS = corpus()
SLOW_INPUT_S = 0.5  # no single input may take longer (a loop that does not end would, by far)


def test_the_corpus_is_valid_and_covers_every_type() -> None:
    types = Counter(codec.decode(f).type for f in SEEDS)
    assert set(types) == set(range(1, wire.MAX_TYPE + 1))
    for f in SEEDS:
        assert check_decode(f) == "ok"
        check_payloads(codec.decode(f))


@pytest.mark.timeout(120)
def test_mutated_frames_seeded_run() -> None:
    """20k mutated frames and random inputs: decode, payload decoders, the poll client."""
    m = Mutator(SEEDS, random.Random(6))
    pc = client.PollClient(n=5, epoch=1, fresh=False)
    outcomes: Counter[str] = Counter()
    payload: Counter[str] = Counter()
    worst = 0.0
    for i in range(20_000):
        data = m.one() if i % 8 else m.raw()
        t = time.perf_counter()
        r = check_decode(data)
        if r == "ok":
            f = codec.decode(data)
            for k, v in check_payloads(f).items():
                payload[k + ":" + v] += 1
            if i % 2:
                f.message_id = pc.tag  # as if it answered the outstanding request
            check_client(pc, f)
            if i % 50 == 0:
                pc.next_request()
        worst = max(worst, time.perf_counter() - t)
        outcomes[r] += 1
    assert worst < SLOW_INPUT_S
    # every header error code is reached, and resealed mutants reach the payload decoders
    assert set(outcomes) == {"ok", "short", "version", "type", "length", "crc", "flags"}
    assert payload["records:ok"] and payload["records:payload"] and payload["hello:payload"]


@pytest.mark.timeout(120)
def test_mutated_payloads_seeded_run() -> None:
    m = Mutator(SEEDS, random.Random(7))
    seen: Counter[str] = Counter()
    for _ in range(10_000):
        for k, v in check_payloads(m.payload()).items():
            seen[k + ":" + v] += 1
    for name in ("hello", "poll", "recovery", "subscribe", "ack", "error", "records", "alarm", "health"):
        assert seen[name + ":ok"] and seen[name + ":payload"], name


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_hypothesis_driven_mutations(rng: random.Random) -> None:
    """The same mutators with hypothesis choosing (and shrinking) every random decision."""
    m = Mutator(SEEDS, rng)
    data = m.one()
    if check_decode(data) == "ok":
        check_payloads(codec.decode(data))
    check_payloads(m.payload())


@pytest.mark.timeout(120)
def test_mutated_streams_host_and_device_cobs_agree() -> None:
    """200 streams of 20 frames with damage: host and device decoders give the same items, every
    intact frame comes out, and the decoder's counters match what it returned."""
    m = Mutator(SEEDS, random.Random(8))
    codes: Counter[int] = Counter()
    for _ in range(200):
        data, must = stream(m, 20)
        chunks = [m.rng.choice([1, 2, 7, 64, 1000, len(data) or 1]) for _ in range(4)]
        for x in check_stream(data, must, chunks):
            if isinstance(x, wire.WireError):
                codes[x.code] += 1
    assert {wire.E_COBS, wire.E_OVERSIZE, wire.E_CRC, wire.E_LENGTH} <= set(codes)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False), st.integers(1, 12), st.lists(st.integers(1, 300), min_size=1))
def test_hypothesis_driven_streams(rng: random.Random, n: int, chunks: list[int]) -> None:
    data, must = stream(Mutator(SEEDS, rng), n)
    check_stream(data, must, chunks)


@pytest.mark.timeout(60)
def test_the_device_sized_decoder_on_mutated_streams() -> None:
    """The board decodes with StreamDecoder(128): larger frames are one oversize error each."""
    m = Mutator(SEEDS, random.Random(9))
    oversize = 0
    for _ in range(100):
        data, _ = stream(m, 10)
        got = decode_stream(data, [97])
        oversize += sum(isinstance(x, wire.WireError) and x.code == wire.E_OVERSIZE for x in got)
        got128 = decode_stream(data, [97], max_frame=128)
        assert all(len(codec.encode(x)) <= 128 for x in got128 if isinstance(x, codec.Frame))
    assert oversize > 0


@pytest.mark.timeout(60)
def test_huge_inputs_are_refused_fast() -> None:
    m = Mutator(SEEDS, random.Random(10))
    for _ in range(20):
        data = m.huge()
        t = time.perf_counter()
        assert check_decode(data) != "ok" or len(data) <= wire.MAX_FRAME
        assert time.perf_counter() - t < SLOW_INPUT_S
    # 4 MB without a delimiter, then one: a single oversize error, bounded memory, linear time
    d = framing.StreamDecoder()
    t = time.perf_counter()
    out = []
    for _ in range(16):
        out += d.feed(bytes(range(1, 256)) * 1028)  # 262,140 bytes, no zero
    out += d.feed(b"\x00" + framing.encode(codec.encode(codec.Frame(wire.NO_EVENT, 3))))
    took = time.perf_counter() - t
    assert [type(x).__name__ for x in out] == ["WireError", "Frame"] and out[0].code == wire.E_OVERSIZE
    assert len(d.frame) == framing.max_encoded(wire.MAX_FRAME)  # the buffer did not grow
    assert took < 10  # ~0.5 s on a laptop core; a quadratic scan would take minutes


def test_a_finding_names_the_target_and_shows_the_input() -> None:
    e = Finding("codec.decode", b"\x01\x02", "raised KeyError()")
    assert "codec.decode" in str(e) and "0102" in str(e)
