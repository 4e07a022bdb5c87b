"""Incremental runs (incremental.py): an export that grows day by day, one day's files at a time
(a lagging bridge's a day late, into the earlier day's partitions), run with --incremental after
each export run, equals one full run over the same files, table by table, at every step checked;
each run reads only the new files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from leadwire.fleet.job import DATED_TABLES, TABLE_ORDER, BadInput, run_job
from leadwire.fleet.oracle import compare_tables, read_job_tables
from leadwire.fleet.rollout_stage import ROLLOUT_ORDER
from leadwire.fleet.synth import SynthConfig, generate
from leadwire.fleet.synth_days import export_days, publish_run
from leadwire.fleet.transforms import LATENCY_WIDE

pytestmark = pytest.mark.spark


@pytest.mark.timeout(900)
def test_incremental_runs_equal_the_full_run_table_by_table(spark: SparkSession, tmp_path: Path) -> None:
    tables, _ = generate(SynthConfig(rows=6000, devices=4, days=2, seed=7, max_delay=30, delay=0.02))
    days = export_days(tables)
    assert len(days) >= 2
    export, inc = tmp_path / "export", tmp_path / "inc"
    read = []
    for k in range(len(days) + 1):
        new = publish_run(tables, str(export), k, days)
        s = run_job(str(export), str(inc), spark, progress=False, report=False, incremental=True)
        read.append((s["rows_read"], new))
    # the last run's rollout tables describe the days it wrote: those of a full run over them,
    # but for the latency (the new rows')
    assert s["date_from"] is not None
    span = run_job(
        str(export),
        str(tmp_path / "span"),
        spark,
        progress=False,
        report=False,
        date_from=s["date_from"],
        date_to=s["date_to"],
    )
    assert span["rows"] > s["rows_read"]  # the days written hold rows earlier runs counted
    got, want = (read_job_tables(str(d), ROLLOUT_ORDER) for d in (inc, tmp_path / "span"))
    for t in (got, want):
        for n in ROLLOUT_ORDER:
            t[n] = t[n].drop(columns=[c for c in t[n].columns if c in LATENCY_WIDE])
    assert compare_tables(got, want, ROLLOUT_ORDER) == []
    assert len(want["rollout_windows"]) > 0 and want["rollout_windows"]["messages"].sum() == span["rows"]
    # every run after the first brought late files for the day before it (the lagging bridge)
    run_job(str(export), str(tmp_path / "full"), spark, progress=False, report=False)
    got = read_job_tables(str(inc), DATED_TABLES)
    want = read_job_tables(str(tmp_path / "full"), DATED_TABLES)
    assert compare_tables(got, want, TABLE_ORDER) == []
    assert len(want["channel_windows"]) > 100 and want["channel_windows"]["lost"].sum() > 0
    assert [r for r, _ in read] == [n for _, n in read]  # each run read exactly its new rows
    assert sum(n for _, n in read) == tables["arrivals"].num_rows
    state = json.loads((inc / "_leadwire_fleet.json").read_text())["incremental"]
    assert state["version"] == len(days) + 1 and "pending" not in state
    assert sorted(p.name for p in (inc / "_state").iterdir()) == ["rollout_times", "slot0", "slot1"]
    with pytest.raises(BadInput, match="no export files new to this run"):
        run_job(str(export), str(inc), spark, progress=False, report=False, incremental=True)
