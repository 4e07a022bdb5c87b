"""Write the golden vectors in this folder from the CPython host implementations.

The JSON files are committed; tests/core/test_vectors.py checks that this script still produces
them byte for byte, and tests/mpy/core_runner.py checks the device implementations against them.
Run: python tests/vectors/make_vectors.py
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
from pathlib import Path

import crcmod.predefined
from cobs import cobs

from leadwire import auth, auth_host, codec, device, frames, messages, wire
from leadwire.lead import LeadTracker
from leadwire.ring_host import HostRing

HERE = Path(__file__).parent
crc = crcmod.predefined.mkCrcFun("crc-ccitt-false")


def crc_vectors() -> list[dict]:
    rng = random.Random(16)
    datas = [b"", b"123456789", b"\x00", b"\xff" * 4, bytes(range(256))]
    datas += [rng.randbytes(rng.randrange(1, 300)) for _ in range(10)]
    return [{"data": d.hex(), "crc": crc(d)} for d in datas]


def cobs_vectors() -> list[dict]:
    rng = random.Random(17)
    datas = [
        b"",
        b"\x00",
        b"\x00\x00",
        b"\x11\x22\x00\x33",
        b"\x11\x00\x00\x00",
        b"\x01" * 253,
        b"\x01" * 254,
    ]
    datas += [b"\x01" * 255, b"\x00" + b"\x01" * 254 + b"\x00", bytes(range(256)) * 2]
    datas += [
        bytes(rng.choice([0, 0, rng.randrange(256)]) for _ in range(rng.randrange(1, 700))) for _ in range(8)
    ]
    return [{"raw": d.hex(), "encoded": (cobs.encode(d) + b"\x00").hex()} for d in datas]


def frame_vectors() -> list[dict]:
    hello = messages.Hello(0xDEADBEEF, 256, 64, 1024, 7, "esp32-a1b2", "0.1.0", "esp32")
    fs = [
        messages.hello_request(),
        messages.hello_frame(hello),
        messages.poll_frame(0xFFFFFFFF, 32, 1400),
        codec.Frame(wire.EVENTS, 0, messages.encode_records([(1, b"\x00\x01"), (2, b"")], backlog=5)),
        codec.Frame(wire.NO_EVENT, 12345),
        messages.recovery_frame(0xFFFFFFF0, 0x10),
        messages.subscribe_frame([3, 1, 2]),
        codec.Frame(wire.NOTIFY, 1, b"report", channel=9, priority=5, flags=0, message_id=200, index=3),
        messages.ack_frame(1, 200, channel=9),
        codec.Frame(wire.CLOSE, 0, b"", channel=9, priority=3, message_id=201),
        messages.error_frame(400, "bad poll"),
        codec.Frame(wire.EVENTS, 7, bytes(2047)),
    ]
    out = []
    for f in fs:
        out.append(
            {
                "type": f.type,
                "seq": f.seq,
                "payload": f.payload.hex(),
                "channel": f.channel,
                "priority": f.priority,
                "flags": f.flags,
                "message_id": f.message_id,
                "index": f.index,
                "encoded": codec.encode(f).hex(),
            }
        )
    return out


def bad_frame_vectors() -> list[dict]:
    good = bytearray(codec.encode(codec.Frame(wire.NO_EVENT, 5)))
    cases = {"short": bytes(good[:11]), "empty": b""}
    v = bytearray(good)
    v[0] = (2 << 5) | wire.NO_EVENT
    cases["version"] = bytes(v)
    t = bytearray(good)
    t[0] = (1 << 5) | 31
    cases["type"] = bytes(t)
    cases["length"] = bytes(good + b"\x00")
    c = bytearray(good)
    c[7] ^= 0x10
    cases["crc"] = bytes(c)
    codes = {
        "short": wire.E_SHORT,
        "empty": wire.E_SHORT,
        "version": wire.E_VERSION,
        "type": wire.E_TYPE,
        "length": wire.E_LENGTH,
        "crc": wire.E_CRC,
    }
    return [{"name": k, "data": d.hex(), "code": codes[k]} for k, d in cases.items()]


def ring_vectors() -> list[dict]:
    """Scenarios: appends then polls, with the exact answer frame bytes (batched answers)."""
    scenarios = []
    for name, cap, start, n_events, slot in [
        ("wrap", 8, 0xFFFFFFFC, 6, 16),
        ("overrun", 4, 100, 11, 8),
        ("empty", 4, 7, 0, 8),
        ("single", 1, 0, 3, 4),
    ]:
        r = HostRing(cap, start=start, slot_size=slot)
        appends = []
        for i in range(n_events):
            data = bytes([i]) * (i % (slot + 1))
            appends.append({"channel": i % 3, "data": data.hex()})
            r.write(data, i % 3)
        polls = []
        probes = {
            start - 1,
            start,
            start + 1,
            r.newest(),
            r.newest() - 1,
            r.oldest() - 1,
            r.oldest() - 2,
            0,
            0x80000000,
        }
        for n in sorted(p & 0xFFFFFFFF for p in probes):
            for me, mb in [(1, 2047), (3, 2047), (255, 20)]:
                buf = bytearray(wire.OVERHEAD + 2047)
                size = r.answer_into(buf, n >> 16, n & 0xFFFF, me, mb)
                polls.append({"n": n, "max_events": me, "max_bytes": mb, "answer": bytes(buf[:size]).hex()})
        scenarios.append(
            {
                "name": name,
                "capacity": cap,
                "start": start,
                "slot_size": slot,
                "appends": appends,
                "polls": polls,
            }
        )
    return scenarios


def ring_burst_vectors() -> list[dict]:
    """Burst answers (docs/protocol.md 4.2) as the reference device sends them, one per line: up to
    max_frames frames, each from the last offset of the one before while the ring holds more; with
    follow a RECOVERY that leaves a frame goes without F_LAST and the burst goes on from n0 - 1
    (section 5). ring.json's scenarios, each with a poll answered RECOVERY (follow off and on) and
    one answered EVENTS (follow on: the same burst as without)."""
    out = []
    for sc in ring_vectors():
        r = HostRing(sc["capacity"], start=sc["start"], slot_size=sc["slot_size"])
        for a in sc["appends"]:
            r.write(bytes.fromhex(a["data"]), a["channel"])
        kinds = {}
        for p in sc["polls"]:
            kinds.setdefault(int(p["answer"][:2], 16) & 0x1F, p["n"])
        cases = []
        if wire.RECOVERY in kinds:
            cases += [(kinds[wire.RECOVERY], False), (kinds[wire.RECOVERY], True)]
        if wire.EVENTS in kinds:
            cases.append((kinds[wire.EVENTS], True))
        for n, follow in cases:
            k = 4
            frames = [f.hex() for f in r.burst(n, 3, 2047, 0, k, follow)]
            poll = codec.encode(messages.poll_frame(n, 3, 2047, 0, k, follow)).hex()
            out.append({"name": sc["name"], "capacity": sc["capacity"], "start": sc["start"],
                        "slot_size": sc["slot_size"], "appends": sc["appends"], "n": n, "max_events": 3,
                        "max_bytes": 2047, "max_frames": k, "follow": follow, "poll": poll,
                        "answers": frames})  # fmt: skip
    return out


def lead_vectors() -> list[dict]:
    # spec 000's worked examples (messages 10..14), as arrival orders
    cases = {
        "nominal": [10, 11, 12, 13, 14],
        "out_of_order": [10, 11, 13, 12, 14],
        "duplicate": [10, 11, 11, 12, 13, 14],
        "delayed_duplicate": [10, 11, 12, 13, 11, 14],
        "lost": [10, 11, 13, 14],
        "wrap": [0xFFFFFFFE, 0xFFFFFFFF, 0, 2, 1],
    }
    out = []
    for name, seqs in cases.items():
        t = LeadTracker()
        out.append({"name": name, "arrivals": seqs, "leads": [t.lead("s", 0, s) for s in seqs]})
    return out


def queue_vectors() -> list[dict]:
    """Operations on a FrameQueue and the exact transmission order they give."""

    def run(frame_size: int, ops: list[list]) -> list[str]:
        q = frames.FrameQueue(frame_size)
        names: dict[int, str] = {}
        for op in ops:
            if op[0] == "post":
                names[q.post(op[2].encode(), op[3])] = op[1]
            elif op[0] == "close":
                q.close(op[1])
        sent = []
        while (f := q.pop()) is not None:
            sent.append("CLOSE" if f.is_close else "%s%d" % (names[f.message_id], f.index + 1))
        return sent

    cases = [
        ("spec_002_priority", 4, [["post", "A", "aaaabbbbcccc", 0], ["post", "B", "ddddeeee", 5]]),
        ("spec_002_close", 4, [["post", "A", "aaaabbbbcccc", 0], ["post", "B", "ddddeeee", 5], ["close", 3]]),
        (
            "fifo_same_priority",
            2,
            [["post", "A", "aaaa", 1], ["post", "B", "bbbb", 1], ["post", "C", "c", 1]],
        ),
        ("lower_goes_last", 2, [["post", "A", "aaaa", 4], ["post", "B", "bbbb", 1]]),
        ("close_fifo_equal", 2, [["post", "A", "aaaa", 2], ["post", "B", "bbbb", 2], ["close", 2]]),
        (
            "mixed",
            3,
            [
                ["post", "A", "aaaaaa", 0],
                ["post", "B", "bbb", 2],
                ["post", "C", "cccccc", 7],
                ["post", "D", "d", 2],
            ],
        ),
    ]
    return [{"name": n, "frame_size": fs, "ops": ops, "sent": run(fs, ops)} for n, fs, ops in cases]


def auth_vectors() -> list[dict]:
    """HMAC tags from the standard library's hmac (the reference the device's auth.Key must match),
    then one signed session: each step is the frame one end sends and the code the other end's
    check returns (wire.OK, E_AUTH, E_REPLAY, E_UNSIGNED, or auth.HINT)."""
    rng = random.Random(19)
    out: list[dict] = []
    for klen, dlen in [(16, 0), (32, 1), (32, 300), (64, 64), (65, 10), (100, 700)]:
        key, ctx, data = rng.randbytes(klen), rng.randbytes(13), rng.randbytes(dlen)
        tag = hmac.new(key, ctx + data, hashlib.sha256).digest()[: auth.TAG_SIZE]
        out.append({"kind": "tag", "key": key.hex(), "ctx": ctx.hex(), "data": data.hex(), "tag": tag.hex()})
    key = bytes(range(1, 33))
    epoch = 0x8000FFFE
    dev, host = auth.Endpoint(key, auth.TO_HOST), auth_host.HostEndpoint(key)
    hello = messages.Hello(epoch, 256, 16, 1024, 7, "vec-1", "0.1.0", "unix", session=0)

    def signed(frame: codec.Frame, how: str, ep: auth.Endpoint) -> bytes:
        b = bytearray(codec.encode(frame)) + bytearray(auth.AUTH_SIZE)
        n = len(b) - auth.AUTH_SIZE
        if how == "hello_req":
            m = ep.host_sign_hello(b, n)
        elif how == "dev_hello":
            m = ep.device_sign_hello(b, n, epoch >> 16, epoch & 0xFFFF)
        else:
            m = ep.sign_into(b, n)
        return bytes(b[:m])

    steps: list[dict] = []

    def send(data: bytes, to: str, what: str, by: str | None = None, how: str | None = None) -> None:
        ep = dev if to == "device" else host
        b = bytearray(data)
        if b[0] & 0x1F != wire.HELLO:
            code = ep.verify(b, len(b))
        elif to == "device":
            code = ep.device_hello(b, len(b), epoch >> 16, epoch & 0xFFFF)
        else:
            code = ep.host_hello(b, len(b))
        step = {"to": to, "what": what, "frame": data.hex(), "code": code}
        if by:
            step["sign"] = how
        steps.append(step)

    def make(frame: codec.Frame, how: str, to: str, what: str) -> bytes:
        data = signed(frame, how, host if to == "device" else dev)
        send(data, to, what, "x", how)
        return data

    hello_frame = messages.hello_frame
    make(hello_frame(hello), "dev_hello", "host", "boot hello: a hint")
    make(messages.poll_frame(5, 10), "data", "device", "poll before any handshake")
    make(codec.Frame(wire.HELLO, 0x1234ABCD, b"", message_id=3), "hello_req", "device", "hello request")
    hello.session = 1
    answer = make(hello_frame(hello, tag=3), "dev_hello", "host", "hello answer")
    send(answer, "host", "hello answer again")
    polls = [signed(messages.poll_frame(100 + i, 10, tag=i), "data", host) for i in range(4)]
    for i in (1, 0, 3, 2):  # signed in order 0..3, delivered reordered: the window takes them
        send(polls[i], "device", "poll %d (reordered)" % i)
    send(polls[2], "device", "poll 2 replayed")
    answers = [make(messages.recovery_frame(1, 2 + i, epoch, tag=i), "data", "host", "answer %d" % i)
               for i in range(3)]  # fmt: skip
    send(answers[1], "host", "answer 1 replayed")
    forged = bytearray(answers[0])
    forged[12] ^= 0x40
    wire.seal(forged, len(forged) - wire.OVERHEAD)
    send(bytes(forged), "host", "forged answer (payload changed, CRC right)")
    send(codec.encode(messages.poll_frame(9, 10)), "device", "unsigned poll")
    wrong = auth_host.HostEndpoint(bytes(32))
    wrong.send_lo = 9
    send(signed(messages.poll_frame(9, 10), "data", wrong), "device", "wrong key")
    req2 = codec.Frame(wire.HELLO, 0x0BADCAFE, b"", message_id=4)
    make(req2, "hello_req", "device", "second hello request")
    send(polls[3], "device", "poll of the old session")
    hello.session = 2
    make(hello_frame(hello, tag=4), "dev_hello", "host", "second hello answer")
    send(answers[2], "host", "answer of the old session")
    make(messages.poll_frame(7, 10), "data", "device", "poll of the new session")
    out.append({"kind": "session", "key": key.hex(), "epoch": epoch, "steps": steps})
    return out


# a link record's slots that device.respond reads (the firmware's: lwboot.link)
LINK = {"tx": 2, "hello": 11, "ep": 15, "lim": 16, "lastp": 17, "size": 18}


def responder_vectors() -> list[dict]:
    """device.respond, the device's answering rules (docs/protocol.md 5, 9; the order of the checks
    is device.py's header), auth off and on: each step is a frame the device receives on one link,
    the result (>= 0: answered, the frames dropped; -1 bad, -2 refused by auth, -3 a copy, -4 the
    caller's) and the frames it sends, signed with auth (every frame a link sends is, as the
    firmware's). Auth on, hint() is 1 while the link has no session (the firmware's limit of one
    per 250 ms is not part of the rule). At the end, the endpoint's rejects: forged, replayed,
    unsigned."""
    return [_responder_scenario(None), _responder_scenario(bytes(range(1, 33)))]


def _responder_scenario(key: bytes | None) -> dict:
    epoch = 0x8000FFFE
    r = HostRing(8, start=0xFFFFFFFC, slot_size=8, epoch=epoch)
    appends = []
    for i in range(6):
        data = bytes([i + 1]) * (2 + i % 5)
        appends.append({"channel": 1 + i % 2, "data": data.hex()})
        r.write(data, 1 + i % 2)
    a = 0 if key is None else wire.AUTH_SIZE
    hello = codec.encode(
        messages.hello_frame(
            messages.Hello(epoch, 8, 8, 128, 3, "vec-2", "0.1.0", "unix", 0 if key else None)
        )
    )
    L: list = [None] * LINK["size"]
    L[LINK["tx"]] = bytearray(128 + a)
    L[LINK["hello"]] = hello
    L[LINK["lim"]] = 128 - wire.OVERHEAD - a
    L[LINK["lastp"]] = -1
    ep = auth.Endpoint(key or bytes(16), auth.TO_HOST)
    host = auth_host.HostEndpoint(key or bytes(16))
    if key is not None:
        L[LINK["ep"]] = [ep.verify, ep.sign_into, ep.device_hello, ep.device_sign_hello, None,
                         epoch >> 16, epoch & 0xFFFF, ep, lambda: 0 if ep.live else 1]  # fmt: skip
    sent: list[bytes] = []
    steps: list[dict] = []

    def d(L: list, b: bytearray, n: int, a: object) -> int:
        A = L[LINK["ep"]]
        if A is not None and not b[1] & (wire.F_AUTH << 4):
            n = A[1](b, n)
        sent.append(bytes(b[:n]))
        return 0

    def step(what: str, data: bytes) -> list[bytes]:
        del sent[:]
        res = device.respond(L, data, len(data), None, r, d)
        steps.append({"what": what, "frame": data.hex(), "result": res, "answers": [b.hex() for b in sent]})
        return list(sent)

    def signed(frame: codec.Frame, by: auth_host.HostEndpoint = host) -> bytes:
        b = bytearray(codec.encode(frame)) + bytearray(wire.AUTH_SIZE)
        n = len(b) - wire.AUTH_SIZE
        return bytes(b[: by.host_sign_hello(b, n) if frame.type == wire.HELLO else by.sign_into(b, n)])

    def poll(back: int, me: int, tag: int, k: int = 1, follow: bool = False) -> codec.Frame:
        return messages.poll_frame((r.newest() - back) & 0xFFFFFFFF, me, 2047, tag, k, follow)

    enc = codec.encode
    if key is None:
        step("POLL: answered", enc(poll(3, 2, 1)))
        step("the same POLL again: a copy, not answered", enc(poll(3, 2, 1)))
        step("another max_events, the same tag and n: a copy", enc(poll(3, 1, 1)))
        step("the next tag, the same n: answered", enc(poll(3, 2, 2)))
        step(
            "a burst with follow from far away: RECOVERY, then the events from n0",
            enc(poll(100, 1, 3, 4, True)),
        )
        step("HELLO request: answered with its tag, the last POLL forgotten", enc(messages.hello_request(5)))
        step("the POLL answered before the HELLO: answered", enc(poll(3, 2, 2)))
        step("a signed POLL with auth off: bad", signed(poll(1, 1, 6)))
        step(
            "a POLL with a 3-byte payload: bad", enc(codec.Frame(wire.POLL, 5, b"\x00\x01\x00", message_id=7))
        )
        bad = bytearray(enc(poll(2, 1, 8, 2)))
        bad[14] = 0
        wire.seal(bad, 5)
        step("a burst POLL with max_frames 0: bad, nothing sent", bytes(bad))
        step("the same tag and n, max_frames 2: answered (a bad POLL is not recorded)", enc(poll(2, 1, 8, 2)))
        step("a HELLO request with a payload: bad", enc(codec.Frame(wire.HELLO, 0, b"\x01", message_id=9)))
        step("SUBSCRIBE: the caller's", enc(messages.subscribe_frame([1], tag=10)))
        step("ACK: the caller's", enc(messages.ack_frame(1, 200, channel=1)))
    else:
        step("a signed POLL before any handshake: refused (forged: no session), the boot HELLO sent",
             signed(poll(1, 1, 1)))  # fmt: skip
        step(
            "an unsigned HELLO request: refused (unsigned), the boot HELLO sent",
            enc(messages.hello_request(2)),
        )
        (ans,) = step("a signed HELLO request: a session, the HELLO signed with K = 1",
                      signed(codec.Frame(wire.HELLO, 0x1234ABCD, b"", message_id=3)))  # fmt: skip
        assert host.host_hello(bytearray(ans), len(ans)) == wire.OK
        p4 = signed(poll(3, 2, 4))
        step("a signed POLL: answered, signed", p4)
        step("the same bytes again: refused (replayed) before the copy rule", p4)
        forged = bytearray(signed(poll(3, 2, 5)))
        forged[11] ^= 1
        wire.seal(forged, len(forged) - wire.OVERHEAD)
        step("a forged POLL (payload changed, CRC right): refused", bytes(forged))
        step("an unsigned POLL: refused", enc(poll(3, 2, 5)))
        step("the POLL answered, signed again (a new counter): a copy, not answered", signed(poll(3, 2, 4)))
        step("the next tag: answered", signed(poll(2, 1, 6)))
        old = signed(poll(1, 1, 7))  # signed in session 1, sent once session 2 began
        step(
            "a burst POLL with max_frames 33: bad",
            signed(codec.Frame(wire.POLL, 5, b"\0\1\7\xff\x21", message_id=8)),
        )
        step("a signed ACK: the caller's", signed(messages.ack_frame(1, 200, channel=1)))
        (ans,) = step("a second HELLO request: a new session (K = 2), the last POLL forgotten",
                      signed(codec.Frame(wire.HELLO, 0x0BADCAFE, b"", message_id=9)))  # fmt: skip
        assert host.host_hello(bytearray(ans), len(ans)) == wire.OK
        step("the POLL of tag 6 again, in the new session: answered", signed(poll(2, 1, 6)))
        step("a POLL of the session before: refused (replayed)", old)
    return {"name": "auth on" if key else "auth off", "key": key.hex() if key else None, "epoch": epoch,
            "capacity": 8, "start": 0xFFFFFFFC, "slot_size": 8, "appends": appends, "hello": hello.hex(),
            "frame": 128, "steps": steps, "rejects": [ep.forged, ep.replayed, ep.unsigned]}  # fmt: skip


ALL = {
    "crc16.json": crc_vectors,
    "cobs.json": cobs_vectors,
    "frames.json": frame_vectors,
    "bad_frames.json": bad_frame_vectors,
    "ring.json": ring_vectors,
    "ring_bursts.json": ring_burst_vectors,
    "lead.json": lead_vectors,
    "frame_queue.json": queue_vectors,
    "auth.json": auth_vectors,
    "responder.json": responder_vectors,
}


def render(name: str) -> str:
    """A JSON array with one element per line, so a 64 KB board can stream it line by line."""
    items = [json.dumps(item, separators=(",", ":")) for item in ALL[name]()]
    return "[\n" + ",\n".join(items) + "\n]\n"


if __name__ == "__main__":
    for name in ALL:
        (HERE / name).write_text(render(name))
        print("wrote", HERE / name)
