"""One store, one bridge: two real bridge processes on one store; a stale lock does not block."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .test_check import UDP_OK, write_config

pytestmark = pytest.mark.timeout(90)

ROOT = Path(__file__).resolve().parents[2]


def bridge(cfg: Path, log: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "leadwire.cli", "bridge", "--config", str(cfg), *args],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
        cwd=ROOT,
        text=True,
    )


def wait_started(p: subprocess.Popen[str], log: Path) -> None:
    end = time.monotonic() + 30
    while '"event":"bridge_started"' not in log.read_text():
        assert p.poll() is None, log.read_text()
        assert time.monotonic() < end, "the bridge did not start"
        time.sleep(0.05)


def test_second_bridge_refused_naming_the_pid_then_a_stale_lock_does_not_block(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, UDP_OK)
    store = tmp_path / "store.db"
    lock = tmp_path / "store.db.lock"
    a = bridge(cfg, tmp_path / "a.log")
    c: subprocess.Popen[str] | None = None
    try:
        wait_started(a, tmp_path / "a.log")
        assert lock.read_text() == "%d\n" % a.pid
        want = "leadwire: store %s is in use by process %d (one bridge per store)\n" % (store, a.pid)
        for args in ((), ("--check",)):
            b = subprocess.run(
                [sys.executable, "-m", "leadwire.cli", "bridge", "--config", str(cfg), *args],
                capture_output=True,
                text=True,
                timeout=30,
                cwd=ROOT,
            )
            assert (b.returncode, b.stderr) == (2, want), args
        a.send_signal(signal.SIGKILL)
        a.wait(timeout=10)
        assert lock.read_text() == "%d\n" % a.pid  # left behind by the dead bridge: stale
        c = bridge(cfg, tmp_path / "c.log")
        wait_started(c, tmp_path / "c.log")
        assert lock.read_text() == "%d\n" % c.pid
        c.send_signal(signal.SIGTERM)
        assert c.wait(timeout=30) == 0
        assert not lock.exists()  # a clean stop removes it
        assert store.exists()
    finally:
        for p in (a, c):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
