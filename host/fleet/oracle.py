"""A single-process DuckDB oracle for the fleet job, and a table comparator.

It computes the same tables as :mod:`leadwire.fleet.job` from the same export directory, in SQL,
with partly *different formulations* so that agreement means something:
* duplicates: row_number() per (lead domain, unwrapped seq) by arrival > 1 (Spark: lag in seq order);
* gaps never filled: next distinct seq among first arrivals (Spark: lag in descending seq order);
* the overtaking arrival of a late one: min(pos) over all higher seqs (Spark: last new maximum);
* percentiles: DuckDB's quantile_cont (Spark: order statistics from a value/count multiset).

duckdb is a dev dependency: this module is for the benchmark and the tests, not the job.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from .columns import MAX_COLS, ROLLUP_MAXES, ROLLUP_SUMS, SUM_COLS
from .schema import HALF, U32

KEY = "device_id, boot_epoch, kind, session, lead_channel"
DIMS = "device_id, kind, channel, firmware_version, transport, window_start"
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


def run_oracle(
    input_dir: str, window_seconds: int = 3600, worst_n: int = 10, threads: int | None = None
) -> dict[str, pd.DataFrame]:
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    if threads:
        con.execute("SET threads = %d" % threads)
    w = window_seconds * 1_000_000

    def src(name: str) -> str:
        path = "%s/%s/*/*.parquet" % (input_dir.rstrip("/"), name)
        return "read_parquet('%s', hive_partitioning = true, hive_types = {'date': VARCHAR})" % path

    def q(sql: str) -> None:
        con.execute(sql)

    q(
        "CREATE MACRO wrapd(x) AS (CASE WHEN (((x) %% %d) + %d) %% %d >= %d "
        "THEN (((x) %% %d) + %d) %% %d - %d ELSE (((x) %% %d) + %d) %% %d END)"
        % (U32, U32, U32, HALF, U32, U32, U32, U32, U32, U32, U32)
    )
    q(
        """CREATE TEMP TABLE a AS SELECT device_id, boot_epoch, kind, session, lead_channel, channel, seq,
        arrival, bridge_id, lead, duplicate, retransmission, firmware_version, transport, payload_bytes,
        epoch_us(host_rx_ts) AS rx_us,
        epoch_us(host_commit_ts) - epoch_us(host_rx_ts) AS commit_us,
        epoch_us(host_rx_ts) - epoch_us(gen_ts) AS e2e_us,
        epoch_us(host_rx_ts) - (epoch_us(host_rx_ts) %% %d) AS window_us
        FROM %s"""
        % (w, src("arrivals"))
    )
    q(
        """CREATE TEMP TABLE l1 AS SELECT *, row_number() OVER w AS pos,
        CASE WHEN lag(seq) OVER w IS NULL THEN seq ELSE wrapd(seq - lag(seq) OVER w) END AS step
        FROM a WINDOW w AS (PARTITION BY %s ORDER BY arrival, bridge_id)"""
        % KEY
    )
    q(
        """CREATE TEMP TABLE l2 AS SELECT *, CAST(sum(step) OVER (PARTITION BY %s ORDER BY arrival, bridge_id
        ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS BIGINT) AS useq FROM l1"""
        % KEY
    )
    q(
        """CREATE TEMP TABLE l3 AS SELECT *, coalesce(useq - max(useq) OVER (PARTITION BY %s
        ORDER BY arrival, bridge_id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 1) AS lead_calc,
        row_number() OVER (PARTITION BY %s, useq ORDER BY arrival, bridge_id) > 1 AS dup_calc FROM l2"""
        % (KEY, KEY)
    )
    # overtaker of a late row = the earliest arrival among all higher seqs of the domain
    q(
        """CREATE TEMP TABLE l4 AS SELECT *,
        min(pos) OVER ws AS over_pos, arg_min(rx_us, pos) OVER ws AS over_rx,
        min(useq) OVER (PARTITION BY %s) AS min_useq
        FROM l3 WINDOW ws AS (PARTITION BY %s ORDER BY useq DESC, arrival ASC, bridge_id ASC
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"""
        % (KEY, KEY)
    )
    q(
        """CREATE TEMP TABLE gaps AS SELECT %s, useq,
        coalesce(lead(useq) OVER (PARTITION BY %s ORDER BY useq) - useq - 1, 0) AS gap_after
        FROM l4 WHERE NOT dup_calc"""
        % (KEY, KEY)
    )
    q(
        """CREATE TEMP TABLE r AS SELECT l4.*, (NOT dup_calc AND lead_calc < 0) AS late,
        CASE WHEN NOT dup_calc AND lead_calc < 0 THEN -lead_calc ELSE 0 END AS lateness_seq,
        CASE WHEN NOT dup_calc AND lead_calc < 0 THEN pos - over_pos ELSE 0 END AS reorder_depth,
        CASE WHEN NOT dup_calc AND lead_calc < 0 THEN rx_us - over_rx ELSE 0 END AS lateness_us,
        CASE WHEN dup_calc THEN 0 ELSE g.gap_after END AS gap_after,
        CASE WHEN NOT dup_calc AND kind = 'report' AND useq = min_useq THEN greatest(useq - 1, 0) ELSE 0 END
          AS report_head_missing
        FROM l4 LEFT JOIN gaps g USING (%s, useq)"""
        % KEY
    )
    q(
        """CREATE TEMP TABLE cw AS SELECT device_id, kind, channel, firmware_version, transport,
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
        count(*) FILTER (lead <> lead_calc) AS lead_mismatches, sum(payload_bytes) AS payload_bytes, %s
        FROM r GROUP BY device_id, kind, channel, firmware_version, transport, window_us"""
        % ", ".join("count(*) FILTER (%s = %d) AS lead_hist_%d" % (BUCKET_CASE, i, i) for i in range(10))
    )
    q(
        """CREATE TEMP TABLE hist AS SELECT kind, firmware_version, transport,
        %s AS bucket_order, count(*) AS n FROM r GROUP BY ALL"""
        % BUCKET_CASE
    )
    q(
        """CREATE TEMP TABLE lat AS
        SELECT device_id, firmware_version, transport, 'rx_to_commit' AS metric, commit_us AS value_us FROM r
        UNION ALL
        SELECT device_id, firmware_version, transport, 'gen_to_rx', e2e_us FROM r WHERE e2e_us IS NOT NULL"""
    )
    q(
        """CREATE TEMP TABLE rec AS SELECT device_id, firmware_version, transport,
        make_timestamp(epoch_us(started_ts) - (epoch_us(started_ts) %% %d)) AS window_start, cause,
        count(*) AS phases, coalesce(sum(lost), 0) AS lost_exact,
        count(*) FILTER (lost IS NULL) AS lost_unknown,
        sum(recovered) AS recovered, count(*) FILTER (ended_ts IS NULL) AS unfinished,
        coalesce(sum(epoch_us(ended_ts) - epoch_us(started_ts)), 0) AS duration_us_sum,
        coalesce(max(epoch_us(ended_ts) - epoch_us(started_ts)), 0) AS duration_us_max
        FROM %s GROUP BY ALL"""
        % (w, src("losses"))
    )
    q(
        """CREATE TEMP TABLE rst AS WITH b AS (
          SELECT * FROM %s QUALIFY row_number() OVER (PARTITION BY device_id, boot_epoch, boots
            ORDER BY first_seen_ts, bridge_id) = 1),
        n AS (SELECT *,
          row_number() OVER (PARTITION BY device_id ORDER BY first_seen_ts, boots, boot_epoch) AS nth
          FROM b)
        SELECT device_id, firmware_version, transport,
        make_timestamp(epoch_us(first_seen_ts) - (epoch_us(first_seen_ts) %% %d)) AS window_start,
        count(*) AS boots_seen, count(*) FILTER (nth > 1) AS restarts,
        count(*) FILTER (detected_by = 'recovery') AS detected_by_recovery FROM n GROUP BY ALL"""
        % (src("boots"), w)
    )
    sum_cols = SUM_COLS
    max_cols = MAX_COLS

    def rec_roll(by: str) -> str:
        return (
            "SELECT %s, sum(phases) AS recovery_phases, sum(phases) FILTER (cause = 'overrun') AS overruns, "
            "sum(lost_exact) AS events_lost_exact, sum(lost_unknown) AS unknown_loss_recoveries, "
            "sum(duration_us_sum) AS recovery_us_sum, max(duration_us_max) AS recovery_us_max "
            "FROM rec GROUP BY %s" % (by, by)
        )

    def rst_roll(by: str) -> str:
        return "SELECT %s, sum(boots_seen) AS boots_seen, sum(restarts) AS restarts FROM rst GROUP BY %s" % (
            by,
            by,
        )

    zero = [
        "boots_seen",
        "restarts",
        "recovery_phases",
        "overruns",
        "events_lost_exact",
        "unknown_loss_recoveries",
        "recovery_us_sum",
        "recovery_us_max",
    ]
    q(
        """CREATE TEMP TABLE dev AS
        WITH base AS (SELECT device_id,
            array_to_string(list_sort(list_distinct(list(firmware_version))), ',') AS firmware_versions,
            array_to_string(list_sort(list_distinct(list(transport))), ',') AS transports, %s, %s
            FROM cw GROUP BY device_id),
        rr AS (%s), ss AS (%s), ll AS (%s)
        SELECT * FROM base FULL JOIN rr USING (device_id) FULL JOIN ss USING (device_id)
        LEFT JOIN ll USING (device_id)"""
        % (
            ", ".join('sum("%s") AS "%s"' % (c, c) for c in sum_cols),
            ", ".join("max(%s) AS %s" % (c, c) for c in max_cols),
            rec_roll("device_id"),
            rst_roll("device_id"),
            _lat_wide("(%s)" % _pct_sql("device_id"), "device_id"),
        )
    )
    fill = ", ".join('coalesce("%s", 0) AS "%s"' % (c, c) for c in [*sum_cols, *max_cols, *zero])
    rates = (
        'CASE WHEN "unique" + lost > 0 THEN lost / ("unique" + lost) ELSE 0.0 END AS loss_rate, '
        "CASE WHEN messages > 0 THEN duplicates / messages ELSE 0.0 END AS dup_rate, "
        "CASE WHEN messages > 0 THEN late / messages ELSE 0.0 END AS late_rate"
    )
    lat_cols = ["%s_%s_us" % (m, p) for m in METRICS for _, p in PCTS]
    q(
        "CREATE TEMP TABLE devices AS SELECT device_id, firmware_versions, transports, %s, %s, %s FROM dev"
        % (fill, rates, ", ".join(lat_cols))
    )
    out: dict[str, pd.DataFrame] = {}
    out["channel_windows"] = con.execute(
        'SELECT *, CASE WHEN "unique" + lost > 0 THEN lost / ("unique" + lost) ELSE 0.0 END AS loss_rate '
        "FROM cw"
    ).df()
    labels = "[%s]" % ", ".join("'%s'" % b for b in BUCKET_LABELS)
    out["lead_histogram"] = con.execute("SELECT *, %s[bucket_order + 1] AS bucket FROM hist" % labels).df()
    out["recoveries"] = con.execute("SELECT * FROM rec").df()
    out["restarts"] = con.execute("SELECT * FROM rst").df()
    out["devices"] = con.execute("SELECT * FROM devices").df()
    out["worst_devices"] = con.execute(
        "SELECT row_number() OVER (ORDER BY loss_rate DESC, lost DESC, late DESC, device_id) AS rank, * "
        "FROM devices ORDER BY rank LIMIT %d" % worst_n
    ).df()
    compare_sums = [
        "messages",
        "unique",
        "duplicates",
        "late",
        "lost",
        "retransmissions",
        "lead_mismatches",
        "dup_flag_mismatches",
    ]
    for dim, name in (("firmware_version", "by_firmware"), ("transport", "by_transport")):
        out[name] = con.execute(
            """WITH base AS (SELECT %s, count(DISTINCT device_id) AS devices, %s,
                 max(reorder_depth_max) AS reorder_depth_max FROM cw GROUP BY %s),
               rr AS (%s), ss AS (%s), ll AS (%s),
               j AS (SELECT * FROM base FULL JOIN rr USING (%s) FULL JOIN ss USING (%s)
                      LEFT JOIN ll USING (%s))
               SELECT %s, %s, %s, %s FROM j"""
            % (
                dim,
                ", ".join('sum("%s") AS "%s"' % (c, c) for c in compare_sums),
                dim,
                rec_roll(dim),
                rst_roll(dim),
                _lat_wide("(%s)" % _pct_sql(dim), dim),
                dim,
                dim,
                dim,
                dim,
                ", ".join(
                    'coalesce("%s", 0) AS "%s"' % (c, c)
                    for c in ["devices", *compare_sums, "reorder_depth_max", *zero]
                ),
                rates,
                ", ".join(lat_cols),
            )
        ).df()
    out["loss_over_time"] = con.execute(
        """WITH base AS (SELECT window_start, transport, sum(messages) AS messages, sum("unique") AS "unique",
             sum(lost) AS lost FROM cw GROUP BY ALL),
           rr AS (%s), ss AS (%s),
           j AS (SELECT * FROM base FULL JOIN rr USING (window_start, transport)
                 FULL JOIN ss USING (window_start, transport))
           SELECT window_start, transport, coalesce(messages, 0) AS messages,
           coalesce("unique", 0) AS "unique",
           coalesce(lost, 0) AS lost,
           CASE WHEN coalesce("unique", 0) + coalesce(lost, 0) > 0 THEN lost / ("unique" + lost) ELSE 0.0 END
             AS loss_rate,
           coalesce(overruns, 0) AS overruns, coalesce(events_lost_exact, 0) AS events_lost_exact,
           coalesce(restarts, 0) AS restarts FROM j"""
        % (rec_roll("window_start, transport"), rst_roll("window_start, transport"))
    ).df()
    out["latency"] = con.execute(_pct_sql("")).df()
    sums = ROLLUP_SUMS
    maxes = ROLLUP_MAXES
    out["summary"] = con.execute(
        """WITH t AS (SELECT count(*) AS devices, %s, %s FROM devices), l AS (%s)
        SELECT t.*, %s, l.* FROM t CROSS JOIN l"""
        % (
            ", ".join('coalesce(sum("%s"), 0) AS "%s"' % (c, c) for c in sums),
            ", ".join("coalesce(max(%s), 0) AS %s" % (c, c) for c in maxes),
            _lat_wide("(%s)" % _pct_sql(""), ""),
            rates,
        )
    ).df()
    con.close()
    return out


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
