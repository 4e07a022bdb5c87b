"""The rollout tables (:mod:`leadwire.fleet.rollout`) computed by DuckDB from an export directory,
on top of the fleet oracle's temporary tables (``oracle.TEMP_TABLES``: arrivals ``a``, channel
windows ``cw``), with partly different formulations so that agreement means something:
* units: the three sources aggregated apart and FULL JOINed (Spark: one aggregation of a union);
* the group totals of a rate: GROUP BY and a join back (Spark: a window over the group);
* the release a device ran last: arg_max (Spark: row_number over last arrival);
* latency: quantile_cont over the raw values (Spark: a running sum of value counts in a window).

duckdb is a dev dependency: this module is for the tests, not the job.
"""

from __future__ import annotations

from string import Template

import pandas as pd

from .oracle import TEMP_TABLES, WRAPD_MACRO, _bind, _quote
from .rollout import MIN_DEVICES, RATE_COLS, ROLLOUT_WINDOW_SECONDS, Z, n_eff_sql

_SUMS = ("messages", "unique", "lost", "duplicates", "late", "crash_restarts", "upgrades")
# (metric, numerator, denominator) over a device's sums
_METRICS = (
    ("loss", "lost", '"unique" + lost'),
    ("dup", "duplicates", "messages"),
    ("late", "late", "messages"),
    ("restart", "restart_windows", "device_windows"),
)
_PCTS = ((0.5, "p50"), (0.95, "p95"), (0.99, "p99"))
_LAT_WIDE = ", ".join(
    "quantile_cont(value_us, %r) FILTER (metric = '%s') AS %s_%s_us" % (q, m, m, p)
    for m in ("rx_to_commit", "gen_to_rx")
    for q, p in _PCTS
)
_VKEY = (
    "list_transform(string_split_regex(firmware_version, '[.+-]'), "
    "lambda x: coalesce(TRY_CAST(x AS INTEGER), -1))"
)

# boot changes: one row per boot (earliest bridge), crash restart or upgrade against the boot before
_CHG = """WITH b AS (SELECT * FROM $boots QUALIFY row_number() OVER (PARTITION BY device_id, boot_epoch, boots
      ORDER BY first_seen_ts, bridge_id) = 1)
    SELECT device_id, firmware_version, epoch_us(first_seen_ts) AS seen_us,
      coalesce(lag(firmware_version) OVER o = firmware_version, false) AS crash_restart,
      coalesce(lag(firmware_version) OVER o <> firmware_version, false) AS upgrade
    FROM b WINDOW o AS (PARTITION BY device_id ORDER BY first_seen_ts, boots, boot_epoch)"""
# units: per device, release and rollout window
_UNITS = """WITH c AS (SELECT device_id, firmware_version,
      epoch_us(window_start) - epoch_us(window_start) % $rw AS wus,
      sum(messages) AS messages, sum("unique") AS "unique", sum(lost) AS lost, sum(duplicates) AS duplicates,
      sum(late) AS late, max(reorder_depth_max) AS reorder_depth_max FROM cw GROUP BY ALL),
    r AS (SELECT device_id, firmware_version, rx_us - rx_us % $rw AS wus,
      min(rx_us) AS first_rx_us, max(rx_us) AS last_rx_us FROM a WHERE $in_range GROUP BY ALL),
    k AS (SELECT device_id, firmware_version, seen_us - seen_us % $rw AS wus,
      count(*) FILTER (crash_restart) AS crash_restarts, count(*) FILTER (upgrade) AS upgrades
      FROM chg WHERE $seen_range GROUP BY ALL)
    SELECT device_id, firmware_version, make_timestamp(wus) AS window_start,
      coalesce(messages, 0) AS messages, coalesce("unique", 0) AS "unique", coalesce(lost, 0) AS lost,
      coalesce(duplicates, 0) AS duplicates, coalesce(late, 0) AS late,
      coalesce(crash_restarts, 0) AS crash_restarts, coalesce(upgrades, 0) AS upgrades,
      coalesce(reorder_depth_max, 0) AS reorder_depth_max, first_rx_us, last_rx_us
    FROM c FULL JOIN r USING (device_id, firmware_version, wus)
      FULL JOIN k USING (device_id, firmware_version, wus)"""
# latency values per release and rollout window
_LAT = """SELECT firmware_version, make_timestamp(rx_us - rx_us % $rw) AS window_start,
      'rx_to_commit' AS metric, commit_us AS value_us FROM a WHERE $in_range
    UNION ALL SELECT firmware_version, make_timestamp(rx_us - rx_us % $rw), 'gen_to_rx', e2e_us
      FROM a WHERE $in_range AND e2e_us IS NOT NULL"""
# moves: per device and release, the release before it and the cohort (day it moved to it)
_MOVES = """WITH f AS (SELECT device_id, firmware_version, min(first_rx_us) AS f FROM units
      WHERE messages > 0 GROUP BY ALL)
    SELECT device_id, firmware_version, f AS first_rx_us,
      lag(firmware_version) OVER (PARTITION BY device_id ORDER BY f, firmware_version) AS from_version,
      CASE WHEN f > min(f) OVER (PARTITION BY device_id)
        THEN CAST(DATE '1970-01-01' + CAST(floor(f / 86400000000) AS INTEGER) AS VARCHAR)
        ELSE 'initial' END AS cohort FROM f"""


def _wilson(p: str, n: str) -> tuple[str, str]:
    z2 = Z * Z
    den = "(1 + %r / %s)" % (z2, n)
    centre = "((%s + %r / (2 * %s)) / %s)" % (p, z2, n, den)
    half = "(%r * sqrt(%s * (1 - %s) / %s + %r / (4 * %s * %s)) / %s)" % (Z, p, p, n, z2, n, n, den)
    return (
        "CASE WHEN %s = 0 THEN 0.0 ELSE greatest(0.0, %s - %s) END" % (p, centre, half),
        "CASE WHEN %s = 1 THEN 1.0 ELSE least(1.0, %s + %s) END" % (p, centre, half),
    )


def _rates(src: str, by: list[str]) -> str:
    """The rate block (rollout.RATE_COLS) per `by` over the unit rows of `src` (a query)."""
    b = ", ".join(by)
    sums = ", ".join('sum("%s") AS "%s"' % (c, c) for c in _SUMS)
    yx = ", ".join(
        "CAST(%s AS DOUBLE) AS y_%s, CAST(%s AS DOUBLE) AS x_%s" % (y, m, x, m) for m, y, x in _METRICS
    )
    p = ", ".join("sum(y_{m}) / sum(x_{m}) AS p_{m}".format(m=m) for m, _, _ in _METRICS)
    tot = ", ".join(
        "sum(y_{m}) AS Y_{m}, sum(x_{m}) AS X_{m}, sum(pow(y_{m} - p_{m} * x_{m}, 2)) AS S_{m}".format(m=m)
        for m, _, _ in _METRICS
    )
    rate = ", ".join(
        "CASE WHEN X_{m} > 0 THEN Y_{m} / X_{m} ELSE 0.0 END AS {m}_rate".format(m=m) for m, _, _ in _METRICS
    )
    deff = ", ".join(
        "CASE WHEN devices_seen >= 2 AND {m}_rate > 0 AND {m}_rate < 1 THEN greatest(1.0, devices_seen / "
        "(devices_seen - 1.0) * S_{m} / (X_{m} * {m}_rate * (1 - {m}_rate))) ELSE 1.0 END AS deff_{m}".format(
            m=m
        )
        for m, _, _ in _METRICS
    )
    bounds = []
    for m, _, _ in _METRICS:
        lo, hi = _wilson("%s_rate" % m, n_eff_sql("X_%s" % m, "deff_%s" % m, "devices_seen"))
        bounds.append("CASE WHEN X_%s > 0 THEN %s END AS %s_lo" % (m, lo, m))
        bounds.append("CASE WHEN X_%s > 0 THEN %s END AS %s_hi" % (m, hi, m))
    cols = ", ".join('"%s"' % c for c in RATE_COLS)
    return f"""WITH d AS (SELECT {b}, device_id, {sums},
          count(*) FILTER (messages > 0) AS device_windows,
          count(*) FILTER (messages > 0 AND crash_restarts > 0) AS restart_windows,
          max(reorder_depth_max) AS reorder_depth_max
          FROM ({src}) GROUP BY {b}, device_id HAVING sum(messages) > 0),
        v AS (SELECT *, {yx} FROM d),
        g AS (SELECT {b}, {p} FROM v GROUP BY {b}),
        s AS (SELECT {b}, count(*) AS devices_seen, sum(device_windows) AS device_windows, {sums},
          count(*) FILTER (crash_restarts > 0) AS restart_devices,
          max(reorder_depth_max) AS reorder_depth_max,
          {tot} FROM v JOIN g USING ({b}) GROUP BY {b}),
        r AS (SELECT *, {rate} FROM s),
        e AS (SELECT *, {deff} FROM r)
        SELECT {b}, {cols} FROM (SELECT *, {", ".join(bounds)} FROM e)"""


_WINDOWS = f"""WITH rr AS ({_rates("SELECT * FROM units", ["firmware_version", "window_start"])}),
    att AS (SELECT window_start, device_id,
      arg_max(firmware_version, (last_rx_us, firmware_version)) AS firmware_version
      FROM units WHERE messages > 0 GROUP BY window_start, device_id),
    dv AS (SELECT firmware_version, window_start, count(*) AS devices FROM att GROUP BY ALL),
    ll AS (SELECT firmware_version, window_start, {_LAT_WIDE} FROM rlat GROUP BY ALL)
    SELECT rr.firmware_version, rr.window_start, coalesce(dv.devices, 0) AS devices, rr.* EXCLUDE
      (firmware_version, window_start), ll.* EXCLUDE (firmware_version, window_start)
    FROM rr LEFT JOIN dv USING (firmware_version, window_start)
      LEFT JOIN ll USING (firmware_version, window_start)"""
_RELEASES = f"""WITH rr AS ({_rates("SELECT * FROM units", ["firmware_version"])}),
    att AS (SELECT arg_max(firmware_version, (last_rx_us, firmware_version)) AS firmware_version
      FROM units WHERE messages > 0 GROUP BY device_id),
    dv AS (SELECT firmware_version, count(*) AS devices FROM att GROUP BY ALL),
    fr AS (SELECT firmware_version, min(first_rx_us) AS first_rx_us FROM units GROUP BY ALL),
    ll AS (SELECT firmware_version, {_LAT_WIDE} FROM rlat GROUP BY ALL)
    SELECT rr.firmware_version, coalesce(dv.devices, 0) AS devices, fr.first_rx_us,
      rr.* EXCLUDE (firmware_version), ll.* EXCLUDE (firmware_version)
    FROM rr LEFT JOIN dv USING (firmware_version) LEFT JOIN fr USING (firmware_version)
      LEFT JOIN ll USING (firmware_version)"""
_COHORTS = _rates(
    "SELECT u.*, m.cohort FROM units u JOIN moves m USING (device_id, firmware_version)",
    ["firmware_version", "cohort"],
)
_BEFORE_AFTER = _rates(
    """SELECT u.* EXCLUDE (firmware_version), m.from_version, m.firmware_version AS to_version,
        'before' AS side
      FROM moves m JOIN units u ON u.device_id = m.device_id AND u.firmware_version = m.from_version
    UNION ALL
    SELECT u.* EXCLUDE (firmware_version), m.from_version, m.firmware_version, 'after'
      FROM moves m JOIN units u ON u.device_id = m.device_id AND u.firmware_version = m.firmware_version
      WHERE m.from_version IS NOT NULL""",
    ["from_version", "to_version", "side"],
)


def _regressions() -> str:
    def long(src: str, keys: str, prefix: str) -> str:
        return " UNION ALL ".join(
            f"SELECT {keys}, '{m}' AS metric, devices_seen AS {prefix}devices_seen, "
            f"{m}_rate AS {prefix}rate, {m}_lo AS {prefix}lo, {m}_hi AS {prefix}hi FROM {src}"
            for m, _, _ in _METRICS
        )

    return f"""WITH rel AS (SELECT *, lag(firmware_version) OVER (ORDER BY {_VKEY}, firmware_version)
        AS previous_version FROM rollout_releases),
      cur AS ({long("rel WHERE previous_version IS NOT NULL", "firmware_version, previous_version", "")}),
      prv AS ({long("rollout_releases", "firmware_version AS previous_version", "previous_")}),
      bef AS ({
        long(
            "rollout_before_after WHERE side = 'before'",
            "to_version AS firmware_version, from_version AS previous_version",
            "before_",
        )
    }),
      aft AS ({
        long(
            "rollout_before_after WHERE side = 'after'",
            "to_version AS firmware_version, from_version AS previous_version",
            "after_",
        )
    })
      SELECT cur.firmware_version, cur.previous_version, cur.metric, devices_seen, rate, lo, hi,
        previous_devices_seen, previous_rate, previous_lo, previous_hi,
        coalesce(devices_seen >= {MIN_DEVICES} AND previous_devices_seen >= {MIN_DEVICES}
          AND lo > previous_hi, false) AS regression,
        before_devices_seen AS moved_devices, before_rate, before_lo, before_hi,
        after_rate, after_lo, after_hi,
        CASE WHEN before_devices_seen >= {MIN_DEVICES} THEN coalesce(after_lo > before_hi, false) END
          AS same_devices_regression
      FROM cur LEFT JOIN prv USING (previous_version, metric)
        LEFT JOIN bef USING (firmware_version, previous_version, metric)
        LEFT JOIN aft USING (firmware_version, previous_version, metric)"""


# (name, SQL), in order; each one a temporary table the later ones read
ROLLOUT_QUERIES: tuple[tuple[str, str], ...] = (
    ("chg", _CHG),
    ("units", _UNITS),
    ("rlat", _LAT),
    ("moves", _MOVES),
    ("rollout_windows", _WINDOWS),
    ("rollout_releases", _RELEASES),
    ("rollout_cohorts", _COHORTS),
    ("rollout_before_after", _BEFORE_AFTER),
    ("rollout_regressions", _regressions()),
)
RESULT_NAMES = tuple(n for n, _ in ROLLOUT_QUERIES if n.startswith("rollout_"))


def run_rollout_oracle(
    input_dir: str,
    window_seconds: int = 3600,
    rollout_seconds: int = ROLLOUT_WINDOW_SECONDS,
    since_us: int | None = None,
    until_us: int | None = None,
) -> dict[str, pd.DataFrame]:
    """The rollout tables computed by DuckDB from the export under input_dir (the job's window
    window_seconds, the rollout window rollout_seconds, a multiple of it)."""
    import duckdb

    def rng(col: str) -> str:
        cond = ["true"]
        if since_us is not None:
            cond.append("%s >= %d" % (col, since_us))
        if until_us is not None:
            cond.append("%s < %d" % (col, until_us))
        return " AND ".join(cond)

    params = {
        "rw": "%d" % (rollout_seconds * 1_000_000),
        "in_range": rng("rx_us"),
        "seen_range": rng("seen_us"),
    }
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.execute(WRAPD_MACRO)
        for name, sql in TEMP_TABLES:
            con.execute("CREATE TEMP TABLE %s AS %s" % (name, _bind(sql, input_dir, window_seconds, 10)))
        if since_us is not None or until_us is not None:
            con.execute("DELETE FROM cw WHERE NOT (%s)" % rng("epoch_us(window_start)"))
        for name, sql in ROLLOUT_QUERIES:
            text = _bind(Template(sql).safe_substitute(params), input_dir, window_seconds, 10)
            con.execute("CREATE TEMP TABLE %s AS %s" % (name, text))
        return {n: con.execute("SELECT * FROM %s" % _quote(n).replace("'", '"')).df() for n in RESULT_NAMES}
    finally:
        con.close()
