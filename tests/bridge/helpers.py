"""Shared helpers: drive a DeviceClient against a SimCore in virtual time, configs, a bridge run."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from leadwire import codec, wire
from leadwire.bridge.client import DeviceClient
from leadwire.bridge.config import BridgeConfig, DeviceConfig, PollConfig, parse
from leadwire.tools.simdevice import SimCore

# the key make_client gives a new SimCore by default (test modules run their cases signed with it)
DEFAULT_KEY: list[bytes | None] = [None]


class Driver:
    """The asyncio layer's job without asyncio: request -> device -> answers -> client, with faults."""

    def __init__(self, client: DeviceClient, core: SimCore) -> None:
        self.client = client
        self.core = core
        self.t = 0.0
        self.us = 1_700_000_000_000_000
        self.held: list[bytes] = []
        self.requests: list[codec.Frame] = []
        self.sent: list[bytes] = []  # the requests as sent (bytes on the wire)
        self.delays: list[float] = []

    def feed(self, data: bytes) -> bool:
        self.us += 1
        try:
            return self.client.receive(data, self.t, self.us)
        except wire.WireError as e:
            self.client.on_bad_frame(e.code)
            return False

    def exchange(
        self, drop: bool = False, dup: bool = False, hold: bool = False, corrupt: bool = False,
        hello: bool = False,
    ) -> bool:  # fmt: skip
        """One request/answer round; returns whether the request was answered. hello: the request is
        the periodic HELLO (the daemon's scheduler sends it between two POLLs)."""
        data = self.client.request_bytes(self.t, hello)  # signed when the client has a key
        self.sent.append(data)
        self.requests.append(codec.decode(data))
        outs = self.core.handle(data, self.t)
        answered = False
        for out in outs:
            if drop:
                continue
            if hold:
                self.held.append(out)
                continue
            if corrupt:
                b = bytearray(out)
                b[len(b) // 2] ^= 0x10
                out = bytes(b)
            answered |= self.feed(out)
            if dup:
                answered |= self.feed(out)
        if not hold:
            while self.held:
                self.feed(self.held.pop(0))
        if not answered:
            self.client.on_transport_error()
        self.delays.append(self.client.next_delay)
        self.t += max(self.client.next_delay, 0.001)
        return answered

    def run(self, rounds: int) -> None:
        for _ in range(rounds):
            self.exchange()

    def drain(self, limit: int = 1000) -> None:
        """Poll until the device has nothing new (case 2) and no recovery is open."""
        for _ in range(limit):
            self.exchange()
            req = self.requests[-1]
            if (
                req.type == wire.POLL
                and self.client.recovery is None
                and self.core.ring.count
                and self.client.n == self.core.ring.newest()
            ):
                return
        raise AssertionError("did not drain")


def make_client(
    core: SimCore | None = None,
    poll: PollConfig | None = None,
    subscribe: tuple[int, ...] = (),
    client_key: bytes | None = None,
    **kw: Any,
) -> tuple[DeviceClient, SimCore, Driver]:
    """A client and a SimCore; `key=` gives the core a key (and the client the same one unless
    `client_key` says otherwise)."""
    if core is None:
        kw.setdefault("key", DEFAULT_KEY[0])
        core = SimCore(0, **kw)
    ck = client_key if client_key is not None else core.key
    cfg = DeviceConfig("dev", "udp", subscribe=subscribe, key=ck)
    cl = DeviceClient(1, cfg, poll or PollConfig(batch=16))
    return cl, core, Driver(cl, core)


def with_auth(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Device tables as given; `auth = false` added where neither key, key_file nor auth is."""
    return [d if {"key", "key_file", "auth"} & set(d) else {**d, "auth": False} for d in devices]


def bridge_config(tmp: Path, devices: list[dict[str, Any]], **sections: Any) -> BridgeConfig:
    doc: dict[str, Any] = {
        "bridge": {"metrics": "", "id": "test-bridge", **sections.get("bridge", {})},
        "store": {"path": str(tmp / "store.db"), "commit_interval": 0.02, **sections.get("store", {})},
        "polling": {"interval": 0.01, "interval_min": 0.002, "interval_max": 0.05, "timeout": 0.1,
                    "backoff_max": 0.2, **sections.get("polling", {})},
        "device": with_auth(devices),
    }  # fmt: skip
    return parse(doc)


def toml_config(
    tmp: Path, devices: list[dict[str, Any]], extra: str = "", store: str = "store.db", writer: str = ""
) -> Path:
    lines = [
        "[bridge]",
        'id = "test-bridge"',
        'metrics = ""',
        "[store]",
        'path = "%s"' % (tmp / store),
        'writer = "%s"' % writer if writer else "",
        "commit_interval = 0.02",
        "[polling]",
        "interval = 0.01",
        "interval_min = 0.002",
        "interval_max = 0.05",
        "timeout = 0.1",
        "backoff_max = 0.2",
        extra,
    ]
    for d in with_auth(devices):
        lines.append("[[device]]")
        for k, v in d.items():
            lines.append("%s = %s" % (k, json.dumps(v)))
    p = tmp / "bridge.toml"
    p.write_text("\n".join(lines) + "\n")
    return p


async def wait_for(cond: Callable[[], bool], timeout: float = 20.0, step: float = 0.02) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError("condition not met within %.1fs" % timeout)
        await asyncio.sleep(step)


def query(db: Path | str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(str(db))
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()
