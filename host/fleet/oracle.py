"""A single-process DuckDB oracle for the fleet job, and a table comparator.

It computes the same tables as :mod:`leadwire.fleet.job` from the same export directory, in SQL,
with partly *different formulations* so that agreement means something:
* duplicates: row_number() per (lead domain, unwrapped seq) by arrival > 1 (Spark: lag in seq order);
* gaps never filled: next distinct seq among first arrivals (Spark: lag in descending seq order);
* the overtaking arrival of a late one: min(pos) over all higher seqs (Spark: last new maximum);
* percentiles: DuckDB's quantile_cont over the raw values (Spark: per device `percentile`; fleet-level
  a running sum of value counts in a window ordered by value).

The SQL is a sequence of named queries: TEMP_TABLES (each a temporary table, in order) and RESULTS
(each an output table). Their text is fixed at import; the run's parameters appear in it only as
``$w`` (the window in microseconds), ``$arrivals``/``$losses``/``$boots`` (the input tables) and
``$worst_n``, filled in by one function, :func:`_bind`.

duckdb is a dev dependency: this module is for the benchmark and the tests, not the job.
"""

from __future__ import annotations

import math
from string import Template
from typing import Any

import pandas as pd

from .columns import MAX_COLS, ROLLUP_MAXES, ROLLUP_SUMS, SUM_COLS
from .schema import HALF, U32

KEY = "device_id, boot_epoch, kind, session, lead_channel"
PCTS = ((0.5, "p50"), (0.95, "p95"), (0.99, "p99"))
METRICS = ("rx_to_commit", "gen_to_rx")
BUCKET_CASE = (
    "CASE WHEN lead_calc <= -100 THEN 0 WHEN lead_calc <= -10 THEN 1 WHEN lead_calc <= -2 THEN 2 "
    "WHEN lead_calc = -1 THEN 3 WHEN lead_calc = 0 THEN 4 WHEN lead_calc = 1 THEN 5 "
    "WHEN lead_calc = 2 THEN 6 WHEN lead_calc <= 9 THEN 7 WHEN lead_calc <= 99 THEN 8 ELSE 9 END"
)
BUCKET_LABELS = ("<=-100", "-99..-10", "-9..-2", "-1", "0", "1", "2", "3..9", "10..99", ">=100")


def _lat_wide(src: str, by: str) -> str:
    cols = ", ".join(
        "max(CASE WHEN metric = '%s' THEN %s END) AS %s_%s_us" % (m, p, m, p)
        for m in METRICS
        for _, p in PCTS
    )
    group = (" GROUP BY " + by) if by else ""
    return "SELECT %s%s %s FROM %s%s" % (by, "," if by else "", cols, src, group)


def _pct_sql(by: str) -> str:
    qs = ", ".join("quantile_cont(value_us, %s) AS %s" % (q, p) for q, p in PCTS)
    lead = (by + ", ") if by else ""
    return "SELECT %smetric, count(*) AS n, %s FROM lat GROUP BY %smetric" % (lead, qs, lead)


def _rec_roll(by: str) -> str:
    """The recovery counters rolled up by `by` (from rec)."""
    return (
        f"SELECT {by}, sum(phases) AS recovery_phases, sum(phases) FILTER (cause = 'overrun') AS overruns, "
        "sum(lost_exact) AS events_lost_exact, sum(lost_unknown) AS unknown_loss_recoveries, "
        "sum(duration_us_sum) AS recovery_us_sum, max(duration_us_max) AS recovery_us_max "
        f"FROM rec GROUP BY {by}"
    )


def _rst_roll(by: str) -> str:
    """The boots and restarts rolled up by `by` (from rst)."""
    return f"SELECT {by}, sum(boots_seen) AS boots_seen, sum(restarts) AS restarts FROM rst GROUP BY {by}"


def _sums(cols: Any, fmt: str = 'sum("{c}") AS "{c}"') -> str:
    return ", ".join(fmt.format(c=c) for c in cols)


# columns of the rollups, 0 where a device/firmware/transport has no row of that source
_ZERO: tuple[str, ...] = ("boots_seen", "restarts", "recovery_phases", "overruns", "events_lost_exact")
_ZERO += ("unknown_loss_recoveries", "recovery_us_sum", "recovery_us_max")
_COMPARE_SUMS: tuple[str, ...] = ("messages", "unique", "duplicates", "late", "lost", "retransmissions")
_COMPARE_SUMS += ("lead_mismatches", "dup_flag_mismatches")
_COALESCE = 'coalesce("{c}", 0) AS "{c}"'
_RATES = (
    'CASE WHEN "unique" + lost > 0 THEN lost / ("unique" + lost) ELSE 0.0 END AS loss_rate, '
    "CASE WHEN messages > 0 THEN duplicates / messages ELSE 0.0 END AS dup_rate, "
    "CASE WHEN messages > 0 THEN late / messages ELSE 0.0 END AS late_rate"
)
_LAT_COLS = ", ".join("%s_%s_us" % (m, p) for m in METRICS for _, p in PCTS)

# wrap-safe signed difference of two u32 offsets, in [-2^31, 2^31)
_MOD = "(((x) %% %d) + %d) %% %d" % (U32, U32, U32)
WRAPD_MACRO = f"CREATE MACRO wrapd(x) AS (CASE WHEN {_MOD} >= {HALF} THEN {_MOD} - {U32} ELSE {_MOD} END)"

# ------------------------------------------------------------------------- temporary tables
# a: the arrivals with the microsecond columns and their window
_A = """SELECT device_id, boot_epoch, kind, session, lead_channel, channel, seq,
    arrival, bridge_id, lead, duplicate, retransmission, firmware_version, transport, payload_bytes,
    epoch_us(host_rx_ts) AS rx_us,
    epoch_us(host_commit_ts) - epoch_us(host_rx_ts) AS commit_us,
    epoch_us(host_rx_ts) - epoch_us(gen_ts) AS e2e_us,
    epoch_us(host_rx_ts) - (epoch_us(host_rx_ts) % $w) AS window_us
    FROM $arrivals"""
# l1: position and wrap-safe step per lead domain in arrival order
_L1 = f"""SELECT *, row_number() OVER w AS pos,
    CASE WHEN lag(seq) OVER w IS NULL THEN seq ELSE wrapd(seq - lag(seq) OVER w) END AS step
    FROM a WINDOW w AS (PARTITION BY {KEY} ORDER BY arrival, bridge_id)"""
# l2: the unwrapped seq (running sum of the steps)
_L2 = f"""SELECT *, CAST(sum(step) OVER (PARTITION BY {KEY} ORDER BY arrival, bridge_id
    ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS BIGINT) AS useq FROM l1"""
# l3: lead (against the running maximum) and duplicate (seq seen before)
_L3 = f"""SELECT *, coalesce(useq - max(useq) OVER (PARTITION BY {KEY}
    ORDER BY arrival, bridge_id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 1) AS lead_calc,
    row_number() OVER (PARTITION BY {KEY}, useq ORDER BY arrival, bridge_id) > 1 AS dup_calc FROM l2"""
# l4: overtaker of a late row = the earliest arrival among all higher seqs of the domain
_L4 = f"""SELECT *,
    min(pos) OVER ws AS over_pos, arg_min(rx_us, pos) OVER ws AS over_rx,
    min(useq) OVER (PARTITION BY {KEY}) AS min_useq
    FROM l3 WINDOW ws AS (PARTITION BY {KEY} ORDER BY useq DESC, arrival ASC, bridge_id ASC
    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"""
# gaps: seqs never received after each first arrival (next distinct seq)
_GAPS = f"""SELECT {KEY}, useq,
    coalesce(lead(useq) OVER (PARTITION BY {KEY} ORDER BY useq) - useq - 1, 0) AS gap_after
    FROM l4 WHERE NOT dup_calc"""
# r: every arrival with its lateness, reorder depth, gap and missing report head
_R = f"""SELECT l4.*, (NOT dup_calc AND lead_calc < 0) AS late,
    CASE WHEN NOT dup_calc AND lead_calc < 0 THEN -lead_calc ELSE 0 END AS lateness_seq,
    CASE WHEN NOT dup_calc AND lead_calc < 0 THEN pos - over_pos ELSE 0 END AS reorder_depth,
    CASE WHEN NOT dup_calc AND lead_calc < 0 THEN rx_us - over_rx ELSE 0 END AS lateness_us,
    CASE WHEN dup_calc THEN 0 ELSE g.gap_after END AS gap_after,
    CASE WHEN NOT dup_calc AND kind = 'report' AND useq = min_useq THEN greatest(useq - 1, 0) ELSE 0 END
      AS report_head_missing
    FROM l4 LEFT JOIN gaps g USING ({KEY}, useq)"""
# cw: the channel windows (counters per device, kind, channel, firmware, transport and window)
_HIST_COLS = ", ".join("count(*) FILTER (%s = %d) AS lead_hist_%d" % (BUCKET_CASE, i, i) for i in range(10))
_CW = f"""SELECT device_id, kind, channel, firmware_version, transport,
    make_timestamp(window_us) AS window_start,
    count(*) AS messages, count(*) FILTER (NOT dup_calc) AS "unique",
    count(*) FILTER (dup_calc) AS duplicates, count(*) FILTER (duplicate) AS duplicate_flagged,
    count(*) FILTER (duplicate <> dup_calc) AS dup_flag_mismatches,
    count(*) FILTER (retransmission) AS retransmissions, count(*) FILTER (late) AS late,
    sum(lateness_seq) AS lateness_seq_sum, max(lateness_seq) AS lateness_seq_max,
    max(lateness_us) AS lateness_us_max, sum(reorder_depth) AS reorder_depth_sum,
    max(reorder_depth) AS reorder_depth_max,
    count(*) FILTER (lead_calc = 1) AS lead_eq1, count(*) FILTER (lead_calc = 0) AS lead_eq0,
    count(*) FILTER (lead_calc > 1) AS lead_gt1, count(*) FILTER (lead_calc < 0) AS lead_lt0,
    coalesce(sum(lead_calc - 1) FILTER (lead_calc > 1), 0) AS skipped, sum(gap_after) AS lost,
    sum(report_head_missing) AS report_head_missing,
    count(*) FILTER (lead <> lead_calc) AS lead_mismatches, sum(payload_bytes) AS payload_bytes, {_HIST_COLS}
    FROM r GROUP BY device_id, kind, channel, firmware_version, transport, window_us"""
# hist: the lead histogram per kind, firmware and transport
_HIST = f"""SELECT kind, firmware_version, transport,
    {BUCKET_CASE} AS bucket_order, count(*) AS n FROM r GROUP BY ALL"""
# lat: one row per latency sample (metric, value)
_LAT = """SELECT device_id, firmware_version, transport, 'rx_to_commit' AS metric, commit_us AS value_us
    FROM r UNION ALL
    SELECT device_id, firmware_version, transport, 'gen_to_rx', e2e_us FROM r WHERE e2e_us IS NOT NULL"""
# rec: the recovery phases per device, firmware, transport, window and cause
_REC = """SELECT device_id, firmware_version, transport,
    make_timestamp(epoch_us(started_ts) - (epoch_us(started_ts) % $w)) AS window_start, cause,
    count(*) AS phases, coalesce(sum(lost), 0) AS lost_exact,
    count(*) FILTER (lost IS NULL) AS lost_unknown,
    sum(recovered) AS recovered, count(*) FILTER (ended_ts IS NULL) AS unfinished,
    coalesce(sum(epoch_us(ended_ts) - epoch_us(started_ts)), 0) AS duration_us_sum,
    coalesce(max(epoch_us(ended_ts) - epoch_us(started_ts)), 0) AS duration_us_max
    FROM $losses GROUP BY ALL"""
# rst: boots (one row per boot, the first bridge to see it) and restarts per window
_RST = """WITH b AS (
      SELECT * FROM $boots QUALIFY row_number() OVER (PARTITION BY device_id, boot_epoch, boots
        ORDER BY first_seen_ts, bridge_id) = 1),
    n AS (SELECT *,
      row_number() OVER (PARTITION BY device_id ORDER BY first_seen_ts, boots, boot_epoch) AS nth
      FROM b)
    SELECT device_id, firmware_version, transport,
    make_timestamp(epoch_us(first_seen_ts) - (epoch_us(first_seen_ts) % $w)) AS window_start,
    count(*) AS boots_seen, count(*) FILTER (nth > 1) AS restarts,
    count(*) FILTER (detected_by = 'recovery') AS detected_by_recovery FROM n GROUP BY ALL"""
# dev: per device, every source joined
_DEV = f"""WITH base AS (SELECT device_id,
        array_to_string(list_sort(list_distinct(list(firmware_version))), ',') AS firmware_versions,
        array_to_string(list_sort(list_distinct(list(transport))), ',') AS transports, {_sums(SUM_COLS)},
        {_sums(MAX_COLS, "max({c}) AS {c}")}
        FROM cw GROUP BY device_id),
    rr AS ({_rec_roll("device_id")}), ss AS ({_rst_roll("device_id")}),
    ll AS ({_lat_wide("(%s)" % _pct_sql("device_id"), "device_id")})
    SELECT * FROM base FULL JOIN rr USING (device_id) FULL JOIN ss USING (device_id)
    LEFT JOIN ll USING (device_id)"""
# devices: dev with zeros for missing sources, and the rates
_DEVICES = f"""SELECT device_id, firmware_versions, transports,
    {_sums([*SUM_COLS, *MAX_COLS, *_ZERO], _COALESCE)}, {_RATES}, {_LAT_COLS} FROM dev"""

TEMP_TABLES: tuple[tuple[str, str], ...] = (
    ("a", _A),
    ("l1", _L1),
    ("l2", _L2),
    ("l3", _L3),
    ("l4", _L4),
    ("gaps", _GAPS),
    ("r", _R),
    ("cw", _CW),
    ("hist", _HIST),
    ("lat", _LAT),
    ("rec", _REC),
    ("rst", _RST),
    ("dev", _DEV),
    ("devices", _DEVICES),
)


# ---------------------------------------------------------------------------- result tables
def _by_dim(dim: str) -> str:
    """The rollup by firmware_version or by transport."""
    return f"""WITH base AS (SELECT {dim}, count(DISTINCT device_id) AS devices, {_sums(_COMPARE_SUMS)},
         max(reorder_depth_max) AS reorder_depth_max FROM cw GROUP BY {dim}),
       rr AS ({_rec_roll(dim)}), ss AS ({_rst_roll(dim)}), ll AS ({_lat_wide("(%s)" % _pct_sql(dim), dim)}),
       j AS (SELECT * FROM base FULL JOIN rr USING ({dim}) FULL JOIN ss USING ({dim})
              LEFT JOIN ll USING ({dim}))
       SELECT {dim}, {_sums(["devices", *_COMPARE_SUMS, "reorder_depth_max", *_ZERO], _COALESCE)}, {_RATES},
       {_LAT_COLS} FROM j"""


_CHANNEL_WINDOWS = (
    'SELECT *, CASE WHEN "unique" + lost > 0 THEN lost / ("unique" + lost) ELSE 0.0 END AS loss_rate FROM cw'
)
_LABELS = "[%s]" % ", ".join("'%s'" % b for b in BUCKET_LABELS)
_WORST_DEVICES = (
    "SELECT row_number() OVER (ORDER BY loss_rate DESC, lost DESC, late DESC, device_id) AS rank, * "
    "FROM devices ORDER BY rank LIMIT $worst_n"
)
_WT = "window_start, transport"
_LOSS_OVER_TIME = f"""WITH base AS (SELECT window_start, transport, sum(messages) AS messages,
         sum("unique") AS "unique", sum(lost) AS lost FROM cw GROUP BY ALL),
       rr AS ({_rec_roll(_WT)}), ss AS ({_rst_roll(_WT)}),
       j AS (SELECT * FROM base FULL JOIN rr USING ({_WT})
             FULL JOIN ss USING ({_WT}))
       SELECT window_start, transport, coalesce(messages, 0) AS messages,
       coalesce("unique", 0) AS "unique",
       coalesce(lost, 0) AS lost,
       CASE WHEN coalesce("unique", 0) + coalesce(lost, 0) > 0 THEN lost / ("unique" + lost) ELSE 0.0 END
         AS loss_rate,
       coalesce(overruns, 0) AS overruns, coalesce(events_lost_exact, 0) AS events_lost_exact,
       coalesce(restarts, 0) AS restarts FROM j"""
_SUMMARY = f"""WITH t AS (SELECT count(*) AS devices,
    {_sums(ROLLUP_SUMS, 'coalesce(sum("{c}"), 0) AS "{c}"')},
    {_sums(ROLLUP_MAXES, "coalesce(max({c}), 0) AS {c}")} FROM devices),
    l AS ({_lat_wide("(%s)" % _pct_sql(""), "")})
    SELECT t.*, {_RATES}, l.* FROM t CROSS JOIN l"""

RESULTS: tuple[tuple[str, str], ...] = (
    ("channel_windows", _CHANNEL_WINDOWS),
    ("lead_histogram", "SELECT *, %s[bucket_order + 1] AS bucket FROM hist" % _LABELS),
    ("recoveries", "SELECT * FROM rec"),
    ("restarts", "SELECT * FROM rst"),
    ("devices", "SELECT * FROM devices"),
    ("worst_devices", _WORST_DEVICES),
    ("by_firmware", _by_dim("firmware_version")),
    ("by_transport", _by_dim("transport")),
    ("loss_over_time", _LOSS_OVER_TIME),
    ("latency", _pct_sql("")),
    ("summary", _SUMMARY),
)


def _bind(sql: str, input_dir: str, window_seconds: int, worst_n: int) -> str:
    """The one place the run's parameters enter the SQL (integers formatted as such, paths quoted)."""

    def src(name: str) -> str:
        path = "%s/%s/*/*.parquet" % (input_dir.rstrip("/"), name)
        return "read_parquet(%s, hive_partitioning = true, hive_types = {'date': VARCHAR})" % _quote(path)

    return Template(sql).substitute(
        w="%d" % (window_seconds * 1_000_000),
        worst_n="%d" % worst_n,
        arrivals=src("arrivals"),
        losses=src("losses"),
        boots=src("boots"),
    )


def _quote(text: str) -> str:
    return "'%s'" % text.replace("'", "''")


def run_oracle(
    input_dir: str,
    window_seconds: int = 3600,
    worst_n: int = 10,
    threads: int | None = None,
    memory_limit: str | None = None,
    spill_dir: str | None = None,
) -> dict[str, pd.DataFrame]:
    """The job's result tables computed by DuckDB (in memory) from the export under input_dir.
    memory_limit (e.g. "6GB") caps DuckDB, which then spills to spill_dir: beside a large Spark
    driver on one machine, its default (80% of RAM) got a 10M-row run OOM-killed."""
    import duckdb

    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        if threads:
            con.execute("SET threads = %d" % threads)
        if memory_limit:
            con.execute("SET memory_limit = %s" % _quote(memory_limit))
        if spill_dir:
            con.execute("SET temp_directory = %s" % _quote(spill_dir))
        con.execute(WRAPD_MACRO)
        for name, sql in TEMP_TABLES:
            con.execute("CREATE TEMP TABLE %s AS %s" % (name, _bind(sql, input_dir, window_seconds, worst_n)))
        return {
            name: con.execute(_bind(sql, input_dir, window_seconds, worst_n)).df() for name, sql in RESULTS
        }
    finally:
        con.close()


# ------------------------------------------------------------------------------------- compare
def _norm(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    df = df.copy()
    for c in df.columns:
        s = df[c]
        if pd.api.types.is_datetime64_any_dtype(s):
            if getattr(s.dt, "tz", None) is not None:
                s = s.dt.tz_convert("UTC").dt.tz_localize(None)
            df[c] = s.astype("datetime64[us]").astype("int64")
        elif s.dtype == object or str(s.dtype) in ("string", "str"):
            df[c] = s.astype(object)
    if keys:
        df = df.sort_values(keys, kind="mergesort")
    return df.reset_index(drop=True)


def _eq(a: Any, b: Any) -> bool:
    a_null = a is None or (isinstance(a, float) and math.isnan(a)) or a is pd.NA
    b_null = b is None or (isinstance(b, float) and math.isnan(b)) or b is pd.NA
    if a_null or b_null:
        return a_null and b_null
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    fa, fb = float(a), float(b)
    if fa == fb:
        return True
    return abs(fa - fb) <= 1e-9 * max(abs(fa), abs(fb))


def compare_tables(
    got: dict[str, pd.DataFrame], want: dict[str, pd.DataFrame], keys: dict[str, list[str]]
) -> list[str]:
    """Differences between two sets of tables (same names): [] when equal. Floats to 1e-9 relative."""
    diffs: list[str] = []
    for name, w in want.items():
        if name not in got:
            diffs.append("%s: missing" % name)
            continue
        g = got[name]
        if set(g.columns) != set(w.columns):
            diffs.append(
                "%s: columns differ: only spark %s, only oracle %s"
                % (name, sorted(set(g.columns) - set(w.columns)), sorted(set(w.columns) - set(g.columns)))
            )
            continue
        cols = list(g.columns)
        g2, w2 = _norm(g[cols], keys.get(name, [])), _norm(w[cols], keys.get(name, []))
        if len(g2) != len(w2):
            diffs.append("%s: %d rows vs %d" % (name, len(g2), len(w2)))
            continue
        bad = 0
        for c in cols:
            for i, (x, y) in enumerate(zip(g2[c].tolist(), w2[c].tolist(), strict=True)):
                if not _eq(x, y):
                    if bad < 5:
                        diffs.append("%s row %d column %s: %r vs %r" % (name, i, c, x, y))
                    bad += 1
        if bad > 5:
            diffs.append("%s: %d differing cells in all" % (name, bad))
    return diffs


def read_job_tables(out_dir: str, names: Any) -> dict[str, pd.DataFrame]:
    """The job's tables under out_dir/parquet/ as pandas: a single file (the small tables) or a
    directory of part files (the executor-written ones; their `date` partition column dropped)."""
    import pyarrow.parquet as pq

    got = {}
    for n in names:
        t = pq.read_table("%s/parquet/%s.parquet" % (out_dir.rstrip("/"), n))
        if "date" in t.column_names:
            t = t.drop_columns(["date"])
        got[n] = t.to_pandas()
    return got
