"""Smoke run of bench/goodput_bench.py: one short run of each measurement (leadwire over UDP, the raw
MicroPython UDP baseline, the emulated serial line and leadwire over it at 921600 baud). Checks
that the harness works and prints its table rows with numbers, not how fast anything is (timed
assertions flake on shared machines; the figures are in docs/benchmarks.md).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "goodput_bench.py"

pytestmark = [pytest.mark.slow, pytest.mark.micropython]


def _number(row: str, col: int) -> float:
    """The number in the given column of a Markdown table row ('**0.856**', '1,234' ...)."""
    cell = row.strip().strip("|").split("|")[col]
    return float(re.sub(r"[*,]", "", cell).split()[0])


def test_goodput_smoke(tmp_path: Path) -> None:
    out = tmp_path / "res.json"
    cmd = [sys.executable, str(BENCH), "--repeat", "1", "--seconds", "1", "--rates", "0",
           "--bauds", "921600", "--no-signed", "--json", str(out)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=90, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = {ln.split("|")[1].strip(): ln for ln in r.stdout.splitlines() if ln.startswith("| ")}
    lw = rows["leadwire: board -> bridge -> SQLite, stored"]
    raw = next(v for k, v in rows.items() if k.startswith("raw MicroPython -> CPython"))
    serial = rows["921,600"]
    assert _number(lw, 1) > 0 and _number(raw, 1) > 0 and _number(raw, 3) > 0
    assert _number(serial, 2) > 0  # the emulated line's own rate
    assert _number(serial, 3) > 0 and _number(serial, 4) > 0  # stored payload B/s, ratio
    res = json.loads(out.read_text())
    # the raw datagrams are the size leadwire put in its EVENTS datagrams (whole 64 B events)
    assert res["raw_size"] % 64 == 0 and res["raw_size"] > 0
    for run in res["udp_lw"] + res["serial"]:
        assert run["silent_lost"] == 0 and run["failed"] is None, run
