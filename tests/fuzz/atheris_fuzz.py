"""Coverage-guided fuzzing (atheris, libFuzzer) of the host decoders, with the oracles of mutate.py.

    .venv/bin/python tests/fuzz/atheris_fuzz.py -runs=1000000 [-max_total_time=600] [CORPUS_DIR]

The mutation fuzzers (mutate.py) know our layouts; coverage guidance finds what they were not
written to reach, above all *sequences*: one PollClient lives across all inputs, so libFuzzer's
feedback walks the spec 004 client through orders of answers (recoveries, epochs, bursts) that no
single input holds. Input layout, first byte even: a frame (byte 1: bit 0 answer the outstanding
request's tag, bit 1 make a new request first; then the frame), odd: a COBS byte stream (bytes 1-2:
two chunk sizes; then the stream, fed to the host and the device decoders, which must agree).

A finding (anything but the typed error, a wrong error code, a decoded frame that does not
re-encode, the two COBS decoders disagreeing) raises mutate.Finding: libFuzzer stops, prints it and
writes the input to crash-*. Seeds: every valid frame of mutate.corpus() and a stream of them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["leadwire"]):
    from leadwire import client, codec, framing

from leadwire.tools.fuzz_mutate import check_client, check_decode, check_payloads, check_stream, corpus

PC = client.PollClient(n=5, epoch=1, fresh=False)


def one_input(data: bytes) -> None:
    if len(data) < 3:
        return
    if data[0] & 1 == 0:
        frame = data[2:]
        if check_decode(frame) != "ok":
            return
        f = codec.decode(frame)
        check_payloads(f)
        if data[1] & 2:
            PC.next_request()
        if data[1] & 1:
            f.message_id = PC.tag  # as if it answered the outstanding request
        check_client(PC, f)
    else:
        check_stream(data[3:], [], [1 + data[1] % 64, 1 + data[2]])


def seeds(folder: Path) -> None:
    """The seed corpus: each valid frame (as a frame input) and all of them as one stream."""
    folder.mkdir(parents=True, exist_ok=True)
    frames = corpus(seed=1, n=200)
    for i, f in enumerate(frames):
        (folder / ("frame-%03d" % i)).write_bytes(b"\x00\x01" + f)
    stream = b"".join(framing.encode(f) for f in frames[:40])  # each with its delimiter
    (folder / "stream").write_bytes(b"\x01\x07\x40" + stream)


def main() -> None:
    args = sys.argv
    if "--seeds" in args:  # write the seed corpus into the given folder and stop
        seeds(Path(args[args.index("--seeds") + 1]))
        return
    atheris.Setup(args, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
