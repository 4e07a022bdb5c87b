"""Issue 15 point 6: a skewed fleet (one device holds half the rows in ONE boot, one lead domain).

The generator's shape (numpy only), and the whole job on it at a small size with the window
buffer forced to spill: every table equals the DuckDB oracle, the summary the ground truth.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from leadwire.fleet.synth import SUMMARY_TRUTH, SynthConfig, generate, write_export

HOT = "dev-0000"


def _cfg() -> SynthConfig:
    return SynthConfig(
        rows=16_000, devices=5, hot_device_share=0.5, lead_errors=2, dup_flag_errors=1, seed=11
    )


def test_hot_device_holds_half_the_rows_in_one_lead_domain() -> None:
    tables, truth = generate(_cfg())
    a = tables["arrivals"]
    dev = np.array(a.column("device_id").to_pylist())
    hot = dev == HOT
    assert 0.49 <= hot.mean() <= 0.52  # half the rows (+ the injected duplicates)
    assert len(set(np.asarray(a.column("boot_epoch"))[hot].tolist())) == 1  # one boot
    assert set(np.array(a.column("kind").to_pylist())[hot].tolist()) == {"event"}  # one lead domain
    assert truth.per_device[HOT]["boots"] == 1 and truth.per_device[HOT]["restarts"] == 0
    assert truth.per_device[HOT]["messages"] == int(hot.sum())
    assert len(set(dev[~hot].tolist())) == 4  # the other devices share the rest
    t = truth.totals
    assert t["rows"] == a.num_rows and t["unique"] + t["duplicates"] == t["rows"]
    # the default (no hot device) is unchanged by the option
    plain, _ = generate(SynthConfig(rows=16_000, devices=5, seed=11))
    again, _ = generate(SynthConfig(rows=16_000, devices=5, seed=11, hot_device_share=0.0))
    assert plain["arrivals"].equals(again["arrivals"])
    with pytest.raises(ValueError):
        generate(SynthConfig(rows=1000, devices=1, hot_device_share=0.5))


@pytest.fixture(scope="module")
def skew_run(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, object, dict]]:
    from leadwire.fleet.job import run_job

    base = tmp_path_factory.mktemp("skew")
    tables, truth = generate(_cfg())
    write_export(tables, str(base / "export"))
    # force the window operator past its in-memory buffer and to spill to disk on the hot domain
    keys = {
        "spark.sql.windowExec.buffer.in.memory.threshold": "512",
        "spark.sql.windowExec.buffer.spill.threshold": "1024",
    }
    old = {k: spark.conf.get(k, None) for k in keys}
    for k, v in keys.items():
        spark.conf.set(k, v)
    try:
        summary = run_job(str(base / "export"), str(base / "out"), spark, report=False, progress=False)
    finally:
        for k, v in old.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)
    yield base / "export", base / "out", truth, summary


@pytest.mark.spark
def test_skewed_fleet_equals_truth_and_oracle(skew_run) -> None:
    pytest.importorskip("duckdb")
    from leadwire.fleet.job import TABLE_ORDER
    from leadwire.fleet.oracle import compare_tables, read_job_tables, run_oracle

    export, out, truth, s = skew_run
    t = truth.totals
    for got_key, want_key in {**SUMMARY_TRUTH, "devices": "devices"}.items():
        assert s[got_key] == t[want_key], got_key
    assert s["rx_to_commit_p50_us"] == pytest.approx(t["latency_rx_to_commit_p50_us"])
    assert s["gen_to_rx_p99_us"] == pytest.approx(t["latency_gen_to_rx_p99_us"])
    got = read_job_tables(str(out), TABLE_ORDER)
    want = run_oracle(str(export))
    assert compare_tables(got, want, TABLE_ORDER) == []
