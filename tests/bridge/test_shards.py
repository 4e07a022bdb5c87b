"""`leadwire bridge --processes K`: one config run as K shard processes (host/bridge/shards.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leadwire.bridge.accounting import check_store
from leadwire.bridge.config import parse, shard_of
from leadwire.bridge.shards import shard_config
from leadwire.bridge.store_reader import StoreReader
from leadwire.tools.fleetsim import Fleet

from .helpers import query, toml_config

pytestmark = pytest.mark.timeout(60)

BRIDGE = [sys.executable, "-c", "from leadwire.cli import main; main()", "bridge"]


def test_shard_i_of_k_gets_its_own_id_store_and_metrics_port() -> None:
    doc = {"bridge": {"id": "north", "metrics": "127.0.0.1:9464"}, "store": {"path": "/var/lib/lw/fleet.db"},
           "device": [{"id": "a", "udp": "127.0.0.1:5000", "auth": False}]}  # fmt: skip
    c = shard_config(parse(doc), 2, 3)
    assert (c.shard, c.bridge_id, c.store, c.metrics) == ((2, 3), "north-2", "/var/lib/lw/fleet-2.db",
                                                          "127.0.0.1:9466")  # fmt: skip
    assert c.devices == parse(doc).devices  # every shard reads the whole list; my_devices() picks
    doc["bridge"]["metrics"] = ""
    assert shard_config(parse(doc), 1, 2).metrics == ""
    doc["bridge"]["metrics"] = "127.0.0.1:0"
    assert shard_config(parse(doc), 1, 2).metrics == "127.0.0.1:0"


def test_two_processes_poll_their_halves_and_stop_cleanly_on_sigterm(tmp_path: Path) -> None:
    with Fleet(8, 50.0, auth=False) as fleet:
        devs = [{"id": d["id"], "udp": d["udp"]} for d in fleet.devices]
        cfg = toml_config(tmp_path, devs)
        p = subprocess.Popen([*BRIDGE, "--config", str(cfg), "--processes", "2"])
        try:
            stores = [tmp_path / "store-0.db", tmp_path / "store-1.db"]
            end = time.monotonic() + 30
            while not all(s.exists() and _events(s) >= 100 for s in stores):
                assert time.monotonic() < end and p.poll() is None
                time.sleep(0.1)
            p.send_signal(signal.SIGTERM)
            assert p.wait(timeout=20) == 0
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert not (tmp_path / "store.db").exists()
    for i, s in enumerate(stores):
        ids = sorted(r[0] for r in query(s, "SELECT device_id FROM devices"))
        assert ids == sorted(d["id"] for d in devs if shard_of(d["id"], 2) == i)
        with StoreReader(s) as r:
            for d in r.devices():
                led = check_store(r, d.dev)
                assert led.ok and led.stored > 0, led.line()


def _events(store: Path) -> int:
    try:
        return int(query(store, "SELECT COUNT(*) FROM arrivals")[0][0])
    except Exception:  # not created yet, or its schema not yet written
        return 0
