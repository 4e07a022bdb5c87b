"""`leadwire board` stops cleanly: SIGTERM or SIGINT stops the board and the launcher exits 0 within a
second, saying nothing of an error, for every kind; the JSON line names the UDP
port as `udp_port`."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leadwire.tools.board import pico_missing

pytestmark = [pytest.mark.micropython, pytest.mark.timeout(60)]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie is gone too (its parent, the launcher, has exited: init reaps it)
    with contextlib.suppress(OSError):
        return Path("/proc/%d/stat" % pid).read_text().split(")")[-1].split()[0] == "Z"
    return True


def _boards_in(d: Path) -> list[int]:
    """Live processes whose working directory is `d` (a unix board runs in its directory)."""
    out = []
    for e in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if e.name.isdigit() and (e / "cwd").resolve() == d.resolve() and not _gone(int(e.name)):
                out.append(int(e.name))
    return out


@pytest.mark.parametrize(
    ("kind", "sig"),
    [("udp", signal.SIGTERM), ("serial", signal.SIGINT), ("both", signal.SIGTERM), ("pico", signal.SIGTERM)],
)
def test_signal_stops_board_and_exits_0_within_a_second(kind: str, sig: int, tmp_path: Path) -> None:
    if kind == "pico" and pico_missing():
        pytest.skip(str(pico_missing()))
    args = ["--kind", "pico"] if kind == "pico" else ["--transport", kind]
    p = subprocess.Popen(
        [sys.executable, "-m", "leadwire.cli", "board", *args, "--dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert p.stdout is not None and p.stderr is not None
        info = json.loads(p.stdout.readline())
        if kind in ("udp", "both"):
            assert info["address"] == "127.0.0.1:%d" % info["udp_port"]
        else:
            assert "udp_port" not in info
        if kind in ("serial", "both", "pico"):
            assert info["port"].startswith("/dev/pts/")
        if kind == "pico":
            assert info["repl"].startswith("/dev/pts/") and info["kind"] == "pico"
        t0 = time.monotonic()
        p.send_signal(sig)
        code = p.wait(5)
        took = time.monotonic() - t0
        err = p.stderr.read()
        assert code == 0, err
        assert took < 1.0, took
        assert "error" not in err, err
        assert _gone(info["pid"])
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(5)


def test_signal_while_starting_leaves_nothing_running(tmp_path: Path) -> None:
    """A SIGTERM before the board is ready: exit 0 at once, and no board process left behind."""
    p = subprocess.Popen(
        [sys.executable, "-m", "leadwire.cli", "board", "--transport", "udp", "--dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        # the launcher has started the interpreter (console.log exists) but the agent is not ready yet
        end = time.monotonic() + 20
        while not (tmp_path / "console.log").exists() and time.monotonic() < end:
            time.sleep(0.005)
        p.send_signal(signal.SIGTERM)
        assert p.wait(5) == 0
        time.sleep(0.2)
        assert _boards_in(tmp_path) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(5)


def test_pico_without_firmware_says_what_to_download(tmp_path: Path) -> None:
    """`leadwire board --kind pico` with no UF2 / boot ROM: one line naming what to get, exit 2."""
    for args, what in (
        (["--firmware", str(tmp_path / "none.uf2")], "download the RPI_PICO UF2"),
        (["--firmware", __file__, "--bootrom", str(tmp_path / "none.bin")], "rp2040js's repository"),
    ):
        r = subprocess.run(
            [sys.executable, "-m", "leadwire.cli", "board", "--kind", "pico", *args],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert r.returncode == 2 and r.stdout == ""
        assert len(r.stderr.strip().splitlines()) == 1 and what in r.stderr, r.stderr
