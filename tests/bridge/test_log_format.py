"""Log lines for people and for machines: log_format / --log-format text or json; by default text on
a terminal and JSON otherwise."""

from __future__ import annotations

import io
import json
import logging
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from leadwire.bridge import logs

from .test_check import UDP_OK, write_config

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
TIME = r"\d\d:\d\d:\d\d\.\d\d\d"


def one_record(fmt: str, stream: io.TextIOBase | None = None) -> str:
    buf = stream or io.StringIO()
    log = logs.setup("info", stream=buf, fmt=fmt)
    logs.event(log, logging.WARNING, "device_unreachable", device="a", rounds=5, causes=["no_answer"],
               detail="no answer at all", last=None)  # fmt: skip
    return buf.getvalue() if isinstance(buf, io.StringIO) else ""


def test_text_and_json_records() -> None:
    text = one_record("text")
    assert re.fullmatch(
        TIME
        + r' WARNING device_unreachable device=a rounds=5 causes=\["no_answer"\] detail="no answer at all" '
        r"last=-\n",
        text,
    ), text
    rec = json.loads(one_record("json"))
    assert {k: rec[k] for k in ("level", "event", "device", "rounds", "causes", "detail", "last")} == {
        "level": "warning",
        "event": "device_unreachable",
        "device": "a",
        "rounds": 5,
        "causes": ["no_answer"],
        "detail": "no answer at all",
        "last": None,
    }


def test_auto_is_text_on_a_terminal_json_otherwise() -> None:
    assert json.loads(one_record("auto"))["event"] == "device_unreachable"  # a StringIO: not a terminal
    master, slave = pty.openpty()
    try:
        with os.fdopen(slave, "w", closefd=False) as tty:
            one_record("auto", tty)
            tty.flush()
        line = os.read(master, 4096).decode()
    finally:
        os.close(master)
        os.close(slave)
    assert re.match(TIME + " WARNING device_unreachable device=a ", line), line


def run(cfg: Path, *args: str) -> list[str]:
    p = subprocess.run(
        [sys.executable, "-m", "leadwire.cli", "bridge", "--config", str(cfg), "--duration", "0.5", *args],
        capture_output=True, text=True, timeout=30, cwd=ROOT,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    return p.stderr.splitlines()


def test_the_bridge_process_config_and_option(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, UDP_OK)
    lines = run(cfg)  # stderr is a pipe: JSON
    assert [json.loads(x)["event"] for x in lines] == ["bridge_started", "bridge_stopped"]
    lines = run(cfg, "--log-format", "text")
    assert [re.match(TIME + r" INFO    (\w+) ", x)[1] for x in lines] == ["bridge_started", "bridge_stopped"]  # type: ignore[index]
    cfg = write_config(tmp_path, UDP_OK, bridge='metrics = ""\nlog_format = "text"')
    assert run(cfg)[0].split()[1:3] == ["INFO", "bridge_started"]
    assert json.loads(run(cfg, "--log-format", "json")[0])["event"] == "bridge_started"  # the option wins
