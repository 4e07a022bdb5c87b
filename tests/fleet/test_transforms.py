"""One small hand-built DataFrame per metric family, with the exact expected rows (chispa)."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import numpy as np
import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from leadwire.fleet import transforms as T

from .conftest import T0, arrivals_df, stream, table_df

pytestmark = pytest.mark.spark

U32 = 1 << 32
H = dt.timedelta(hours=1)


def rows_of(spark: SparkSession, rows: list[dict[str, Any]], window_seconds: int = 3600) -> DataFrame:
    return T.transform_order(
        T.transform_leads(T.transform_arrivals(arrivals_df(spark, rows), window_seconds))
    )


def assert_rows(
    spark: SparkSession, actual: DataFrame, cols: list[str], expected: list[tuple[Any, ...]], order: list[str]
) -> None:
    got = actual.select(*cols).orderBy(*order)
    want = spark.createDataFrame(expected, got.schema)
    assert_df_equality(got, want, ignore_nullable=True)


def test_lead_wraps_at_2_32_and_matches_spec_examples(spark: SparkSession) -> None:
    wrap = stream([U32 - 2, U32 - 1, 0, 2, 1, 1], device_id="wrap")
    # spec 000: 12 arrives after 13 (lead 2 then -1, and 14 has lead 1); 11 twice in a row (lead 0)
    reorder = stream([10, 11, 13, 12, 14], device_id="reorder")
    dup = stream([10, 11, 11, 12], device_id="dup")
    # two report channels of one session are independent lead domains
    ch0 = stream([1, 2, 3], device_id="rep", kind="report", session=4, channel=0, lead_channel=0)
    ch1 = stream(
        [1, 3, 2], device_id="rep", kind="report", session=4, channel=1, lead_channel=1, first_arrival=10
    )
    rows = rows_of(spark, wrap + reorder + dup + ch0 + ch1)
    assert_rows(
        spark,
        rows,
        ["device_id", "lead_channel", "arrival", "useq", "lead_calc", "dup_calc"],
        [
            ("dup", -1, 1, 10, 1, False),
            ("dup", -1, 2, 11, 1, False),
            ("dup", -1, 3, 11, 0, True),
            ("dup", -1, 4, 12, 1, False),
            ("reorder", -1, 1, 10, 1, False),
            ("reorder", -1, 2, 11, 1, False),
            ("reorder", -1, 3, 13, 2, False),
            ("reorder", -1, 4, 12, -1, False),
            ("reorder", -1, 5, 14, 1, False),
            ("rep", 0, 1, 1, 1, False),
            ("rep", 0, 2, 2, 1, False),
            ("rep", 0, 3, 3, 1, False),
            ("rep", 1, 10, 1, 1, False),
            ("rep", 1, 11, 3, 2, False),
            ("rep", 1, 12, 2, -1, False),
            ("wrap", -1, 1, U32 - 2, 1, False),
            ("wrap", -1, 2, U32 - 1, 1, False),
            ("wrap", -1, 3, U32, 1, False),
            ("wrap", -1, 4, U32 + 2, 2, False),
            ("wrap", -1, 5, U32 + 1, -1, False),
            ("wrap", -1, 6, U32 + 1, -1, True),
        ],
        ["device_id", "lead_channel", "arrival"],
    )


def test_late_lateness_reorder_depth_and_gaps_never_filled(spark: SparkSession) -> None:
    # 3 overtaken by 4 (arrival 3) and arrives at 5: depth 2, 2 s late; 6 never arrives; 3 again: duplicate
    rows = rows_of(spark, stream([1, 2, 4, 5, 3, 7, 3]))
    assert_rows(
        spark,
        rows,
        [
            "arrival",
            "lead_calc",
            "dup_calc",
            "late",
            "lateness_seq",
            "reorder_depth",
            "lateness_us",
            "gap_after",
        ],
        [
            (1, 1, False, False, 0, 0, 0, 0),
            (2, 1, False, False, 0, 0, 0, 0),
            (3, 2, False, False, 0, 0, 0, 0),
            (4, 1, False, False, 0, 0, 0, 1),
            (5, -2, False, True, 2, 2, 2_000_000, 0),
            (6, 2, False, False, 0, 0, 0, 0),
            (7, -4, True, False, 0, 0, 0, 0),
        ],
        ["arrival"],
    )


def test_channel_windows_with_wrap_and_restart_mid_window(spark: SparkSession) -> None:
    boot_a = stream([U32 - 1, 0, 1], boot_epoch=111, boots=5)
    # the device restarts: new boot_epoch, a random new offset, same hour; one more event an hour later
    boot_b = stream(
        [500, 501, 503], boot_epoch=222, boots=6, first_arrival=4, t0=T0 + dt.timedelta(minutes=30)
    )
    boot_b += stream([504], boot_epoch=222, boots=6, first_arrival=7, t0=T0 + H)
    cw = T.transform_channel_windows(rows_of(spark, boot_a + boot_b))
    assert_rows(
        spark,
        cw,
        [
            "window_start",
            "messages",
            "unique",
            "duplicates",
            "late",
            "lead_eq1",
            "lead_gt1",
            "lead_lt0",
            "lead_eq0",
            "skipped",
            "lost",
            "loss_rate",
            "lead_mismatches",
        ],
        [
            (T0, 6, 6, 0, 0, 5, 1, 0, 0, 1, 1, 1 / 7, 1),
            (T0 + H, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0.0, 0),
        ],
        ["window_start"],
    )


def test_report_sequence_gaps_head_and_retransmissions(spark: SparkSession) -> None:
    rep = stream([3, 4, 4, 6], kind="report", session=9, channel=2, lead_channel=2)
    rep[2]["retransmission"] = True
    rep[2]["duplicate"] = True
    rep[2]["lead"] = 0
    rep[3]["lead"] = 2
    cw = T.transform_channel_windows(rows_of(spark, rep))
    assert_rows(
        spark,
        cw,
        [
            "kind",
            "channel",
            "messages",
            "duplicates",
            "retransmissions",
            "lost",
            "report_head_missing",
            "lead_mismatches",
            "dup_flag_mismatches",
        ],
        [("report", 2, 4, 1, 1, 1, 2, 0, 0)],
        ["kind"],
    )


def test_consistency_mismatches_are_reported(spark: SparkSession) -> None:
    rows = stream([1, 2, 3, 3])
    rows[1]["lead"] = 5  # the bridge stored a wrong lead
    rows[3]["lead"] = 0  # right lead, but the duplicate flag is missing
    mm = T.transform_mismatches(rows_of(spark, rows))
    assert_rows(
        spark,
        mm,
        ["arrival", "seq", "lead", "lead_calc", "duplicate", "dup_calc"],
        [(2, 2, 5, 1, False, False), (4, 3, 0, 0, False, True)],
        ["arrival"],
    )


def test_lead_histogram_buckets(spark: SparkSession) -> None:
    # leads: 1, 1, 150 (>=100), -100 (<=-100), -1, 0 (152 again: duplicate of the newest), 3 (3..9)
    rows = rows_of(spark, stream([1, 2, 152, 52, 151, 152, 155]))
    h = T.transform_lead_histogram(T.transform_channel_windows(rows))
    assert_rows(
        spark,
        h,
        ["bucket_order", "bucket", "n"],
        [(0, "<=-100", 1), (3, "-1", 1), (4, "0", 1), (5, "1", 2), (7, "3..9", 1), (9, ">=100", 1)],
        ["bucket_order"],
    )


def test_recovery_phases_overruns_and_exact_loss(spark: SparkSession) -> None:
    base = {
        "device_id": "d1",
        "boot_epoch": 7,
        "client_n": 0,
        "n0": 0,
        "n1": 0,
        "recovered": 4,
        "firmware_version": "1.0.0",
        "transport": "udp",
        "bridge_id": "b1",
    }
    s = dt.timedelta(seconds=1)
    losses = table_df(
        spark,
        "losses",
        [
            {**base, "cause": "first_contact", "lost": None, "started_ts": T0, "ended_ts": T0 + s},
            {**base, "cause": "overrun", "lost": 5, "started_ts": T0 + 10 * s, "ended_ts": T0 + 12 * s},
            {**base, "cause": "overrun", "lost": 3, "started_ts": T0 + 20 * s, "ended_ts": None},
            {
                **base,
                "cause": "restart",
                "lost": None,
                "boot_epoch": 8,
                "started_ts": T0 + H,
                "ended_ts": T0 + H + s,
            },
        ],
    )
    rec = T.transform_recoveries(losses)
    assert_rows(
        spark,
        rec,
        [
            "window_start",
            "cause",
            "phases",
            "lost_exact",
            "lost_unknown",
            "recovered",
            "unfinished",
            "duration_us_sum",
            "duration_us_max",
        ],
        [
            (T0, "first_contact", 1, 0, 1, 4, 0, 1_000_000, 1_000_000),
            (T0, "overrun", 2, 8, 0, 8, 1, 2_000_000, 2_000_000),
            (T0 + H, "restart", 1, 0, 1, 4, 0, 1_000_000, 1_000_000),
        ],
        ["window_start", "cause"],
    )


def test_restarts_count_each_boot_after_the_first_once(spark: SparkSession) -> None:
    base = {"device_id": "d1", "firmware_version": "1.0.0", "board": "esp32", "transport": "udp"}
    m = dt.timedelta(minutes=1)
    boots = table_df(
        spark,
        "boots",
        [
            {
                **base,
                "boot_epoch": 1,
                "boots": 5,
                "first_seen_ts": T0,
                "detected_by": "hello",
                "bridge_id": "a",
            },
            # the restart seen by two bridges counts once
            {
                **base,
                "boot_epoch": 2,
                "boots": 6,
                "first_seen_ts": T0 + 10 * m,
                "detected_by": "recovery",
                "bridge_id": "a",
            },
            {
                **base,
                "boot_epoch": 2,
                "boots": 6,
                "first_seen_ts": T0 + 11 * m,
                "detected_by": "recovery",
                "bridge_id": "b",
            },
            {
                **base,
                "boot_epoch": 3,
                "boots": 7,
                "first_seen_ts": T0 + 2 * H,
                "detected_by": "hello",
                "bridge_id": "a",
            },
            {
                **base,
                "device_id": "d2",
                "boot_epoch": 9,
                "boots": 1,
                "first_seen_ts": T0 + 2 * H,
                "detected_by": "hello",
                "bridge_id": "a",
            },
        ],
    )
    rst = T.transform_restarts(boots)
    assert_rows(
        spark,
        rst,
        ["device_id", "window_start", "boots_seen", "restarts", "detected_by_recovery"],
        [("d1", T0, 2, 1, 1), ("d1", T0 + 2 * H, 1, 1, 0), ("d2", T0 + 2 * H, 1, 0, 0)],
        ["device_id", "window_start"],
    )


def test_exact_latency_percentiles_match_numpy(spark: SparkSession) -> None:
    rng = np.random.default_rng(3)
    commit_us = rng.integers(100, 5000, 41).tolist()
    rows = stream(list(range(41)))
    for r, c in zip(rows, commit_us, strict=True):
        r["host_commit_ts"] = r["host_rx_ts"] + dt.timedelta(microseconds=c)
        r["gen_ts"] = r["host_rx_ts"] - dt.timedelta(microseconds=2 * c)
    rows[0]["gen_ts"] = None  # unknown generation time: left out of gen_to_rx
    counts = T.transform_latency_counts(T.transform_arrivals(arrivals_df(spark, rows)), 86_400)
    lat = T.transform_fleet_latency(T.transform_fleet_percentiles(counts))
    got = {r["metric"]: r for r in lat.collect()}
    for metric, values in (("rx_to_commit", commit_us), ("gen_to_rx", [2 * c for c in commit_us[1:]])):
        assert got[metric]["n"] == len(values)
        for q in (50, 95, 99):
            assert got[metric]["p%d" % q] == pytest.approx(float(np.percentile(values, q)), rel=1e-12)


def test_devices_worst_and_compare(spark: SparkSession) -> None:
    a = stream([1, 2, 4], device_id="a", firmware_version="1.0.0")  # 1 lost of 4
    b = stream([1, 2, 3, 4], device_id="b", firmware_version="1.1.0", transport="serial")
    c = stream([1, 5], device_id="c", firmware_version="1.1.0")  # 3 lost of 5
    rows = rows_of(spark, a + b + c)
    cw = T.transform_channel_windows(rows)
    empty_losses = table_df(spark, "losses", [])
    boots = table_df(
        spark,
        "boots",
        [
            {
                "device_id": "z",
                "boot_epoch": 1,
                "boots": 1,
                "firmware_version": "1.1.0",
                "board": "x",
                "transport": "udp",
                "first_seen_ts": T0,
                "detected_by": "hello",
                "bridge_id": "a",
            },
        ],
    )
    rec = T.transform_recoveries(empty_losses)
    rst = T.transform_restarts(boots)
    arr = T.transform_arrivals(arrivals_df(spark, a + b + c))
    values = T.transform_latency_values(arr)
    pct = T.transform_fleet_percentiles(T.transform_latency_counts(arr, 3600))
    devices = T.transform_devices(cw, rec, rst, T.transform_device_latency(values))
    # z has a boot but no arrivals: it is still a device (full join), with zero counts
    assert_rows(
        spark,
        devices,
        ["device_id", "messages", "lost", "loss_rate", "boots_seen", "restarts"],
        [("a", 3, 1, 0.25, 0, 0), ("b", 4, 0, 0.0, 0, 0), ("c", 2, 3, 0.6, 0, 0), ("z", 0, 0, 0.0, 1, 0)],
        ["device_id"],
    )
    worst = T.transform_worst(devices, 2)
    assert_rows(spark, worst, ["rank", "device_id"], [(1, "c"), (2, "a")], ["rank"])
    fw = T.transform_compare(cw, rec, rst, pct, "firmware_version")
    assert_rows(
        spark,
        fw,
        ["firmware_version", "devices", "messages", "lost", "boots_seen"],
        [("1.0.0", 1, 3, 1, 0), ("1.1.0", 2, 6, 3, 1)],
        ["firmware_version"],
    )
    tr = T.transform_compare(cw, rec, rst, pct, "transport").where(F.col("transport") == "serial")
    assert_rows(
        spark,
        tr,
        ["transport", "devices", "messages", "rx_to_commit_p50_us"],
        [("serial", 1, 4, 1000.0)],
        ["transport"],
    )


def test_per_arrival_plan_shuffles_the_arrivals_once(spark: SparkSession) -> None:
    # transform_by_device's exchange by device_id serves both lead-domain windows, their carried
    # state (joined back without an exchange) and the channel-window aggregation: any second
    # Exchange would mean a second shuffle of every arrival. The first pass is persisted, as
    # job.build_tables does (its consumers read different columns: without it each would get an
    # exchange of its own)
    rows = stream([1, 2, 4, 3], device_id="a") + stream([5, 6], device_id="b")
    by_device = T.transform_by_device(T.transform_arrivals(arrivals_df(spark, rows)))
    first = T.transform_lead_buckets(by_device).persist()
    try:
        cw = T.transform_channel_windows(T.transform_order(T.transform_lead_carry(first)))
        plan = cw._jdf.queryExecution().executedPlan().toString()
        assert len(set(re.findall(r"Exchange \w+\(.*plan_id=(\d+)", plan))) == 1, plan
        assert "hashpartitioning(device_id" in plan and "BroadcastExchange" not in plan
        assert sorted(r["messages"] for r in cw.collect()) == [2, 4]
    finally:
        first.unpersist()


def test_a_device_that_moved_between_bridge_shards_orders_by_arrival_then_bridge(spark: SparkSession) -> None:
    # each store counts arrivals per device on its own: the new shard's counter starts again at 1.
    # Rows with equal counters order by bridge_id (deterministic; docs/fleet.md says so), so the
    # move shows as reordering, the same in every run and in the DuckDB oracle.
    old = stream([10, 11, 12], device_id="moved", bridge_id="shard-a")
    new = stream([13, 14], device_id="moved", bridge_id="shard-b", t0=T0 + 10 * H)
    rows = rows_of(spark, new + old)
    assert_rows(
        spark,
        rows,
        ["bridge_id", "arrival", "useq", "lead_calc", "dup_calc", "late"],
        [
            ("shard-a", 1, 10, 1, False, False),
            ("shard-b", 1, 13, 3, False, False),
            ("shard-a", 2, 11, -2, False, True),
            ("shard-b", 2, 14, 1, False, False),
            ("shard-a", 3, 12, -2, False, True),
        ],
        ["pos"],
    )


@pytest.mark.parametrize("bits", [0, 1, 3])
def test_bucketed_lead_domains_equal_one_window_per_domain(spark: SparkSession, bits: int) -> None:
    # bounded pieces: both lead-domain passes run per (domain, bucket) with carried prefix state.
    # With 2^bits arrivals / seq values per bucket (1, 2, 8: most buckets cut a domain, many rows
    # are the first of their bucket), every per-arrival value equals one window over the whole
    # domain (bucket_bits None, the plan for fleets without long domains): wraps past 2^32,
    # duplicates, late arrivals, gaps, report heads, a device that moved between bridge shards.
    from leadwire.fleet.synth import SynthConfig, generate

    tables, _ = generate(SynthConfig(rows=3_000, devices=3, seed=5, lead_errors=2, dup_flag_errors=1))
    synth = spark.createDataFrame(tables["arrivals"].select(arrivals_df(spark, []).columns).to_pandas())
    hand = arrivals_df(
        spark,
        stream([U32 - 2, U32 - 1, 0, 2, 1, 1, 5, 3, 9, 4, 4, 12], device_id="wrap")
        + stream([1, 2, 4, 5, 3, 7, 3, 6, 8, 2], device_id="late", kind="report", session=2, lead_channel=0)
        + stream([10, 11, 12], device_id="moved", bridge_id="shard-a")
        + stream([13, 14, 9], device_id="moved", bridge_id="shard-b", t0=T0 + 10 * H),
    )
    for src in (hand, synth):
        arr = T.transform_by_device(T.transform_arrivals(src))
        one = T.transform_order(T.transform_leads(arr, None), None)  # one window per whole domain
        cut = T.transform_order(T.transform_leads(arr, bits), bits)
        assert cut.count() == one.count() > 0
        assert cut.exceptAll(one).count() == 0 and one.exceptAll(cut).count() == 0
