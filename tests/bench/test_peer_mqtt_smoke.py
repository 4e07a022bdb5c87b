"""Smoke run of bench/peer_mqtt_bench.py: a few thousand events through each system, with and
without loss. Checks that the harness works and accounts for every event, not how fast anything is
(timed assertions flake on shared machines; the figures are in docs/benchmarks.md).

Skips where the benchmark cannot run, with the one line the bench says when it exits 2 (it installs
nothing): not root, no network namespace or nftables, no mosquitto.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "peer_mqtt_bench.py"

pytestmark = [pytest.mark.slow, pytest.mark.micropython]


def test_peer_mqtt_smoke(tmp_path: Path) -> None:
    cmd = [sys.executable, str(BENCH), "--quick", "--events", "3000", "--lw-rates", "64:2000",
           "--seconds", "4", "--nagle-seconds", "1", "--lw-seconds", "2", "--out", str(tmp_path)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=280)
    last = (r.stderr.strip().splitlines() or [""])[-1]
    if r.returncode == 2 and last.startswith("peer_mqtt_bench: "):  # cannot run here (not a usage error)
        pytest.skip(last)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "acknowledged events/s" in r.stdout and "lost silently" in r.stdout
    res = json.loads((tmp_path / "results.json").read_text())
    runs = res["clean"] + res["impaired"]
    assert {r["system"] for r in runs} >= {"leadwire", "MQTT QoS 0", "MQTT QoS 1 nodelay", "MQTT QoS 1"}
    for run in runs:
        # every event is delivered, or counted lost by the receiver, or lost silently: nothing else
        assert run["received"] + run["known_lost"] + run["silent_lost"] == run["generated"], run
        assert run["up_packets"] > 0 and run["down_packets"] > 0, run  # the counters saw the board's link
        if run["system"] == "leadwire":
            assert run["silent_lost"] == 0, run  # leadwire accounts for every offset
            assert run["events"] > 0, run
        else:
            assert run["known_lost"] == 0  # MQTT gives the receiver no loss signal
            assert run["received"] > 0, run
