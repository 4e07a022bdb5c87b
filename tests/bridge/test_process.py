"""The bridge as a process: real SIGKILL mid-stream then restart, SIGTERM, CLI status."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .helpers import query, toml_config
from .simthread import FleetThread

pytestmark = pytest.mark.timeout(90)

ROOT = Path(__file__).resolve().parents[2]


def start_bridge(cfg: Path, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "leadwire.cli", "bridge", "--config", str(cfg)],
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
        cwd=ROOT,
    )


def count_events(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        return query(db, "SELECT COUNT(*) FROM events")[0][0]
    except Exception:
        return 0


def wait_until(cond, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("timed out")
        time.sleep(0.05)


@pytest.fixture
def fleet():  # type: ignore[no-untyped-def]
    ft = FleetThread(count=4, rate=300, capacity=4096, limit=1500, serial=1, seed=7)
    yield ft
    ft.close()


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path("/proc/%d/task" % pid).iterdir():
        out += [int(x) for x in (task / "children").read_text().split()]
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path("/proc/%d/stat" % pid).read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("writer", ["process", "thread"])
def test_sigkill_mid_stream_then_restart_no_duplicate_no_gap(
    tmp_path: Path, fleet: FleetThread, writer: str
) -> None:
    cfg = toml_config(tmp_path, fleet.fleet.describe(), writer=writer)
    db = tmp_path / "store.db"
    log = tmp_path / "bridge.log"
    total = 4 * 1500
    p = start_bridge(cfg, log)
    try:
        wait_until(lambda: count_events(db) > 1000)
        time.sleep(0.3)
        kids = children(p.pid)
        assert len(kids) == (1 if writer == "process" else 0)  # the store writer process
        os.kill(p.pid, signal.SIGKILL)
        assert p.wait(timeout=10) == -signal.SIGKILL
        wait_until(lambda: not any(alive(k) for k in kids), timeout=5)  # the writer died with it
    finally:
        if p.poll() is None:
            p.kill()
    at_kill = count_events(db)
    assert 1000 < at_kill < total  # really mid-stream
    p = start_bridge(cfg, log)
    try:
        wait_until(lambda: count_events(db) >= total, timeout=40)
        time.sleep(0.2)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=15) == 0  # SIGTERM: clean stop
    finally:
        if p.poll() is None:
            p.kill()
    cores = fleet.fleet.cores
    for dev, core in enumerate(cores, start=1):
        offs = [r[0] for r in query(db, "SELECT offset FROM events WHERE dev=? ORDER BY arrival", dev)]
        assert offs == [core.offset_of(i) for i in range(1500)]  # no duplicate, no gap, in order
        arr = query(db, "SELECT arrival, seq, lead, duplicate FROM arrivals WHERE dev=? ORDER BY id", dev)
        assert [a[0] for a in arr] == list(range(1, 1501))  # the arrival counter survived the kill
        assert [a[1] for a in arr] == offs and {a[2] for a in arr} == {1} and {a[3] for a in arr} == {0}
        (n,) = query(db, "SELECT n FROM devices WHERE dev=?", dev)[0]
        assert n == offs[-1]
    assert query(db, "SELECT cause, COUNT(*) FROM losses GROUP BY 1") == [("first_contact", 4)]
    records = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert [r["event"] for r in records].count("bridge_started") == 2
    assert records[-1]["event"] == "bridge_stopped" and records[-1]["failed"] is None


def test_status_prints_devices_and_counters(tmp_path: Path, fleet: FleetThread) -> None:
    cfg = toml_config(tmp_path, fleet.fleet.describe())
    p = subprocess.run(
        [sys.executable, "-m", "leadwire.cli", "bridge", "--config", str(cfg), "--duration", "7"],
        capture_output=True,
        timeout=60,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    out = subprocess.run(
        [sys.executable, "-m", "leadwire.cli", "status", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:3] == ["device", "transport", "boot"]
    assert lines[-1] == "4 devices"
    js = subprocess.run(
        [sys.executable, "-m", "leadwire.cli", "status", "--config", str(cfg), "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )
    rows = [json.loads(x) for x in js.stdout.splitlines()]
    assert [r["device"] for r in rows] == ["sim-0", "sim-1", "sim-2", "sim-3"]
    assert [r["transport"] for r in rows] == ["udp", "udp", "udp", "serial"]
    assert all(r["events"] == r["received"] == 1500 and r["duplicates"] == 0 for r in rows)
