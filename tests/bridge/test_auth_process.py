"""Authentication end to end with the bridge as a process: signed devices over UDP and a pty, one
device configured with the wrong key; events stored exactly once, rejects counted per device in
/metrics and `leadwire status`, and no key (nor any 16-digit piece of one) in the log, /metrics
or status."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from .helpers import query
from .simthread import FleetThread

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
EVENTS = 400


def pieces(hex_key: str) -> list[str]:
    """The key and every 16-digit window of it (8 bytes): none may show anywhere."""
    return [hex_key, hex_key.upper()] + [hex_key[i : i + 16] for i in range(0, len(hex_key) - 15, 4)]


def wait_until(cond, timeout: float = 40.0) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("timed out")
        time.sleep(0.05)


def stored(db: Path) -> int:
    try:
        return query(db, "SELECT COUNT(*) FROM events")[0][0] if db.exists() else 0
    except Exception:
        return 0


def test_signed_fleet_through_the_bridge_process_keys_never_shown(tmp_path: Path) -> None:
    ft = FleetThread(count=4, rate=400, capacity=4096, limit=EVENTS, serial=1, seed=11, auth=True)
    p = None
    try:
        devs = ft.fleet.describe()
        keys = [d["key"] for d in devs]
        assert all(len(k) == 64 for k in keys) and len(set(keys)) == 4
        wrong = os.urandom(32).hex()
        (tmp_path / "keys").mkdir()
        (tmp_path / "keys" / "sim-3.hex").write_text(keys[3] + "\n")  # sim-3: on a pty
        lines = ["[bridge]", 'id = "auth-test"', 'metrics = "127.0.0.1:0"', 'log_level = "debug"',
                 "[store]", 'path = "%s"' % (tmp_path / "store.db"), "commit_interval = 0.02",
                 "[polling]", "interval = 0.01", "interval_min = 0.002", "interval_max = 0.05",
                 "timeout = 0.1", "backoff_max = 0.2"]  # fmt: skip
        for i, d in enumerate(devs):
            link = 'udp = "%s"' % d["udp"] if "udp" in d else 'serial = "%s"' % d["serial"]
            auth = ('key = "%s"' % wrong if i == 1 else 'key_file = "keys/sim-3.hex"' if i == 3
                    else 'key = "%s"' % keys[i])  # fmt: skip
            lines += ["[[device]]", 'id = "%s"' % d["id"], link, auth]
        cfg = tmp_path / "bridge.toml"
        cfg.write_text("\n".join(lines) + "\n")
        db = tmp_path / "store.db"
        log = tmp_path / "bridge.log"
        p = subprocess.Popen(
            [sys.executable, "-m", "leadwire.cli", "bridge", "--config", str(cfg)],
            stdout=subprocess.DEVNULL, stderr=log.open("ab"), cwd=ROOT,
        )  # fmt: skip
        wait_until(lambda: stored(db) >= 3 * EVENTS)
        m = re.search(r'"metrics_port": ?(\d+)', log.read_text())
        assert m, log.read_text()[:2000]
        time.sleep(1.0)  # a few more rounds: the wrong-key device keeps being refused
        url = "http://127.0.0.1:%s/metrics" % m.group(1)
        metrics = urllib.request.urlopen(url, timeout=10).read().decode()
        status = subprocess.run(
            [sys.executable, "-m", "leadwire.cli", "status", "--config", str(cfg)],
            capture_output=True, text=True, timeout=30, cwd=ROOT,
        )  # fmt: skip
        status_json = subprocess.run(
            [sys.executable, "-m", "leadwire.cli", "status", "--config", str(cfg), "--json"],
            capture_output=True, text=True, timeout=30, cwd=ROOT,
        )  # fmt: skip
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=15) == 0
        text = log.read_text()
        assert status.returncode == 0 and status_json.returncode == 0
        # exactly once, every signed device complete; the wrong-key device: nothing stored
        per = dict(query(db, "SELECT d.device_id, COUNT(e.offset) FROM devices d LEFT JOIN events e "
                             "ON e.dev = d.dev GROUP BY d.device_id"))  # fmt: skip
        assert per == {"sim-0": EVENTS, "sim-1": 0, "sim-2": EVENTS, "sim-3": EVENTS}
        assert query(db, "SELECT COUNT(*) FROM (SELECT dev, boot_epoch, offset FROM events "
                         "GROUP BY 1, 2, 3 HAVING COUNT(*) > 1)")[0][0] == 0  # fmt: skip
        rows = {r["device"]: r for r in map(json.loads, status_json.stdout.splitlines())}
        for dev in ("sim-0", "sim-2", "sim-3"):
            assert [rows[dev][k] for k in ("auth_forged", "auth_replayed", "auth_unsigned")] == [0, 0, 0]
        # the wrong key (sim-1): its device refuses our HELLOs and answers nothing: timeouts, no
        # session here; the refusals are counted there
        assert rows["sim-1"]["events"] == 0 and rows["sim-1"]["timeouts"] > 3
        dev1 = ft.fleet.cores[1].auth
        assert dev1 is not None and dev1.forged >= 3 and dev1.replayed == dev1.unsigned == 0
        for i in (0, 2, 3):
            ep = ft.fleet.cores[i].auth
            assert ep is not None and (ep.forged, ep.replayed, ep.unsigned) == (0, 0, 0)
        assert 'leadwire_auth_forged_total{device="sim-0"} 0.0' in metrics
        assert 'leadwire_auth_replayed_total{device="sim-3"} 0.0' in metrics
        assert "forged" in status.stdout.splitlines()[0]
        for k in [*keys, wrong]:
            for s in pieces(k):
                assert s not in text, "a key in the log"
                assert s not in metrics, "a key in /metrics"
                assert s not in status.stdout + status_json.stdout, "a key in status"
                assert s not in status.stderr + status_json.stderr
    finally:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()
        ft.close()
