"""`leadwire flash` and `mpremote mip install` against a virtual board over a pty (mpremote's raw
REPL on the unix port, reached with `resume`), then the firmware booting from the flashed files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from leadwire import manifest
from leadwire.tools.authclient import AuthClient
from leadwire.tools.board import start_board
from leadwire.tools.flash import flash
from leadwire.tools.wireclient import UdpLink

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.micropython, pytest.mark.timeout(120)]


@pytest.mark.parametrize("kind,march", [("esp32", "xtensawin"), ("rp2", "armv6m"), ("unix", "x64")])
def test_dry_run_prints_the_plan(kind: str, march: str, tmp_path: Path) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text('{"id": "x"}')
    args = ["--port", "/dev/null", "--board", kind, "--config", str(cfg), "--dry-run", "--no-auth"]
    r = CliRunner().invoke(flash, args)
    assert r.exit_code == 0, r.output
    assert "-march=%s" % march in r.output
    assert ":leadwire/ring.mpy" in r.output and ":main.py" in r.output and ":config.json" in r.output
    assert ":boards/%s.mpy" % kind in r.output
    assert ("resume" in r.output) == (kind == "unix")
    assert (":wlan.mpy" in r.output) == (kind != "unix")
    assert (":lwdma.mpy" in r.output) == (kind == "rp2")


def test_bad_config_is_refused_before_touching_the_board(tmp_path: Path) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text("{not json")
    r = CliRunner().invoke(
        flash, ["--port", "/dev/null", "--board", "rp2", "--config", str(cfg), "--no-auth"]
    )
    assert r.exit_code != 0 and "config" in r.output


KEY = "00112233445566778899aabbccddeeff" * 2


@pytest.mark.parametrize(
    "cfg,args,error",
    [
        ({"id": "x"}, [], "authentication: give --key HEX, --new-key or --no-auth"),
        (None, [], "authentication: give --key HEX, --new-key or --no-auth"),
        ({"id": "x"}, ["--key", KEY, "--no-auth"], "give one of --key, --new-key, --no-auth"),
        ({"id": "x"}, ["--new-key", "--no-auth"], "give one of --key, --new-key, --no-auth"),
        ({"id": "x"}, ["--key", KEY[:-2] + "zz"], "--key: a key is hex digits only"),
        ({"id": "x"}, ["--key", "+f" * 32], "--key: a key is hex digits only"),  # int("+f", 16) is 15
        ({"id": "x"}, ["--key", KEY[:30]], "--key: a key is 32..128 hex digits"),
        ({"key": KEY[:-2] + "zz"}, [], "config key: a key is hex digits only"),
    ],
)
def test_the_auth_choice_is_required_and_checked(
    tmp_path: Path, cfg: dict | None, args: list, error: str
) -> None:
    extra = []
    if cfg is not None:
        (tmp_path / "c.json").write_text(json.dumps(cfg))
        extra = ["--config", str(tmp_path / "c.json")]
    r = CliRunner().invoke(flash, ["--port", "/dev/null", "--board", "rp2", "--dry-run", *extra, *args])
    assert r.exit_code == 1 and error in r.output, r.output
    assert KEY[:16] not in r.output  # no key (or part of one) in an error


@pytest.mark.parametrize(
    "cfg,args,want",
    [
        ({"id": "x"}, ["--key", KEY.upper()], {"id": "x", "key": KEY}),
        ({"id": "x", "auth": False}, ["--key", KEY], {"id": "x", "key": KEY}),
        ({"id": "x", "key": KEY}, ["--no-auth"], {"id": "x", "auth": False}),
        ({"id": "x", "key": KEY}, [], {"id": "x", "key": KEY}),
        ({"id": "x", "auth": False}, [], {"id": "x", "auth": False}),
    ],
)
def test_the_auth_choice_goes_into_the_config(cfg: dict, args: list, want: dict) -> None:
    from leadwire.tools.flash import auth_config

    key = args[1] if args[:1] == ["--key"] else None
    assert auth_config(cfg, key, False, "--no-auth" in args) == (want, None)


def test_dry_run_never_shows_the_key(tmp_path: Path) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"id": "x"}))
    for args in (["--key", KEY], ["--new-key"]):
        r = CliRunner().invoke(
            flash, ["--port", "/dev/null", "--board", "rp2", "--config", str(cfg), "--dry-run", *args]
        )
        assert r.exit_code == 0, r.output
        assert KEY not in r.output and 'key = "' not in r.output
        assert ":config.json (%s)" % ("new key" if args == ["--new-key"] else "key set") in r.output
    assert json.loads(cfg.read_text()) == {"id": "x"}  # the operator's file is left as it was


def test_flash_then_boot_from_the_flashed_files(tmp_path: Path) -> None:
    d = tmp_path / "board"
    cfg = tmp_path / "device.json"
    cfg.write_text(json.dumps({"id": "flashed-1", "sensors": [{"ch": 5, "hz": 20, "size": 8}]}))
    repl = start_board("repl", board_dir=d)
    # left from an earlier install as source: MicroPython would import them instead of the .mpy
    (d / "leadwire").mkdir(parents=True, exist_ok=True)
    (d / "lwagent.py").write_text("raise ImportError('stale')\n")
    (d / "leadwire" / "ring.py").write_text("raise ImportError('stale')\n")
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
                "--new-key",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert "cp " in r.stdout and "flashed" in r.stdout  # progress shown
        # the board's version and chip, asked first and shown; the build follows them
        assert re.search(r"^board: MicroPython 1\.\d+\.\d+, linux \(linux ", r.stdout, re.M), r.stdout
        assert "loads .mpy 6.3, native code: x64" in r.stdout and "(mpy-cross -march=x64)" in r.stdout
        assert "removed stale lwagent.py" in r.stdout and "removed stale leadwire/ring.py" in r.stdout
        # the new key: printed once, as the bridge config line, and nowhere else
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith('key = "')]
        assert len(lines) == 1
        key = lines[0].split('"')[1]
        assert len(key) == 64 and r.stdout.count(key) == 1 and key not in r.stderr
        repl.proc.wait(10)  # the "reset": the interpreter exited  # type: ignore[union-attr]
    finally:
        repl.close()
    for f in ("main.py", "lwagent.mpy", "lwboot.mpy", "boards/unix.mpy", "leadwire/ring.mpy", "config.json"):
        assert (d / f).exists(), f
    assert not (d / "lwagent.py").exists() and not (d / "leadwire" / "ring.py").exists()
    flashed = json.loads((d / "config.json").read_text())
    assert (flashed["id"], flashed["key"]) == ("flashed-1", key) and "auth" not in flashed
    assert json.loads(cfg.read_text()) == {"id": "flashed-1", "sensors": [{"ch": 5, "hz": 20, "size": 8}]}
    # power on from the flashed files (no build): its HELLO carries the flashed config, signed
    with start_board("udp", board_dir=d, build_firmware=False) as b:
        assert b.address is not None and b.key == key
        c = AuthClient(UdpLink(b.address), key)
        try:
            h = c.handshake()
            assert (h.board_id, h.board, h.boots, h.session) == ("flashed-1", "unix", 1, 1)
            recs = []
            for _ in range(20):
                recs = c.records(5)
                if recs:
                    break
                time.sleep(0.1)
            assert recs  # the flashed sensor channel
        finally:
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
    core = sorted(m + ".py" for m in manifest.DEVICE + manifest.HOST)
    assert sorted(Path(dest).name for dest, _ in pkg["urls"]) == core  # every core module MicroPython runs
    for dest, src in pkg["urls"]:
        assert (d / "lib" / dest).read_bytes() == (ROOT / src).read_bytes()


# -- the board's version and chip: a fake board answers the first mpremote step -------------------


def _mpy(sub: int, arch: int) -> int:
    return 6 | (sub << 8) | (arch << 10)  # sys.implementation._mpy


def _fake_flash(
    monkeypatch: pytest.MonkeyPatch, kind: str, answer: str, tmp_path: Path
) -> tuple[object, list[list[str]], Path]:
    """`leadwire flash` against a board that answers `answer` to the version question; the later
    mpremote steps are recorded (not run) and the staged build is kept in the returned directory."""
    import leadwire.tools.flash as fl

    ran: list[list[str]] = []
    kept = tmp_path / "staged"

    def fake_step(
        cmd: list[str], port: str, i: int, n: int, name: str, echo: bool = True, may_fail: bool = False
    ) -> str:
        ran.append(cmd)
        if i == 1:
            return answer
        if i == 3:  # the copy step: keep what was staged
            import shutil

            src = Path(cmd[cmd.index("cp") + 1]).parent
            shutil.copytree(src, kept)
        return ""

    monkeypatch.setattr(fl, "run_step", fake_step)
    r = CliRunner().invoke(flash, ["--port", "/dev/fake", "--board", kind, "--no-auth"])
    return r, ran, kept


ESP32_C3 = "LWBOARD esp32 %d 1.24.1 ESP32C3 module with ESP32C3\n" % _mpy(3, 11)


def test_a_risc_v_esp32_gets_native_code_for_its_chip(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    r, ran, kept = _fake_flash(monkeypatch, "esp32", ESP32_C3, tmp_path)
    assert r.exit_code == 0, r.output
    said = "board: MicroPython 1.24.1, esp32 (ESP32C3 module with ESP32C3), loads .mpy 6.3, native code: "
    said += "rv32imc"
    assert said in r.output
    assert "native code for rv32imc (the board's), not xtensawin" in r.output
    assert "plan for esp32 on /dev/fake (mpy-cross -march=rv32imc):" in r.output
    assert len(ran) == 4  # asked, made directories, copied, reset
    viper = (kept / "leadwire" / "_viper.mpy").read_bytes()
    assert viper[:4] == bytes([ord("M"), 6, (11 << 2) | 3, 31])  # v6.3, rv32imc, 31-bit small ints


RP2350_RISCV = "LWBOARD rp2 %d 1.26.1 Raspberry Pi Pico2 with RP2350-RISCV\n" % _mpy(3, 11)
RP2040 = "LWBOARD rp2 %d 1.26.1 Raspberry Pi Pico with RP2040\n" % _mpy(3, 4)


@pytest.mark.parametrize("answer,thumb", [(RP2040, True), (RP2350_RISCV, False)])
def test_the_thumb_kernels_go_only_to_a_thumb_board(
    answer: str, thumb: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The asm_thumb modules (_thumb, and lwdma's hand-over to the DMA channel) are planned, built
    and copied for an ARM rp2 only: an RP2350 running its RISC-V cores gets the viper module for its
    chip, sends by machine.UART, and loses a Thumb module an earlier flash left."""
    r, ran, kept = _fake_flash(monkeypatch, "rp2", answer, tmp_path)
    assert r.exit_code == 0, r.output
    assert (kept / "leadwire" / "_viper.mpy").exists()
    assert (kept / "leadwire" / "_thumb.mpy").exists() is thumb and (kept / "lwdma.mpy").exists() is thumb
    assert (":leadwire/_thumb.mpy" in r.output) is thumb and (":lwdma.mpy" in r.output) is thumb
    assert len(ran) == 4  # asked, made directories, copied, reset
    mk = ran[1][-1]  # the exec of step 2: the stale files it removes
    assert ("'leadwire/_thumb.mpy'" in mk) is not thumb and ("'lwdma.mpy'" in mk) is not thumb
    assert "'leadwire/_viper.mpy'" not in mk


def test_micropython_1_22_gets_no_viper_and_loses_a_stale_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    answer = "LWBOARD rp2 %d 1.22.2 Raspberry Pi Pico with RP2040\n" % _mpy(2, 4)
    r, ran, kept = _fake_flash(monkeypatch, "rp2", answer, tmp_path)
    assert r.exit_code == 0, r.output
    said = "native .mpy sub-version 6.2 (mpy-cross emits 6.3): _viper.mpy left out, the bytecode twins run"
    assert said in r.output
    assert ":leadwire/_viper.mpy" not in r.output and not (kept / "leadwire" / "_viper.mpy").exists()
    assert (kept / "leadwire" / "crc16.mpy").exists()
    mk = ran[1][-1]  # the exec of step 2: the stale files it removes
    assert "'leadwire/_viper.mpy'" in mk and "'lwagent.py'" in mk and "'leadwire/ring.py'" in mk


@pytest.mark.parametrize(
    "kind,answer,error",
    [
        (
            "rp2",
            ESP32_C3,
            "the board on /dev/fake is esp32 (ESP32C3 module with ESP32C3), not a rp2 board:"
            " use --board esp32",
        ),
        (
            "rp2",
            "LWBOARD rp2 %d 1.21.0 Pico\n" % _mpy(1, 4),
            "the board on /dev/fake runs MicroPython 1.21.0: leadwire needs 1.22 or later",
        ),
        (
            "rp2",
            "LWBOARD rp2 -1 1.24.0 Pico\n",
            "the board on /dev/fake cannot load .mpy files (no sys.implementation._mpy): leadwire needs a"
            " firmware built with .mpy loading",
        ),
        (
            "rp2",
            "LWBOARD rp2 %d 2.0.0 Pico\n" % (7 | (4 << 10)),
            "the board on /dev/fake loads .mpy version 7; the installed mpy-cross emits version 6",
        ),
        (
            "unix",
            "MicroPython v1.29.0\n>>> ",
            "the board on /dev/fake did not say its version (mpremote exec): >>>",
        ),
    ],
)
def test_a_board_leadwire_cannot_run_on_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kind: str, answer: str, error: str
) -> None:
    r, ran, _ = _fake_flash(monkeypatch, kind, answer, tmp_path)
    assert r.exit_code == 1 and r.output.strip().splitlines()[-1] == "Error: " + error, r.output
    assert len(ran) == 1  # asked, nothing built or copied


def test_a_compile_error_is_one_line_with_mpy_cross_s_message(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import shutil

    import leadwire.tools.firmware_build as fb

    fw = tmp_path / "firmware"
    shutil.copytree(fb.FIRMWARE, fw, ignore=shutil.ignore_patterns("typings"))
    (fw / "lwboot.py").write_text("import sys\n\ndef boot(:\n    pass\n")
    monkeypatch.setattr(fb, "FIRMWARE", fw)
    answer = "LWBOARD linux %d 1.29.0 linux [GCC 14.2.1] version\n" % _mpy(3, 2)
    r, ran, _ = _fake_flash(monkeypatch, "unix", answer, tmp_path)
    assert r.exit_code == 1, r.output
    assert r.output.strip().splitlines()[-1] == (
        "Error: mpy-cross -march=x64 cannot compile %s: line 3: SyntaxError: invalid syntax"
        % (fw / "lwboot.py")
    )
    assert "Traceback" not in r.output and len(ran) == 1
