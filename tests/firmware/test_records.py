"""The firmware's records and frame sizes are defined once.

The firmware keeps its settings, links, sensors, health counters and auth endpoints in lists
indexed by `_NAME = const(n)` names (underscore consts cost no RAM and no qstr on a board, but
are visible only in the module that defines them), so each module that indexes a record repeats
the lines it uses. These tests read those lines from the sources (ast, nothing is imported) and
fail when:

- two files give one name different values (a slot or a size that moved in one file only);
- a record's slots are not 0..n-1, each once, or its length constant disagrees;
- a factory (lwboot.link, lwauth.link, the sensor record in lwboot._attempt) leaves a slot unset;
- a record is indexed with a bare number (`k[15]`, `L[11]`, `h[12]`) instead of its name;
- a frame size or header position the firmware copies disagrees with shared/leadwire/wire.py,
  and wire's sizes disagree with frames the core encodes (messages, codec, auth).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from leadwire import auth_host, codec, messages, wire

ROOT = Path(__file__).resolve().parents[2]
FIRMWARE = sorted((ROOT / "firmware").glob("*.py")) + sorted((ROOT / "firmware" / "boards").glob("*.py"))
# the core's device modules that index the firmware's records (a link; the auth list)
FIRMWARE += [ROOT / "shared" / "leadwire" / "device.py"]

# Each record's slots in order, and the name of its length constant (None: no such constant).
# Names are unique across the firmware: a name means one value in every file.
RECORDS: dict[str, tuple[list[str], str | None]] = {
    "settings": (
        (
            "_RING _SLOT _TICK _HCH _HMS _ACH _APRIO _AMS _AGAP _RMS _RBYTES _RTO _RPRIO _CPRIO "
            "_NBOOT _KEY _WDT"
        ).split(),
        None,
    ),
    "link": (
        "_IO _UDP _TX _MV _Q _GAP _NEXT _SUBS _OWN _RAW _PEER _HELLO _RB _CB _DEC _EP _LIM _LASTP".split(),
        "_NLINK",
    ),
    "sensor": ("_SCH _SPER _SSIZE _SDUE _SNUM _SBUF _SREAD".split(), "_NSENSOR"),
    "health": (
        (
            "_BOOTS _CAUSE _UP _FREE _LOW _OVER _DROP _BAD _OVERFLOW _ALARMS _ALAST _RESTARTS "
            "_FORGED _REPLAYED _UNSIGNED"
        ).split(),
        "_NHEALTH_AUTH",
    ),
    "auth": ("_AVER _ASIGN _AHELLO _ASHELLO _AREJ _AEH _AEL _AEP _AHINT".split(), "_NAUTH"),
    "session": ("_RS _BODY _END _K _SENT _DEAD _DUE _CH _PRIO _EVERY".split(), None),
    # lwboot's own: the boot's state, a link's settings
    "boot state": ("_STHOLD _STCONF _STBOOT _STKEY".split(), None),
    "link settings": ("_LKEY _LCONF _LPORT _LFRAME _LGAP".split(), None),
}
# factories: (file, function, the list variable it fills, record)
FACTORIES = [
    ("lwboot.py", "link", "L", "link"),
    ("lwboot.py", "_attempt", "s", "sensor"),
    ("lwauth.py", "link", "A", "auth"),
]
# the variables that hold a record in the firmware (k settings, L link, h health, A auth list,
# st lwboot's boot state, x a link's settings in lwboot); s is a sensor or a session
RECORD_VARS = {"k", "L", "h", "A", "s", "st", "x"}
# the firmware's copies of wire's constants (a module attribute lookup per frame otherwise)
WIRE_COPIES = {
    "_OVERHEAD": wire.OVERHEAD,
    "_AUTH_SIZE": wire.AUTH_SIZE,
    "_POLL_SIZE": wire.POLL_SIZE,
    "_POLL_BURST_SIZE": wire.POLL_BURST_SIZE,
    "_ACK_SIZE": wire.ACK_SIZE,
    "_AUTH_BIT": wire.F_AUTH << 4,
    "_HELLO_TYPE": wire.HELLO,
    "_POLL_TYPE": wire.POLL,
}


def consts(path: Path) -> dict[str, int]:
    """The module-level `_NAME = const(expr)` lines of one source file, evaluated in order (an
    expression may use the consts above it)."""
    out: dict[str, int] = {}
    for node in ast.parse(path.read_text()).body:
        if not (isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Call)):
            continue
        target = node.targets[0] if isinstance(node, ast.Assign) else node.target
        call = node.value
        if isinstance(call.func, ast.Name) and call.func.id == "const" and isinstance(target, ast.Name):
            expr = ast.Expression(call.args[0])
            out[target.id] = eval(compile(expr, str(path), "eval"), {"__builtins__": {}}, dict(out))
    return out


def all_consts() -> dict[str, dict[str, int]]:
    """name -> {file: value} over the firmware."""
    seen: dict[str, dict[str, int]] = {}
    for p in FIRMWARE:
        for name, v in consts(p).items():
            seen.setdefault(name, {})[str(p.relative_to(ROOT))] = v
    return seen


def test_every_name_has_one_value_in_every_file() -> None:
    differ = {n: where for n, where in all_consts().items() if len(set(where.values())) > 1}
    assert not differ, "firmware files disagree about these consts: %r" % differ


def test_the_parser_sees_the_records() -> None:
    # (a parser that found nothing would pass everything above)
    seen = all_consts()
    assert seen["_EP"] == {
        "firmware/lwagent.py": 15,
        "firmware/lwauth.py": 15,
        "firmware/lwboot.py": 15,
        "shared/leadwire/device.py": 15,
    }
    assert seen["_RESTARTS"] == {"firmware/lwagent.py": 11, "firmware/wlan.py": 11}
    assert seen["_KEY"] == {"firmware/lwagent.py": 15, "firmware/lwauth.py": 15, "firmware/lwboot.py": 15}


@pytest.mark.parametrize("record", list(RECORDS))
def test_a_record_is_its_slots_in_order(record: str) -> None:
    names, length = RECORDS[record]
    seen = all_consts()
    missing = [n for n in names if n not in seen]
    assert not missing, "%s: slots no file defines: %s" % (record, missing)
    values = [next(iter(seen[n].values())) for n in names]
    assert values == list(range(len(names))), "%s slots: %r" % (record, dict(zip(names, values, strict=True)))
    if length is not None:
        assert {v for v in seen[length].values()} == {len(names)}, (length, seen[length])


def test_health_lengths() -> None:
    seen = all_consts()
    # the health record without auth ends before the auth rejects
    assert next(iter(seen["_NHEALTH"].values())) == next(iter(seen["_FORGED"].values()))


def _function(file: str, name: str) -> ast.FunctionDef:
    tree = ast.parse((ROOT / "firmware" / file).read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AssertionError("no function %s in firmware/%s" % (name, file))


def _assigned_slots(fn: ast.FunctionDef, var: str) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(fn):
        if not isinstance(node, ast.Assign):
            continue
        for t in node.targets:
            for e in t.elts if isinstance(t, ast.Tuple) else [t]:
                if (
                    isinstance(e, ast.Subscript)
                    and isinstance(e.value, ast.Name)
                    and e.value.id == var
                    and isinstance(e.slice, ast.Name)
                ):
                    out.add(e.slice.id)
    return out


@pytest.mark.parametrize("file,fn,var,record", FACTORIES)
def test_a_factory_sets_every_slot(file: str, fn: str, var: str, record: str) -> None:
    names, _ = RECORDS[record]
    unset = set(names) - _assigned_slots(_function(file, fn), var)
    assert not unset, "firmware/%s %s() leaves %s slots unset: %s" % (file, fn, record, sorted(unset))


def test_no_record_is_indexed_with_a_bare_number() -> None:
    raw = []
    for p in FIRMWARE:
        for node in ast.walk(ast.parse(p.read_text())):
            if (
                isinstance(node, ast.Subscript)
                and isinstance(node.value, ast.Name)
                and node.value.id in RECORD_VARS
                and isinstance(node.slice, ast.Constant)
                and isinstance(node.slice.value, int)
            ):
                raw.append("%s:%d %s" % (p.relative_to(ROOT), node.lineno, ast.unparse(node)))
    assert not raw, "index these records by their const() names: %s" % raw


# -- frame sizes and header positions: the firmware's copies, wire, and frames the core encodes


@pytest.mark.parametrize("name", list(WIRE_COPIES))
def test_firmware_copies_of_wire_constants_agree(name: str) -> None:
    where = all_consts().get(name)
    assert where, "no firmware file defines %s" % name
    assert set(where.values()) == {WIRE_COPIES[name]}, "%s: %r, wire says %d" % (
        name,
        where,
        WIRE_COPIES[name],
    )


def test_wire_sizes_are_the_encoded_frames() -> None:
    poll = codec.encode(messages.poll_frame(7, 3, 200, tag=5))
    burst = codec.encode(messages.poll_frame(7, 3, 200, tag=5, max_frames=9))
    ack = codec.encode(messages.ack_frame(0x12345, 413, channel=6, tag=4))
    hello = codec.encode(messages.hello_request(tag=2))
    assert len(poll) == wire.POLL_SIZE == wire.HEADER_SIZE + 4 + wire.CRC_SIZE
    assert len(burst) == wire.POLL_BURST_SIZE
    assert len(ack) == wire.ACK_SIZE == wire.HEADER_SIZE + 2 + wire.CRC_SIZE
    assert len(hello) == wire.OVERHEAD
    signed = bytearray(hello) + bytes(wire.AUTH_SIZE)
    n = auth_host.HostEndpoint(bytes(range(32))).host_sign_hello(signed, len(hello))
    assert n == wire.OVERHEAD + wire.AUTH_SIZE and wire.check(signed, n) == wire.OK


def test_firmware_header_positions_read_the_encoded_frames() -> None:
    agent = consts(ROOT / "firmware" / "lwagent.py")
    ack = codec.encode(messages.ack_frame(0x12345, 413, channel=6, tag=4))
    assert ack[agent["_CH_AT"]] == 6 and ack[agent["_TAG_AT"]] == 4 == wire.tag(ack)
    for t, f in [
        (wire.POLL, codec.encode(messages.poll_frame(7, 3, 200, tag=5, max_frames=9))),
        (wire.ACK, ack),
        (wire.HELLO, codec.encode(messages.hello_request(tag=2))),
        (wire.SUBSCRIBE, codec.encode(messages.subscribe_frame([1, 2], tag=3))),
    ]:
        assert f[0] & agent["_TYPE_BITS"] == t == wire.frame_type(f)
        assert not f[1] & agent["_AUTH_BIT"]
    hello = codec.encode(messages.hello_request(tag=2))
    signed = bytearray(hello) + bytes(wire.AUTH_SIZE)
    auth_host.HostEndpoint(bytes(range(32))).host_sign_hello(signed, len(hello))
    assert signed[1] & agent["_AUTH_BIT"] and (signed[1] >> 4) & wire.F_AUTH


def test_the_poll_key_is_the_tag_and_the_low_half_of_n() -> None:
    """messages.poll_key (the copy rule, docs/protocol.md 5) and the responder's copy (device.py)."""
    src = (ROOT / "shared" / "leadwire" / "device.py").read_text()
    assert "k = (b[_TAG_AT] << 16) | (b[8] << 8) | b[9]" in src
    for n, tag in [(0, 0), (0x12345678, 5), (0xFFFFFFFF, 255), (0x0001FFFF, 1)]:
        for k in (1, 9):
            f = codec.encode(messages.poll_frame(n, 3, 200, tag=tag, max_frames=k))
            assert messages.poll_key(f) == (tag << 16) | (n & 0xFFFF) == (f[3] << 16) | (f[8] << 8) | f[9]
    assert messages.poll_key(codec.encode(messages.poll_frame(0xFFFFFFFF, 1, 1, tag=255))) < 2**24
