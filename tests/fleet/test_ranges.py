"""Date ranges, incremental days and a non-local Hadoop filesystem, on one small synthetic export.

* Edges: a run over one day (--from D --to D) counts the rows of D exactly as the full run does,
  although report sessions, boots, duplicates and late arrivals cross the cuts (the test checks
  that they do, and that a run reading no margin around the cut gets them wrong).
* Incremental: the union of the daily runs into one --out equals the full run; re-running a day
  replaces that day's partitions only; --daily goes on from the last date seen.
* Hadoop URIs: input and output on viewfs:// (a non-file scheme: Hadoop's ViewFileSystem with a
  mount table onto a temporary folder), output into a directory that does not exist yet, then a
  re-run over it; the tables equal the local run's.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from leadwire.fleet.job import DATED_TABLES, TABLE_ORDER, run_job
from leadwire.fleet.oracle import compare_tables, read_job_tables
from leadwire.fleet.synth import SynthConfig, generate, write_export

pytestmark = pytest.mark.spark

DAYS = ["2026-01-01", "2026-01-02", "2026-01-03"]


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("ranges")
    cfg = SynthConfig(rows=6_000, devices=3, days=2.5, restart_share=1.0, lead_errors=1, seed=11)
    tables, _ = generate(cfg)
    write_export(tables, str(base / "export"))
    return base / "export"


@pytest.fixture(scope="module")
def full(spark: SparkSession, export: Path) -> tuple[Path, dict]:
    out = export.parent / "full"
    summary = run_job(str(export), str(out), spark, progress=False, report=False)
    return out, summary


def _dated(out: Path, day: str | None = None) -> dict[str, pd.DataFrame]:
    """The dated tables of a run (all days, or one)."""
    tables = {}
    for name in DATED_TABLES:
        t = pq.read_table(out / "parquet" / (name + ".parquet")).to_pandas()
        if day is not None:
            t = t[t["date"] == day]
        tables[name] = t.drop(columns=["date"]).reset_index(drop=True)
    return tables


def test_the_cuts_cross_sessions_boots_duplicates_and_late_arrivals(export: Path) -> None:
    a = pq.read_table(export / "arrivals").to_pandas()
    key = ["device_id", "boot_epoch", "kind", "session", "lead_channel"]
    spans = a.groupby(key)["date"].nunique()
    reports = spans[spans.index.get_level_values("kind") == "report"]
    assert (reports > 1).sum() > 0  # report sessions cut by midnight
    boots = pq.read_table(export / "boots").to_pandas()
    assert (boots.groupby("device_id")["date"].nunique() > 1).sum() > 0  # restarts after the first day
    day2 = a[a["date"] == DAYS[1]]
    assert day2["duplicate"].sum() > 0 and (day2["lead"] < 0).sum() > 0


def test_one_day_without_margins_is_wrong(spark: SparkSession, export: Path, full: tuple) -> None:
    # (with the margins every day equals the full run on that day: test_union_of_daily_runs...)
    # reading only the day itself, first arrivals of crossing sessions get lead 1, duplicates of
    # rows before the cut count as unique, the first boot of the day is no restart
    out, _ = full
    day = DAYS[1]
    naive = export.parent / "naive"
    run_job(
        str(export),
        str(naive),
        spark,
        progress=False,
        report=False,
        date_from=day,
        date_to=day,
        lookback_days=0,
        lookahead_days=0,
    )
    diffs = compare_tables(_dated(naive), _dated(out, day), TABLE_ORDER)
    assert any(d.startswith("channel_windows") for d in diffs)
    assert any(d.startswith("restarts") for d in diffs)


def test_union_of_daily_runs_equals_the_full_run(spark: SparkSession, export: Path, full: tuple) -> None:
    out, _ = full
    daily = export.parent / "daily"
    for day in DAYS:
        run_job(str(export), str(daily), spark, progress=False, report=False, date_from=day, date_to=day)
        # each day equals the full run on that day, although sessions, boots, duplicates and
        # late arrivals cross the cuts (test_the_cuts_cross_...)
        assert compare_tables(_dated(daily, day), _dated(out, day), TABLE_ORDER) == [], day
    assert compare_tables(_dated(daily), _dated(out), TABLE_ORDER) == []
    # a re-run of day 2 replaces day 2's files and leaves the other days' files alone
    cw = daily / "parquet" / "channel_windows.parquet"
    before = {p.relative_to(cw): p.stat().st_mtime_ns for p in cw.rglob("*.parquet")}
    run_job(str(export), str(daily), spark, progress=False, report=False, date_from=DAYS[1], date_to=DAYS[1])
    after = {p.relative_to(cw): p.stat().st_mtime_ns for p in cw.rglob("*.parquet")}
    mid = "date=" + DAYS[1]
    for p, t in before.items():
        if p.parts[0] != mid:
            assert after.get(p) == t, p
    old_mid = {p for p in before if p.parts[0] == mid}
    new_mid = {p for p in after if p.parts[0] == mid}
    assert old_mid and new_mid and not old_mid & new_mid
    # --daily goes on from the last date the previous runs saw (that day again, and on)
    s = run_job(str(export), str(daily), spark, progress=False, report=False, daily=True)
    assert s["date_from"] == DAYS[-1]
    assert compare_tables(_dated(daily), _dated(out), TABLE_ORDER) == []


def test_viewfs_input_and_output_new_directory_then_rerun(
    spark: SparkSession, export: Path, full: tuple, tmp_path: Path
) -> None:
    out, summary = full
    root = tmp_path / "vfsroot"
    (root / "in").mkdir(parents=True)
    os.symlink(export, root / "in" / "export")
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    table = "lwtest%d" % (abs(hash(str(tmp_path))) % 10**9)  # a fresh mount table: no cached FS
    conf.set("fs.viewfs.mounttable.%s.link./data" % table, "file://" + str(root))
    base = "viewfs://%s/data" % table
    target = base + "/not/yet/there/out"
    assert not (root / "not").exists()
    for _ in range(2):  # into a directory that does not exist, then over the existing one
        got = run_job(base + "/in/export", target, spark, progress=False, report=True)
        local = root / "not" / "yet" / "there" / "out"
        # not this process's disk as far as Spark's paths go: the small tables and summary.json
        # by Spark's writers (a directory each), the report in a local folder the summary names
        report = Path(got["report_dir"])
        assert (report / "index.html").stat().st_size > 1000 and not (local / "index.html").exists()
        shutil.rmtree(report)
        assert (
            json.loads(spark.read.text(target + "/summary.json", wholetext=True).first()[0])["rows"]
            == got["rows"]
        )
        assert list((local / "csv" / "summary.csv").glob("part-*.csv"))
        tables = read_job_tables(str(local), TABLE_ORDER)
        assert compare_tables(tables, read_job_tables(str(out), TABLE_ORDER), TABLE_ORDER) == []
        assert (
            got["messages"] == summary["messages"] and got["mismatch_rows"] == summary["mismatch_rows"] == 1
        )
        assert len(pq.read_table(local / "mismatches")) == 1
