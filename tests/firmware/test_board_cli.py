"""`leadwire board`: one JSON line when ready; killing the board's pid is a power cut."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from leadwire.tools.wireclient import Client, SerialLink, UdpLink

pytestmark = [pytest.mark.micropython, pytest.mark.timeout(60)]


def _kill_group(p: subprocess.Popen[str]) -> None:
    # a failed assertion must not leave the board running when the launcher is killed
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGKILL)
    p.wait(5)


@pytest.mark.parametrize("transport", ["udp", "serial"])
def test_board_prints_json_and_dies_with_its_pid(transport: str, tmp_path: Path) -> None:
    p = subprocess.Popen(
        [sys.executable, "-m", "leadwire.cli", "board", "--transport", transport, "--dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the launcher and its board in one group: killed together on failure
    )
    try:
        assert p.stdout is not None
        info = json.loads(p.stdout.readline())
        assert info["transport"] == transport and info["pid"] > 0
        if transport == "udp":
            host, port = info["address"].rsplit(":", 1)
            assert host == "127.0.0.1"
            c = Client(UdpLink((host, int(port))))
        else:
            assert info["port"].startswith("/dev/pts/")
            c = Client(SerialLink(info["port"]))
        assert c.hello().board == "unix"
        c.close()
        os.kill(info["pid"], signal.SIGKILL)  # power cut: the launcher exits with the board
        assert p.wait(10) == 0
    finally:
        _kill_group(p)


def test_board_key_auto_prints_the_key_once_and_signs(tmp_path: Path) -> None:
    from leadwire.tools.authclient import AuthClient

    p = subprocess.Popen(
        [sys.executable, "-m", "leadwire.cli", "board", "--dir", str(tmp_path), "--key", "auto"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the launcher and its board in one group: killed together on failure
    )
    try:
        assert p.stdout is not None
        info = json.loads(p.stdout.readline())
        key = info["key"]
        assert len(key) == 64 and key not in (tmp_path / "console.log").read_text()
        host, port = info["address"].rsplit(":", 1)
        c = AuthClient(UdpLink((host, int(port))), key)
        try:
            assert c.handshake().session == 1
        finally:
            c.close()
        os.kill(info["pid"], signal.SIGKILL)
        assert p.wait(10) == 0
        assert p.stderr is not None and key not in p.stderr.read()
    finally:
        _kill_group(p)
