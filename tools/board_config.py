"""A board's config.json checked on the host, as the bridge checks its TOML: an unknown key or a value
of the wrong type or out of range is refused by `leadwire flash` and `leadwire board` before
anything is written, with one line naming the key (``udp.frame``, ``sensors[1].hz``).

The board itself never refuses a config (it says `config: ...; using <default>` on its console and
goes on, docs/firmware.md): this check exists so that a typo does not silently become a default.

The schema is read from the firmware, not written a second time:
  * firmware/lwboot.py's SPEC: the integer settings with their ranges ("path default low high"),
    the udp, serial and sensor settings, the top-level keys and the watchdog;
  * what the board modules (firmware/boards/*.py: serial(c), network(c)) and firmware/wlan.py read
    from their object with ``c.get("key", ...)``: the serial and wlan keys; what firmware/lwsrc.py
    reads from a sensor's "i2c" object (``d.get("key")``, ``d["key"]``).
Those read keys get their types from TYPES below; tests/firmware/test_board_config.py fails when the
firmware reads a key TYPES does not know.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from leadwire.tools.firmware_build import FIRMWARE

# the types of the keys the board modules read (checked against what they read, see above)
TYPES: dict[str, dict[str, type]] = {
    "serial": {"uart": int, "baud": int, "tx": int, "rx": int, "path": str, "dma": bool},
    "wlan": {"ssid": str, "key": str, "tries": int, "wait": int, "country": str},
    "i2c": {"bus": int, "sda": int, "scl": int, "freq": int, "addr": int, "reg": int, "n": int},
}
SOURCE_TYPES = {"adc": int, "call": str}  # a sensor's real source (lwsrc.read); "i2c": an object
LINK_STRINGS = {"udp": ("bind", "host")}  # lwboot reads these strings from the udp object


class BoardConfigError(ValueError):
    """`key` names the setting (``udp.frame``), str() is the whole one-line message."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__("%s: %s" % (key, problem))
        self.key = key


@dataclass(frozen=True)
class IntSetting:
    default: int
    lo: int
    hi: int


@dataclass(frozen=True)
class Schema:
    top: dict[str, Any]  # key -> IntSetting | a nested dict (health, alarm, report) | a kind name
    udp: dict[str, Any]
    serial: dict[str, Any]
    sensor: dict[str, Any]  # IntSetting, or a real source's type (an i2c object: a dict)
    wlan: dict[str, type]
    max_sensors: int


def _ints(part: str) -> dict[str, Any]:
    """A SPEC part "path default low high,..." -> {key: IntSetting} (dotted paths nest)."""
    out: dict[str, Any] = {}
    for item in part.split(","):
        path, d, lo, hi = item.split()
        *parents, leaf = path.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = IntSetting(int(d), int(lo), int(hi))
    return out


def _spec() -> tuple[str, ...]:
    tree = ast.parse((FIRMWARE / "lwboot.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == ["SPEC"]:
            return tuple(ast.literal_eval(node.value).split("|"))  # as lwboot.build splits it
    raise RuntimeError("firmware/lwboot.py has no SPEC")


def _const(name: str) -> int:
    m = re.search(r"^%s = const\((\d+)\)" % name, (FIRMWARE / "lwboot.py").read_text(), re.M)
    if m is None:
        raise RuntimeError("firmware/lwboot.py has no %s" % name)
    return int(m.group(1))


def read_keys(path: Path, functions: tuple[str, ...] = (), var: str = "c") -> set[str]:
    """The keys a firmware module reads from the object named `var` with var.get("key"...) or
    var["key"] (in the named functions, or anywhere)."""
    tree = ast.parse(path.read_text())
    scopes = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in functions]
    out: set[str] = set()
    for scope in scopes if functions else [tree]:
        for n in ast.walk(scope):
            if (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr == "get"
                and isinstance(n.func.value, ast.Name)
                and n.func.value.id == var
                and n.args
                and isinstance(n.args[0], ast.Constant)
            ):
                out.add(n.args[0].value)
            elif (
                isinstance(n, ast.Subscript)
                and isinstance(n.value, ast.Name)
                and n.value.id == var
                and isinstance(n.slice, ast.Constant)
                and isinstance(n.slice.value, str)
            ):
                out.add(n.slice.value)
    return out


def firmware_reads() -> dict[str, set[str]]:
    """The serial and wlan keys the firmware reads (board modules and wlan.py)."""
    boards = sorted((FIRMWARE / "boards").glob("*.py"))
    serial = set().union(*(read_keys(b, ("serial",)) for b in boards))
    wlan = set().union(*(read_keys(b, ("network",)) for b in boards), read_keys(FIRMWARE / "wlan.py"))
    return {"serial": serial, "wlan": wlan, "i2c": read_keys(FIRMWARE / "lwsrc.py", var="d")}


@cache
def schema() -> Schema:
    spec = _spec()
    top = _ints(spec[_const("_SPSET")])
    top.update(_ints(spec[_const("_SPWDT")]))
    # config.json's keys: up to _CADC the top level's (bind and host: the udp object's), then the
    # keys of a sensor's real source up to _CCALL; after those, names that are not keys
    keys = spec[_const("_SPKEYS")].split()
    adc, call = _const("_CADC"), _const("_CCALL")
    for k in keys[:adc]:
        if k not in ("bind", "host"):
            top.setdefault(k, k)
    udp = {**_ints(spec[_const("_SPUDP")]), **dict.fromkeys(LINK_STRINGS["udp"], str)}
    reads = firmware_reads()
    serial = {**_ints(spec[_const("_SPSER")]), **{k: TYPES["serial"][k] for k in reads["serial"]}}
    del serial["port"]  # the serial part's "port 0 0 0" keeps SPEC's shape: a UART has none
    wlan = {k: TYPES["wlan"][k] for k in reads["wlan"]}
    sensor: dict[str, Any] = _ints(spec[_const("_SPSENSOR")])
    for k in keys[adc : call + 1]:
        sensor[k] = {j: TYPES["i2c"][j] for j in reads["i2c"]} if k == "i2c" else SOURCE_TYPES[k]
    return Schema(top, udp, serial, sensor, wlan, 8)


def _type_name(t: type) -> str:
    return {int: "an integer", str: "a string", bool: "true or false"}[t]


def _check_value(where: str, v: Any, s: Any) -> None:
    if isinstance(s, IntSetting):
        if type(v) is not int or not s.lo <= v <= s.hi:
            raise BoardConfigError(
                where, "must be an integer in %d..%d, got %s" % (s.lo, s.hi, json.dumps(v))
            )
    elif isinstance(s, type):
        if type(v) is not s:
            raise BoardConfigError(where, "must be %s, got %s" % (_type_name(s), json.dumps(v)))
    elif isinstance(s, dict):
        _check_object(where + ".", v, s)


def _check_object(where: str, d: Any, spec: dict[str, Any]) -> None:
    name = where.rstrip(".")
    if not isinstance(d, dict):
        raise BoardConfigError(name or "config", "must be a JSON object, got %s" % json.dumps(d))
    for k, v in d.items():
        if k not in spec:
            raise BoardConfigError(where + k, "unknown key (expected one of %s)" % ", ".join(sorted(spec)))
        _check_value(where + k, v, spec[k])


def check(d: Any) -> None:
    """Raise BoardConfigError (one line, naming the key) unless `d` is a config.json object the
    firmware takes as written: known keys, right types, values within range."""
    s = schema()
    simple = {k: v for k, v in s.top.items() if not isinstance(v, str)}
    if not isinstance(d, dict):
        raise BoardConfigError("config", "must be a JSON object, got %s" % type(d).__name__)
    for k, v in d.items():
        if k not in s.top:
            raise BoardConfigError(k, "unknown key (expected one of %s)" % ", ".join(sorted(s.top)))
        if k in simple:
            _check_value(k, v, simple[k])
        elif k in ("udp", "serial"):
            if v is not False:  # false: the link is off
                _check_object(k + ".", v, s.udp if k == "udp" else s.serial)
        elif k == "wlan":
            _check_object("wlan.", v, s.wlan)
        elif k == "sensors":
            _sensors(v, s, d)
        elif k in ("id", "key"):
            if not isinstance(v, str) or not v:
                raise BoardConfigError(k, "must be a non-empty string, got %s" % json.dumps(v))
        elif k == "auth" and not isinstance(v, bool):
            raise BoardConfigError(
                "auth", "must be false (authentication off) or true, got %s" % json.dumps(v)
            )
    health = d.get("health", {}).get("ch", s.top["health"]["ch"].default)
    alarm = d.get("alarm", {}).get("ch", s.top["alarm"]["ch"].default)
    if health == alarm:
        raise BoardConfigError("alarm.ch", "must differ from health.ch (%d)" % health)


def _sensors(v: Any, s: Schema, d: dict[str, Any]) -> None:
    if not isinstance(v, list):
        raise BoardConfigError("sensors", "must be a list of objects, got %s" % json.dumps(v))
    if len(v) > s.max_sensors:
        raise BoardConfigError("sensors", "at most %d sensors, got %d" % (s.max_sensors, len(v)))
    slot = d.get("slot", s.top["slot"].default)
    taken = {
        d.get("health", {}).get("ch", s.top["health"]["ch"].default): "health",
        d.get("alarm", {}).get("ch", s.top["alarm"]["ch"].default): "alarm",
    }
    for i, sensor in enumerate(v):
        where = "sensors[%d]" % i
        _check_object(where + ".", sensor, s.sensor)
        _source(where, sensor, [k for k in s.sensor if not isinstance(s.sensor[k], IntSetting)])
        ch = sensor.get("ch", s.sensor["ch"].default)
        if ch in taken:
            raise BoardConfigError(where + ".ch", "channel %d is taken (%s)" % (ch, taken[ch]))
        taken[ch] = "sensors[%d]" % i
        size = sensor.get("size", s.sensor["size"].default)
        if isinstance(slot, int) and size > slot:
            raise BoardConfigError(where + ".size", "%d is above the slot size (%d)" % (size, slot))


def _source(where: str, sensor: dict[str, Any], kinds: list[str]) -> None:
    """A sensor's real source, as lwsrc.read takes it: one kind, i2c with its address (and sda and
    scl both or neither), call as "module.function"."""
    given = [k for k in kinds if k in sensor]
    if len(given) > 1:
        raise BoardConfigError(where, "give one source of %s, got %s" % (", ".join(kinds), ", ".join(given)))
    i2c = sensor.get("i2c")
    if i2c is not None:
        if "addr" not in i2c:
            raise BoardConfigError(where + ".i2c.addr", "missing: the device's address")
        if ("sda" in i2c) != ("scl" in i2c):
            raise BoardConfigError(where + ".i2c.sda", "give sda and scl both, or neither (the port's pins)")
    call = sensor.get("call")
    if call is not None and "." not in call:
        raise BoardConfigError(where + ".call", 'must be "module.function", got %s' % json.dumps(call))


def check_file(path: str | Path) -> dict[str, Any]:
    """Read and check a config.json file; BoardConfigError (ValueError) names the file and the key."""
    p = Path(path)
    try:
        d = json.loads(p.read_text())
    except (OSError, UnicodeError, ValueError) as e:
        raise BoardConfigError("config %s" % p, str(e)) from None
    try:
        check(d)
    except BoardConfigError as e:
        raise BoardConfigError("config %s: %s" % (p, e.key), str(e).partition(": ")[2]) from None
    return d
