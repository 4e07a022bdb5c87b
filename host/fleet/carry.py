"""Lead domains carried between runs: the per-arrival values of rows new to a run, seeded from the
state earlier runs left, equal to what one pass over the domain's whole history gives.

A run reads only the arrivals it has not read before. Per lead domain (transforms.LEAD_KEY) the
state holds what the rows already counted contribute to the values of later rows:

* the domain row (DOMAIN_STATE_COLS): rows counted (`n`), the last arrival's seq and useq, its
  place in the arrival order (`last_arrival`, `last_bridge`), and the highest useq (`max_useq`);
* the boundary points (POINT_COLS): every useq that bounds a region of seqs never received. A
  point is the domain's lowest useq, its highest, and the received useq just below and just above
  each open gap. `open` marks a point whose region above it is a gap (or, for the highest, open
  to the top); `gap` is the size of that gap as counted (0 for the highest: nothing above yet).
  A point at the top of a gap (or the lowest) carries the arrival that first overtook the seqs
  below it (`over_pos`, `over_rx`: the arrival with lead > 0 and the lowest useq at or above
  it). Each point names the channel window of its row (`w_*`), to which a later fill's change of
  the gap below it is counted.

New rows must come after the counted ones in the domain's arrival order (arrival, bridge_id):
the bridge's arrival counter grows per device, so a file read late comes from a bridge whose
export lagged, not from before what was counted. A row that would come before is reported
(`order_violation`) and the run refuses it; a full recompute then counts it in place.

The state's points stand in for the history in the second pass (transform_order's definitions):
sorted with the new rows by useq descending, a new row is a duplicate when an earlier row had
its useq (the point or a new row with the same useq comes first) or when it lies in a region the
history covers (the nearest point below it is not open); the next higher received useq above a
new row in an open region is a new row or the point at the region's top; the overtaking arrival
of a late row is the nearest row above with lead > 0, which a point at a gap's top stands for.
The points below a gap whose upper end was filled, and the lowest when a lower seq arrived,
yield revisions: the change of `lost` and `report_head_missing` of the windows they name.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .columns import MAX_COLS, SUM_COLS
from .transforms import (
    ARRIVAL_ORDER,
    CHANNEL_WINDOW_COLS,
    DIMS,
    DOMAIN_COLS,
    HIST_COLS,
    LEAD_COLS,
    LEAD_KEY,
    RECOVERY_COLS,
    RECOVERY_DIMS,
    ROW_COLS,
    _bq,
    _wrap_diff_sql,
)

# the channel window a point's row is counted in (with the domain's device_id and kind)
WINDOW_OF = ["channel", "firmware_version", "transport", "window_start"]
W_COLS = ["w_" + c for c in WINDOW_OF]
DOMAIN_STATE_COLS = [*LEAD_KEY, "n", "last_seq", "last_useq", "last_arrival", "last_bridge", "max_useq"]
POINT_COLS = [*LEAD_KEY, "useq", "open", "gap", "is_min", "over_pos", "over_rx", *W_COLS]
# revisions of windows counted by earlier runs: device_id, kind and the point's window
REVISION_COLS = ["device_id", "kind", *WINDOW_OF, "lost", "report_head_missing"]
_TYPES = {
    "device_id": "STRING",
    "boot_epoch": "BIGINT",
    "kind": "STRING",
    "session": "BIGINT",
    "lead_channel": "INT",
    "n": "BIGINT",
    "last_seq": "BIGINT",
    "last_useq": "BIGINT",
    "last_arrival": "BIGINT",
    "last_bridge": "STRING",
    "max_useq": "BIGINT",
    "useq": "BIGINT",
    "open": "BOOLEAN",
    "gap": "BIGINT",
    "is_min": "BOOLEAN",
    "over_pos": "BIGINT",
    "over_rx": "BIGINT",
    "w_channel": "INT",
    "w_firmware_version": "STRING",
    "w_transport": "STRING",
    "w_window_start": "TIMESTAMP",
}
_KEY = ", ".join(_bq(LEAD_KEY))


def state_ddl(cols: list[str]) -> str:
    """The schema of a state table (DOMAIN_STATE_COLS or POINT_COLS) as DDL text."""
    return ", ".join("`%s` %s" % (c, _TYPES[c]) for c in cols)


_FRAME_TO_PREV = "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING"
_FRAME_TO_HERE = "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"
_FRAME_BELOW = "ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING"


def transform_seeded_leads(rows: DataFrame, domains: DataFrame) -> DataFrame:
    """Pass 1 for the new rows (transforms.ARRIVAL_COLS) of each domain, seeded with its state
    row (DOMAIN_STATE_COLS; none for a new domain): pos, useq and lead_calc as one window over
    the whole history gives them (LEAD_COLS), plus `order_violation` (the row comes before the
    counted ones in arrival order)."""
    seed = domains.selectExpr(
        *_bq(LEAD_KEY),
        "n AS _n0",
        "last_seq AS _s0",
        "last_useq AS _u0",
        "last_arrival AS _a0",
        "last_bridge AS _b0",
        "max_useq AS _m0",
    )
    df = rows.selectExpr(*_bq(DOMAIN_COLS), "xxhash64(%s) AS domain_hash" % _KEY).join(seed, LEAD_KEY, "left")
    spec = "PARTITION BY domain_hash, %s ORDER BY %s" % (_KEY, ", ".join(ARRIVAL_ORDER))
    first = "CASE WHEN _s0 IS NULL THEN seq ELSE %s END" % _wrap_diff_sql("seq", "_s0")
    step = "CASE WHEN _prev IS NULL THEN %s ELSE %s END" % (first, _wrap_diff_sql("seq", "_prev"))
    df = df.selectExpr("*", "row_number() OVER (%s) AS _pos" % spec, "lag(seq, 1) OVER (%s) AS _prev" % spec)
    df = df.selectExpr(
        "*", "coalesce(_u0, CAST(0 AS BIGINT)) + sum(%s) OVER (%s %s) AS useq" % (step, spec, _FRAME_TO_HERE)
    )
    df = df.selectExpr("*", "max(useq) OVER (%s %s) AS _mb" % (spec, _FRAME_TO_PREV))
    return df.selectExpr(
        *_bq(DOMAIN_COLS),
        "domain_hash",
        "coalesce(_n0, CAST(0 AS BIGINT)) + _pos AS pos",
        "useq",
        # greatest() skips nulls: both null only for the first arrival of a new domain
        "coalesce(useq - greatest(_m0, _mb), CAST(1 AS BIGINT)) AS lead_calc",
        "_a0 IS NOT NULL AND (arrival < _a0 OR (arrival = _a0 AND bridge_id <= _b0)) AS order_violation",
    )


def _ghosts(points: DataFrame) -> DataFrame:
    """The state's points as rows of the second pass: `_ghost`, a lead > 0 marker where the point
    carries an overtaking arrival (pos, rx_us are that arrival's), the point's own columns."""
    return points.selectExpr(
        *_bq(LEAD_KEY),
        "xxhash64(%s) AS domain_hash" % _KEY,
        "useq",
        "true AS _ghost",
        "open AS _open",
        "gap AS _old_gap",
        "is_min AS _is_min",
        "over_pos AS pos",
        "over_rx AS rx_us",
        "CASE WHEN over_pos IS NOT NULL THEN CAST(1 AS BIGINT) ELSE CAST(0 AS BIGINT) END AS lead_calc",
        *_bq(W_COLS),
    )


def transform_seeded_order(leads: DataFrame, points: DataFrame) -> DataFrame:
    """Pass 2 over the new rows (transform_seeded_leads output) and the state's points, by useq
    descending: every row of both with `_ghost`, the window columns and the values of
    transforms.transform_order for the new rows (ROW_COLS). transform_seeded_rows,
    transform_revisions and transform_next_points read it."""
    new = leads.selectExpr(
        *_bq(LEAD_COLS),
        "order_violation",
        "false AS _ghost",
        "CAST(NULL AS BOOLEAN) AS _open",
        "CAST(NULL AS BIGINT) AS _old_gap",
        "false AS _is_min",
        *("`%s` AS `w_%s`" % (c, c) for c in WINDOW_OF),
    )
    both = new.unionByName(_ghosts(points), allowMissingColumns=True)
    spec = "PARTITION BY domain_hash, %s ORDER BY useq DESC, _ghost DESC, %s" % (
        _KEY,
        ", ".join("%s ASC" % c for c in ARRIVAL_ORDER),
    )
    over = "last(CASE WHEN lead_calc > 0 THEN %s END, true) OVER (%s %s)"
    both = both.selectExpr(
        "*",
        "lag(useq, 1) OVER (%s) AS _above" % spec,
        (over + " AS _over_pos") % ("pos", spec, _FRAME_TO_PREV),
        (over + " AS _over_rx") % ("rx_us", spec, _FRAME_TO_PREV),
        (over + " AS _over_pos_here") % ("pos", spec, _FRAME_TO_HERE),
        (over + " AS _over_rx_here") % ("rx_us", spec, _FRAME_TO_HERE),
        # the nearest point below: is the region above it a gap? (null: no point below)
        "first(CASE WHEN _ghost THEN _open END, true) OVER (%s %s) AS _below_open" % (spec, _FRAME_BELOW),
        "min(useq) OVER (PARTITION BY domain_hash, %s) AS _min_useq" % _KEY,
        "max(useq) OVER (PARTITION BY domain_hash, %s) AS _max_useq" % _KEY,
    )
    dup = "(NOT _ghost AND (coalesce(_above = useq, false) OR NOT coalesce(_below_open, true)))"
    both = both.selectExpr("*", "%s AS dup_calc" % dup)
    late = "(NOT _ghost AND NOT dup_calc AND lead_calc < 0)"
    return both.selectExpr(
        "*",
        "%s AS late" % late,
        "CASE WHEN %s THEN -lead_calc ELSE CAST(0 AS BIGINT) END AS lateness_seq" % late,
        "CASE WHEN %s THEN pos - _over_pos ELSE 0 END AS reorder_depth" % late,
        "CASE WHEN %s THEN rx_us - _over_rx ELSE 0 END AS lateness_us" % late,
        "CASE WHEN NOT dup_calc AND _above IS NOT NULL THEN _above - useq - 1 ELSE 0 END AS gap_after",
        "CASE WHEN NOT dup_calc AND kind = 'report' AND useq = _min_useq THEN greatest(useq - 1, 0) "
        "ELSE 0 END AS report_head_missing",
    )


def transform_seeded_rows(order: DataFrame) -> DataFrame:
    """The new rows with transform_order's columns (ROW_COLS), ready for the channel windows."""
    return order.where("NOT _ghost").selectExpr(*_bq(ROW_COLS))


def transform_revisions(order: DataFrame) -> DataFrame:
    """What the new rows change in windows counted before (REVISION_COLS, nonzero rows only): the
    gap above an open point (filled from below its top, or a first row above the highest), and
    the report head of a domain whose lowest seq is now lower."""
    lost = "CASE WHEN _open THEN gap_after - _old_gap ELSE 0 END"
    head = "CASE WHEN _is_min AND kind = 'report' AND _min_useq < useq THEN -greatest(useq - 1, 0) ELSE 0 END"
    rev = order.where("_ghost").selectExpr(
        "device_id",
        "kind",
        *("`w_%s` AS `%s`" % (c, c) for c in WINDOW_OF),
        "CAST(%s AS BIGINT) AS lost" % lost,
        "CAST(%s AS BIGINT) AS report_head_missing" % head,
    )
    return rev.where("lost != 0 OR report_head_missing != 0").selectExpr(*_bq(REVISION_COLS))


def transform_next_points(order: DataFrame) -> DataFrame:
    """The domains' points after this run (POINT_COLS), for the domains with new rows: from every
    received useq's first row (new or a point), those that bound a gap, and the lowest and
    highest. A point with nothing new around it is carried as it was."""
    firsts = order.where("NOT dup_calc").selectExpr("*", "CASE WHEN _ghost THEN _old_gap END AS _g0")
    spec = "PARTITION BY domain_hash, %s ORDER BY useq DESC" % _KEY
    # new rows in an open region keep it open above them; a point keeps what it was
    open_above = "(NOT _ghost OR _open OR useq = _max_useq)"
    cand = firsts.selectExpr(
        "*",
        "%s AND gap_after > 0 AS _gap_open" % open_above,
        "CASE WHEN %s THEN gap_after ELSE 0 END AS _gap" % open_above,
    )
    cand = cand.selectExpr("*", "coalesce(lead(_gap_open, 1) OVER (%s), false) AS _top_of_gap" % spec)
    keep = "_gap_open OR _top_of_gap OR useq = _min_useq OR useq = _max_useq"
    return cand.where(keep).selectExpr(
        *_bq(LEAD_KEY),
        "useq",
        "_gap_open OR useq = _max_useq AS open",
        "CAST(_gap AS BIGINT) AS gap",
        "useq = _min_useq AS is_min",
        "CASE WHEN _top_of_gap OR useq = _min_useq THEN _over_pos_here END AS over_pos",
        "CASE WHEN _top_of_gap OR useq = _min_useq THEN _over_rx_here END AS over_rx",
        *_bq(W_COLS),
    )


def transform_next_domains(leads: DataFrame, domains: DataFrame) -> DataFrame:
    """The domain rows after this run (DOMAIN_STATE_COLS) for the domains with new rows
    (transform_seeded_leads output): counts added, the last arrival's seq, useq and place, the
    highest useq."""
    order = "struct(arrival, bridge_id)"
    new = leads.groupBy(*LEAD_KEY).agg(
        *(
            F.expr(e)
            for e in (
                "count(1) AS _cnt",
                "max_by(seq, %s) AS last_seq" % order,
                "max_by(useq, %s) AS last_useq" % order,
                "max_by(arrival, %s) AS last_arrival" % order,
                "max_by(bridge_id, %s) AS last_bridge" % order,
                "max(useq) AS _max_new",
            )
        )
    )
    old = domains.selectExpr(*_bq(LEAD_KEY), "n AS _n0", "max_useq AS _m0")
    return new.join(old, LEAD_KEY, "left").selectExpr(
        *_bq(LEAD_KEY),
        "coalesce(_n0, CAST(0 AS BIGINT)) + _cnt AS n",
        "last_seq",
        "last_useq",
        "last_arrival",
        "last_bridge",
        "greatest(_m0, _max_new) AS max_useq",
    )


def transform_carry_state(old: DataFrame, new: DataFrame) -> DataFrame:
    """A state table after a run: the rows of `old` for the domains `new` does not have, and all
    of `new` (the domains with new rows: their rows replace the old ones whole)."""
    touched = new.selectExpr(*_bq(LEAD_KEY)).distinct()
    return old.join(touched, LEAD_KEY, "left_anti").unionByName(new.selectExpr(*_bq(old.columns)))


def transform_merge_windows(*parts: DataFrame) -> DataFrame:
    """Channel windows counted in parts (windows written before, the new rows' windows, the
    revisions: a column a part lacks counts 0) as one row per window (CHANNEL_WINDOW_COLS): sums
    added, maxima the largest, the loss rate of the sums."""
    src = parts[0]
    for p in parts[1:]:
        src = src.unionByName(p, allowMissingColumns=True)
    sums = [*SUM_COLS, *HIST_COLS]
    out = src.groupBy(*DIMS).agg(
        *(F.expr("CAST(coalesce(sum(`%s`), 0) AS BIGINT) AS `%s`" % (c, c)) for c in sums),
        *(F.expr("CAST(coalesce(max(`%s`), 0) AS BIGINT) AS `%s`" % (c, c)) for c in MAX_COLS),
    )
    rate = "CASE WHEN `unique` + lost > 0 THEN lost / (`unique` + lost) ELSE 0D END AS loss_rate"
    return out.selectExpr("*", rate).selectExpr(*_bq(CHANNEL_WINDOW_COLS))


_RECOVERY_MAX = ["duration_us_max"]


def transform_merge_recoveries(*parts: DataFrame) -> DataFrame:
    """Recovery rows (RECOVERY_COLS) of several runs as one row per window and cause."""
    src = parts[0]
    for p in parts[1:]:
        src = src.unionByName(p.selectExpr(*_bq(RECOVERY_COLS)))
    sums = [c for c in RECOVERY_COLS if c not in RECOVERY_DIMS and c not in _RECOVERY_MAX]
    return (
        src.groupBy(*RECOVERY_DIMS)
        .agg(
            *(F.expr("CAST(sum(`%s`) AS BIGINT) AS `%s`" % (c, c)) for c in sums),
            *(F.expr("CAST(max(`%s`) AS BIGINT) AS `%s`" % (c, c)) for c in _RECOVERY_MAX),
        )
        .selectExpr(*_bq(RECOVERY_COLS))
    )
