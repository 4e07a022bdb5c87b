"""A skewed fleet (one device holds half the rows in ONE boot, one lead domain).

The generator's shape (numpy only), and the whole job on it at a small size, day by day with
--incremental and once in full with the window buffer forced to spill: every table equals the
DuckDB oracle, the summary the ground truth, the incremental runs the full one.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import numpy as np
import pytest

from leadwire.fleet.synth import SUMMARY_TRUTH, SynthConfig, generate

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


# A hot device day by day (half the rows, one lead domain, ~2,000 of its rows a day: ~8 buckets of
# 2^HOT_BUCKET_BITS arrivals, more than plan.HOT_BUCKETS, as a 1.5M-row domain is with the job's
# 2^16): the export grows one day's files at a time (a lagging bridge's a day late) and is run
# with --incremental after each export run, then once in full; both tests below read these runs.
HOT_DAYS = SynthConfig(rows=12_000, devices=6, hot_device_share=0.5, days=2, seed=17, max_delay=30)
HOT_BUCKET_BITS = 8
SPILL = {
    "spark.sql.windowExec.buffer.in.memory.threshold": "512",
    "spark.sql.windowExec.buffer.spill.threshold": "1024",
}


@pytest.fixture(scope="module")
def hot_days(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """With buckets of 2^HOT_BUCKET_BITS arrivals and 8 shuffle tasks: the task sizes of the whole
    export's arrivals shuffled by device and by (device, bucket), the runs with --incremental after
    each export run (their logs' shapes, rows read, rows new), and one full run over the whole
    export (its log and summary)."""
    from pyspark.sql import functions as F

    from leadwire.fleet import transforms
    from leadwire.fleet.job import Progress, run_job
    from leadwire.fleet.synth_days import export_days, publish_run

    base = tmp_path_factory.mktemp("hot_days")
    tables, truth = generate(HOT_DAYS)
    days = export_days(tables)
    export, inc, full = base / "export", base / "inc", base / "full"
    mp = pytest.MonkeyPatch()
    mp.setattr(transforms, "BUCKET_BITS", HOT_BUCKET_BITS)
    old = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "8")
    shapes, read = [], []
    spilled: dict[str, str | None] = {}
    try:
        for k in range(len(days) + 1):
            new = publish_run(tables, str(export), k, days)
            log = io.StringIO()
            s = run_job(
                str(export), str(inc), spark, report=False, progress=Progress(stream=log), incremental=True
            )
            shapes.append("shuffled by device and bucket" in log.getvalue())
            read.append((s["rows_read"], new))
        arr = transforms.transform_arrivals(spark.read.parquet(str(export / "arrivals")))

        def tasks(df: object) -> list[int]:
            counts = df.groupBy(F.spark_partition_id().alias("p")).count().collect()  # type: ignore[attr-defined]
            return sorted(r["count"] for r in counts)

        by_device = tasks(transforms.transform_by_device(arr))
        by_bucket = tasks(transforms.transform_by_device_bucket(arr, HOT_BUCKET_BITS))
        # the full run with the window operator forced past its in-memory buffer, to spill to disk
        # on the hot domain's buckets
        spilled = {k: spark.conf.get(k, None) for k in SPILL}
        for k, v in SPILL.items():
            spark.conf.set(k, v)
        log = io.StringIO()
        summary = run_job(str(export), str(full), spark, report=False, progress=Progress(stream=log))
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", old)
        for k, v in spilled.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)
        mp.undo()
    yield {
        "tables": tables, "truth": truth, "export": export, "inc": inc, "full": full, "shapes": shapes,
        "read": read, "by_device": by_device, "by_bucket": by_bucket, "full_log": log.getvalue(),
        "summary": summary,
    }  # fmt: skip


@pytest.mark.spark
@pytest.mark.timeout(900)
def test_a_hot_device_is_shuffled_by_device_and_bucket_and_still_equals_the_oracle(hot_days) -> None:
    """One device with half the rows in one lead domain: shuffled by device alone it is one task;
    by (device, arrival bucket) the largest task holds at most 3x the median's rows, and the whole
    job (which picks that shuffle from its input profile, its window buffers spilling) equals the
    DuckDB oracle cell by cell, the latency percentiles included, and its summary the ground truth."""
    pytest.importorskip("duckdb")
    from leadwire.fleet.job import TABLE_ORDER
    from leadwire.fleet.oracle import compare_tables, read_job_tables, run_oracle

    h = hot_days
    by_device, by_bucket = h["by_device"], h["by_bucket"]
    assert sum(by_bucket) == sum(by_device) == h["tables"]["arrivals"].num_rows
    assert by_device[-1] >= 0.5 * sum(by_device)  # the hot device's task
    assert by_bucket[-1] <= 3 * float(np.median(by_bucket)), by_bucket
    assert "shuffled by device and bucket" in h["full_log"]
    t = h["truth"].totals
    for got_key, want_key in {**SUMMARY_TRUTH, "devices": "devices"}.items():
        assert h["summary"][got_key] == t[want_key], got_key
    got = read_job_tables(str(h["full"]), TABLE_ORDER)
    assert compare_tables(got, run_oracle(str(h["export"])), TABLE_ORDER) == []


@pytest.mark.spark
@pytest.mark.timeout(900)
def test_incremental_days_with_a_hot_device_shuffle_by_device_and_bucket_and_equal_the_full_run(
    hot_days,
) -> None:
    """The same shape day by day with --incremental: each run's new rows of the hot device (half
    of them, one lead domain) go through both passes in buckets shuffled by (device, bucket), the
    domain's carried state seeding its first bucket (broadcast with the other buckets' prefix
    state); the dated tables equal one full run's, and every run read exactly its new rows."""
    from leadwire.fleet.job import DATED_TABLES, TABLE_ORDER
    from leadwire.fleet.oracle import compare_tables, read_job_tables

    h = hot_days
    shapes, read = h["shapes"], h["read"]
    # the two whole days' runs (~3,000 hot rows each; the last run: a partial day, whole domains)
    assert shapes[:2] == [True, True], shapes
    assert [r for r, _ in read] == [n for _, n in read]
    got = read_job_tables(str(h["inc"]), DATED_TABLES)
    want = read_job_tables(str(h["full"]), DATED_TABLES)
    assert compare_tables(got, want, TABLE_ORDER) == []
    hot = want["channel_windows"][want["channel_windows"]["device_id"] == HOT]
    assert hot["messages"].sum() >= 0.49 * len(h["tables"]["arrivals"])
    assert hot["duplicates"].sum() > 0 and hot["late"].sum() > 0  # the carried values were exercised
