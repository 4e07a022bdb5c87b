"""Mutation fuzzing of the host decoders: a corpus of valid frames, mutators, and an oracle per target.

Shared by the tests (tests/fuzz/test_decoders.py: small runs) and bench/fuzz_bench.py (>= 1M inputs).
Every target takes one input and returns an outcome label ("ok" or an error name); anything but the
typed error raises `Finding` with the input, so a run stops at the first real bug and shows it.

Mutators work on valid frames the way a bad link or a hostile peer would: bit flips, byte writes,
truncation, extension, splicing two frames, inserted/deleted runs, header fields out of range, and
"lies": a length field (header, record, string, count) set to a wrong value with the CRC resealed,
so the frame passes the wire check and reaches the payload decoders. Streams add COBS damage:
stuffing codes changed, zeros inserted, delimiters dropped, overlong runs, random bytes.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable

from leadwire import client, codec, framing, messages, wire
from leadwire.codec import Frame
from leadwire.crc16 import crc16


class Finding(AssertionError):
    """A decoder did something other than return a value or raise the typed error."""

    def __init__(self, target: str, data: bytes, why: str) -> None:
        super().__init__("%s: %s\n  input (%d bytes): %s" % (target, why, len(data), data[:200].hex()))
        self.target = target
        self.data = data


def _hello_payload(rng: random.Random) -> bytes:
    kind = rng.choice(["rp2", "esp32", "unix", "é"])
    h = messages.Hello(
        rng.getrandbits(32), rng.randrange(1, 4097), rng.randrange(8, 513), rng.randrange(64, 2060),
        rng.randrange(65536), "board-%d" % rng.randrange(100), "0.1.0", kind,
    )  # fmt: skip
    return messages.hello_frame(h).payload


def _records(rng: random.Random) -> list[tuple[int, bytes]]:
    out = []
    for _ in range(rng.randrange(0, 6)):
        kind = rng.randrange(4)
        if kind == 0:
            data = struct.pack(">IHHHHHH", *(rng.getrandbits(16) for _ in range(7)))  # health
        elif kind == 1:
            data = bytes([rng.randrange(1, 3)]) + struct.pack(">I", rng.getrandbits(32))  # alarm
        else:
            data = rng.randbytes(rng.randrange(0, 40))  # samples
        out.append((rng.randrange(256), data))
    return out


def corpus(seed: int = 1, n: int = 400) -> list[bytes]:
    """Valid encoded frames of every type, with realistic payloads."""
    rng = random.Random(seed)
    out: list[bytes] = []
    for v in range(n):
        t = v % wire.MAX_TYPE + 1
        tag = rng.randrange(256)
        if t == wire.HELLO:
            f = Frame(
                t, rng.getrandbits(32), _hello_payload(rng) if rng.random() < 0.7 else b"", message_id=tag
            )
        elif t == wire.POLL:
            frames = rng.choice([1, 1, rng.randint(2, 32)])  # single answers and bursts
            f = messages.poll_frame(rng.getrandbits(32), rng.randrange(256), rng.randrange(2048), tag, frames)
        elif t in (wire.EVENTS, wire.NOTIFY):
            body = messages.encode_records(_records(rng), rng.randrange(70000))
            f = Frame(t, rng.getrandbits(32), body, rng.randrange(256), rng.randrange(16),
                      rng.choice([0, wire.F_LAST]), tag, rng.randrange(32))  # fmt: skip
        elif t == wire.NO_EVENT:
            f = Frame(t, rng.getrandbits(32), message_id=tag)
        elif t == wire.RECOVERY:
            f = messages.recovery_frame(rng.getrandbits(32), rng.getrandbits(32), rng.getrandbits(32), tag)
        elif t == wire.SUBSCRIBE:
            f = messages.subscribe_frame(rng.sample(range(256), rng.randrange(0, 12)), tag)
        elif t == wire.ACK:
            f = messages.ack_frame(
                rng.getrandbits(32), rng.choice([200, 204, 413, 503]), rng.randrange(256), tag
            )
        elif t == wire.CLOSE:
            f = Frame(t, 0, b"", rng.randrange(256), rng.randrange(16), message_id=tag)
        else:
            f = messages.error_frame(rng.randrange(65536), rng.choice(["", "bad", "ünïcode", "x" * 100]))
        out.append(codec.encode(f))
    return out


def reseal(b: bytearray) -> bytearray:
    """Make the header length match and the CRC right: the frame passes wire.check (if its
    version, type and flags are valid), so the payload decoders see whatever the payload is."""
    if len(b) < wire.OVERHEAD:
        return b
    n = min(len(b) - wire.OVERHEAD, wire.MAX_PAYLOAD)
    del b[wire.OVERHEAD + n :]
    b[4] = (b[4] & 0xF8) | (n >> 8)
    b[5] = n & 0xFF
    c = crc16(b, 0, len(b) - 2)
    b[-2] = c >> 8
    b[-1] = c & 0xFF
    return b


INTERESTING = (0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF)


class Mutator:
    """Seeded mutations of valid frames (one to a few per input)."""

    def __init__(self, seeds: list[bytes], rng: random.Random) -> None:
        self.seeds = seeds
        self.rng = rng
        self.ops: list[Callable[[bytearray], bytearray]] = [
            self.flip, self.flip, self.flip, self.set_byte, self.truncate, self.extend, self.splice,
            self.insert, self.delete, self.header, self.lie_length, self.lie_payload, self.lie_payload,
        ]  # fmt: skip

    def one(self) -> bytes:
        r = self.rng
        b = bytearray(r.choice(self.seeds))
        for _ in range(1 + (r.random() < 0.3) + (r.random() < 0.1)):
            b = r.choice(self.ops)(b)
        if r.random() < 0.35:
            b = reseal(b)
        return bytes(b)

    def payload(self) -> Frame:
        """A frame object whose payload is a mutated valid payload (for the payload decoders)."""
        r = self.rng
        seed = r.choice(self.seeds)
        p = bytearray(seed[wire.HEADER_SIZE : -wire.CRC_SIZE])
        for _ in range(1 + (r.random() < 0.3)):
            k = r.randrange(7)
            if k == 0:
                p = self.flip(p)
            elif k == 1:
                p = self.set_byte(p)
            elif k == 2:
                p = p[: r.randrange(len(p) + 1)]
            elif k == 3:
                p = self.insert(p)
            elif k == 4:
                p = self.delete(p)
            elif k == 5:
                o = r.choice(self.seeds)[wire.HEADER_SIZE : -wire.CRC_SIZE]
                p = p[: r.randrange(len(p) + 1)] + o[r.randrange(len(o) + 1) :]
            elif p:  # a length or count byte off by a little or a lot
                i = r.randrange(min(len(p), 12))
                p[i] = r.choice([0, 1, 0xFF, (p[i] + 1) & 0xFF, (p[i] - 1) & 0xFF])
        return Frame(seed[0] & 0x1F, 0, bytes(p[: wire.MAX_PAYLOAD]))

    def raw(self) -> bytes:
        """Random bytes, sometimes shaped like a header."""
        r = self.rng
        b = bytearray(r.randbytes(r.choice([0, 1, 5, 11, 12, 13, 16, 30, r.randrange(200)])))
        if len(b) >= 12 and r.random() < 0.5:
            b[0] = 0x20 | r.randrange(1, 11)
            b = reseal(b)
        return bytes(b)

    def huge(self) -> bytes:
        """A very long input: up to 256 KB, sometimes a valid header in front."""
        r = self.rng
        n = r.choice([2059, 2060, 4096, 65536, 262144])
        b = bytearray(r.choice(self.seeds)[:10]) + r.randbytes(n)
        if r.random() < 0.5:  # the largest length the header can say, and a right CRC over it all
            b[4] |= 0x07
            b[5] = 0xFF
            c = crc16(b, 0, len(b) - 2)
            b[-2], b[-1] = c >> 8, c & 0xFF
        return bytes(b)

    # -- mutators
    def flip(self, b: bytearray) -> bytearray:
        if b:
            for _ in range(self.rng.choice([1, 1, 1, 2, 3, 8])):
                i = self.rng.randrange(len(b) * 8)
                b[i >> 3] ^= 1 << (i & 7)
        return b

    def set_byte(self, b: bytearray) -> bytearray:
        if b:
            r = self.rng
            b[r.randrange(len(b))] = r.choice(INTERESTING) if r.random() < 0.5 else r.randrange(256)
        return b

    def truncate(self, b: bytearray) -> bytearray:
        return b[: self.rng.randrange(len(b) + 1)]

    def extend(self, b: bytearray) -> bytearray:
        return b + self.rng.randbytes(self.rng.choice([1, 2, 3, 16, 100]))

    def splice(self, b: bytearray) -> bytearray:
        o = self.rng.choice(self.seeds)
        return b[: self.rng.randrange(len(b) + 1)] + o[self.rng.randrange(len(o) + 1) :]

    def insert(self, b: bytearray) -> bytearray:
        i = self.rng.randrange(len(b) + 1)
        return b[:i] + self.rng.randbytes(self.rng.randrange(1, 9)) + b[i:]

    def delete(self, b: bytearray) -> bytearray:
        if not b:
            return b
        i = self.rng.randrange(len(b))
        return b[:i] + b[i + self.rng.randrange(1, 9) :]

    def header(self, b: bytearray) -> bytearray:
        """Version, type, flags or fragment index set to any value (reserved ones included)."""
        if len(b) >= 6:
            r = self.rng
            k = r.randrange(4)
            if k == 0:
                b[0] = (r.randrange(8) << 5) | (b[0] & 0x1F)
            elif k == 1:
                b[0] = (b[0] & 0xE0) | r.randrange(32)
            elif k == 2:
                b[1] = (r.randrange(16) << 4) | (b[1] & 0x0F)
            else:
                b[4] = (r.randrange(32) << 3) | (b[4] & 0x07)
        return b

    def lie_length(self, b: bytearray) -> bytearray:
        """The header's length field says something else than the bytes present (CRC kept right)."""
        if len(b) >= wire.OVERHEAD:
            n = self.rng.choice([0, 1, 2047, self.rng.randrange(2048), len(b) - wire.OVERHEAD + 1])
            b[4] = (b[4] & 0xF8) | (n >> 8)
            b[5] = n & 0xFF
            c = crc16(b, 0, len(b) - 2)
            b[-2], b[-1] = c >> 8, c & 0xFF
        return b

    def lie_payload(self, b: bytearray) -> bytearray:
        """A length or count inside the payload (record length, batch count, string length)."""
        if len(b) > wire.OVERHEAD:
            r = self.rng
            i = wire.HEADER_SIZE + r.randrange(min(len(b) - wire.OVERHEAD, 16))
            b[i] = r.choice([0, 1, 0xFF, (b[i] + 1) & 0xFF, (b[i] - 1) & 0xFF])
            b = reseal(b)
        return b


def stream(m: Mutator, n_frames: int) -> tuple[bytes, list[bytes]]:
    """A serial byte stream: COBS frames, some intact, some mutated, with garbage between.

    Returns the stream and the frames (decoded bytes) that must come out of it: intact ones that
    follow a delimiter. Others may or may not (a mutation can leave a frame valid)."""
    r = m.rng
    out = bytearray()
    must: list[bytes] = []
    for _ in range(n_frames):
        k = r.random()
        if k < 0.5:  # intact frame
            f = r.choice(m.seeds)
            if not out or out[-1] == 0:
                must.append(f)
            out += framing.encode(f)
        elif k < 0.7:  # mutated frame, correctly stuffed
            out += framing.encode(m.one())
        elif k < 0.85:  # COBS damage to a stuffed frame
            enc = bytearray(framing.encode(r.choice(m.seeds))[:-1])
            op = r.randrange(4)
            if op == 0 and enc:  # a stuffing code changed
                enc[0] = r.randrange(1, 256)
            elif op == 1 and enc:  # a zero inside
                enc[r.randrange(len(enc))] = 0
            elif op == 2:  # delimiter lost: runs into the next frame
                out += enc
                continue
            else:
                enc = enc[: r.randrange(len(enc) + 1)]
            out += enc + b"\x00"
        elif k < 0.95:  # line noise
            out += r.randbytes(r.randrange(1, 40))
        else:  # an overlong run without a delimiter
            out += bytes(x or 1 for x in r.randbytes(r.choice([300, 2100, 5000]))) + b"\x00"
    return bytes(out), must


# -- targets and oracles -------------------------------------------------------------------------


def check_decode(data: bytes) -> str:
    """codec.decode: a Frame that re-encodes to the same bytes, or WireError with check()'s code."""
    try:
        f = codec.decode(data)
    except wire.WireError as e:
        code = wire.check(data, len(data))
        if e.code != code or not wire.E_SHORT <= e.code <= wire.E_FLAGS:
            raise Finding("codec.decode", data, "WireError %d, wire.check says %d" % (e.code, code)) from None
        return codec.error_name(e.code)
    except Exception as e:
        raise Finding("codec.decode", data, "raised %r" % e) from e
    if codec.encode(f) != data:
        raise Finding("codec.decode", data, "decoded frame does not re-encode to its bytes")
    return "ok"


def _canonical(name: str, frame: Frame, got: object) -> bool:
    p = frame.payload
    if name == "records":
        backlog, recs = got  # type: ignore[misc]
        return bool(messages.encode_records(recs, backlog) == p)
    if name == "hello":
        return messages.hello_frame(got).payload == p  # type: ignore[arg-type]
    if name == "poll":
        k = messages.poll_frames(frame)  # a burst's max_frames; 5 bytes with k = 1 is the 4-byte form
        follow = messages.poll_follow(frame)  # (the byte's top bit: go on past a RECOVERY)
        enc = messages.poll_frame(*got, max_frames=k, follow=follow).payload  # type: ignore[misc]
        return p in (enc, enc + b"\x01")
    if name == "ack":
        return messages.ack_frame(*got).payload == p  # type: ignore[misc]
    return True


PAYLOAD_DECODERS: list[tuple[str, Callable[[Frame], object]]] = [
    ("hello", messages.decode_hello),
    ("poll", messages.decode_poll),
    ("poll_frames", messages.poll_frames),
    ("recovery", messages.decode_recovery),
    ("epoch", messages.recovery_epoch),
    ("subscribe", messages.decode_subscribe),
    ("ack", messages.decode_ack),
    ("error", messages.decode_error),
    ("records", lambda f: messages.decode_records(f.payload)),
    ("sample", lambda f: messages.decode_sample(f.payload)),
    ("alarm", lambda f: messages.decode_alarm(f.payload)),
    ("health", lambda f: messages.decode_health(f.payload)),
]


def check_payloads(frame: Frame) -> dict[str, str]:
    """Every messages.decode_* on one frame's payload: a value (canonical where the layout is) or
    WireError(E_PAYLOAD); the records of a batch go through the channel payload decoders too."""
    out: dict[str, str] = {}
    for name, fn in PAYLOAD_DECODERS:
        try:
            got = fn(frame)
        except wire.WireError as e:
            if e.code != wire.E_PAYLOAD:
                raise Finding("messages." + name, frame.payload, "WireError code %d" % e.code) from None
            out[name] = "payload"
            continue
        except Exception as e:
            raise Finding("messages." + name, frame.payload, "raised %r" % e) from e
        if not _canonical(name, frame, got):
            raise Finding(
                "messages." + name, frame.payload, "decoded value does not re-encode to the payload"
            )
        out[name] = "ok"
        if name == "records":
            for _, data in got[1]:  # type: ignore[index]
                for sub in ("sample", "alarm", "health"):
                    fn2 = getattr(messages, "decode_" + sub)
                    try:
                        fn2(data)
                    except wire.WireError as e:
                        if e.code != wire.E_PAYLOAD:
                            raise Finding("messages." + sub, data, "WireError code %d" % e.code) from None
                    except Exception as e:
                        raise Finding("messages." + sub, data, "raised %r" % e) from e
    return out


def check_client(pc: client.PollClient, frame: Frame) -> str:
    """PollClient.on_frame (the spec 004 client on answers): a result or WireError only."""
    try:
        kind, _ = pc.on_frame(frame)
    except wire.WireError as e:
        if e.code != wire.E_PAYLOAD:
            raise Finding("PollClient.on_frame", codec.encode(frame), "WireError code %d" % e.code) from None
        return "payload"
    except Exception as e:
        raise Finding("PollClient.on_frame", codec.encode(frame), "raised %r" % e) from e
    return str(kind)


def decode_stream(data: bytes, chunks: list[int], max_frame: int = wire.MAX_FRAME) -> list[object]:
    """StreamDecoder.feed over data cut into the given chunk sizes; checks the decoder's accounting."""
    d = framing.StreamDecoder(max_frame)
    got: list[object] = []
    pos = 0
    i = 0
    try:
        while pos < len(data):
            c = chunks[i % len(chunks)]
            i += 1
            got += d.feed(data[pos : pos + c])
            pos += c
    except Exception as e:
        raise Finding("StreamDecoder.feed", data, "raised %r" % e) from e
    nf = sum(isinstance(x, codec.Frame) for x in got)
    ne = sum(isinstance(x, wire.WireError) for x in got)
    if nf + ne != len(got) or (d.frames, d.errors) != (nf, ne):
        raise Finding("StreamDecoder.feed", data, "items %d frames %d errors %d; decoder counted %d, %d"
                      % (len(got), nf, ne, d.frames, d.errors))  # fmt: skip
    if any(not wire.E_SHORT <= x.code <= wire.E_OVERSIZE for x in got if isinstance(x, wire.WireError)):
        raise Finding("StreamDecoder.feed", data, "an error code outside 1..8")
    return got


def check_stream(data: bytes, must: list[bytes], chunks: list[int]) -> list[object]:
    """Host decoder (cobs package) == device decoder (own unstuffing), and every intact frame out."""
    host = decode_stream(data, chunks)
    saved = framing._unstuff
    framing._unstuff = framing._unstuff_own  # the board's allocation-free decoder, on CPython
    try:
        dev = decode_stream(data, chunks)
    finally:
        framing._unstuff = saved
    key = [x.code if isinstance(x, wire.WireError) else codec.encode(x) for x in host]  # type: ignore[arg-type]
    if key != [x.code if isinstance(x, wire.WireError) else codec.encode(x) for x in dev]:  # type: ignore[arg-type]
        raise Finding("StreamDecoder (host vs device COBS)", data, "the two decoders disagree")
    frames = iter([codec.encode(x) for x in host if isinstance(x, codec.Frame)])
    for f in must:  # a subsequence: intact frames come out, in order
        if not any(g == f for g in frames):
            raise Finding("StreamDecoder.feed", data, "an intact frame after a delimiter was lost")
    return host
