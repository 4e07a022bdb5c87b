"""Pure transforms of the fleet job: ``transform_*(df, ...) -> df``.

Rules every function here follows:
* no I/O, no actions (nothing is collected or counted), no Python UDFs: only Catalyst expressions;
* window frames are spelled out (``rowsBetween``) wherever a frame matters; offset functions
  (``lag``, ``row_number``) have a fixed frame in Spark and take none;
* joins name their keys and their type;
* each function ends with a ``select`` of its output contract (the ``*_COLS`` lists below), so a
  column renamed upstream fails here, at the boundary, and not three stages later.

The definitions (see docs/fleet.md for the long form):
* lead domain ("sender and channel" of spec 000): LEAD_KEY. Ordered by ``arrival``.
* useq: the seq unwrapped across 2^32 (first seq + running sum of wrap-safe differences).
* lead_calc: useq - max(useq of all earlier arrivals of the domain); 1 for the first arrival.
* dup_calc: an earlier arrival of the domain had the same useq.
* late: not a duplicate and lead_calc < 0. lateness_seq = -lead_calc.
  reorder_depth = arrivals of the domain from the first arrival that overtook it up to it
  (RFC 4737 reorder extent); lateness_us = host receive time since that overtaking arrival.
* gap_after: seqs missing between this (first) arrival and the next higher seq ever received:
  the gaps never filled. Their sum per domain is the loss estimate.
* report_head_missing: report MessageNumbers start at 1 per session (spec 003): a session whose
  lowest received number is m > 1 misses m - 1 reports at its head.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from .columns import COUNT_COLS, MAX_COLS, RATE_COLS, RECOVERY_SUMS, ROLLUP_MAXES, ROLLUP_SUMS, SUM_COLS
from .schema import HALF, U32

LEAD_KEY = ["device_id", "boot_epoch", "kind", "session", "lead_channel"]
DIMS = ["device_id", "kind", "channel", "firmware_version", "transport", "window_start"]
LATENCY_METRICS = ("rx_to_commit", "gen_to_rx")
PERCENTILES = (0.5, 0.95, 0.99)
# Latency percentiles, per device and per fleet-level group alike: linear interpolation between
# the order statistics at (n-1)p (numpy's default, DuckDB's quantile_cont, Spark's percentile),
# exact at every size. The fleet-level ones (the `latency` table, the summary's, by_firmware's and
# by_transport's <metric>_p<q>_us) come from value counts (transform_exact_percentiles): latency
# values repeat, so the counts are far fewer rows than the values, and a window sorts them (it
# spills; no map of a group's values is held in memory).
# Lead histogram buckets: (label, lower bound inclusive, upper bound inclusive), in plot order.
LEAD_BUCKETS: tuple[tuple[str, int | None, int | None], ...] = (
    ("<=-100", None, -100),
    ("-99..-10", -99, -10),
    ("-9..-2", -9, -2),
    ("-1", -1, -1),
    ("0", 0, 0),
    ("1", 1, 1),
    ("2", 2, 2),
    ("3..9", 3, 9),
    ("10..99", 10, 99),
    (">=100", 100, None),
)

# Order within a lead domain: (arrival, bridge_id). `arrival` is one store's per-device counter;
# a device that moved between bridge shards has rows of two stores whose counters are unrelated,
# and bridge_id makes their order deterministic (equal counters: the smaller bridge_id first).
ARRIVAL_ORDER = ["arrival", "bridge_id"]
ARRIVAL_COLS = [
    *LEAD_KEY,
    "channel",
    "seq",
    "arrival",
    "bridge_id",
    "lead",
    "duplicate",
    "retransmission",
    "firmware_version",
    "transport",
    "payload_bytes",
    "rx_us",
    "window_start",
    "commit_us",
    "e2e_us",
]
DOMAIN_COLS = [c for c in ARRIVAL_COLS if c not in ("commit_us", "e2e_us")]
LEAD_COLS = [*DOMAIN_COLS, "domain_hash", "pos", "useq", "lead_calc"]
ROW_COLS = [
    *LEAD_COLS,
    "dup_calc",
    "late",
    "lateness_seq",
    "reorder_depth",
    "lateness_us",
    "gap_after",
    "report_head_missing",
]
HIST_COLS = ["lead_hist_%d" % i for i in range(len(LEAD_BUCKETS))]
CHANNEL_WINDOW_COLS = [*DIMS, *COUNT_COLS, "loss_rate", *HIST_COLS]
RECOVERY_DIMS = ["device_id", "firmware_version", "transport", "window_start", "cause"]
RECOVERY_COLS = [
    *RECOVERY_DIMS,
    "phases",
    "lost_exact",
    "lost_unknown",
    "recovered",
    "unfinished",
    "duration_us_sum",
    "duration_us_max",
]
RESTART_DIMS = ["device_id", "firmware_version", "transport", "window_start"]
RESTART_COLS = [*RESTART_DIMS, "boots_seen", "restarts", "detected_by_recovery"]
LATENCY_VALUE_COLS = ["device_id", "firmware_version", "transport", "metric", "value_us", "n"]
LATENCY_COUNT_COLS = ["firmware_version", "transport", "window_start", "metric", "value_us", "n"]
PCT_NAMES = ["p%g" % (p * 100) for p in PERCENTILES]
LATENCY_COLS = ["metric", "n", *PCT_NAMES]
# transform_fleet_percentiles: `kind` firmware_version, transport or fleet; `key` the firmware or
# transport (null for the fleet)
FLEET_PCT_COLS = ["kind", "key", *LATENCY_COLS]
LATENCY_WIDE = ["%s_p%g_us" % (m, p * 100) for m in LATENCY_METRICS for p in PERCENTILES]
DEVICE_COLS = [
    "device_id",
    "firmware_versions",
    "transports",
    *SUM_COLS,
    *MAX_COLS,
    *RATE_COLS,
    *RECOVERY_SUMS,
    "recovery_us_max",
    *LATENCY_WIDE,
]
WORST_COLS = ["rank", *DEVICE_COLS]
COMPARE_SUMS = [
    "messages",
    "unique",
    "duplicates",
    "late",
    "lost",
    "retransmissions",
    "lead_mismatches",
    "dup_flag_mismatches",
]
LOSS_TIME_COLS = [
    "window_start",
    "transport",
    "messages",
    "unique",
    "lost",
    "loss_rate",
    "overruns",
    "events_lost_exact",
    "restarts",
]
HISTOGRAM_COLS = ["kind", "firmware_version", "transport", "bucket_order", "bucket", "n"]
MISMATCH_COLS = [
    *LEAD_KEY,
    "channel",
    "seq",
    "arrival",
    "lead",
    "lead_calc",
    "duplicate",
    "dup_calc",
    "rx_us",
]


# Expressions are written as SQL text where a function builds many of them: a Column built with
# `functions` costs ~10-40 Py4J round trips to the driver's JVM (F.col alone 13), F.expr 3, a
# name in selectExpr 1: built with `functions`, the job's expressions cost seconds of driver time
# on a small export (docs/benchmarks.md).
def _n(cond: Column) -> Column:
    """Count rows where cond holds (as a long; nulls count as false)."""
    return F.sum(F.when(cond, F.lit(1)).otherwise(F.lit(0))).cast("long")


def _bq(cols: list[str] | tuple[str, ...]) -> list[str]:
    """Column names quoted for SQL text (`unique` is a keyword)."""
    return ["`%s`" % c for c in cols]


def _nx(cond: str, alias: str) -> Column:
    """_n of a SQL condition, as one expression."""
    return F.expr("CAST(sum(CASE WHEN %s THEN 1 ELSE 0 END) AS BIGINT) AS `%s`" % (cond, alias))


def _ratiox(num: str, den: str, alias: str) -> Column:
    """num / den (0.0 where den is not positive), SQL text in, one expression out."""
    return F.expr("CASE WHEN (%s) > 0 THEN `%s` / (%s) ELSE 0D END AS `%s`" % (den, num, den, alias))


def window_start(ts_us: Column, window_seconds: int) -> Column:
    w = F.lit(window_seconds * 1_000_000)
    return F.timestamp_micros(ts_us - F.pmod(ts_us, w))


# ---------------------------------------------------------------------------------------- arrivals
def transform_arrivals(arrivals: DataFrame, window_seconds: int = 3600) -> DataFrame:
    """Raw arrivals -> the columns the job uses, times as integer microseconds, the time window."""
    rx = "unix_micros(host_rx_ts)"
    w = window_seconds * 1_000_000
    return arrivals.selectExpr(
        *_bq([*LEAD_KEY, "channel", "seq", "arrival", "bridge_id", "lead", "duplicate", "retransmission"]),
        *_bq(["firmware_version", "transport", "payload_bytes"]),
        "%s AS rx_us" % rx,
        "timestamp_micros(%s - pmod(%s, %d)) AS window_start" % (rx, rx, w),
        "unix_micros(host_commit_ts) - %s AS commit_us" % rx,
        "%s - unix_micros(gen_ts) AS e2e_us" % rx,
    ).selectExpr(*_bq(ARRIVAL_COLS))


def transform_by_device_bucket(arrivals: DataFrame, bucket_bits: int = 16) -> DataFrame:
    """Arrivals hash-partitioned by (device_id, arrival bucket) instead of the device alone: for a
    fleet with a hot device, whose rows would otherwise all be in one task. A bucket holds at
    most 2^bucket_bits arrival counters per bridge, so no task holds more than the buckets that
    hash to it. The lead-domain passes then run per (domain, bucket) with the carried state
    broadcast (transform_lead_carry(broadcast=True)), and the second pass's windows get an
    exchange by (domain, useq bucket) of their own: bounded pieces again."""
    by = "shiftright(arrival, %d)" % bucket_bits
    return arrivals.repartition("device_id", F.expr(by)).select(*arrivals.columns)


def transform_by_device(arrivals: DataFrame) -> DataFrame:
    """Arrivals hash-partitioned by device_id (into spark.sql.shuffle.partitions parts): the job's
    only shuffle of the per-arrival rows.

    Every later per-arrival step groups by keys that contain device_id (the lead-domain windows of
    transform_leads and transform_order, the channel-window aggregation, the per-device latency
    percentiles), and a hash partitioning on a subset of the grouping keys satisfies Spark's
    clustered distribution, so the planner adds no further exchange: one shuffle of the arrivals
    instead of one for the windows and another for the aggregation.
    """
    return arrivals.repartition("device_id").select(*arrivals.columns)


def _wrap_diff_sql(a: str, b: str) -> str:
    """Wrap-safe signed a - b in [-2^31, 2^31) for u32 values a, b (SQL text)."""
    m = "pmod(%s - %s, %d)" % (a, b, U32)
    return "CASE WHEN %s >= %d THEN %s - %d ELSE %s END" % (m, HALF, m, U32, m)


_FROM_START = "ROWS BETWEEN UNBOUNDED PRECEDING AND %s"
_DOMAIN_KEYS = ["domain_hash", *LEAD_KEY]
_WHOLE_DOMAIN = "PARTITION BY %s" % ", ".join(_bq(_DOMAIN_KEYS))
# A lead domain (one device boot's event ring, one report channel of a push session) can hold a
# large share of all rows (a device that never reboots). Spark's window operator buffers each of
# its partitions whole, so neither window pass is partitioned by the domain alone: the first by
# (domain, arrival bucket), the second by (domain, useq bucket), 2^BUCKET_BITS arrival counters or
# seq values per bucket, and what a bucket needs from the rest of its domain (the prefix state) is
# carried in from a small per-(domain, bucket) summary (a second, cheap window over the summaries
# and a join back, sort-merge on the device partitioning: no exchange). 2^16 rows stay below the job's
# in-memory window buffer (2^18 rows), so no bucket spills or needs managed memory.
BUCKET_BITS = 16


def _carry_join(rows: DataFrame, carry: DataFrame, keys: list[str], broadcast: bool = False) -> DataFrame:
    """rows joined with their bucket's carried state: a sort-merge join on the domain and bucket
    keys (the hint keeps the planner from broadcasting: a job of its own per run). Both sides are
    hash-partitioned by device_id, so with spark.sql.requireAllClusterKeysForCoPartition=false
    (session.TUNING_CONF) the join needs no exchange, and the rows come sorted by the keys from
    their window already. broadcast=True (rows partitioned by device and bucket: the carried
    state, one row per bucket, is not partitioned like them): the state broadcast to every task."""
    return rows.join(carry.hint("broadcast" if broadcast else "merge"), on=keys, how="inner")


def transform_lead_buckets(df: DataFrame, bucket_bits: int = BUCKET_BITS) -> DataFrame:
    """Step 1 of transform_leads: arrival order within (domain, arrival bucket): position, the seq
    unwrapped from the bucket's first arrival (`_l`: running sum of wrap-safe differences, 0 for the
    first row), the largest `_l` before each row (`_lmax`), and which row is the bucket's last.
    Keeps every ARRIVAL_COLS column (the job persists this and reads the latency columns from it
    too)."""
    df = df.selectExpr(
        *_bq(ARRIVAL_COLS),
        "xxhash64(%s) AS domain_hash" % ", ".join(_bq(LEAD_KEY)),
        "shiftright(arrival, %d) AS _abucket" % bucket_bits,
    )
    spec = "PARTITION BY %s ORDER BY %s" % (
        ", ".join(_bq([*_DOMAIN_KEYS, "_abucket"])),
        ", ".join(ARRIVAL_ORDER),
    )
    step = "CASE WHEN _prev IS NULL THEN CAST(0 AS BIGINT) ELSE %s END" % _wrap_diff_sql("seq", "_prev")
    # one select per Window operator: expressions sharing a select and a window spec share a pass
    df = df.selectExpr(
        "*",
        "row_number() OVER (%s) AS _pos" % spec,
        "lag(seq, 1) OVER (%s) AS _prev" % spec,
        # the bucket's last row (seq is never null): its summary is read from it and the first row
        "lead(seq, 1) OVER (%s) IS NULL AS _is_last" % spec,
    )
    df = df.selectExpr("*", "sum(%s) OVER (%s %s) AS _l" % (step, spec, _FROM_START % "CURRENT ROW"))
    return df.selectExpr("*", "max(_l) OVER (%s %s) AS _lmax" % (spec, _FROM_START % "1 PRECEDING"))


def lead_bucket_summary(df: DataFrame) -> DataFrame:
    """One row per (domain, arrival bucket) of transform_lead_buckets output: its rows (`_n`), first
    and last seq, last `_l` and largest `_l`, from the bucket's first and last row only (a filter,
    not an aggregation of every row)."""
    return (
        df.where("_pos = 1 OR _is_last")
        .groupBy(*_DOMAIN_KEYS, "_abucket")
        .agg(
            F.expr("max(_pos) AS _n"),
            F.expr("min_by(seq, _pos) AS _first"),
            F.expr("max_by(seq, _pos) AS _last"),
            F.expr("max_by(_l, _pos) AS _llast"),
            F.expr("max(greatest(_l, _lmax)) AS _lmax_b"),
        )
    )


def transform_lead_carry(df: DataFrame, broadcast: bool = False) -> DataFrame:
    """Step 2 of transform_leads: every bucket's prefix state from the buckets before it in its
    domain, from one summary row per (domain, arrival bucket): the useq of its first arrival
    (`_start`: the previous bucket's last useq plus the wrap-safe step to this bucket's first
    seq), the rows before it (`_pos0`) and the largest useq before it (`_max0`). Then pos, useq
    and lead_calc of every row equal those of one window over the whole domain."""
    keys = [*_DOMAIN_KEYS, "_abucket"]
    summ = lead_bucket_summary(df)
    spec = "PARTITION BY %s ORDER BY _abucket" % ", ".join(_bq(_DOMAIN_KEYS))
    before = "%s %s" % (spec, _FROM_START % "1 PRECEDING")
    delta = "CASE WHEN _pl IS NULL THEN _first ELSE %s END" % _wrap_diff_sql("_first", "_pl")
    summ = summ.selectExpr("*", "lag(_last, 1) OVER (%s) AS _pl" % spec)
    summ = summ.selectExpr(
        *_bq(keys),
        "_lmax_b",
        "sum(%s + _llast) OVER (%s %s) - _llast AS _start" % (delta, spec, _FROM_START % "CURRENT ROW"),
        "coalesce(sum(_n) OVER (%s), CAST(0 AS BIGINT)) AS _pos0" % before,
    )
    carry = summ.selectExpr(
        *_bq(keys), "_start", "_pos0", "max(_start + _lmax_b) OVER (%s) AS _max0" % before
    )
    out = _carry_join(df, carry, keys, broadcast)
    return out.selectExpr(
        *_bq(DOMAIN_COLS),
        "domain_hash",
        "_pos0 + _pos AS pos",
        "_start + _l AS useq",
        # greatest() skips nulls: both null only for the first arrival of the domain
        "coalesce(_start + _l - greatest(_max0, _start + _lmax), CAST(1 AS BIGINT)) AS lead_calc",
    )


def transform_leads(df: DataFrame, bucket_bits: int | None = BUCKET_BITS) -> DataFrame:
    """Spec 000 lead recomputed from arrival order per lead domain, wrap-safe at 2^32: pos
    (row_number), useq (first seq + running sum of wrap-safe differences) and lead_calc (useq -
    max useq before; 1 for the first arrival), in bounded pieces (transform_lead_buckets, then
    transform_lead_carry). The domain's hash goes first in every partitioning: exact (all key
    columns follow), but the sorts compare a long prefix instead of strings.

    Run it on transform_by_device output: the windows then reuse that partitioning (no shuffle).
    bucket_bits None: one window per whole domain (fewer operators: what the job runs when no
    device has more than 2^BUCKET_BITS arrivals, so that no domain can exceed one bucket).
    """
    if bucket_bits is None:
        return _leads_whole(df)
    return transform_lead_carry(transform_lead_buckets(df, bucket_bits))


def _leads_whole(df: DataFrame) -> DataFrame:
    """transform_leads with one window per whole domain."""
    df = df.selectExpr(*_bq(DOMAIN_COLS), "xxhash64(%s) AS domain_hash" % ", ".join(_bq(LEAD_KEY)))
    by_arrival = "%s ORDER BY %s" % (_WHOLE_DOMAIN, ", ".join(ARRIVAL_ORDER))
    step = "CASE WHEN _prev IS NULL THEN seq ELSE %s END" % _wrap_diff_sql("seq", "_prev")
    df = df.selectExpr(
        "*", "row_number() OVER (%s) AS pos" % by_arrival, "lag(seq, 1) OVER (%s) AS _prev" % by_arrival
    )
    df = df.selectExpr("*", "sum(%s) OVER (%s %s) AS useq" % (step, by_arrival, _FROM_START % "CURRENT ROW"))
    last_max = "max(useq) OVER (%s %s)" % (by_arrival, _FROM_START % "1 PRECEDING")
    return df.selectExpr(
        *_bq(LEAD_COLS[:-1]), "coalesce(useq - %s, CAST(1 AS BIGINT)) AS lead_calc" % last_max
    )


def _order_whole(df: DataFrame) -> DataFrame:
    """transform_order's window columns with one window per whole domain."""
    by_seq = "%s ORDER BY useq DESC, %s" % (_WHOLE_DOMAIN, ", ".join("%s ASC" % c for c in ARRIVAL_ORDER))
    above_rows = "%s %s" % (by_seq, _FROM_START % "1 PRECEDING")
    whole = "%s ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING" % by_seq
    return df.selectExpr(
        *_bq(LEAD_COLS),
        "lag(useq, 1) OVER (%s) AS _above" % by_seq,
        "last(CASE WHEN lead_calc > 0 THEN pos END, true) OVER (%s) AS _over_pos" % above_rows,
        "last(CASE WHEN lead_calc > 0 THEN rx_us END, true) OVER (%s) AS _over_rx" % above_rows,
        "min(useq) OVER (%s) AS _min_useq" % whole,
    )


def transform_order(df: DataFrame, bucket_bits: int | None = BUCKET_BITS) -> DataFrame:
    """Duplicates, late arrivals, reorder depth, lateness and gaps never filled, per lead domain.

    One more sort, by useq descending then arrival, within (domain, useq bucket): the row before a
    first arrival is the next higher seq ever received (gap) or an earlier copy (duplicate), and
    the nearest earlier row with lead > 0 is the arrival that first overtook it. For the first
    row of a bucket and rows with no overtaking arrival in their bucket, both come from the
    buckets above (carried: the lowest useq of the next bucket up, the lowest-useq arrival with
    lead > 0 of the nearest bucket up that has one), and the domain's lowest useq (report head)
    from all its buckets. bucket_bits None: one window per whole domain (as transform_leads).
    """
    df = _order_whole(df) if bucket_bits is None else _order_buckets(df, bucket_bits)
    df = df.selectExpr("*", "coalesce(_above = useq, false) AS dup_calc")
    late = "(NOT dup_calc AND lead_calc < 0)"
    return df.selectExpr(
        *_bq(LEAD_COLS),
        "dup_calc",
        "%s AS late" % late,
        "CASE WHEN %s THEN -lead_calc ELSE CAST(0 AS BIGINT) END AS lateness_seq" % late,
        "CASE WHEN %s THEN pos - _over_pos ELSE 0 END AS reorder_depth" % late,
        "CASE WHEN %s THEN rx_us - _over_rx ELSE 0 END AS lateness_us" % late,
        "CASE WHEN NOT dup_calc AND _above IS NOT NULL THEN _above - useq - 1 ELSE 0 END AS gap_after",
        "CASE WHEN NOT dup_calc AND kind = 'report' AND useq = _min_useq THEN greatest(useq - 1, 0) "
        "ELSE 0 END AS report_head_missing",
    ).selectExpr(*_bq(ROW_COLS))


def _order_buckets(df: DataFrame, bucket_bits: int) -> DataFrame:
    """transform_order's window columns per (domain, useq bucket) with the carried state."""
    keys = [*_DOMAIN_KEYS, "_ubucket"]
    df = df.selectExpr(*_bq(LEAD_COLS), "shiftright(useq, %d) AS _ubucket" % bucket_bits)
    by_seq = "PARTITION BY %s ORDER BY useq DESC, %s" % (
        ", ".join(_bq(keys)),
        ", ".join("%s ASC" % c for c in ARRIVAL_ORDER),
    )
    above_rows = "%s %s" % (by_seq, _FROM_START % "1 PRECEDING")
    local = df.selectExpr(
        "*",
        "lag(useq, 1) OVER (%s) AS _above_l" % by_seq,
        "last(CASE WHEN lead_calc > 0 THEN pos END, true) OVER (%s) AS _over_pos_l" % above_rows,
        "last(CASE WHEN lead_calc > 0 THEN rx_us END, true) OVER (%s) AS _over_rx_l" % above_rows,
    )
    summ = df.groupBy(*keys).agg(
        F.expr("min(useq) AS _min_b"),
        # the arrival with lead > 0 and the lowest useq (at most one arrival per useq has lead > 0,
        # a later copy has lead <= 0: no ties); min_by skips null orderings. Not min(struct(...)):
        # a struct buffer forces a sort-based aggregation, a sort of every row
        F.expr("min_by(pos, CASE WHEN lead_calc > 0 THEN useq END) AS _over_pos_b"),
        F.expr("min_by(rx_us, CASE WHEN lead_calc > 0 THEN useq END) AS _over_rx_b"),
    )
    down = "PARTITION BY %s ORDER BY _ubucket DESC" % ", ".join(_bq(_DOMAIN_KEYS))
    carry = summ.selectExpr(
        *_bq(keys),
        "lag(_min_b, 1) OVER (%s) AS _next_min" % down,
        "last(_over_pos_b, true) OVER (%s %s) AS _over_pos_c" % (down, _FROM_START % "1 PRECEDING"),
        "last(_over_rx_b, true) OVER (%s %s) AS _over_rx_c" % (down, _FROM_START % "1 PRECEDING"),
        "min(_min_b) OVER (PARTITION BY %s) AS _min_useq" % ", ".join(_bq(_DOMAIN_KEYS)),
    )
    return _carry_join(local, carry, keys).selectExpr(
        *_bq(LEAD_COLS),
        "coalesce(_above_l, _next_min) AS _above",
        "coalesce(_over_pos_l, _over_pos_c) AS _over_pos",
        "coalesce(_over_rx_l, _over_rx_c) AS _over_rx",
        "_min_useq",
    )


def _bucket_sql(lead: str, i: int) -> str:
    """The SQL condition `lead` is in LEAD_BUCKETS[i]."""
    _, lo, hi = LEAD_BUCKETS[i]
    cond = ["%s >= %d" % (lead, lo)] if lo is not None else []
    cond += ["%s <= %d" % (lead, hi)] if hi is not None else []
    return "(" + " AND ".join(cond) + ")"


def _bucket_label(order: Column) -> Column:
    expr = None
    for i, (label, _, _) in enumerate(LEAD_BUCKETS):
        expr = F.when(order == i, F.lit(label)) if expr is None else expr.when(order == i, F.lit(label))
    assert expr is not None
    return expr


# ------------------------------------------------------------------------------------ aggregates
def transform_channel_windows(rows: DataFrame, with_mismatches: bool = False) -> DataFrame:
    """Per device, kind, channel, firmware, transport and time window: the counting metrics, and the
    lead histogram (lead_hist_<i> counts leads in LEAD_BUCKETS[i]).

    with_mismatches: one more column, `mismatch_rows`, the MISMATCH_COLS structs of the window's
    rows that disagree with the bridge (usually empty), so that they come out of the same pass
    over the per-arrival rows (transform_window_mismatches takes them out). A `collect_list`
    over every row would make the whole aggregation Spark's interpreted ObjectHashAggregate; so
    each mismatching row is a group of its own (its struct is a grouping key, null for every
    other row) in the generated HashAggregate, and a second aggregation of those groups (one per
    window, one more per mismatching row; on the same partitioning: no exchange) adds them up per
    window and lists the structs."""
    bad = "(lead != lead_calc OR duplicate != dup_calc)"
    e = F.expr
    counts = [
        e("count(1) AS messages"),
        _nx("NOT dup_calc", "unique"),
        _nx("dup_calc", "duplicates"),
        _nx("duplicate", "duplicate_flagged"),
        _nx("duplicate != dup_calc", "dup_flag_mismatches"),
        _nx("retransmission", "retransmissions"),
        _nx("late", "late"),
        e("sum(lateness_seq) AS lateness_seq_sum"),
        e("max(lateness_seq) AS lateness_seq_max"),
        e("max(lateness_us) AS lateness_us_max"),
        e("CAST(sum(reorder_depth) AS BIGINT) AS reorder_depth_sum"),
        e("CAST(max(reorder_depth) AS BIGINT) AS reorder_depth_max"),
        _nx("lead_calc = 1", "lead_eq1"),
        _nx("lead_calc = 0", "lead_eq0"),
        _nx("lead_calc > 1", "lead_gt1"),
        _nx("lead_calc < 0", "lead_lt0"),
        e("CAST(sum(CASE WHEN lead_calc > 1 THEN lead_calc - 1 ELSE 0 END) AS BIGINT) AS skipped"),
        e("CAST(sum(gap_after) AS BIGINT) AS lost"),
        e("CAST(sum(report_head_missing) AS BIGINT) AS report_head_missing"),
        _nx("lead != lead_calc", "lead_mismatches"),
        e("CAST(sum(payload_bytes) AS BIGINT) AS payload_bytes"),
        *(_nx(_bucket_sql("lead_calc", i), c) for i, c in enumerate(HIST_COLS)),
    ]
    if with_mismatches:
        mm = "CASE WHEN %s THEN struct(%s) END AS _mm" % (bad, ", ".join(_bq(MISMATCH_COLS)))
        groups = rows.selectExpr("*", mm).groupBy(*DIMS, "_mm").agg(*counts)
        folded = [
            e("%s(`%s`) AS `%s`" % ("max" if c in MAX_COLS else "sum", c, c))
            for c in [*COUNT_COLS, *HIST_COLS]
        ]
        agg = groups.groupBy(*DIMS).agg(*folded, e("collect_list(_mm) AS mismatch_rows"))
    else:
        agg = rows.groupBy(*DIMS).agg(*counts)
    return agg.selectExpr(
        *_bq(DIMS),
        *_bq(COUNT_COLS),
        "CASE WHEN `unique` + lost > 0 THEN lost / (`unique` + lost) ELSE 0D END AS loss_rate",
        *_bq(HIST_COLS),
        *(["mismatch_rows"] if with_mismatches else []),
    )


def transform_window_mismatches(cw: DataFrame) -> DataFrame:
    """The mismatching rows carried by transform_channel_windows(..., with_mismatches=True)."""
    return cw.select(F.explode("mismatch_rows").alias("m")).select("m.*").select(*MISMATCH_COLS)


def transform_lead_histogram(cw: DataFrame) -> DataFrame:
    """Recomputed lead in buckets (1, 0, >1, <0 split by size) per kind, firmware and transport,
    from the histogram columns of the channel windows."""
    stacked = F.explode(
        F.array(
            *(F.struct(F.lit(i).alias("bucket_order"), F.col(c).alias("n")) for i, c in enumerate(HIST_COLS))
        )
    )
    return (
        cw.select("kind", "firmware_version", "transport", stacked.alias("h"))
        .select("kind", "firmware_version", "transport", "h.bucket_order", "h.n")
        .groupBy("kind", "firmware_version", "transport", "bucket_order")
        .agg(F.sum("n").cast("long").alias("n"))
        .where(F.col("n") > 0)
        .withColumn("bucket", _bucket_label(F.col("bucket_order")))
        .select(*HISTOGRAM_COLS)
    )


def transform_mismatches(rows: DataFrame) -> DataFrame:
    """Rows where the bridge's stored lead or duplicate flag disagrees with the recomputation."""
    bad = (F.col("lead") != F.col("lead_calc")) | (F.col("duplicate") != F.col("dup_calc"))
    return rows.where(bad).select(*MISMATCH_COLS)


def transform_latency_values(arrivals: DataFrame) -> DataFrame:
    """One row per latency value (us), n = 1, from transform_arrivals output (no lead needed).

    rx_to_commit = host_commit_ts - host_rx_ts (bridge); gen_to_rx = host_rx_ts - gen_ts (end to
    end, only where gen_ts is known).
    """
    long = arrivals.select(
        "device_id",
        "firmware_version",
        "transport",
        F.explode(
            F.array(
                F.struct(F.lit("rx_to_commit").alias("metric"), F.col("commit_us").alias("value_us")),
                F.struct(F.lit("gen_to_rx").alias("metric"), F.col("e2e_us").alias("value_us")),
            )
        ).alias("m"),
    ).select("device_id", "firmware_version", "transport", "m.metric", "m.value_us")
    return (
        long.where(F.col("value_us").isNotNull())
        .withColumn("n", F.lit(1).cast("long"))
        .select(*LATENCY_VALUE_COLS)
    )


def transform_latency_counts(arrivals: DataFrame, window_seconds: int) -> DataFrame:
    """The latency multiset: how often each value (us) occurs per firmware version, transport,
    window of window_seconds (the job: the rollout window, a day) and metric, from the arrivals
    (transform_arrivals output, rows counted): rx_to_commit always, gen_to_rx where known. Values
    repeat across devices, so the fleet-level percentiles (summed over windows) and the rollout's
    (per release and window; summed over transports) read far fewer rows than there are values,
    and both read this one aggregation (one scan of the arrivals' columns)."""
    long = arrivals.selectExpr(
        "firmware_version",
        "transport",
        "timestamp_micros(rx_us - pmod(rx_us, %d)) AS window_start" % (window_seconds * 1_000_000),
        "inline(array(struct('rx_to_commit' AS metric, commit_us AS value_us), "
        "struct('gen_to_rx' AS metric, e2e_us AS value_us)))",
    )
    return (
        long.where("value_us IS NOT NULL")
        .groupBy("firmware_version", "transport", "window_start", "metric", "value_us")
        .agg(F.expr("count(1) AS n"))
        .select(*LATENCY_COUNT_COLS)
    )


def transform_exact_percentiles(counts: DataFrame, by: list[str]) -> DataFrame:
    """Exact percentiles of value_us weighted by n, per `by` + metric: linear interpolation between
    the order statistics at position (n-1)p (0-based ranks), the arithmetic of Spark's
    `percentile` (and numpy's default, DuckDB's quantile_cont): lo = floor, hi = ceil of the
    position; v(lo) when lo = hi or v(lo) = v(hi), else v(lo) + (pos - lo) (v(hi) - v(lo)), in
    that order of operations, as `percentile` computes it (the same to the last bit: (hi - pos)
    v(lo) + (pos - lo) v(hi) can differ from it in the last bit).

    `counts` (by..., metric, value_us, n > 0; a value may have several rows, as per release and
    transport counts read per release) sorted by value per group in one window: a row holds ranks
    [before, before + n) where `before` is the running sum of n of the rows ordered before it
    (explicit frame: every earlier row), so v(k) is the value of the row whose ranks hold k. Ties
    in value may come in any order: their rows carry the same value. Null values are not counted
    (as `percentile`); a group without values has no row."""
    grp = _bq([*by, "metric"])
    order = "PARTITION BY %s ORDER BY value_us" % ", ".join(grp)
    ranked = counts.where("value_us IS NOT NULL").selectExpr(
        *grp,
        "value_us",
        "n",
        "sum(n) OVER (%s ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS _before" % order,
        "sum(n) OVER (%s ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS _total" % order,
    )
    pos = ["CAST(_total - 1 AS DOUBLE) * %rD" % p for p in PERCENTILES]
    ranks = ["_lo%d" % i for i in range(len(PERCENTILES))] + ["_hi%d" % i for i in range(len(PERCENTILES))]
    at = ranked.selectExpr(
        "*",
        "coalesce(_before, 0) AS _from",
        *("CAST(floor(%s) AS BIGINT) AS _lo%d" % (x, i) for i, x in enumerate(pos)),
        *("CAST(ceil(%s) AS BIGINT) AS _hi%d" % (x, i) for i, x in enumerate(pos)),
    )
    holds = "CASE WHEN _from <= {r} AND {r} < _from + n THEN value_us END"
    # the window's partitioning by the group serves this aggregation: no exchange
    picked = at.groupBy(*grp).agg(
        F.expr("max(_total) AS n"),
        *(F.expr("max(%s) AS _v%s" % (holds.format(r=r), r)) for r in ranks),
        *(F.expr("max(%s) AS %s" % (r, r)) for r in ranks),
    )
    interp = (
        "CASE WHEN _lo{i} = _hi{i} OR _v_lo{i} = _v_hi{i} THEN CAST(_v_lo{i} AS DOUBLE) ELSE "
        "CAST(_v_lo{i} AS DOUBLE) + ({pos} - CAST(_lo{i} AS DOUBLE)) "
        "* (CAST(_v_hi{i} AS DOUBLE) - CAST(_v_lo{i} AS DOUBLE)) END AS {name}"
    )
    return picked.selectExpr(
        *grp,
        "CAST(n AS BIGINT) AS n",
        *(
            interp.format(i=i, pos=pos[i].replace("_total", "n"), name=name)
            for i, name in enumerate(PCT_NAMES)
        ),
    ).select(*by, *LATENCY_COLS)


def transform_fleet_percentiles(counts: DataFrame) -> DataFrame:
    """The fleet-level latency percentiles from value counts (firmware_version, transport, metric,
    value_us, n: transform_latency_counts output), exact: per firmware version (kind
    firmware_version), per transport (kind transport) and for the fleet (kind fleet, key null),
    per metric. Each count row counts in its firmware's, its transport's and the fleet's group
    (one row per kind, summed per value), then one window sorts them all
    (transform_exact_percentiles)."""
    kinds = counts.selectExpr(
        "inline(array(struct('firmware_version' AS kind, firmware_version AS key), "
        "struct('transport' AS kind, transport AS key), "
        "struct('fleet' AS kind, CAST(NULL AS STRING) AS key)))",
        "metric",
        "value_us",
        "n",
    )
    summed = kinds.groupBy("kind", "key", "metric", "value_us").agg(F.expr("CAST(sum(n) AS BIGINT) AS n"))
    return transform_exact_percentiles(summed, ["kind", "key"]).select(*FLEET_PCT_COLS)


def transform_percentiles(values: DataFrame, by: list[str]) -> DataFrame:
    """Exact percentiles (as transform_exact_percentiles) of value_us weighted by n, per `by` +
    metric, by Spark's `percentile` (a map of the group's distinct values on one task: for groups
    whose values are one task's anyway, the per-device ones)."""
    pct = F.percentile(F.col("value_us"), list(PERCENTILES), F.col("n"))
    res = values.groupBy(*by, "metric").agg(F.sum("n").cast("long").alias("n"), pct.alias("_p"))
    return res.select(*by, "metric", "n", *(F.col("_p")[i].alias(name) for i, name in enumerate(PCT_NAMES)))


def latency_wide(pct: DataFrame, by: list[str]) -> DataFrame:
    """One row per `by` with <metric>_p<q>_us columns, from (by..., metric, p50, p95, p99) rows."""
    aggs = []
    for m in LATENCY_METRICS:
        for name in PCT_NAMES:
            aggs.append(F.max(F.when(F.col("metric") == m, F.col(name))).alias("%s_%s_us" % (m, name)))
    out = pct.groupBy(*by).agg(*aggs) if by else pct.agg(*aggs)
    return out.select(*by, *LATENCY_WIDE)


def transform_recoveries(losses: DataFrame, window_seconds: int = 3600) -> DataFrame:
    """Recovery phases (spec 004 case 3) per device, firmware, transport, window and cause."""
    started = F.unix_micros("started_ts")
    dur = F.unix_micros("ended_ts") - started
    return (
        losses.select(
            "device_id",
            "firmware_version",
            "transport",
            "cause",
            "lost",
            "recovered",
            "ended_ts",
            window_start(started, window_seconds).alias("window_start"),
            dur.alias("_dur"),
        )
        .groupBy(*RECOVERY_DIMS)
        .agg(
            F.count(F.lit(1)).alias("phases"),
            F.coalesce(F.sum("lost"), F.lit(0)).cast("long").alias("lost_exact"),
            _n(F.col("lost").isNull()).alias("lost_unknown"),
            F.sum("recovered").cast("long").alias("recovered"),
            _n(F.col("ended_ts").isNull()).alias("unfinished"),
            F.coalesce(F.sum("_dur"), F.lit(0)).cast("long").alias("duration_us_sum"),
            F.coalesce(F.max("_dur"), F.lit(0)).cast("long").alias("duration_us_max"),
        )
        .select(*RECOVERY_COLS)
    )


def in_range(us: Column, since_us: int | None, until_us: int | None) -> Column:
    """since_us <= us < until_us (a bound of None is open)."""
    cond = F.lit(True)
    if since_us is not None:
        cond = cond & (us >= F.lit(since_us))
    if until_us is not None:
        cond = cond & (us < F.lit(until_us))
    return cond


def transform_restarts(
    boots: DataFrame, window_seconds: int = 3600, since_us: int | None = None, until_us: int | None = None
) -> DataFrame:
    """Boots per device window; every boot after a device's first one seen is a restart.

    The same boot reported by two bridges counts once (earliest first_seen_ts wins). Boots are
    numbered over everything read, then only those first seen in [since_us, until_us) are counted:
    a device's first boot inside a date range is a restart when an earlier boot was read.
    """
    same_boot = Window.partitionBy("device_id", "boot_epoch", "boots").orderBy("first_seen_ts", "bridge_id")
    per_device = Window.partitionBy("device_id").orderBy("first_seen_ts", "boots", "boot_epoch")
    first_seen = F.unix_micros("first_seen_ts")
    return (
        boots.withColumn("_copy", F.row_number().over(same_boot))
        .where(F.col("_copy") == 1)
        .withColumn("_nth", F.row_number().over(per_device))
        .where(in_range(first_seen, since_us, until_us))
        .select(
            "device_id",
            "firmware_version",
            "transport",
            "detected_by",
            "_nth",
            window_start(first_seen, window_seconds).alias("window_start"),
        )
        .groupBy(*RESTART_DIMS)
        .agg(
            F.count(F.lit(1)).alias("boots_seen"),
            _n(F.col("_nth") > 1).alias("restarts"),
            _n(F.col("detected_by") == "recovery").alias("detected_by_recovery"),
        )
        .select(*RESTART_COLS)
    )


# The roll-ups (devices, by firmware, by transport, loss over time) read ONE union of narrow
# projections of their sources (channel windows, recoveries, restarts, latency) and aggregate it
# once: one exchange per table, where a groupBy per source and full outer joins between them
# would be a sort-merge join with its own exchanges each. Sums over a group without rows of a
# source are null and filled with 0, as a full outer join and fillna(0) would give.
ROLL_DIMS = ["device_id", "firmware_version", "transport", "window_start"]
_RECOVERY_ROLL = [
    "recovery_phases",
    "overruns",
    "events_lost_exact",
    "unknown_loss_recoveries",
    "recovery_us_sum",
]
_ZERO_FILL = ["boots_seen", "restarts", *_RECOVERY_ROLL, "recovery_us_max"]


def _roll_source(
    cw: DataFrame, rec: DataFrame, rst: DataFrame, cw_cols: list[str], *extra: DataFrame
) -> DataFrame:
    """cw (its `cw_cols`, flagged `_cw`), rec and rst as rows of one DataFrame with the roll-up
    columns (a column a source lacks is null there), plus `extra` frames as they are."""
    parts = [
        cw.selectExpr(*_bq(ROLL_DIMS), "true AS _cw", *_bq(cw_cols)),
        rec.selectExpr(
            *_bq(ROLL_DIMS),
            "CAST(phases AS BIGINT) AS recovery_phases",
            "CAST(CASE WHEN cause = 'overrun' THEN phases ELSE 0 END AS BIGINT) AS overruns",
            "CAST(lost_exact AS BIGINT) AS events_lost_exact",
            "CAST(lost_unknown AS BIGINT) AS unknown_loss_recoveries",
            "CAST(duration_us_sum AS BIGINT) AS recovery_us_sum",
            "CAST(duration_us_max AS BIGINT) AS recovery_us_max",
        ),
        rst.selectExpr(
            *_bq(ROLL_DIMS),
            "CAST(boots_seen AS BIGINT) AS boots_seen",
            "CAST(restarts AS BIGINT) AS restarts",
        ),
        *extra,
    ]
    out = parts[0]
    for d in parts[1:]:
        out = out.unionByName(d, allowMissingColumns=True)
    return out


def _sum0(c: str) -> Column:
    return F.expr("CAST(coalesce(sum(`%s`), 0) AS BIGINT) AS `%s`" % (c, c))


def _max0(c: str) -> Column:
    return F.expr("CAST(coalesce(max(`%s`), 0) AS BIGINT) AS `%s`" % (c, c))


def _rates() -> list[Column]:
    return [
        _ratiox("lost", "`unique` + lost", "loss_rate"),
        _ratiox("duplicates", "messages", "dup_rate"),
        _ratiox("late", "messages", "late_rate"),
    ]


def _pct_pivot(metric: str = "_pm", prefix: str = "_") -> list[Column]:
    """<metric>_p<q>_us as aggregate expressions over rows of (metric, <prefix>p50, ...) columns
    (one row per metric; rows of other sources have a null metric)."""
    return [
        F.expr("max(CASE WHEN %s = '%s' THEN %s%s END) AS %s_%s_us" % (metric, m, prefix, name, m, name))
        for m in LATENCY_METRICS
        for name in PCT_NAMES
    ]


def transform_device_latency(values: DataFrame) -> DataFrame:
    """Per device: <metric>_p<q>_us (exact percentiles of transform_latency_values output). On data
    partitioned by device (transform_by_device) the aggregation needs no exchange."""
    return latency_wide(transform_percentiles(values, ["device_id"]), ["device_id"])


def transform_stack(parts: dict[str, DataFrame]) -> DataFrame:
    """Several results as one DataFrame: a `_part` column naming each, the union of their columns
    (a column a part lacks is null there). One action then computes every part in one plan, where
    Spark reuses an exchange the parts share instead of running it once per part."""
    out: DataFrame | None = None
    for tag, df in parts.items():
        d = df.selectExpr("'%s' AS _part" % tag, *_bq(df.columns))
        out = d if out is None else out.unionByName(d, allowMissingColumns=True)
    assert out is not None
    return out


def transform_unstack(stacked: DataFrame, tag: str, cols: list[str]) -> DataFrame:
    """One part of transform_stack output, with its own columns."""
    return stacked.where("_part = '%s'" % tag).selectExpr(*_bq(cols))


def transform_devices(cw: DataFrame, rec: DataFrame, rst: DataFrame, lat: DataFrame) -> DataFrame:
    """One row per device over the whole input: counts, rates, restarts, recoveries, latency
    (`lat`: transform_device_latency output). One aggregation of _roll_source, no joins."""
    src = _roll_source(cw, rec, rst, [*SUM_COLS, *MAX_COLS], lat.selectExpr("device_id", *_bq(LATENCY_WIDE)))
    # null for a device with recoveries or boots but no arrivals (as the outer join gave)
    joined = "CASE WHEN size({s}) > 0 THEN array_join(array_sort({s}), ',') END AS {a}"
    out = src.groupBy("device_id").agg(
        *(
            F.expr(joined.format(s="collect_set(CASE WHEN _cw THEN %s END)" % c, a=a))
            for c, a in (("firmware_version", "firmware_versions"), ("transport", "transports"))
        ),
        *(_sum0(c) for c in [*SUM_COLS, *RECOVERY_SUMS]),
        *(_max0(c) for c in [*MAX_COLS, "recovery_us_max"]),
        *(F.expr("max(%s) AS %s" % (c, c)) for c in LATENCY_WIDE),
    )
    return out.select("*", *_rates()).selectExpr(*_bq(DEVICE_COLS))


def transform_worst(devices: DataFrame, n: int = 10) -> DataFrame:
    """The n devices with the highest loss rate (ties: more lost, more late, device_id)."""
    order = [F.col("loss_rate").desc(), F.col("lost").desc(), F.col("late").desc(), F.col("device_id").asc()]
    top = devices.orderBy(*order).limit(n)
    # single partition on purpose: at most n rows
    return top.withColumn("rank", F.row_number().over(Window.orderBy(*order))).select(*WORST_COLS)


def transform_compare(cw: DataFrame, rec: DataFrame, rst: DataFrame, pct: DataFrame, dim: str) -> DataFrame:
    """Fleet metrics side by side for each value of `dim` (firmware_version or transport): one
    aggregation of _roll_source with the latency percentiles of the value (`pct`:
    transform_fleet_percentiles output, its rows of kind `dim`)."""
    mine = pct.where("kind = '%s'" % dim).selectExpr(
        "key AS `%s`" % dim, "metric AS _pm", *("%s AS _%s" % (c, c) for c in PCT_NAMES)
    )
    src = _roll_source(cw, rec, rst, [*COMPARE_SUMS, "reorder_depth_max"], mine)
    out = src.groupBy(dim).agg(
        F.expr("CAST(size(collect_set(CASE WHEN _cw THEN device_id END)) AS BIGINT) AS devices"),
        *(_sum0(c) for c in [*COMPARE_SUMS, "boots_seen", "restarts", *_RECOVERY_ROLL]),
        *(_max0(c) for c in ["reorder_depth_max", "recovery_us_max"]),
        *_pct_pivot(),
    )
    return out.select("*", *_rates()).selectExpr(
        *_bq(
            [
                dim,
                "devices",
                *COMPARE_SUMS,
                "reorder_depth_max",
                "loss_rate",
                "dup_rate",
                "late_rate",
                *_ZERO_FILL,
                *LATENCY_WIDE,
            ]
        )
    )


def transform_loss_over_time(cw: DataFrame, rec: DataFrame, rst: DataFrame) -> DataFrame:
    """Per time window and transport: messages, gaps never filled, loss rate, overruns, restarts."""
    src = _roll_source(cw, rec, rst, ["messages", "unique", "lost"])
    out = src.groupBy("window_start", "transport").agg(
        *(_sum0(c) for c in ["messages", "unique", "lost", "overruns", "events_lost_exact", "restarts"])
    )
    return out.select("*", _ratiox("lost", "`unique` + lost", "loss_rate")).selectExpr(*_bq(LOSS_TIME_COLS))


def transform_fleet_latency(pct: DataFrame) -> DataFrame:
    """Fleet-wide latency percentiles per metric (`pct`: transform_fleet_percentiles output)."""
    return pct.where("kind = 'fleet'").select(*LATENCY_COLS)


SUMMARY_COLS = [
    "devices",
    *SUM_COLS,
    *MAX_COLS,
    *RATE_COLS,
    *RECOVERY_SUMS,
    "recovery_us_max",
    *LATENCY_WIDE,
]


def transform_summary(devices: DataFrame, fleet_latency: DataFrame) -> DataFrame:
    """One row: the fleet totals (sums and maxima over devices) and fleet latency percentiles
    (`fleet_latency`: transform_fleet_latency). One aggregation of the two as rows of one
    DataFrame (a crossJoin of two one-row aggregates costs a broadcast, a job of its own)."""
    src = devices.selectExpr("true AS _dev", *_bq([*ROLLUP_SUMS, *ROLLUP_MAXES])).unionByName(
        fleet_latency.select("metric", *PCT_NAMES),
        allowMissingColumns=True,
    )
    tot = src.agg(
        F.expr("count(_dev) AS devices"),
        *(_sum0(c) for c in ROLLUP_SUMS),
        *(_max0(c) for c in ROLLUP_MAXES),
        *_pct_pivot("metric", ""),
    )
    return tot.select("*", *_rates()).selectExpr(*_bq(SUMMARY_COLS))
