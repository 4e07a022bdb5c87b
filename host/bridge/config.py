"""The bridge's TOML configuration: parsed and checked completely before anything is opened.

Every problem is a :class:`ConfigError` naming the key (``device[3].udp``) and the problem in one
line; the CLI prints it and exits 2 without creating the store, the log or the metrics socket.
The reference is docs/bridge.md ("Configuration reference") and docs/examples/bridge.toml.
"""

from __future__ import annotations

import math
import tomllib
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class ConfigError(Exception):
    """A bad configuration: `key` names the setting, `problem` says what is wrong."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__("%s: %s" % (key, problem))
        self.key = key
        self.problem = problem


@dataclass(frozen=True)
class PollConfig:
    interval: float = 0.1  # initial (and, without `adaptive`, fixed) poll interval, seconds
    interval_min: float = 0.005
    interval_max: float = 1.0
    adaptive: bool = True
    batch: int = 64  # max_events in a POLL
    max_bytes: int = 1400  # max payload bytes in an answer (fits one Ethernet MTU)
    frames: int = 1  # answer frames per POLL (a burst, docs/protocol.md); >1 needs burst-aware devices
    pipeline: bool = True  # with frames > 1: the next POLL goes out from a burst's predicted end
    timeout: float = 0.25  # ceiling of the retransmission timeout (RTO, rtt.py) and the RTO before a sample
    rto_min: float = 0.1  # floor of the RTO (a serial link's floor is at least its line time, rtt.py)
    backoff_max: float = 5.0  # bound of the exponential backoff after transport errors
    hello_interval: float = 10.0  # periodic HELLO: catches restarts of devices with empty rings
    ack_timeout: float = 1.0  # SUBSCRIBE not acknowledged within this: send it again


@dataclass(frozen=True)
class DeviceConfig:
    id: str
    transport: str  # "udp" | "serial"
    host: str = ""
    port: int = 0
    serial: str = ""
    baud: int = 115200
    subscribe: tuple[int, ...] = ()
    timestamp: str = "none"  # "none" | "prefix_us": payload starts with u64 BE generation time, us
    # authentication (issue 6): the device's key (16..64 bytes), None with `auth = false`. A secret:
    # kept out of repr() (and so out of every log line and error message built from a config)
    key: bytes | None = field(default=None, repr=False, compare=False)

    @property
    def auth(self) -> bool:
        return self.key is not None


@dataclass(frozen=True)
class BridgeConfig:
    bridge_id: str = "bridge"
    store: str = "leadwire.db"
    metrics: str = "127.0.0.1:9464"  # "" disables the endpoint
    bind: str = "127.0.0.1:0"  # local UDP address the bridge polls from
    log_level: str = "info"
    commit_interval: float = 0.05  # seconds between store commits (a batch)
    commit_rows: int = 20000  # commit earlier when this many rows are pending
    # "process": the store writes in a child process (rows over a pipe, its own GIL; dies with the
    # bridge); "thread": on a thread of the bridge process (docs/bridge.md, "Store writer")
    store_writer: str = "process"
    # "full": every commit is fsynced before it returns, so ACKs (sent after it) confirm durable data;
    # "normal": the WAL is fsynced only at checkpoints (a power loss can lose ACKed reports; docs/bridge.md)
    store_sync: str = "full"
    shard: tuple[int, int] = (0, 1)  # (index, count): poll the devices whose hash falls in this shard
    poll: PollConfig = field(default_factory=PollConfig)
    devices: tuple[DeviceConfig, ...] = ()

    def my_devices(self) -> list[DeviceConfig]:
        i, k = self.shard
        return [d for d in self.devices if shard_of(d.id, k) == i]


def shard_of(device_id: str, count: int) -> int:
    """The shard a device belongs to: stable across runs and machines (CRC-32 of its id)."""
    return zlib.crc32(device_id.encode()) % count


_TOP = {"bridge", "polling", "store", "device"}
_BRIDGE = {"id", "metrics", "bind", "log_level", "shard"}
_STORE = {"path", "commit_interval", "commit_rows", "writer", "synchronous"}
_POLL = {
    "interval",
    "interval_min",
    "interval_max",
    "adaptive",
    "batch",
    "max_bytes",
    "frames",
    "pipeline",
    "timeout",
    "rto_min",
    "backoff_max",
    "hello_interval",
    "ack_timeout",
}
_DEVICE = {"id", "udp", "serial", "baud", "subscribe", "timestamp", "key", "key_file", "auth"}


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
    _unknown(doc, _TOP, "")
    b = _table(doc, "bridge")
    _unknown(b, _BRIDGE, "bridge.")
    s = _table(doc, "store")
    _unknown(s, _STORE, "store.")
    pl = _table(doc, "polling")
    _unknown(pl, _POLL, "polling.")

    bridge_id = _str(b, "id", "bridge.", "bridge")
    if not bridge_id or len(bridge_id) > 128:
        raise ConfigError("bridge.id", "must be 1..128 characters")
    metrics = _str(b, "metrics", "bridge.", "127.0.0.1:9464")
    parse_address(metrics, "bridge.metrics", allow_empty=True)
    bind = _str(b, "bind", "bridge.", "127.0.0.1:0")
    parse_address(bind, "bridge.bind")
    level = _str(b, "log_level", "bridge.", "info").lower()
    if level not in ("debug", "info", "warning", "error"):
        raise ConfigError("bridge.log_level", "must be debug, info, warning or error, got %r" % level)
    shard_s = _str(b, "shard", "bridge.", "0/1")
    si, sep, sk = shard_s.partition("/")
    if not sep or not si.isdigit() or not sk.isdigit() or int(sk) < 1 or int(si) >= int(sk):
        raise ConfigError("bridge.shard", "must be INDEX/COUNT with 0 <= INDEX < COUNT, got %r" % shard_s)

    store = _str(s, "path", "store.", "leadwire.db")
    if not store:
        raise ConfigError("store.path", "must not be empty")
    if base is not None and store != ":memory:" and not Path(store).is_absolute():
        store = str(base / store)
    commit_interval = _num(s, "commit_interval", "store.", 0.05, 0.001, 10.0)
    commit_rows = _int(s, "commit_rows", "store.", 20000, 1, 10_000_000)
    writer = _str(s, "writer", "store.", "process")
    if writer not in ("process", "thread"):
        raise ConfigError("store.writer", 'must be "process" or "thread", got %r' % writer)
    sync = _str(s, "synchronous", "store.", "full")
    if sync not in ("full", "normal"):
        raise ConfigError("store.synchronous", 'must be "full" or "normal", got %r' % sync)

    w = "polling."
    interval_min = _num(pl, "interval_min", w, 0.005, 0.0, 3600.0)
    interval_max = _num(pl, "interval_max", w, 1.0, 0.0, 3600.0)
    if interval_max < interval_min:
        raise ConfigError("polling.interval_max", "must be >= polling.interval_min (%g)" % interval_min)
    interval = _num(pl, "interval", w, min(max(0.1, interval_min), interval_max), 0.0, 3600.0)
    if not interval_min <= interval <= interval_max:
        raise ConfigError(
            "polling.interval",
            "must lie within [interval_min, interval_max] = [%g, %g]" % (interval_min, interval_max),
        )
    poll = PollConfig(
        interval=interval,
        interval_min=interval_min,
        interval_max=interval_max,
        adaptive=_bool(pl, "adaptive", w, True),
        batch=_int(pl, "batch", w, 64, 1, 255),
        max_bytes=_int(pl, "max_bytes", w, 1400, 16, 2047),
        frames=_int(pl, "frames", w, 1, 1, 32),
        pipeline=_bool(pl, "pipeline", w, True),
        timeout=_num(pl, "timeout", w, 0.25, 0.001, 60.0),
        rto_min=_num(pl, "rto_min", w, 0.1, 0.0, 60.0),
        backoff_max=_num(pl, "backoff_max", w, 5.0, 0.001, 3600.0),
        hello_interval=_num(pl, "hello_interval", w, 10.0, 0.1, 86400.0),
        ack_timeout=_num(pl, "ack_timeout", w, 1.0, 0.01, 60.0),
    )

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
        where = "device[%d]." % i
        if not isinstance(d, dict):
            raise ConfigError("device[%d]" % i, "must be a table")
        _unknown(d, _DEVICE, where)
        has_udp = "udp" in d
        has_serial = "serial" in d
        if has_udp == has_serial:
            raise ConfigError(where + "udp", 'give exactly one of udp = "host:port" or serial = "PORT"')
        sub = d.get("subscribe", [])
        if not isinstance(sub, list) or any(isinstance(c, bool) or not isinstance(c, int) for c in sub):
            raise ConfigError(where + "subscribe", "must be a list of channel numbers, got %r" % (sub,))
        if any(not 0 <= c <= 255 for c in sub) or len(set(sub)) != len(sub):
            raise ConfigError(where + "subscribe", "channels must be distinct and within 0..255")
        ts = _str(d, "timestamp", where, "none")
        if ts not in ("none", "prefix_us"):
            raise ConfigError(where + "timestamp", 'must be "none" or "prefix_us", got %r' % ts)
        if has_udp:
            addr = _str(d, "udp", where, "")
            host, port = parse_address(addr, where + "udp")
            if port == 0:
                raise ConfigError(where + "udp", "port must be 1..65535")
            if "baud" in d:
                raise ConfigError(where + "baud", "only for serial devices")
            dev_id = _str(d, "id", where, addr)
            dkey = _device_key(d, where, base)
            dc = DeviceConfig(
                dev_id, "udp", host=host, port=port, subscribe=tuple(sub), timestamp=ts, key=dkey
            )
            key = "udp:%s:%d" % (host, port)
        else:
            port_s = _str(d, "serial", where, "")
            if not port_s:
                raise ConfigError(where + "serial", "must name a serial port")
            baud = _int(d, "baud", where, 115200, 50, 10_000_000)
            dev_id = _str(d, "id", where, port_s)
            dkey = _device_key(d, where, base)
            dc = DeviceConfig(
                dev_id, "serial", serial=port_s, baud=baud, subscribe=tuple(sub), timestamp=ts, key=dkey
            )
            key = "serial:" + port_s
        if not dev_id or len(dev_id) > 128:
            raise ConfigError(where + "id", "must be 1..128 characters")
        if dev_id in seen_ids:
            raise ConfigError(where + "id", "duplicate device id %r" % dev_id)
        if key in seen_addr:
            raise ConfigError(
                where + ("udp" if has_udp else "serial"), "address already used by another device"
            )
        seen_ids.add(dev_id)
        seen_addr.add(key)
        devices.append(dc)
    return BridgeConfig(
        bridge_id=bridge_id,
        store=store,
        metrics=metrics,
        bind=bind,
        log_level=level,
        commit_interval=commit_interval,
        commit_rows=commit_rows,
        store_writer=writer,
        store_sync=sync,
        shard=(int(si), int(sk)),
        poll=poll,
        devices=tuple(devices),
    )
