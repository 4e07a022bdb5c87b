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
    _DOMAIN_KEYS,
    ARRIVAL_ORDER,
    CHANNEL_WINDOW_COLS,
    DIMS,
    DOMAIN_COLS,
    HIST_COLS,
    LEAD_COLS,
    LEAD_KEY,
    ROW_COLS,
    _bq,
    _carry_join,
    _wrap_diff_sql,
    lead_bucket_summary,
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


# a new row that comes before (or is) the last counted arrival of its domain
_VIOLATION = "_a0 IS NOT NULL AND (arrival < _a0 OR (arrival = _a0 AND bridge_id <= _b0)) AS order_violation"


def _seed(domains: DataFrame) -> DataFrame:
    """The domain state rows as the columns that seed a domain's new rows (_n0 ... _m0)."""
    return domains.selectExpr(
        *_bq(LEAD_KEY),
        "n AS _n0",
        "last_seq AS _s0",
        "last_useq AS _u0",
        "last_arrival AS _a0",
        "last_bridge AS _b0",
        "max_useq AS _m0",
    )


def transform_seeded_leads(rows: DataFrame, domains: DataFrame) -> DataFrame:
    """Pass 1 for the new rows (transforms.ARRIVAL_COLS) of each domain, seeded with its state
    row (DOMAIN_STATE_COLS; none for a new domain): pos, useq and lead_calc as one window over
    the whole history gives them (LEAD_COLS), plus `order_violation` (the row comes before the
    counted ones in arrival order)."""
    df = rows.selectExpr(*_bq(DOMAIN_COLS), "xxhash64(%s) AS domain_hash" % _KEY)
    df = df.join(_seed(domains), LEAD_KEY, "left")
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
        _VIOLATION,
    )


def transform_seeded_lead_carry(df: DataFrame, domains: DataFrame, broadcast: bool = False) -> DataFrame:
    """transform_seeded_leads in bounded pieces: the new rows' first pass per (domain, arrival
    bucket) (transforms.transform_lead_buckets output) with every bucket's prefix state carried
    in from one summary row per bucket, the domain's state row seeding the first one (as
    transforms.transform_lead_carry, which starts from nothing). broadcast=True (rows partitioned
    by device and bucket, a hot device's buckets spread over the tasks): the carried state, one
    row per bucket, is broadcast to them."""
    keys = [*_DOMAIN_KEYS, "_abucket"]
    summ = lead_bucket_summary(df).join(_seed(domains), LEAD_KEY, "left")
    spec = "PARTITION BY %s ORDER BY _abucket" % ", ".join(_bq(_DOMAIN_KEYS))
    before = "%s %s" % (spec, _FRAME_TO_PREV)
    # the useq of the first new row: the counted last one's plus the wrap-safe step (none: its seq)
    first = "CASE WHEN _s0 IS NULL THEN _first ELSE _u0 + %s END" % _wrap_diff_sql("_first", "_s0")
    delta = "CASE WHEN _pl IS NULL THEN %s ELSE %s END" % (first, _wrap_diff_sql("_first", "_pl"))
    summ = summ.selectExpr("*", "lag(_last, 1) OVER (%s) AS _pl" % spec)
    summ = summ.selectExpr(
        *_bq(keys),
        "_lmax_b",
        "_m0",
        "_a0",
        "_b0",
        "sum(%s + _llast) OVER (%s %s) - _llast AS _start" % (delta, spec, _FRAME_TO_HERE),
        "coalesce(_n0, CAST(0 AS BIGINT)) + coalesce(sum(_n) OVER (%s), CAST(0 AS BIGINT)) AS _pos0" % before,
    )
    carry = summ.selectExpr(
        *_bq(keys),
        "_start",
        "_pos0",
        "_a0",
        "_b0",
        # greatest() skips nulls: the counted rows' highest, the earlier new buckets' highest
        "greatest(_m0, max(_start + _lmax_b) OVER (%s)) AS _max0" % before,
    )
    return _carry_join(df, carry, keys, broadcast).selectExpr(
        *_bq(DOMAIN_COLS),
        "domain_hash",
        "_pos0 + _pos AS pos",
        "_start + _l AS useq",
        "coalesce(_start + _l - greatest(_max0, _start + _lmax), CAST(1 AS BIGINT)) AS lead_calc",
        _VIOLATION,
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


def transform_seeded_order(leads: DataFrame, points: DataFrame, bucket_bits: int | None = None) -> DataFrame:
    """Pass 2 over the new rows (transform_seeded_leads output) and the state's points, by useq
    descending: every row of both with `_ghost`, the window columns and the values of
    transforms.transform_order for the new rows (ROW_COLS). transform_seeded_rows,
    transform_revisions and transform_next_points read it. bucket_bits: per (domain, useq bucket),
    what lies above and below a bucket carried in (_order_buckets); None: one window per domain."""
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
    both = _order_whole(both) if bucket_bits is None else _order_buckets(both, bucket_bits)
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


# pass 2's order: useq descending; a point before a new row of the same useq
_BY_USEQ = "ORDER BY useq DESC, _ghost DESC, %s" % ", ".join("%s ASC" % c for c in ARRIVAL_ORDER)
_OVER = "last(CASE WHEN lead_calc > 0 THEN %s END, true) OVER (%s %s)"


def _order_whole(both: DataFrame) -> DataFrame:
    """Pass 2's window columns, one window per domain: the row above (_above), the overtaking
    arrival above (_over_*) and up to here (_over_*_here), whether the nearest point below is
    open (_below_open: null when none), the domain's lowest and highest useq."""
    spec = "PARTITION BY domain_hash, %s %s" % (_KEY, _BY_USEQ)
    domain = "PARTITION BY domain_hash, %s" % _KEY
    return both.selectExpr(
        "*",
        "lag(useq, 1) OVER (%s) AS _above" % spec,
        (_OVER + " AS _over_pos") % ("pos", spec, _FRAME_TO_PREV),
        (_OVER + " AS _over_rx") % ("rx_us", spec, _FRAME_TO_PREV),
        (_OVER + " AS _over_pos_here") % ("pos", spec, _FRAME_TO_HERE),
        (_OVER + " AS _over_rx_here") % ("rx_us", spec, _FRAME_TO_HERE),
        "first(CASE WHEN _ghost THEN _open END, true) OVER (%s %s) AS _below_open" % (spec, _FRAME_BELOW),
        "min(useq) OVER (%s) AS _min_useq" % domain,
        "max(useq) OVER (%s) AS _max_useq" % domain,
    )


def _order_buckets(both: DataFrame, bucket_bits: int) -> DataFrame:
    """_order_whole's columns per (domain, useq bucket), what a bucket needs from the others
    carried in from one summary row per bucket (as transforms._order_buckets): the lowest useq of
    the next bucket up (_above of its top row), the lowest-useq row with lead > 0 of the nearest
    bucket up that has one (the overtaking arrival), the `open` of the highest point of the
    nearest bucket down that has a point, and the domain's lowest and highest useq."""
    keys = [*_DOMAIN_KEYS, "_ubucket"]
    both = both.selectExpr("*", "shiftright(useq, %d) AS _ubucket" % bucket_bits)
    spec = "PARTITION BY %s %s" % (", ".join(_bq(keys)), _BY_USEQ)
    local = both.selectExpr(
        "*",
        "lag(useq, 1) OVER (%s) AS _above_l" % spec,
        (_OVER + " AS _over_pos_l") % ("pos", spec, _FRAME_TO_PREV),
        (_OVER + " AS _over_rx_l") % ("rx_us", spec, _FRAME_TO_PREV),
        (_OVER + " AS _over_pos_here_l") % ("pos", spec, _FRAME_TO_HERE),
        (_OVER + " AS _over_rx_here_l") % ("rx_us", spec, _FRAME_TO_HERE),
        "first(CASE WHEN _ghost THEN _open END, true) OVER (%s %s) AS _below_open_l" % (spec, _FRAME_BELOW),
    )
    # at most one row per useq has lead > 0 (a later copy, or a new row at a point's useq, has
    # lead <= 0) and a point's useq is its own: min_by / max_by have no ties
    summ = both.groupBy(*keys).agg(
        F.expr("min(useq) AS _min_b"),
        F.expr("max(useq) AS _max_b"),
        F.expr("min_by(pos, CASE WHEN lead_calc > 0 THEN useq END) AS _over_pos_b"),
        F.expr("min_by(rx_us, CASE WHEN lead_calc > 0 THEN useq END) AS _over_rx_b"),
        F.expr("max_by(_open, CASE WHEN _ghost THEN useq END) AS _top_open_b"),
    )
    domain = "PARTITION BY %s" % ", ".join(_bq(_DOMAIN_KEYS))
    down = "%s ORDER BY _ubucket DESC" % domain
    carry = summ.selectExpr(
        *_bq(keys),
        "lag(_min_b, 1) OVER (%s) AS _next_min" % down,
        "last(_over_pos_b, true) OVER (%s %s) AS _over_pos_c" % (down, _FRAME_TO_PREV),
        "last(_over_rx_b, true) OVER (%s %s) AS _over_rx_c" % (down, _FRAME_TO_PREV),
        "first(_top_open_b, true) OVER (%s %s) AS _below_open_c" % (down, _FRAME_BELOW),
        "min(_min_b) OVER (%s) AS _min_useq" % domain,
        "max(_max_b) OVER (%s) AS _max_useq" % domain,
    )
    out = _carry_join(local, carry, keys).selectExpr(
        "*",
        "coalesce(_above_l, _next_min) AS _above",
        "coalesce(_over_pos_l, _over_pos_c) AS _over_pos",
        "coalesce(_over_rx_l, _over_rx_c) AS _over_rx",
        "coalesce(_over_pos_here_l, _over_pos_c) AS _over_pos_here",
        "coalesce(_over_rx_here_l, _over_rx_c) AS _over_rx_here",
        "coalesce(_below_open_l, _below_open_c) AS _below_open",
    )
    return out.drop(
        "_ubucket",
        "_above_l",
        "_over_pos_l",
        "_over_rx_l",
        "_over_pos_here_l",
        "_over_rx_here_l",
        "_below_open_l",
        "_next_min",
        "_over_pos_c",
        "_over_rx_c",
        "_below_open_c",
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


def transform_next_points(order: DataFrame, bucket_bits: int | None = None) -> DataFrame:
    """The domains' points after this run (POINT_COLS), for the domains with new rows: from every
    received useq's first row (new or a point), those that bound a gap, and the lowest and
    highest. A point with nothing new around it is carried as it was."""
    firsts = order.where("NOT dup_calc")
    # new rows in an open region keep it open above them; a point keeps what it was
    open_above = "(NOT _ghost OR _open OR useq = _max_useq)"
    cand = firsts.selectExpr(
        "*",
        "%s AND gap_after > 0 AS _gap_open" % open_above,
        "CASE WHEN %s THEN gap_after ELSE 0 END AS _gap" % open_above,
    )
    cand = _next_open(cand, bucket_bits)
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


def _next_open(cand: DataFrame, bucket_bits: int | None) -> DataFrame:
    """`_top_of_gap`: the next received useq below a row opens a gap (whole domain, or per useq
    bucket with the next bucket down's top row carried in)."""
    if bucket_bits is None:
        spec = "PARTITION BY domain_hash, %s ORDER BY useq DESC" % _KEY
        return cand.selectExpr("*", "coalesce(lead(_gap_open, 1) OVER (%s), false) AS _top_of_gap" % spec)
    keys = [*_DOMAIN_KEYS, "_ubucket"]
    cand = cand.selectExpr("*", "shiftright(useq, %d) AS _ubucket" % bucket_bits)
    spec = "PARTITION BY %s ORDER BY useq DESC" % ", ".join(_bq(keys))
    local = cand.selectExpr("*", "lead(_gap_open, 1) OVER (%s) AS _next_l" % spec)
    summ = cand.groupBy(*keys).agg(F.expr("max_by(_gap_open, useq) AS _top_b"))
    down = "PARTITION BY %s ORDER BY _ubucket DESC" % ", ".join(_bq(_DOMAIN_KEYS))
    carry = summ.selectExpr(*_bq(keys), "lead(_top_b, 1) OVER (%s) AS _next_c" % down)
    out = _carry_join(local, carry, keys).selectExpr("*", "coalesce(_next_l, _next_c, false) AS _top_of_gap")
    return out.drop("_ubucket", "_next_l", "_next_c")


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
