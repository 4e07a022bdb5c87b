"""Exact latency percentiles from value counts (transforms.transform_exact_percentiles and
transform_fleet_percentiles): hand-made multisets with known answers, equal bit for bit to Spark's
`percentile` on the same counts and to the DuckDB oracle's quantile_cont on the raw values."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pyspark.sql import DataFrame, SparkSession

from leadwire.fleet import transforms as T

pytestmark = pytest.mark.spark

COUNT_DDL = "firmware_version STRING, transport STRING, metric STRING, value_us BIGINT, n BIGINT"
RX, GEN = "rx_to_commit", "gen_to_rx"
# (firmware, transport, metric, value, count): one value's count may be split over rows (its
# transports), as a release's counts are when counted per transport too
COUNTS = [
    # 1.0.0 rx_to_commit: [1, 3, 3, 3, 10], odd count, a tie of three across two transports
    ("1.0.0", "udp", RX, 3, 2),
    ("1.0.0", "serial", RX, 3, 1),
    ("1.0.0", "udp", RX, 1, 1),
    ("1.0.0", "serial", RX, 10, 1),
    # 1.0.0 gen_to_rx: [5, 5, 5, 5], every order statistic the same value
    ("1.0.0", "udp", GEN, 5, 4),
    # 2.0.0 rx_to_commit: [10, 20, 30, 40], even count, given out of order
    ("2.0.0", "udp", RX, 40, 1),
    ("2.0.0", "udp", RX, 10, 1),
    ("2.0.0", "udp", RX, 30, 1),
    ("2.0.0", "udp", RX, 20, 1),
    # 2.0.0 gen_to_rx: one value
    ("2.0.0", "udp", GEN, 7, 1),
    # 3.0.0: rx_to_commit only (no generation times known): its gen_to_rx has no row
    ("3.0.0", "serial", RX, 1000, 3),
]
# worked by hand: position (n-1)p, lo = floor, hi = ceil, v(lo) + (pos - lo)(v(hi) - v(lo))
KNOWN = {
    ("firmware_version", "1.0.0", RX): (5, 3.0, 3 + 0.8 * 7, 3 + 0.96 * 7),
    ("firmware_version", "1.0.0", GEN): (4, 5.0, 5.0, 5.0),
    ("firmware_version", "2.0.0", RX): (4, 25.0, 38.5, 39.7),
    ("firmware_version", "2.0.0", GEN): (1, 7.0, 7.0, 7.0),
    ("firmware_version", "3.0.0", RX): (3, 1000.0, 1000.0, 1000.0),
}


def counts_df(spark: SparkSession, rows: list[tuple[Any, ...]]) -> DataFrame:
    return spark.createDataFrame(rows, COUNT_DDL)


def raw_values(rows: list[tuple[Any, ...]]) -> dict[tuple[str, str | None, str], list[int]]:
    """(kind, key, metric) -> every value, each as often as counted."""
    out: dict[tuple[str, str | None, str], list[int]] = {}
    for fw, tr, m, v, n in rows:
        for key in (("firmware_version", fw), ("transport", tr), ("fleet", None)):
            out.setdefault((*key, m), []).extend([v] * n)
    return out


def by_group(df: DataFrame) -> dict[tuple[str, str | None, str], tuple[Any, ...]]:
    return {(r["kind"], r["key"], r["metric"]): (r["n"], r["p50"], r["p95"], r["p99"]) for r in df.collect()}


def spark_percentile(counts: DataFrame) -> dict[tuple[str, str | None, str], tuple[Any, ...]]:
    """The same groups by Spark's `percentile` aggregate (a map of the group's values)."""
    out = {}
    for kind in ("firmware_version", "transport", "fleet"):
        by = [] if kind == "fleet" else [kind]
        for r in T.transform_percentiles(counts, by).collect():
            out[(kind, r[kind] if by else None, r["metric"])] = (r["n"], r["p50"], r["p95"], r["p99"])
    return out


def test_fleet_percentiles_known_answers_and_spark_percentile_bit_for_bit(spark: SparkSession) -> None:
    counts = counts_df(spark, COUNTS)
    got = by_group(T.transform_fleet_percentiles(counts))
    raw = raw_values(COUNTS)
    assert set(got) == set(raw)  # 3.0.0 has no gen_to_rx row, serial none either
    assert (("firmware_version", "3.0.0", GEN)) not in got
    for g, want in KNOWN.items():
        assert got[g][0] == want[0], g
        assert got[g][1:] == pytest.approx(want[1:], rel=1e-12), g
    for g, values in raw.items():
        assert got[g][0] == len(values)
        assert got[g][1:] == pytest.approx([float(np.percentile(values, q)) for q in (50, 95, 99)], rel=1e-12)
    # the same arithmetic as Spark's own exact percentile: equal to the last bit
    assert got == spark_percentile(counts)


def test_fleet_percentiles_equal_the_oracles_quantile_cont(spark: SparkSession) -> None:
    duckdb = pytest.importorskip("duckdb")
    import pandas as pd

    from leadwire.fleet.oracle import _pct_sql, compare_tables

    rng = np.random.default_rng(11)
    rows = []
    for fw in ("1.0.0", "1.1.0"):
        for tr in ("udp", "serial"):
            for m in (RX, GEN):
                # few distinct values, many repeats: ties across rows and transports
                values, n = np.unique(rng.integers(0, 40, int(rng.integers(1, 300))), return_counts=True)
                rows += [(fw, tr, m, int(v), int(c)) for v, c in zip(values, n, strict=True)]
    rows.append(("1.2.0", "udp", RX, 123456789, 1))  # a group of one value
    got = T.transform_fleet_percentiles(counts_df(spark, rows)).toPandas()
    lat = pd.DataFrame(
        [(fw, tr, m, v) for fw, tr, m, v, n in rows for _ in range(n)],
        columns=["firmware_version", "transport", "metric", "value_us"],
    )
    con = duckdb.connect()
    try:
        con.register("lat", lat)
        for kind in ("firmware_version", "transport", "fleet"):
            dim = "" if kind == "fleet" else kind
            want = con.execute(_pct_sql(dim)).df()
            mine = got[got["kind"] == kind].rename(columns={"key": kind}) if dim else got[got["kind"] == kind]
            mine = mine.drop(columns=["kind"] + ([] if dim else ["key"]))
            keys = [dim, "metric"] if dim else ["metric"]
            assert compare_tables({kind: mine}, {kind: want}, {kind: keys}) == [], kind
    finally:
        con.close()
    assert by_group(T.transform_fleet_percentiles(counts_df(spark, rows))) == spark_percentile(
        counts_df(spark, rows)
    )


def test_percentiles_per_group_of_any_columns_ignore_null_values(spark: SparkSession) -> None:
    # transform_exact_percentiles on rows of (by, metric, value_us, n): a null value is not counted
    # (as `percentile`), a group of only nulls has no row
    df = spark.createDataFrame(
        [("a", RX, 4, 1), ("a", RX, None, 5), ("a", RX, 2, 1), ("b", RX, None, 2)],
        "release STRING, metric STRING, value_us BIGINT, n BIGINT",
    )
    got = {r["release"]: r for r in T.transform_exact_percentiles(df, ["release"]).collect()}
    assert list(got) == ["a"]
    assert (got["a"]["n"], got["a"]["p50"], got["a"]["p95"]) == (2, 3.0, pytest.approx(3.9, rel=1e-12))
    assert T.transform_exact_percentiles(df, ["release"]).columns == ["release", *T.LATENCY_COLS]


def test_percentiles_per_device_equal_sparks_percentile_bit_for_bit(spark: SparkSession) -> None:
    # transform_exact_percentiles per device against Spark's `percentile` map per device
    # (transform_percentiles) on values with many repeats, every cell to the last bit: the
    # interpolation v(lo) + (pos - lo)(v(hi) - v(lo)) in `percentile`'s order of operations
    # (d1's gen_to_rx p99, 47 and 49 at position 19.8, is 48.6 so and 48.599999999999994 as
    # (hi - pos) v(lo) + (pos - lo) v(hi)); a null value is not counted
    rng = np.random.default_rng(5)
    rows = [("d0", RX, 1000, 1), ("d1", RX, None, 1)]
    for d in ("d1", "d2", "d3"):
        for m in (RX, GEN) if d != "d3" else (RX,):
            rows += [(d, m, int(v), 1) for v in rng.integers(0, 50, int(rng.integers(2, 400)))]
    df = spark.createDataFrame(rows, "device_id STRING, metric STRING, value_us BIGINT, n BIGINT")
    got = {
        (r["device_id"], r["metric"]): r.asDict()
        for r in T.transform_exact_percentiles(df, ["device_id"]).collect()
    }
    want = {
        (r["device_id"], r["metric"]): r.asDict()
        for r in T.transform_percentiles(df.where("value_us IS NOT NULL"), ["device_id"]).collect()
    }
    assert got == want
    assert sorted(got) == [("d0", RX), ("d1", GEN), ("d1", RX), ("d2", GEN), ("d2", RX), ("d3", RX)]
    assert got[("d1", GEN)]["p99"] == 48.6 and got[("d0", RX)]["p50"] == 1000.0
    d2 = sorted(v for d, m, v, _n in rows if d == "d2" and m == GEN)
    assert got[("d2", GEN)]["n"] == len(d2)
    assert got[("d2", GEN)]["p95"] == pytest.approx(float(np.percentile(d2, 95)), rel=1e-12)
