"""The bridge's TOML configuration: parsed and checked completely before anything is opened.

Every problem is a :class:`ConfigError` naming the key (``device[3].udp``) and the problem in one
line; the CLI prints it and exits 2 without creating the store, the log or the metrics socket.
The reference is docs/bridge.md ("Configuration reference") and docs/examples/bridge.toml.

Each setting's TOML key, default and range (or choices) is written once, on its dataclass field
(:func:`_setting`); :func:`parse` reads them from there (:func:`settings`), and so does the test
that docs/bridge.md and docs/examples/bridge.toml agree with the code (tests/bridge/test_config.py).
"""

from __future__ import annotations

import math
import os
import tomllib
import zlib
from dataclasses import Field, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .mqtt_forward import MqttConfig


class ConfigError(Exception):
    """A bad configuration: `key` names the setting, `problem` says what is wrong."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__("%s: %s" % (key, problem))
        self.key = key
        self.problem = problem


def _setting(
    default: Any,
    section: str,
    limits: tuple[float, float] | None = None,
    key: str = "",
    choices: tuple[str, ...] = (),
    quoted: bool = True,
    lower: bool = False,
) -> Any:
    """A dataclass field that is the TOML setting `section`.`key` (`key` defaults to the field's
    name; section "device" is a [[device]] table): its default, the range of a number, the allowed
    strings (`quoted` in the error message; `lower`: the value is lower-cased first)."""
    meta = {
        "section": section,
        "key": key,
        "range": limits,
        "choices": choices,
        "quoted": quoted,
        "lower": lower,
    }
    return field(default=default, metadata=meta)


def settings(cls: type) -> list[tuple[str, str, Field[Any]]]:
    """(section, key, field) of every TOML setting of a config dataclass, in field order."""
    return [(f.metadata["section"], f.metadata["key"] or f.name, f) for f in fields(cls) if f.metadata]


_P = "polling"


@dataclass(frozen=True)
class PollConfig:
    interval: float = _setting(0.1, _P, (0.0, 3600.0))  # initial (without `adaptive`: fixed) interval, s
    interval_min: float = _setting(0.005, _P, (0.0, 3600.0))
    interval_max: float = _setting(1.0, _P, (0.0, 3600.0))
    adaptive: bool = _setting(True, _P)
    batch: int = _setting(64, _P, (1, 255))  # max_events in a POLL
    max_bytes: int = _setting(1400, _P, (16, 2047))  # max payload bytes in an answer (one Ethernet MTU)
    # answer frames per POLL (a burst, docs/protocol.md); >1 needs burst-aware devices
    frames: int = _setting(1, _P, (1, 32))
    # with frames > 1: the next POLL goes out from a burst's predicted end
    pipeline: bool = _setting(True, _P)
    # with frames > 1: a RECOVERY answer goes on with the events from n0 in the same burst (a device
    # of this release: docs/protocol.md 5), instead of a round trip later
    follow: bool = _setting(True, _P)
    # on a UDP link that lost datagrams lately (auth off): every POLL twice; the device answers one
    copies: bool = _setting(True, _P)
    # ceiling of the retransmission timeout (RTO, rtt.py) and the RTO before a sample
    timeout: float = _setting(0.25, _P, (0.001, 60.0))
    # floor of the RTO (a serial link's floor is at least its line time, rtt.py)
    rto_min: float = _setting(0.1, _P, (0.0, 60.0))
    backoff_max: float = _setting(5.0, _P, (0.001, 3600.0))  # bound of the backoff after transport errors
    # periodic HELLO: catches restarts of devices with empty rings
    hello_interval: float = _setting(10.0, _P, (0.1, 86400.0))
    ack_timeout: float = _setting(1.0, _P, (0.01, 60.0))  # SUBSCRIBE not acknowledged within this: send again
    # tuning of the bridge client's request timing (host/bridge/timing.py), not TOML settings: the
    # measured defaults; tests and simulations set them to compare a rule with and without
    pipeline_min_events: float = 4.0  # events generated per round trip from which pipelined POLLs pay
    gen_rate_span: float = 0.002  # s: the generation rate is measured over answers at least this far apart
    dead_silence: float = 0.5  # the dead-link backoff waits for silent rounds adding up to this x timeout
    probe_margin: float = 0.0002  # s: the tail-loss probe fires at SRTT + 2 RTTVAR + this
    probe_recent: int = 2000  # sends after a frame showed a datagram lost during which the link is lossy
    turnover_slack: float = 0.25  # added to a turnover estimate that stays within the ring
    # the lossy-link rules on (leadwire.hold's HoldingPollClient.RULES, and the bridge's third_poll):
    # all by default; a simulation leaves one out to measure what it pays
    rules: tuple[str, ...] = (
        "chase_past_n1", "take_held", "skip_past_held", "predict_held_end", "third_poll",
    )  # fmt: skip
    # rounds in a row without a valid answer after which a device is reported unreachable (reach.py)
    unreachable_rounds: int = _setting(5, _P, (1, 1000))


@dataclass(frozen=True)
class DeviceConfig:
    id: str
    transport: str  # "udp" | "serial"
    host: str = ""
    port: int = 0
    serial: str = ""
    baud: int = _setting(115200, "device", (50, 10_000_000))
    subscribe: tuple[int, ...] = _setting((), "device")
    # "none" | "prefix_us": payload starts with u64 BE generation time, us
    timestamp: str = _setting("none", "device", choices=("none", "prefix_us"))
    # authentication: the device's key (16..64 bytes), None with `auth = false`. A secret:
    # kept out of repr() (and so out of every log line and error message built from a config)
    key: bytes | None = field(default=None, repr=False, compare=False)

    @property
    def auth(self) -> bool:
        return self.key is not None


@dataclass(frozen=True)
class BridgeConfig:
    bridge_id: str = _setting("bridge", "bridge", key="id")
    store: str = _setting("leadwire.db", "store", key="path")
    metrics: str = _setting("127.0.0.1:9464", "bridge")  # "" disables the endpoint
    # local UDP address the bridge polls from: every interface by default (a socket bound to
    # 127.0.0.1 cannot send to a LAN address: EINVAL); a LAN address of one interface restricts it
    bind: str = _setting("0.0.0.0:0", "bridge")
    log_level: str = _setting(
        "info", "bridge", choices=("debug", "info", "warning", "error"), quoted=False, lower=True
    )
    # "auto": text on a terminal, JSON lines otherwise (logs.py)
    log_format: str = _setting("auto", "bridge", choices=("auto", "text", "json"))
    commit_interval: float = _setting(0.05, "store", (0.001, 10.0))  # seconds between store commits (a batch)
    commit_rows: int = _setting(20000, "store", (1, 10_000_000))  # commit earlier at this many pending rows
    # "process": the store writes in a child process (rows over a pipe, its own GIL; dies with the
    # bridge); "thread": on a thread of the bridge process (docs/bridge.md, "Store writer")
    store_writer: str = _setting("process", "store", key="writer", choices=("process", "thread"))
    # "full": every commit is fsynced before it returns, so ACKs (sent after it) confirm durable data;
    # "normal": the WAL is fsynced only at checkpoints (a power loss can lose ACKed reports; docs/bridge.md)
    store_sync: str = _setting("full", "store", key="synchronous", choices=("full", "normal"))
    # (index, count): poll the devices whose hash falls in this shard; TOML "INDEX/COUNT"
    shard: tuple[int, int] = _setting((0, 1), "bridge")
    poll: PollConfig = field(default_factory=PollConfig)
    devices: tuple[DeviceConfig, ...] = ()
    mqtt: MqttConfig | None = None  # [mqtt]: forward what is stored (mqtt_forward.py)

    def my_devices(self) -> list[DeviceConfig]:
        i, k = self.shard
        return [d for d in self.devices if shard_of(d.id, k) == i]


def shard_of(device_id: str, count: int) -> int:
    """The shard a device belongs to: stable across runs and machines (CRC-32 of its id)."""
    return zlib.crc32(device_id.encode()) % count


_TOP = {"bridge", "polling", "store", "device", "mqtt"}
_SECTIONS = (("bridge", BridgeConfig), ("store", BridgeConfig), ("polling", PollConfig))
_DEVICE = {"id", "udp", "serial", "key", "key_file", "auth"} | {k for _, k, _ in settings(DeviceConfig)}
_DEVICE_FIELDS = {f.name: f for f in fields(DeviceConfig)}


def _unknown(table: dict[str, Any], allowed: set[str], where: str) -> None:
    for k in table:
        if k not in allowed:
            raise ConfigError(
                where + k if where else k, "unknown key (expected one of %s)" % ", ".join(sorted(allowed))
            )


def _table(doc: dict[str, Any], key: str) -> dict[str, Any]:
    v = doc.get(key, {})
    if not isinstance(v, dict):
        raise ConfigError(key, "must be a table ([%s])" % key)
    return v


def _num(t: dict[str, Any], key: str, where: str, default: float, lo: float, hi: float) -> float:
    v = t.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ConfigError(where + key, "must be a number, got %r" % (v,))
    if not lo <= v <= hi:
        raise ConfigError(where + key, "must be between %g and %g, got %g" % (lo, hi, v))
    return float(v)


def _int(t: dict[str, Any], key: str, where: str, default: int, lo: int, hi: int) -> int:
    v = t.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(where + key, "must be an integer, got %r" % (v,))
    if not lo <= v <= hi:
        raise ConfigError(where + key, "must be between %d and %d, got %d" % (lo, hi, v))
    return v


def _bool(t: dict[str, Any], key: str, where: str, default: bool) -> bool:
    v = t.get(key, default)
    if not isinstance(v, bool):
        raise ConfigError(where + key, "must be true or false, got %r" % (v,))
    return v


def _str(t: dict[str, Any], key: str, where: str, default: str) -> str:
    v = t.get(key, default)
    if not isinstance(v, str):
        raise ConfigError(where + key, "must be a string, got %r" % (v,))
    return v


def _read(t: dict[str, Any], where: str, key: str, f: Field[Any], default: Any = None) -> Any:
    """The value of setting f (key `key` in table t): its default when absent, checked against its
    type (the annotation), range and choices."""
    default = f.default if default is None else default
    if f.type == "tuple[int, int]":  # bridge.shard: (index, count) written "INDEX/COUNT"
        default = "%d/%d" % default
    rng, choices = f.metadata["range"], f.metadata["choices"]
    if f.type == "float":
        return _num(t, key, where, default, *rng)
    if f.type == "int":
        return _int(t, key, where, default, *rng)
    if f.type == "bool":
        return _bool(t, key, where, default)
    v = _str(t, key, where, default)
    if f.metadata["lower"]:
        v = v.lower()
    if choices and v not in choices:
        names = ['"%s"' % c if f.metadata["quoted"] else c for c in choices]
        raise ConfigError(where + key, "must be %s or %s, got %r" % (", ".join(names[:-1]), names[-1], v))
    return v


def _device_key(d: dict[str, Any], where: str, base: Path | None) -> bytes | None:
    """The device's key from `key` (hex) or `key_file` (a file holding the hex), or None for an
    explicit `auth = false`. Errors name the setting and the problem, never the key or its text."""
    from leadwire import auth_host as core_auth

    has_key = "key" in d
    has_file = "key_file" in d
    off = d.get("auth", True)
    if "auth" in d and not isinstance(off, bool):
        raise ConfigError(where + "auth", "must be false (to turn authentication off) or true")
    if has_key and has_file:
        raise ConfigError(where + "key", "give one of key or key_file, not both")
    if off is False:
        if has_key or has_file:
            raise ConfigError(where + "key", "a key is given but auth = false: give one or the other")
        return None
    if has_key:
        text = d["key"]
        if not isinstance(text, str):
            raise ConfigError(where + "key", "must be a string of hex digits")  # no value: a secret
        try:
            return bytes(core_auth.parse_key(text))
        except ValueError as e:
            raise ConfigError(where + "key", str(e)) from None
    if has_file:
        name = d["key_file"]
        if not isinstance(name, str) or not name:
            raise ConfigError(where + "key_file", "must be a file path")
        path = Path(name)
        if base is not None and not path.is_absolute():
            path = base / path
        try:
            text = path.read_bytes().decode("ascii")
        except FileNotFoundError:
            raise ConfigError(where + "key_file", "file %s not found" % path) from None
        except (OSError, UnicodeError) as e:
            raise ConfigError(where + "key_file", "cannot read %s (%s)" % (path, type(e).__name__)) from None
        try:
            return bytes(core_auth.parse_key(text))
        except ValueError as e:
            raise ConfigError(where + "key_file", "%s: %s" % (path, e)) from None
    raise ConfigError(
        where + "key",
        'missing: give key = "HEX", key_file = "PATH" or auth = false (authentication is off only when '
        "said so)",
    )


def parse_address(value: str, key: str, allow_empty: bool = False) -> tuple[str, int]:
    if allow_empty and value == "":
        return "", 0
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(key, "must be host:port, got %r" % (value,))
    return host, int(port)


def load(path: str | Path) -> BridgeConfig:
    """Read and check a config file; raises ConfigError (never anything else for bad content)."""
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError("--config", "file %s not found" % p) from None
    except (OSError, UnicodeError) as e:
        raise ConfigError("--config", "cannot read %s: %s" % (p, e)) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("--config", "not valid TOML: %s" % e) from None
    return parse(doc, base=p.parent)


def parse(doc: dict[str, Any], base: Path | None = None) -> BridgeConfig:
    """Check a parsed TOML document completely; raises ConfigError naming the first bad key."""
    _unknown(doc, _TOP, "")
    tables: dict[str, dict[str, Any]] = {}
    for section, cls in _SECTIONS:
        tables[section] = _table(doc, section)
        _unknown(tables[section], {k for s, k, _ in settings(cls) if s == section}, section + ".")
    top: dict[str, Any] = {}
    for section in ("bridge", "store"):
        for s, key, f in settings(BridgeConfig):
            if s == section:
                top[f.name] = _check(f.name, _read(tables[s], s + ".", key, f), base)
    poll = _poll(tables["polling"])
    mqtt = None
    if "mqtt" in doc:
        from .mqtt_forward import parse_mqtt

        mqtt = parse_mqtt(_table(doc, "mqtt"), base, top["store"], top["bridge_id"])
    return BridgeConfig(**top, poll=poll, devices=_devices(doc, base), mqtt=mqtt)


def _check(name: str, v: Any, base: Path | None) -> Any:
    """The checks of one [bridge]/[store] value beyond type, range and choices; the value to keep."""
    if name == "bridge_id" and (not v or len(v) > 128):
        raise ConfigError("bridge.id", "must be 1..128 characters")
    if name in ("metrics", "bind"):
        parse_address(v, "bridge." + name, allow_empty=name == "metrics")
    if name == "shard":
        si, sep, sk = v.partition("/")
        if not sep or not si.isdigit() or not sk.isdigit() or int(sk) < 1 or int(si) >= int(sk):
            raise ConfigError("bridge.shard", "must be INDEX/COUNT with 0 <= INDEX < COUNT, got %r" % v)
        return (int(si), int(sk))
    if name == "store":
        if not v:
            raise ConfigError("store.path", "must not be empty")
        if v != ":memory:" and not Path(v).is_absolute():
            state = state_directory()
            if state is not None:
                return str(state / v)
            if base is not None:
                return str(base / v)
    return v


def state_directory() -> Path | None:
    """The service's state directory when systemd gives it one (``StateDirectory=``: the variable
    STATE_DIRECTORY, colon-separated when several): relative store paths go there, not next to a
    config file that ``ProtectSystem=strict`` makes read-only."""
    first = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
    return Path(first) if first else None


def _poll(pl: dict[str, Any]) -> PollConfig:
    """[polling]: interval_min and interval_max first, the interval within them (its default too)."""
    w, f = "polling.", {x.name: x for x in fields(PollConfig)}
    interval_min = _read(pl, w, "interval_min", f["interval_min"])
    interval_max = _read(pl, w, "interval_max", f["interval_max"])
    if interval_max < interval_min:
        raise ConfigError("polling.interval_max", "must be >= polling.interval_min (%g)" % interval_min)
    default = min(max(f["interval"].default, interval_min), interval_max)
    interval = _read(pl, w, "interval", f["interval"], default)
    if not interval_min <= interval <= interval_max:
        raise ConfigError(
            "polling.interval",
            "must lie within [interval_min, interval_max] = [%g, %g]" % (interval_min, interval_max),
        )
    bounds = {"interval": interval, "interval_min": interval_min, "interval_max": interval_max}
    rest = {x.name: _read(pl, w, k, x) for _, k, x in settings(PollConfig) if x.name not in bounds}
    return PollConfig(**bounds, **rest)


def _devices(doc: dict[str, Any], base: Path | None) -> tuple[DeviceConfig, ...]:
    """The [[device]] list: at least one, ids and addresses unique."""
    if "device" not in doc:
        raise ConfigError("device", "no [[device]] in the config: give at least one")
    raw = doc["device"]
    if not isinstance(raw, list):
        raise ConfigError("device", "must be an array of tables ([[device]])")
    if not raw:
        raise ConfigError("device", "the list is empty: give at least one [[device]]")
    devices: list[DeviceConfig] = []
    seen_ids: set[str] = set()
    seen_addr: set[str] = set()
    for i, d in enumerate(raw):
        dc, addr = _device(d, i, base)
        if dc.id in seen_ids:
            raise ConfigError("device[%d].id" % i, "duplicate device id %r" % dc.id)
        if addr in seen_addr:
            raise ConfigError("device[%d].%s" % (i, dc.transport), "address already used by another device")
        seen_ids.add(dc.id)
        seen_addr.add(addr)
        devices.append(dc)
    return tuple(devices)


def _device(d: Any, i: int, base: Path | None) -> tuple[DeviceConfig, str]:
    """One [[device]] table: the config and its address ("udp:HOST:PORT" or "serial:PORT")."""
    where, f = "device[%d]." % i, _DEVICE_FIELDS
    if not isinstance(d, dict):
        raise ConfigError("device[%d]" % i, "must be a table")
    _unknown(d, _DEVICE, where)
    has_udp = "udp" in d
    if has_udp == ("serial" in d):
        raise ConfigError(where + "udp", 'give exactly one of udp = "host:port" or serial = "PORT"')
    sub = d.get("subscribe", list(DeviceConfig.subscribe))  # the class attribute: the default
    if not isinstance(sub, list) or any(isinstance(c, bool) or not isinstance(c, int) for c in sub):
        raise ConfigError(where + "subscribe", "must be a list of channel numbers, got %r" % (sub,))
    if any(not 0 <= c <= 255 for c in sub) or len(set(sub)) != len(sub):
        raise ConfigError(where + "subscribe", "channels must be distinct and within 0..255")
    common: dict[str, Any] = {
        "subscribe": tuple(sub),
        "timestamp": _read(d, where, "timestamp", f["timestamp"]),
    }
    if has_udp:
        addr = _str(d, "udp", where, "")
        host, port = parse_address(addr, where + "udp")
        if port == 0:
            raise ConfigError(where + "udp", "port must be 1..65535")
        if "baud" in d:
            raise ConfigError(where + "baud", "only for serial devices")
        dev_id = _str(d, "id", where, addr)
        dkey = _device_key(d, where, base)
        dc = DeviceConfig(dev_id, "udp", host=host, port=port, key=dkey, **common)
        key = "udp:%s:%d" % (host, port)
    else:
        port_s = _str(d, "serial", where, "")
        if not port_s:
            raise ConfigError(where + "serial", "must name a serial port")
        baud = _read(d, where, "baud", f["baud"])
        dev_id = _str(d, "id", where, port_s)
        dkey = _device_key(d, where, base)
        dc = DeviceConfig(dev_id, "serial", serial=port_s, baud=baud, key=dkey, **common)
        key = "serial:" + port_s
    if not dev_id or len(dev_id) > 128:
        raise ConfigError(where + "id", "must be 1..128 characters")
    return dc, key
