"""Smoke run of bridge_bench.py's fleet phase (tools/fleet_shards.py): a small fleet polled by two
shard processes, and the same with the bridge code of a git ref (--before). Checks that every device
is polled by exactly one shard, that the stores' accounting is exact and that the figures are
there, not how fast anything is (the figures are in docs/benchmarks.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "bridge_bench.py"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


def test_fleet_phase_two_shards_and_a_before_ref(tmp_path: Path) -> None:
    out = tmp_path / "res.json"
    cmd = [sys.executable, str(BENCH), "--only", "fleet", "--fleet-devices", "12", "--fleet-shards", "2",
           "--seconds", "1", "--writers", "process", "--before", "HEAD", "--json", str(out)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    runs = json.loads(out.read_text())["fleet"]
    assert sorted(x["code"] for x in runs) == ["before", "now"]
    for x in runs:
        assert (x["devices"], x["devices_polled"], x["shards"], x["silent"]) == (12, 12, 2, 0)
        assert x["round_trips_per_s"] > 0 and x["bridge_cpu_us_per_rt"] > 0
        # process CPU is counted in clock ticks (10 ms): 12 simulated devices for 1 s on an idle host
        # can stay under one tick, so their figure is only required to be there
        assert x["sim_cpu_us_per_rt"] >= 0
    assert "ratio now / before, bridge_cpu_us_per_rt" in r.stdout


def test_rt_cost_parts_without_io() -> None:
    """The rtcost phase's measurement (tools/fleet_shards.rt_cost): every device answered once per
    round after the three warm-up rounds, each part's CPU counted."""
    from leadwire.tools.fleet_shards import rt_cost

    r = rt_cost(20, 5)
    assert (r["devices"], r["round_trips"]) == (20, 2 * 20)
    for part in ("request", "device", "receive", "drain", "write"):
        assert r[part + "_us_per_rt"] > 0
    assert r["bridge_us_per_rt"] == r["request_us_per_rt"] + r["receive_us_per_rt"] + r["drain_us_per_rt"]
