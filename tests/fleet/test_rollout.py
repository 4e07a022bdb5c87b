"""Rollout analytics (leadwire.fleet.rollout): exact rows on a hand-built upgrade, the Spark tables
equal to the DuckDB oracle's on a synthetic rollout, and the regression flag: raised for a release
made worse on purpose, not raised where nothing changed."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import pandas as pd
import pytest

from tests.fleet.conftest import T0, arrivals_df, stream, table_df

pytest.importorskip("duckdb")

from leadwire.fleet import transforms as T
from leadwire.fleet.extract import Inputs, extract
from leadwire.fleet.oracle import compare_tables
from leadwire.fleet.plan import by_device
from leadwire.fleet.rollout import T975, Z, rollout_inputs, rollout_tables
from leadwire.fleet.rollout_oracle import run_rollout_oracle
from leadwire.fleet.rollout_synth import RolloutConfig, rollout_synth_config, write_rollout

KEYS = {
    "rollout_windows": ["firmware_version", "window_start"],
    "rollout_releases": ["firmware_version"],
    "rollout_cohorts": ["firmware_version", "cohort"],
    "rollout_before_after": ["from_version", "to_version", "side"],
    "rollout_regressions": ["firmware_version", "metric"],
}


def _spark_rollout(spark: Any, inputs: Inputs) -> dict[str, pd.DataFrame]:
    """The rollout stage's inputs as the job has them (its arrivals by device, the channel windows
    of the lead-domain passes), then the rollout tables."""
    arr = by_device(inputs.arrivals, 3600).localCheckpoint()
    cw = T.transform_channel_windows(T.transform_order(T.transform_leads(arr, None), None))
    inp = {k: v.localCheckpoint() for k, v in rollout_inputs(arr).items()}
    out = rollout_tables(
        cw.localCheckpoint(), inp["rtimes"], inp["rlat"], inputs.boots, cut=lambda d: d.localCheckpoint()
    )
    return {k: v.toPandas() for k, v in out.items()}


def _boot(dev: str, epoch: int, boots: int, fw: str, at: dt.datetime) -> dict[str, Any]:
    return {
        "device_id": dev,
        "boot_epoch": epoch,
        "boots": boots,
        "firmware_version": fw,
        "board": "rp2040",
        "transport": "udp",
        "first_seen_ts": at,
        "detected_by": "hello",
        "bridge_id": "b1",
    }


def _wilson(p: float, n: float) -> tuple[float, float]:
    c = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    h = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / (1 + Z * Z / n)
    return (0.0 if p == 0 else max(0.0, c - h)), (1.0 if p == 1 else min(1.0, c + h))


@pytest.fixture(scope="module")
def upgrade(spark: Any) -> dict[str, pd.DataFrame]:
    """d1 upgrades 1.0.0 -> 1.1.0 (a reboot) and loses seq 102 on 1.1.0; d2 stays on 1.0.0 and
    crashes once (a reboot on the same firmware). All on 2026-01-01."""
    h = dt.timedelta(hours=1)
    rows = [
        *stream([0, 1, 2, 3, 4], device_id="d1", boot_epoch=1, firmware_version="1.0.0", t0=T0),
        *stream(
            [100, 101, 103, 104, 105], 6, T0 + 10 * h, device_id="d1", boot_epoch=2, firmware_version="1.1.0"
        ),
        *stream([0, 1, 2, 3], device_id="d2", boot_epoch=5, firmware_version="1.0.0", t0=T0 + h),
        *stream([0, 1, 2], 5, T0 + 12 * h, device_id="d2", boot_epoch=6, firmware_version="1.0.0"),
    ]
    boots = [
        _boot("d1", 1, 1, "1.0.0", T0),
        _boot("d1", 2, 2, "1.1.0", T0 + 10 * h),
        _boot("d2", 5, 1, "1.0.0", T0 + h),
        _boot("d2", 6, 2, "1.0.0", T0 + 12 * h),
    ]
    inputs = Inputs(arrivals_df(spark, rows), table_df(spark, "losses", []), table_df(spark, "boots", boots))
    return _spark_rollout(spark, inputs)


def test_rollout_upgrade_splits_rows_not_devices(upgrade: dict[str, pd.DataFrame]) -> None:
    rel = upgrade["rollout_releases"].set_index("firmware_version")
    # each device once, under the release it ran last: 2 devices, not 3
    assert rel["devices"].to_dict() == {"1.0.0": 1, "1.1.0": 1}
    assert rel["devices_seen"].to_dict() == {"1.0.0": 2, "1.1.0": 1}
    assert rel["messages"].to_dict() == {"1.0.0": 12, "1.1.0": 5}
    assert rel["lost"].to_dict() == {"1.0.0": 0, "1.1.0": 1}
    # d1's reboot into 1.1.0 is an upgrade, d2's into 1.0.0 again a crash restart
    assert rel["upgrades"].to_dict() == {"1.0.0": 0, "1.1.0": 1}
    assert rel["crash_restarts"].to_dict() == {"1.0.0": 1, "1.1.0": 0}
    assert rel["restart_rate"].to_dict() == {"1.0.0": 0.5, "1.1.0": 0.0}
    win = upgrade["rollout_windows"]
    assert win["devices"].sum() == 2 and len(win) == 2
    assert rel.loc["1.1.0", "first_rx_us"] == int((T0 + dt.timedelta(hours=10)).timestamp() * 1e6)


def test_rollout_interval_is_wilson_on_effective_n(upgrade: dict[str, pd.DataFrame]) -> None:
    rel = upgrade["rollout_releases"].set_index("firmware_version")
    # one device: deff 1, t on 1 degree of freedom: n_eff = 6 * (z / t)^2
    lo, hi = _wilson(1 / 6, 6 * (Z / T975[0]) ** 2)
    assert rel.loc["1.1.0", "loss_rate"] == pytest.approx(1 / 6, rel=1e-12)
    assert rel.loc["1.1.0", "loss_lo"] == pytest.approx(lo, rel=1e-9)
    assert rel.loc["1.1.0", "loss_hi"] == pytest.approx(hi, rel=1e-9)
    # 1.0.0: two devices without loss, one of their two device-days with a crash restart
    assert rel.loc["1.0.0", "loss_lo"] == 0.0
    deff = max(1.0, 2 / 1 * ((1 - 0.5) ** 2 + (0 - 0.5) ** 2) / (2 * 0.5 * 0.5))
    lo, hi = _wilson(0.5, 2 / deff * (Z / T975[0]) ** 2)
    assert (rel.loc["1.0.0", "restart_lo"], rel.loc["1.0.0", "restart_hi"]) == pytest.approx(
        (lo, hi), rel=1e-9
    )


def test_rollout_cohort_and_before_after(upgrade: dict[str, pd.DataFrame]) -> None:
    co = upgrade["rollout_cohorts"].set_index(["firmware_version", "cohort"])
    assert co["devices_seen"].to_dict() == {("1.0.0", "initial"): 2, ("1.1.0", "2026-01-01"): 1}
    ba = upgrade["rollout_before_after"].set_index(["from_version", "to_version", "side"])
    assert ba["messages"].to_dict() == {("1.0.0", "1.1.0", "before"): 5, ("1.0.0", "1.1.0", "after"): 5}
    assert ba["lost"].to_dict() == {("1.0.0", "1.1.0", "before"): 0, ("1.0.0", "1.1.0", "after"): 1}
    # too few devices for a flag either way
    assert not upgrade["rollout_regressions"]["regression"].any()


def _fleet(
    spark: Any, tmp: Any, worse: str | None
) -> tuple[dict[str, pd.DataFrame], dict[str, pd.DataFrame]]:
    d = str(tmp)
    cfg = rollout_synth_config(rows=12_000, seed=0)
    write_rollout(cfg, RolloutConfig(worse=worse, extra_loss=0.05, latency_factor=2.0), d)
    return _spark_rollout(spark, extract(spark, d)), run_rollout_oracle(d)


def test_rollout_regression_flagged_for_worse_release_equals_oracle(spark: Any, tmp_path: Any) -> None:
    got, want = _fleet(spark, tmp_path, "1.1.0")
    assert compare_tables(got, want, KEYS) == []
    reg = got["rollout_regressions"]
    flagged = reg[reg["regression"]]
    assert flagged[["firmware_version", "previous_version", "metric"]].values.tolist() == [
        ["1.1.0", "1.0.0", "loss"]
    ]
    r = flagged.iloc[0]
    assert r["lo"] > r["previous_hi"]
    rel = got["rollout_releases"].set_index("firmware_version")
    assert rel["devices"].sum() == 40 and rel["devices_seen"].sum() > 40
    # the worse release's latency doubled
    ratio = rel.loc["1.1.0", "rx_to_commit_p50_us"] / rel.loc["1.0.0", "rx_to_commit_p50_us"]
    assert 1.8 < ratio < 2.2


def test_regression_not_flagged_when_nothing_changed(spark: Any, tmp_path: Any) -> None:
    got, want = _fleet(spark, tmp_path, None)
    assert compare_tables(got, want, KEYS) == []
    reg = got["rollout_regressions"]
    assert len(reg) == 8 and not reg["regression"].any()
