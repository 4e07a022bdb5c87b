"""Firmware rollout analytics: pure ``transform_*(df, ...) -> df`` functions (the rules of
transforms.py: no I/O, no actions, no UDFs, window frames spelled out, joins with named keys and
types, each function ends with a ``select`` of its contract).

Definitions (docs/fleet.md, "Rollouts"):
* unit: one device's rows on one release in one rollout window (`transform_units`). Rows are
  attributed to the firmware the device ran when it sent them (the arrival's firmware_version), so
  an upgrade splits a device's rows between two releases.
* devices: each device counted ONCE per group, under the release of its last arrival in the group
  (the release it ran at the group's end); devices_seen: devices with any arrival on the release
  in the group (a device that moved within the group is seen on both).
* crash restart: a boot after the device's first whose firmware equals the boot before it; a boot
  whose firmware differs is an upgrade (a move), not a restart of the release.
* rates: loss = lost / (unique + lost), dup = duplicates / messages, late = late / messages
  (reordering), restart = device-windows with a crash restart / device-windows (a device-window:
  a device's rows on the release in one rollout window; per window, not per device, so that a
  release run for six days is not compared with one run for two on the same footing).
* interval: Wilson score interval (95%) on the effective sample size n_eff = X / deff, where
  deff = max(1, ratio-estimator variance clustered by device / binomial variance). Why: losses
  and reordering come in bursts (an overrun loses up to hundreds of events at once), so events
  are not independent and a plain binomial interval is far too narrow; the device is the unit
  that is independent. Wilson (not Wald) because it stays inside [0, 1] and is sensible at 0
  events, the common case for a good release. With few devices the between-device variance is
  itself uncertain: n_eff is multiplied by (z / t)^2, t on devices - 1 degrees of freedom (Korn
  and Graubard's adjustment), so a canary of three devices gets a wide interval.
* regression: a release whose interval lies entirely above its previous release's (by version
  order), both with at least MIN_DEVICES devices seen.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .columns import REGRESSION_COLS
from .transforms import LATENCY_WIDE, _bq, latency_wide, transform_exact_percentiles, transform_latency_counts

Z = 1.959963984540054  # two-sided 95%
# Student's t 0.975 quantiles for 1..30 degrees of freedom; above, the Cornish-Fisher expansion
# (t975_sql), within 1e-4 of the quantile there
T975 = (12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157)
T975 += (2.228139, 2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905, 2.109816, 2.100922)
T975 += (2.093024, 2.085963, 2.079614, 2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831)
T975 += (2.048407, 2.045230, 2.042272)
MIN_DEVICES = 3  # below this, the between-device variance (deff) is not estimable
ROLLOUT_WINDOW_SECONDS = 86_400


def rollout_window(window_seconds: int) -> int:
    """The job's rollout window: a day when the job's window divides one (the rollout tables need
    a multiple of it), else the job's window."""
    return ROLLOUT_WINDOW_SECONDS if ROLLOUT_WINDOW_SECONDS % window_seconds == 0 else window_seconds


# (metric, numerator, denominator) per device, SQL over unit sums
RATE_METRICS = (
    ("loss", "lost", "`unique` + lost"),
    ("dup", "duplicates", "messages"),
    ("late", "late", "messages"),
    ("restart", "restart_windows", "device_windows"),
)
METRIC_NAMES = tuple(m for m, _, _ in RATE_METRICS)
UNIT_SUMS = ["messages", "unique", "lost", "duplicates", "late", "crash_restarts", "upgrades"]
UNIT_COLS = [
    "device_id",
    "firmware_version",
    "window_start",
    *UNIT_SUMS,
    "reorder_depth_max",
    "first_rx_us",
    "last_rx_us",
]
CHANGE_COLS = ["device_id", "firmware_version", "seen_us", "crash_restart", "upgrade"]
TIME_COLS = ["device_id", "firmware_version", "window_start", "first_rx_us", "last_rx_us"]
# transform_rollout_latency: window_start null for the release's whole range
LATENCY_PCT_COLS = ["firmware_version", "window_start", *LATENCY_WIDE]
RATE_COLS = [
    "devices_seen",
    "device_windows",
    *UNIT_SUMS,
    "restart_devices",
    "reorder_depth_max",
    *("%s_%s" % (m, s) for m in METRIC_NAMES for s in ("rate", "lo", "hi")),
]
WINDOW_COLS = ["firmware_version", "window_start", "devices", *RATE_COLS, *LATENCY_WIDE]
RELEASE_COLS = ["firmware_version", "devices", "first_rx_us", *RATE_COLS, *LATENCY_WIDE]
COHORT_COLS = ["firmware_version", "cohort", *RATE_COLS]
BEFORE_AFTER_COLS = ["from_version", "to_version", "side", *RATE_COLS]
ROLLOUT_TABLES = (
    "rollout_windows",
    "rollout_releases",
    "rollout_cohorts",
    "rollout_before_after",
    "rollout_regressions",
)
_ALL = "ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING"


def t975_sql(df: str) -> str:
    """SQL (Spark and DuckDB alike): Student's t 0.975 quantile for `df` (an integer >= 1)
    degrees of freedom."""
    z = Z
    d = "CAST(%s AS DOUBLE)" % df
    terms = (
        (z**3 + z) / 4,
        (5 * z**5 + 16 * z**3 + 3 * z) / 96,
        (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
    )
    cf = "%r + %r / %s + %r / (%s * %s) + %r / (%s * %s * %s)" % (
        z,
        terms[0],
        d,
        terms[1],
        d,
        d,
        terms[2],
        d,
        d,
        d,
    )
    table = " ".join("WHEN %s = %d THEN %r" % (df, i + 1, t) for i, t in enumerate(T975))
    return "CASE %s ELSE %s END" % (table, cf)


def n_eff_sql(x: str, deff: str, devices: str, t: str | None = None) -> str:
    """SQL: the effective sample size of a clustered proportion, X / deff, times (Z / t)^2 with t
    on devices - 1 degrees of freedom (at least 1): Korn and Graubard's adjustment, because the
    between-device variance is estimated from few devices. `t`: a column already holding
    t975_sql of those degrees of freedom (t_sql), else the quantile's expression inline."""
    t = t or t_sql(devices)
    return "(%s / %s * %r / ((%s) * (%s)))" % (x, deff, Z * Z, t, t)


def t_sql(devices: str) -> str:
    """SQL: n_eff_sql's t quantile for `devices` devices (devices - 1 degrees of freedom, at least 1)."""
    return t975_sql("greatest(%s - 1, 1)" % devices)


def _floor(us: str, window_seconds: int) -> str:
    w = window_seconds * 1_000_000
    return "timestamp_micros(%s - pmod(%s, %d))" % (us, us, w)


def version_key(col: str = "firmware_version") -> str:
    """SQL: a release's sort key, its dot/dash-separated parts as integers (a part that is not a
    number sorts as -1; ties are broken by the version string)."""
    return "transform(split(%s, '[.+-]'), x -> coalesce(try_cast(x AS INT), -1))" % col


# ---------------------------------------------------------------------------------------- units
def transform_boot_changes(boots: DataFrame) -> DataFrame:
    """One row per boot (the same boot seen by several bridges once: the earliest): whether it is a
    crash restart (a later boot on the firmware of the boot before) or an upgrade (another one)."""
    same = "PARTITION BY device_id, boot_epoch, boots ORDER BY first_seen_ts, bridge_id"
    order = "PARTITION BY device_id ORDER BY first_seen_ts, boots, boot_epoch"
    b = boots.selectExpr("*", "row_number() OVER (%s) AS _copy" % same).where("_copy = 1")
    b = b.selectExpr(
        "device_id",
        "firmware_version",
        "unix_micros(first_seen_ts) AS seen_us",
        "lag(firmware_version, 1) OVER (%s) AS _prev" % order,
    )
    return b.selectExpr(
        "device_id",
        "firmware_version",
        "seen_us",
        "coalesce(_prev = firmware_version, false) AS crash_restart",
        "coalesce(_prev != firmware_version, false) AS upgrade",
    ).select(*CHANGE_COLS)


def transform_unit_times(arrivals: DataFrame, window_seconds: int = ROLLOUT_WINDOW_SECONDS) -> DataFrame:
    """Per device, release and rollout window: the first and last arrival time (TIME_COLS), from
    the arrivals (transform_arrivals output, in range). On arrivals partitioned by device the
    aggregation needs no exchange: the job computes it with its per-arrival stage."""
    return (
        arrivals.groupBy(
            "device_id", "firmware_version", F.expr("%s AS window_start" % _floor("rx_us", window_seconds))
        )
        .agg(F.expr("min(rx_us) AS first_rx_us"), F.expr("max(rx_us) AS last_rx_us"))
        .select(*TIME_COLS)
    )


def transform_merge_times(*parts: DataFrame) -> DataFrame:
    """Unit times (TIME_COLS) of several runs as one row per device, release and window."""
    src = parts[0]
    for p in parts[1:]:
        src = src.unionByName(p.select(*TIME_COLS))
    return (
        src.groupBy("device_id", "firmware_version", "window_start")
        .agg(F.expr("min(first_rx_us) AS first_rx_us"), F.expr("max(last_rx_us) AS last_rx_us"))
        .select(*TIME_COLS)
    )


def transform_units(
    cw: DataFrame,
    times: DataFrame,
    changes: DataFrame,
    window_seconds: int = ROLLOUT_WINDOW_SECONDS,
    since_us: int | None = None,
    until_us: int | None = None,
) -> DataFrame:
    """Per device, release and rollout window: counts from the channel windows (their window
    floored to the rollout window, a multiple of it), first and last arrival time from
    transform_unit_times, crash restarts and upgrades from transform_boot_changes (those first
    seen in [since_us, until_us)). One aggregation of a union of the three, no joins."""
    keys = ["device_id", "firmware_version"]
    rng = ["true"]
    if since_us is not None:
        rng.append("seen_us >= %d" % since_us)
    if until_us is not None:
        rng.append("seen_us < %d" % until_us)
    parts = [
        cw.selectExpr(
            *keys,
            "%s AS window_start" % _floor("unix_micros(window_start)", window_seconds),
            *_bq(["messages", "unique", "lost", "duplicates", "late", "reorder_depth_max"]),
        ),
        times.selectExpr(*keys, "window_start", "first_rx_us AS _rx_lo", "last_rx_us AS _rx_hi"),
        changes.where(" AND ".join(rng)).selectExpr(
            *keys,
            "%s AS window_start" % _floor("seen_us", window_seconds),
            "CAST(crash_restart AS BIGINT) AS crash_restarts",
            "CAST(upgrade AS BIGINT) AS upgrades",
        ),
    ]
    src = (
        parts[0]
        .unionByName(parts[1], allowMissingColumns=True)
        .unionByName(parts[2], allowMissingColumns=True)
    )
    return (
        src.groupBy(*keys, "window_start")
        .agg(
            *(F.expr("CAST(coalesce(sum(`%s`), 0) AS BIGINT) AS `%s`" % (c, c)) for c in UNIT_SUMS),
            F.expr("CAST(coalesce(max(reorder_depth_max), 0) AS BIGINT) AS reorder_depth_max"),
            F.expr("min(_rx_lo) AS first_rx_us"),
            F.expr("max(_rx_hi) AS last_rx_us"),
        )
        .select(*UNIT_COLS)
    )


# ---------------------------------------------------------------------------------------- rates
def _wilson(p: str, n: str) -> tuple[str, str]:
    """SQL: the Wilson score interval's bounds for proportion p on n (> 0) trials, z = Z."""
    z2 = Z * Z
    den = "(1D + %r / %s)" % (z2, n)
    centre = "((%s + %r / (2D * %s)) / %s)" % (p, z2, n, den)
    half = "(%r * sqrt(%s * (1D - %s) / %s + %r / (4D * %s * %s)) / %s)" % (Z, p, p, n, z2, n, n, den)
    # exact at the ends (the formula's rounding leaves ~1e-17 there)
    return (
        "CASE WHEN %s = 0D THEN 0D ELSE greatest(0D, %s - %s) END" % (p, centre, half),
        "CASE WHEN %s = 1D THEN 1D ELSE least(1D, %s + %s) END" % (p, centre, half),
    )


def transform_rates(units: DataFrame, by: list[str]) -> DataFrame:
    """The rate block (RATE_COLS) per `by`: sums over the units, each rate with its interval.

    Per device in the group first (its units summed; a device with no arrivals in the group is
    left out), then per group: X, Y = the sums of the devices' denominators and numerators, p =
    Y / X, S = sum over devices of (y - p x)^2 (window over the group, the whole frame), and
    deff = max(1, n / (n - 1) * S / (X p (1 - p))) for n >= 2 devices and 0 < p < 1 (else 1):
    the clustered variance n / (n - 1) * S / X^2 over the binomial p (1 - p) / X. The interval
    is Wilson's on n_eff = X / deff."""
    per_dev = units.groupBy(*by, "device_id").agg(
        *(F.expr("CAST(sum(`%s`) AS BIGINT) AS `%s`" % (c, c)) for c in UNIT_SUMS),
        F.expr("CAST(count_if(messages > 0) AS BIGINT) AS device_windows"),
        F.expr("CAST(count_if(messages > 0 AND crash_restarts > 0) AS BIGINT) AS restart_windows"),
        F.expr("CAST(max(reorder_depth_max) AS BIGINT) AS reorder_depth_max"),
    )
    per_dev = per_dev.where("messages > 0").selectExpr(
        "*",
        *("CAST(%s AS DOUBLE) AS _y_%s" % (y, m) for m, y, _ in RATE_METRICS),
        *("CAST(%s AS DOUBLE) AS _x_%s" % (x, m) for m, _, x in RATE_METRICS),
    )
    group = "PARTITION BY %s %s" % (", ".join(_bq(by)), _ALL)
    per_dev = per_dev.selectExpr(
        "*",
        *(
            "sum(_y_{m}) OVER ({w}) / sum(_x_{m}) OVER ({w}) AS _p_{m}".format(m=m, w=group)
            for m in METRIC_NAMES
        ),
    )
    agg = per_dev.groupBy(*by).agg(
        F.expr("count(1) AS devices_seen"),
        F.expr("CAST(sum(device_windows) AS BIGINT) AS device_windows"),
        *(F.expr("CAST(sum(`%s`) AS BIGINT) AS `%s`" % (c, c)) for c in UNIT_SUMS),
        F.expr("CAST(sum(CASE WHEN crash_restarts > 0 THEN 1 ELSE 0 END) AS BIGINT) AS restart_devices"),
        F.expr("CAST(max(reorder_depth_max) AS BIGINT) AS reorder_depth_max"),
        *(F.expr("sum(_y_%s) AS _Y_%s" % (m, m)) for m in METRIC_NAMES),
        *(F.expr("sum(_x_%s) AS _X_%s" % (m, m)) for m in METRIC_NAMES),
        *(F.expr("sum(pow(_y_{m} - _p_{m} * _x_{m}, 2)) AS _S_{m}".format(m=m)) for m in METRIC_NAMES),
    )
    rate = "CASE WHEN _X_{m} > 0 THEN _Y_{m} / _X_{m} ELSE 0D END AS {m}_rate"
    deff = (
        "CASE WHEN devices_seen >= 2 AND {m}_rate > 0 AND {m}_rate < 1 THEN greatest(1D, "
        "devices_seen / (devices_seen - 1D) * _S_{m} / (_X_{m} * {m}_rate * (1D - {m}_rate))) "
        "ELSE 1D END AS _deff_{m}"
    )
    # the t quantile (it depends on devices_seen only) as one column that every metric's n_eff
    # reads: written out in each, its 30-way CASE, twice per metric, cost the driver's JVM ~0.1 s
    # of parsing and analysis per call
    agg = agg.selectExpr("*", *(rate.format(m=m) for m in METRIC_NAMES), "%s AS _t" % t_sql("devices_seen"))
    agg = agg.selectExpr("*", *(deff.format(m=m) for m in METRIC_NAMES))
    # n_eff as a column of its own: inlined into every use, the t table made methods past 64 KB
    agg = agg.selectExpr(
        "*",
        *(
            "%s AS _n_%s" % (n_eff_sql("_X_%s" % m, "_deff_%s" % m, "devices_seen", "_t"), m)
            for m in METRIC_NAMES
        ),
    )
    bounds = []
    for m in METRIC_NAMES:
        lo, hi = _wilson("%s_rate" % m, "_n_%s" % m)
        bounds.append("CASE WHEN _X_%s > 0 THEN %s END AS %s_lo" % (m, lo, m))
        bounds.append("CASE WHEN _X_%s > 0 THEN %s END AS %s_hi" % (m, hi, m))
    return agg.selectExpr("*", *bounds).selectExpr(*_bq(by), *_bq(RATE_COLS))


def _attributed(units: DataFrame, group: list[str]) -> DataFrame:
    """devices per (firmware_version, *group): each device once per group, under the release of
    its last arrival in the group (ties: the higher version string)."""
    spec = "PARTITION BY device_id%s ORDER BY last_rx_us DESC, firmware_version DESC" % "".join(
        ", `%s`" % g for g in group
    )
    last = units.where("messages > 0").selectExpr("*", "row_number() OVER (%s) AS _nth" % spec)
    return (
        last.where("_nth = 1")
        .groupBy("firmware_version", *group)
        .agg(F.expr("count(1) AS devices"))
        .select("firmware_version", *group, "devices")
    )


def transform_rollout_latency(counts: DataFrame) -> DataFrame:
    """Latency percentiles (exact: transforms.transform_exact_percentiles) per release and rollout
    window, and per release over the whole range (window_start null), from
    transforms.transform_latency_counts output: each count row counts in its window's group and
    its release's (its transports summed per value), then one window sorts them all."""
    both = counts.selectExpr(
        "firmware_version",
        "inline(array(struct(window_start AS ws), struct(CAST(NULL AS TIMESTAMP) AS ws)))",
        "metric",
        "value_us",
        "n",
    )
    summed = both.groupBy("firmware_version", "ws", "metric", "value_us").agg(
        F.expr("CAST(sum(n) AS BIGINT) AS n")
    )
    by = ["firmware_version", "window_start"]
    pct = transform_exact_percentiles(summed.withColumnRenamed("ws", "window_start"), by)
    return latency_wide(pct, by).select(*LATENCY_PCT_COLS)


# ---------------------------------------------------------------------------------------- tables
def transform_rollout_windows(units: DataFrame, lat: DataFrame) -> DataFrame:
    """Per release and rollout window: devices (each once), the rate block, latency percentiles
    (`lat`: transform_rollout_latency output)."""
    by = ["firmware_version", "window_start"]
    out = transform_rates(units, by).join(_attributed(units, ["window_start"]), on=by, how="left")
    out = out.join(lat.where("window_start IS NOT NULL"), on=by, how="left")
    return out.selectExpr("*", "coalesce(devices, 0) AS _d").selectExpr(
        *_bq(by), "_d AS devices", *_bq([*RATE_COLS, *LATENCY_WIDE])
    )


def transform_rollout_releases(units: DataFrame, lat: DataFrame) -> DataFrame:
    """Per release over the whole range: devices (each device once, under the release it ran
    last), first arrival on it, the rate block, latency percentiles (`lat`:
    transform_rollout_latency output)."""
    by = ["firmware_version"]
    first = units.groupBy(*by).agg(F.expr("min(first_rx_us) AS first_rx_us"))
    out = transform_rates(units, by).join(_attributed(units, []), on=by, how="left")
    whole = lat.where("window_start IS NULL").select(*by, *LATENCY_WIDE)
    out = out.join(first, on=by, how="left").join(whole, on=by, how="left")
    return out.selectExpr("*", "coalesce(devices, 0) AS _d").selectExpr(
        *_bq(by), "_d AS devices", "first_rx_us", *_bq([*RATE_COLS, *LATENCY_WIDE])
    )


def transform_moves(units: DataFrame) -> DataFrame:
    """Per device and release: its first arrival on it, the release it ran before (by first
    arrival; null for the one it was first seen on) and its cohort: the UTC day it moved to the
    release, 'initial' for the release it was first seen on."""
    per = (
        units.where("messages > 0")
        .groupBy("device_id", "firmware_version")
        .agg(F.expr("min(first_rx_us) AS _f"))
    )
    dev = "PARTITION BY device_id ORDER BY _f, firmware_version"
    per = per.selectExpr(
        "*",
        "lag(firmware_version, 1) OVER (%s) AS from_version" % dev,
        "min(_f) OVER (PARTITION BY device_id %s) AS _dev_first" % _ALL,
    )
    day = "CAST(date_from_unix_date(CAST(floor(_f / 86400000000D) AS INT)) AS STRING)"
    return per.selectExpr(
        "device_id",
        "firmware_version",
        "_f AS first_rx_us",
        "from_version",
        "CASE WHEN _f > _dev_first THEN %s ELSE 'initial' END AS cohort" % day,
    )


def transform_rollout_cohorts(units: DataFrame, moves: DataFrame) -> DataFrame:
    """Per release and cohort (the day its devices moved to it): the rate block over the cohort's
    rows on the release."""
    u = units.join(
        moves.select("device_id", "firmware_version", "cohort"), ["device_id", "firmware_version"], "inner"
    )
    return transform_rates(u, ["firmware_version", "cohort"]).select(*COHORT_COLS)


def transform_rollout_before_after(units: DataFrame, moves: DataFrame) -> DataFrame:
    """The same devices before and after a move: per (from_version, to_version) and side, the rate
    block over the moved devices' rows on from_version ('before') and on to_version ('after')."""
    pairs = moves.where("from_version IS NOT NULL").selectExpr(
        "device_id", "from_version", "firmware_version AS to_version"
    )
    before = pairs.selectExpr("*", "from_version AS firmware_version", "'before' AS side")
    after = pairs.selectExpr("*", "to_version AS firmware_version", "'after' AS side")
    sides = before.unionByName(after)
    u = units.join(sides, ["device_id", "firmware_version"], "inner").drop("firmware_version")
    return transform_rates(u, ["from_version", "to_version", "side"]).select(*BEFORE_AFTER_COLS)


def _long(df: DataFrame, keys: list[str], prefix: str = "") -> DataFrame:
    """One row per metric: keys, metric, <prefix>devices_seen, <prefix>rate, <prefix>lo, <prefix>hi
    (one stack() generator, not a union of a select per metric: a plan a quarter the size)."""
    cols = ", ".join("'%s', %s_rate, %s_lo, %s_hi" % (m, m, m, m) for m in METRIC_NAMES)
    return df.selectExpr(
        *_bq(keys),
        "devices_seen AS %sdevices_seen" % prefix,
        "stack(%d, %s) AS (metric, %srate, %slo, %shi)" % (len(METRIC_NAMES), cols, prefix, prefix, prefix),
    ).selectExpr(*_bq(keys), "metric", *("%s%s" % (prefix, c) for c in ("devices_seen", "rate", "lo", "hi")))


def transform_regressions(releases: DataFrame, before_after: DataFrame) -> DataFrame:
    """Per release with a previous one (version order) and metric: its rate and interval beside the
    previous release's; `regression` when its lower bound lies above the previous upper bound,
    both with at least MIN_DEVICES devices seen. Beside it the same devices before and after the
    move from the previous release (when some moved directly): `same_devices_regression` likewise."""
    order = "ORDER BY %s, firmware_version" % version_key()
    rel = releases.selectExpr("*", "lag(firmware_version, 1) OVER (%s) AS previous_version" % order)
    cur = _long(rel.where("previous_version IS NOT NULL"), ["firmware_version", "previous_version"])
    prev = _long(
        releases.withColumnRenamed("firmware_version", "previous_version"), ["previous_version"], "previous_"
    )
    ba = before_after.withColumnRenamed("from_version", "previous_version").withColumnRenamed(
        "to_version", "firmware_version"
    )
    bk = ["firmware_version", "previous_version"]
    before = _long(ba.where("side = 'before'"), bk, "before_").withColumnRenamed(
        "before_devices_seen", "moved_devices"
    )
    after = _long(ba.where("side = 'after'"), bk, "after_").drop("after_devices_seen")
    out = cur.join(prev, ["previous_version", "metric"], "left")
    out = out.join(before, [*bk, "metric"], "left").join(after, [*bk, "metric"], "left")
    enough = "devices_seen >= %d AND previous_devices_seen >= %d" % (MIN_DEVICES, MIN_DEVICES)
    return out.selectExpr(
        "*",
        "coalesce(%s AND lo > previous_hi, false) AS regression" % enough,
        "CASE WHEN moved_devices >= %d THEN coalesce(after_lo > before_hi, false) END"
        " AS same_devices_regression" % MIN_DEVICES,
    ).select(*REGRESSION_COLS)


def rollout_inputs(
    arrivals: DataFrame, window_seconds: int = ROLLOUT_WINDOW_SECONDS, counts: DataFrame | None = None
) -> dict[str, DataFrame]:
    """What the rollout tables read from the arrivals (transform_arrivals output, rows in range):
    the unit times and the latency percentiles (transform_rollout_latency) of the latency
    multiset per release, transport and rollout window (`counts`: transforms.
    transform_latency_counts of the same arrivals and window, which the job's fleet-level
    percentiles read too; computed here when not given). The job computes them with its
    per-arrival stage (parts `rtimes`, `rlat`): the arrivals are read once."""
    if counts is None:
        counts = transform_latency_counts(arrivals, window_seconds)
    return {
        "rtimes": transform_unit_times(arrivals, window_seconds),
        "rlat": transform_rollout_latency(counts),
    }


def rollout_tables(
    cw: DataFrame,
    times: DataFrame,
    lat: DataFrame,
    boots: DataFrame,
    window_seconds: int = ROLLOUT_WINDOW_SECONDS,
    since_us: int | None = None,
    until_us: int | None = None,
    cut: Callable[[DataFrame], DataFrame] | None = None,
    days: list[str] | None = None,
) -> dict[str, DataFrame]:
    """The ROLLOUT_TABLES from the job's channel windows (window a divisor of window_seconds), the
    unit times and latency percentiles of rollout_inputs and the boots table (all read: a boot's
    predecessor may lie before the range). days: only the units of these dates (an incremental
    run's days written; their restarts too). `cut` (the job: computed once, lineage cut) is
    applied to what several tables read: the units, releases and before/after (planning the
    regressions over their whole plans cost more than computing them apart)."""
    cut = cut or (lambda df: df)
    units = transform_units(cw, times, transform_boot_changes(boots), window_seconds, since_us, until_us)
    if days is not None:
        units = units.where(
            "date_format(window_start, 'yyyy-MM-dd') IN (%s)" % (", ".join("'%s'" % d for d in days) or "''")
        )
    units = cut(units)
    releases = cut(transform_rollout_releases(units, lat))
    moves = transform_moves(units)
    before_after = cut(transform_rollout_before_after(units, moves))
    return {
        "rollout_windows": transform_rollout_windows(units, lat),
        "rollout_releases": releases,
        "rollout_cohorts": transform_rollout_cohorts(units, moves),
        "rollout_before_after": before_after,
        "rollout_regressions": transform_regressions(releases, before_after),
    }
