"""`leadwire flash` and `mpremote mip install` against a virtual board over a pty (mpremote's raw
REPL on the unix port, reached with `resume`), then the firmware booting from the flashed files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from leadwire import messages, wire
from leadwire.tools.board import start_board
from leadwire.tools.flash import flash

from ..hil.client import Client, UdpLink

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.micropython, pytest.mark.timeout(120)]


@pytest.mark.parametrize("kind,march", [("esp32", "xtensawin"), ("rp2", "armv6m"), ("unix", "x64")])
def test_dry_run_prints_the_plan(kind: str, march: str, tmp_path: Path) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text('{"id": "x"}')
    r = CliRunner().invoke(flash, ["--port", "/dev/null", "--board", kind, "--config", str(cfg), "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "-march=%s" % march in r.output
    assert ":leadwire/ring.mpy" in r.output and ":main.py" in r.output and ":config.json" in r.output
    assert ":boards/%s.mpy" % kind in r.output
    assert ("resume" in r.output) == (kind == "unix")
    assert (":wlan.mpy" in r.output) == (kind != "unix")


def test_bad_config_is_refused_before_touching_the_board(tmp_path: Path) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text("{not json")
    r = CliRunner().invoke(flash, ["--port", "/dev/null", "--board", "rp2", "--config", str(cfg)])
    assert r.exit_code != 0 and "config" in r.output


def test_flash_then_boot_from_the_flashed_files(tmp_path: Path) -> None:
    d = tmp_path / "board"
    cfg = tmp_path / "device.json"
    cfg.write_text(json.dumps({"id": "flashed-1", "sensors": [{"ch": 5, "hz": 20, "size": 8}]}))
    repl = start_board("repl", board_dir=d)
    try:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "leadwire.cli",
                "flash",
                "--port",
                str(repl.port),
                "--board",
                "unix",
                "--config",
                str(cfg),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert "cp " in r.stdout and "flashed" in r.stdout  # progress shown
        repl.proc.wait(10)  # the "reset": the interpreter exited  # type: ignore[union-attr]
    finally:
        repl.close()
    for f in ("main.py", "lwagent.mpy", "lwboot.mpy", "boards/unix.mpy", "leadwire/ring.mpy", "config.json"):
        assert (d / f).exists(), f
    assert json.loads((d / "config.json").read_text())["id"] == "flashed-1"
    # power on from the flashed files (no build): its HELLO carries the flashed config
    with start_board("udp", board_dir=d, build_firmware=False) as b:
        assert b.address is not None
        c = Client(UdpLink(b.address))
        h = c.hello()
        assert (h.board_id, h.board, h.boots) == ("flashed-1", "unix", 1)
        f = c.poll(0)
        if f.type == wire.RECOVERY:
            n0, _ = messages.decode_recovery(f)
            ev = c.poll((n0 - 1) & 0xFFFFFFFF)
            assert messages.decode_records(ev.payload)[1][0][0] == 5  # the flashed sensor channel
        c.close()


def test_mip_install_of_the_core_from_package_json(tmp_path: Path) -> None:
    d = tmp_path / "board"
    repl = start_board("repl", board_dir=d)
    try:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "mpremote",
                "connect",
                str(repl.port),
                "resume",
                "mip",
                "install",
                "--target",
                "lib",
                str(ROOT / "package.json"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        repl.close()
    pkg = json.loads((ROOT / "package.json").read_text())
    core = sorted(p.name for p in (ROOT / "shared" / "leadwire").glob("*.py"))
    assert sorted(Path(dest).name for dest, _ in pkg["urls"]) == core  # every core module listed
    for dest, src in pkg["urls"]:
        assert (d / "lib" / dest).read_bytes() == (ROOT / src).read_bytes()
