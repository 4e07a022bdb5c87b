"""What a run needs besides a valid config: the store's path, the metrics address, the UDP socket,
the serial ports, a route from ``bridge.bind`` to each UDP device.

``leadwire bridge --check`` runs :func:`check` (every problem, one line each, creating nothing);
the daemon's start meets the same resources in the same order and raises the same
:class:`ResourceError` for them before the store is created (the CLI: one line, exit 2). Each
message names the resource: the setting and its value.

A route that is missing (ENETUNREACH, EHOSTUNREACH) is only a warning: a network that is not up yet
at boot comes up later, and the bridge keeps polling (its send errors are logged, reach.py). A bind
address that cannot reach the device at all (EINVAL: a socket bound to 127.0.0.1 and a LAN device)
or a host name that does not resolve is an error.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import lock
from .config import BridgeConfig, DeviceConfig, parse_address


class ResourceError(Exception):
    """A resource the run needs is not usable; `resource` names it (setting and value)."""

    def __init__(self, resource: str, problem: str) -> None:
        super().__init__("%s: %s" % (resource, problem))
        self.resource = resource
        self.problem = problem


def _oserror(e: OSError) -> str:
    return e.strerror or str(e)


def device_resource(d: DeviceConfig) -> str:
    if d.transport == "udp":
        return 'device "%s" udp %s:%d' % (d.id, d.host, d.port)
    return 'device "%s" serial %s' % (d.id, d.serial)


def _not_writable(path: Path) -> str:
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return "read-only file system"
    except OSError:
        pass
    return "permission denied for uid %d" % os.getuid()


def check_store(path: str) -> None:
    """The store can be created or written where the config puts it, and no bridge holds it."""
    if path == ":memory:":
        return
    res = "store.path %s" % path
    p = Path(path)
    if p.is_dir():
        raise ResourceError(res, "is a directory")
    parent = p.parent
    if not parent.is_dir():
        raise ResourceError(res, "directory %s does not exist" % parent)
    # SQLite's WAL and shared-memory files (and the lock) are created beside the store
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ResourceError(res, "directory %s is not writable (%s)" % (parent, _not_writable(parent)))
    if p.exists() and not os.access(p, os.R_OK | os.W_OK):
        raise ResourceError(res, "not writable (%s)" % _not_writable(p))
    pid = lock.holder(path)
    if pid is not None:
        raise lock.StoreLocked(path, pid)


def metrics_error(addr: str, e: OSError) -> ResourceError:
    return ResourceError("bridge.metrics %s" % addr, "cannot listen: %s" % _oserror(e))


def check_metrics(addr: str) -> None:
    """The /metrics address can be listened on (bound and closed again; as the HTTP server does)."""
    if not addr:
        return
    host, port = parse_address(addr, "bridge.metrics")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, sockaddr = infos[0]
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(sockaddr)
            s.listen(1)
    except OSError as e:
        raise metrics_error(addr, e) from None


def bind_error(addr: str, e: OSError) -> ResourceError:
    return ResourceError("bridge.bind %s" % addr, "cannot bind the UDP socket: %s" % _oserror(e))


def check_bind(addr: str) -> None:
    host, port = parse_address(addr, "bridge.bind")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((host, port))
    except OSError as e:
        raise bind_error(addr, e) from None


def resolve_udp(d: DeviceConfig) -> tuple[str, int]:
    """The (IPv4, port) the device's datagrams come from; ResourceError if the name does not resolve."""
    try:
        info = socket.getaddrinfo(d.host, d.port, socket.AF_INET, socket.SOCK_DGRAM)
    except OSError as e:
        raise ResourceError(device_resource(d), "cannot resolve %s: %s" % (d.host, _oserror(e))) from None
    return str(info[0][4][0]), d.port


def check_route(bind: str, d: DeviceConfig) -> str | None:
    """Can a socket bound like ``bridge.bind`` send to the device? (connect() of a UDP socket asks
    the kernel for the route; nothing is sent.) Raises ResourceError when it never can; returns a
    warning when there is no route now."""
    host, _ = parse_address(bind, "bridge.bind")
    ip = resolve_udp(d)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((host, 0))
            s.connect(ip)
    except OSError as e:
        if e.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
            return "%s: no route now (%s): the bridge retries" % (device_resource(d), _oserror(e))
        raise ResourceError(
            device_resource(d),
            "not reachable from bridge.bind %s (%s): bind to 0.0.0.0:0 or to an address of the "
            "interface that reaches it" % (bind, _oserror(e)),
        ) from None
    return None


def serial_error(d: DeviceConfig, e: BaseException) -> ResourceError:
    text = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
    return ResourceError(device_resource(d), "cannot open: %s" % text)


def check_serial(d: DeviceConfig) -> None:
    """The port exists and is readable and writable (not opened: opening resets many boards).
    A pyserial URL (socket://, rfc2217://, ...) is not checked."""
    if "://" in d.serial:
        return
    p = Path(d.serial)
    if not p.exists():
        raise ResourceError(device_resource(d), "no such port")
    if not os.access(p, os.R_OK | os.W_OK):
        raise ResourceError(device_resource(d), "not readable and writable (permission denied for uid %d: "
                            "the dialout group?)" % os.getuid())  # fmt: skip


def check(cfg: BridgeConfig) -> tuple[list[str], list[str]]:
    """Every problem a run of this config would meet (one line each), and the warnings."""
    problems: list[str] = []
    warnings: list[str] = []

    def run(fn: Callable[..., str | None], *args: Any) -> None:
        try:
            w = fn(*args)
        except (ResourceError, lock.StoreLocked) as e:
            problems.append(str(e))
            return
        if w:
            warnings.append(w)

    run(check_store, cfg.store)
    run(check_metrics, cfg.metrics)
    devices = cfg.my_devices()
    if any(d.transport == "udp" for d in devices):
        run(check_bind, cfg.bind)
    for d in devices:
        if d.transport == "udp":
            run(check_route, cfg.bind, d)
        else:
            run(check_serial, d)
    return problems, warnings
