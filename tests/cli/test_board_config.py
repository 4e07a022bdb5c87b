"""A board's config.json is checked on the host like the bridge's TOML (tools/board_config.py): the
schema comes from the firmware, unknown keys and wrong types are refused by `leadwire flash` and
`leadwire board` before anything is written; flash finds the one USB port and asks the board kind."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import leadwire.tools.flash as fl
from leadwire.cli import main
from leadwire.tools import board_config
from leadwire.tools.board_config import BoardConfigError, check

ROOT = Path(__file__).resolve().parents[2]
TOP = "alarm, auth, health, id, key, report, ring, sensors, serial, slot, tick, udp, wdt, wlan"


def test_every_key_the_firmware_reads_has_a_type() -> None:
    reads = board_config.firmware_reads()
    assert reads == {
        "serial": {"uart", "baud", "tx", "rx", "path", "dma"},
        "wlan": {"ssid", "key", "tries", "wait", "country"},
        "i2c": {"bus", "sda", "scl", "freq", "addr", "reg", "n"},
    }
    for part, keys in reads.items():
        assert keys <= set(board_config.TYPES[part]), part


def test_the_documented_example_configs_are_accepted() -> None:
    examples = re.findall(r"```json\n(\{.*?)```", (ROOT / "docs" / "firmware.md").read_text(), re.S)
    configs = [json.loads(e) for e in examples]
    configs = [c for c in configs if "sensors" in c]
    assert len(configs) >= 2
    for c in configs:
        check(c)
    assert set(configs[0]) == set(TOP.split(", ")) - {"auth"}  # the reference shows every key but auth
    assert any("adc" in s for c in configs for s in c["sensors"])  # and the real sources


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"rign": 256}, "rign: unknown key (expected one of %s)" % TOP),
        ({"ring": "256"}, 'ring: must be an integer in 1..4096, got "256"'),
        ({"ring": True}, "ring: must be an integer in 1..4096, got true"),
        ({"slot": 600}, "slot: must be an integer in 8..512, got 600"),
        ({"health": {"period": 5}}, "health.period: unknown key (expected one of ch, ms)"),
        ({"health": 5}, "health: must be a JSON object, got 5"),
        ({"udp": {"port": 0}}, "udp.port: must be an integer in 1..65535, got 0"),
        ({"udp": {"host": 7}}, "udp.host: must be a string, got 7"),
        ({"serial": {"port": 1}},
         "serial.port: unknown key (expected one of baud, dma, frame, gap, path, rx, tx, uart)"),
        ({"serial": {"dma": 1}}, "serial.dma: must be true or false, got 1"),
        ({"wlan": {"ssid": "lab", "password": "x"}},
         "wlan.password: unknown key (expected one of country, key, ssid, tries, wait)"),
        ({"sensors": {"ch": 1}}, 'sensors: must be a list of objects, got {"ch": 1}'),
        ({"sensors": [{"ch": 1, "rate": 5}]},
         "sensors[0].rate: unknown key (expected one of adc, call, ch, hz, i2c, size)"),
        ({"sensors": [{"ch": 1, "adc": 0, "call": "m.f"}]},
         "sensors[0]: give one source of adc, i2c, call, got adc, call"),
        ({"sensors": [{"ch": 1, "i2c": {"bus": 0}}]}, "sensors[0].i2c.addr: missing: the device's address"),
        ({"sensors": [{"ch": 1, "i2c": {"addr": 72, "sda": 4}}]},
         "sensors[0].i2c.sda: give sda and scl both, or neither (the port's pins)"),
        ({"sensors": [{"ch": 1, "i2c": {"addr": 72, "speed": 1}}]},
         "sensors[0].i2c.speed: unknown key (expected one of addr, bus, freq, n, reg, scl, sda)"),
        ({"sensors": [{"ch": 1, "call": "read"}]}, 'sensors[0].call: must be "module.function", got "read"'),
        ({"sensors": [{"ch": 1, "adc": "GP26"}]}, 'sensors[0].adc: must be an integer, got "GP26"'),
        ({"sensors": [{"ch": 9}]}, "sensors[0].ch: channel 9 is taken (alarm)"),
        ({"sensors": [{"ch": 1}, {"ch": 1}]}, "sensors[1].ch: channel 1 is taken (sensors[0])"),
        ({"slot": 16, "sensors": [{"ch": 1, "size": 32}]}, "sensors[0].size: 32 is above the slot size (16)"),
        ({"alarm": {"ch": 8}}, "alarm.ch: must differ from health.ch (8)"),
        ({"id": ""}, 'id: must be a non-empty string, got ""'),
        ({"auth": "no"}, 'auth: must be false (authentication off) or true, got "no"'),
    ],
)  # fmt: skip
def test_bad_configs_are_one_line_naming_the_key(config: dict[str, Any], error: str) -> None:
    with pytest.raises(BoardConfigError) as e:
        check(config)
    assert str(e.value) == error


def test_links_may_be_turned_off() -> None:
    check({"udp": False, "serial": {"uart": 1, "baud": 921600}, "wlan": {"ssid": "lab", "key": "k"}})


def test_flash_and_board_refuse_a_typo_before_writing_anything(tmp_path: Path) -> None:
    cfg = tmp_path / "pico.json"
    cfg.write_text('{"id": "p", "rign": 512}')
    want = "leadwire: error: config %s: rign: unknown key (expected one of %s)\n" % (cfg, TOP)
    r = CliRunner().invoke(main, ["flash", "--port", "/dev/null", "--board", "rp2", "--config", str(cfg),
                                  "--no-auth"])  # fmt: skip
    assert (r.exit_code, r.output) == (2, want)
    board_dir = tmp_path / "b"
    r = CliRunner().invoke(main, ["board", "--config", str(cfg), "--dir", str(board_dir)])
    assert (r.exit_code, r.output) == (2, want)
    assert not board_dir.exists()


def test_a_port_that_does_not_exist_is_said_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fl, "usb_ports", lambda: ["/dev/ttyACM0"])
    r = CliRunner().invoke(
        main, ["flash", "--port", "/dev/leadwire-no-such-port", "--board", "rp2", "--no-auth"]
    )
    assert r.exit_code == 2
    assert r.output.splitlines()[-1] == (
        "leadwire: error: no serial port /dev/leadwire-no-such-port (USB serial ports here: /dev/ttyACM0)"
    )


@pytest.mark.parametrize(
    ("ports", "said"),
    [
        ([], "leadwire: error: no board found: no USB serial port here (plug one in, or give --port)"),
        (["/dev/ttyACM0", "/dev/ttyUSB0"], "leadwire: error: 2 USB serial ports here (/dev/ttyACM0, "
                                           "/dev/ttyUSB0): give --port"),
    ],
)  # fmt: skip
def test_port_auto_needs_exactly_one_usb_port(
    monkeypatch: pytest.MonkeyPatch, ports: list, said: str
) -> None:
    monkeypatch.setattr(fl, "usb_ports", lambda: ports)
    r = CliRunner().invoke(main, ["flash", "--no-auth"])
    assert (r.exit_code, r.output) == (2, said + "\n")


def test_the_one_port_and_the_board_kind_are_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """--port auto takes the one USB port; without --board the kind is what the board says (rp2)."""
    ran: list[list[str]] = []

    def fake_step(cmd: list[str], port: str, i: int, n: int, name: str, **kw: Any) -> str:
        ran.append(cmd)
        return (
            "LWBOARD rp2 %d 1.24.1 Raspberry Pi Pico W with RP2040\n" % (6 | 3 << 8 | 4 << 10)
            if i == 1
            else ""
        )

    monkeypatch.setattr(fl, "usb_ports", lambda: ["/dev/ttyACM3"])
    monkeypatch.setattr(fl, "run_step", fake_step)
    r = CliRunner().invoke(main, ["flash", "--no-auth"])
    assert r.exit_code == 0, r.output
    assert ran[0][1:] == ["connect", "/dev/ttyACM3", "resume", "exec", fl.ASK]
    assert "plan for rp2 on /dev/ttyACM3 (mpy-cross -march=armv6m):" in r.output
    assert ran[-1][1:] == ["connect", "/dev/ttyACM3", "reset"]


def test_a_dry_run_needs_the_board_kind() -> None:
    r = CliRunner().invoke(main, ["flash", "--port", "/dev/ttyACM0", "--dry-run", "--no-auth"])
    assert r.exit_code == 2
    assert "--dry-run needs --board (a dry run does not ask the board)" in r.output
