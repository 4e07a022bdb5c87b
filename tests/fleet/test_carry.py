"""carry.py: the rows new to a run, seeded from the state earlier runs left, get the values one
pass over the whole history gives them; the windows counted earlier get the revisions a late
fill or a lower report head makes."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from leadwire.fleet import carry as C
from leadwire.fleet import transforms as T
from leadwire.fleet.schema import spark_schema

from .conftest import T0, arrivals_df, stream

pytestmark = pytest.mark.spark

EXACT = ["pos", "useq", "lead_calc", "dup_calc", "late", "lateness_seq", "reorder_depth", "lateness_us"]
REVISED = ["gap_after", "report_head_missing"]


def carried(
    spark: SparkSession, parts: list[DataFrame], bits: int | None = None
) -> tuple[list[dict[str, Any]], dict[tuple, list[int]]]:
    """The parts run one after another with the state carried: every new row's values, and per
    window (device, kind, channel, window_start) the sums of gap_after and report_head_missing
    with the revisions added. bits: both passes in buckets of 2^bits arrivals / useq values
    (None: one window per domain)."""
    domains = points = None
    rows: list[dict[str, Any]] = []
    sums: dict[tuple, list[int]] = {}
    for part in parts:
        arr = T.transform_arrivals(part, 3600)
        if domains is None or points is None:
            domains = spark.createDataFrame([], C.state_ddl(C.DOMAIN_STATE_COLS))
            points = spark.createDataFrame([], C.state_ddl(C.POINT_COLS))
        if bits is None:
            leads = C.transform_seeded_leads(arr, domains).localCheckpoint()
        else:
            leads = C.transform_seeded_lead_carry(T.transform_lead_buckets(arr, bits), domains)
            leads = leads.localCheckpoint()
        assert leads.where("order_violation").count() == 0
        order = C.transform_seeded_order(leads, points, bits).localCheckpoint()
        for r in C.transform_seeded_rows(order).collect():
            rows.append(r.asDict())
            k = (r.device_id, r.kind, r.channel, r.window_start)
            s = sums.setdefault(k, [0, 0])
            s[0] += r.gap_after
            s[1] += r.report_head_missing
        for r in C.transform_revisions(order).collect():
            s = sums.setdefault((r.device_id, r.kind, r.channel, r.window_start), [0, 0])
            s[0] += r.lost
            s[1] += r.report_head_missing
        points = C.transform_carry_state(points, C.transform_next_points(order, bits)).localCheckpoint()
        domains = C.transform_carry_state(domains, C.transform_next_domains(leads, domains)).localCheckpoint()
    return rows, sums


def full(all_rows: DataFrame) -> tuple[list[dict[str, Any]], dict[tuple, list[int]]]:
    rows = T.transform_order(T.transform_leads(T.transform_arrivals(all_rows, 3600), None), None)
    out, sums = [], {}
    for r in rows.collect():
        out.append(r.asDict())
        s = sums.setdefault((r.device_id, r.kind, r.channel, r.window_start), [0, 0])
        s[0] += r.gap_after
        s[1] += r.report_head_missing
    return out, sums


def _key(r: dict[str, Any]) -> tuple:
    return (r["device_id"], r["boot_epoch"], r["kind"], r["session"], r["lead_channel"], r["arrival"])


def check(spark: SparkSession, all_rows: DataFrame, parts: list[DataFrame], bits: int | None = None) -> None:
    got_rows, got_sums = carried(spark, parts, bits)
    want_rows, want_sums = full(all_rows)
    assert len(got_rows) == len(want_rows)
    got = {_key(r): [r[c] for c in EXACT] for r in got_rows}
    want = {_key(r): [r[c] for c in EXACT] for r in want_rows}
    bad = [(k, got[k], want[k]) for k in want if got[k] != want[k]]
    assert bad == [], bad[:5]
    nonzero = {k: v for k, v in got_sums.items() if v != [0, 0]}
    assert nonzero == {k: v for k, v in want_sums.items() if v != [0, 0]}


# buckets of 2 and 4 (every boundary case at every few rows) give what one window per domain gives
@pytest.mark.parametrize("bits", [None, 1, 2])
def test_late_fills_duplicates_and_a_lower_report_head_across_three_runs(
    spark: SparkSession, bits: int | None
) -> None:
    hour = dt.timedelta(hours=1)
    # events from just below 2^32 (they wrap): run 1 leaves gaps 3..4 and 7..8; run 2 fills 3..4
    # late and has a duplicate of 1, a new high and 7 (8 stays lost); run 3 new highs, a late 11
    # and a duplicate of 5, inside the region 1..7 received without a gap (no point at 5)
    base = 2**32 - 6
    ev = [(base + s) % 2**32 for s in (1, 2, 5, 6, 9, 3, 1, 4, 10, 7, 12, 14, 11, 5)]
    rows = stream(ev, t0=T0, step_s=1500)
    # reports: session head 3 in run 1, 2 arrives in run 2 (head revised), 1 in run 3
    rep = stream([3, 4, 6, 2, 7, 1, 5], t0=T0, step_s=2400, kind="report", session=1, lead_channel=0)
    for r in rep:
        r["arrival"] += 100
    every = rows + rep
    all_df = arrivals_df(spark, every)
    cut1, cut2 = T0 + 2 * hour, T0 + 4 * hour
    parts = [
        arrivals_df(spark, [r for r in every if r["host_rx_ts"] < cut1]),
        arrivals_df(spark, [r for r in every if cut1 <= r["host_rx_ts"] < cut2]),
        arrivals_df(spark, [r for r in every if r["host_rx_ts"] >= cut2]),
    ]
    assert all(p.count() > 0 for p in parts)
    check(spark, all_df, parts, bits)


@pytest.mark.parametrize("bits", [None, 4])
def test_a_synthetic_fleet_in_daily_parts_equals_one_pass(spark: SparkSession, bits: int | None) -> None:
    from leadwire.fleet.synth import SynthConfig, generate

    tables, _ = generate(SynthConfig(rows=3000, devices=3, days=3, seed=3, max_delay=40, delay=0.02))
    arr: pa.Table = tables["arrivals"]
    schema = spark_schema("arrivals", with_partition=False)
    df = spark.createDataFrame(arr.select(schema.fieldNames()).to_pandas(), schema)
    day = "CAST(host_rx_ts AS DATE)"
    days = sorted(r[0] for r in df.selectExpr(day).distinct().collect())
    parts = [df.where("%s = DATE'%s'" % (day, d.isoformat())) for d in days]
    assert len(parts) >= 3
    check(spark, df, parts, bits)
