"""The job's plan: every output table as a DataFrame over one scan and one exchange of the
arrivals (build_tables), the small profile job that chooses the plan's shape (profile_input), and
the one collect of the small tables (collect_small)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from leadwire.fleet import rollout as R
from leadwire.fleet import transforms as T
from leadwire.fleet.arrow import to_arrow
from leadwire.fleet.extract import DateRange, Inputs

DEFAULT_WINDOW_SECONDS = 3600


def by_device(arrivals: DataFrame, window_seconds: int = DEFAULT_WINDOW_SECONDS) -> DataFrame:
    """The selected arrival columns, hash-partitioned by device (the one shuffle of the arrivals)."""
    return T.transform_by_device(T.transform_arrivals(arrivals, window_seconds))


# Written by the executors (DataFrameWriter), never collected: they grow with rows or devices.
# The dated ones are partitioned by the date of window_start.
DATED_TABLES = ("channel_windows", "recoveries", "restarts")
EXECUTOR_TABLES = (*DATED_TABLES, "devices")
# Collected to the driver (bounded by windows x transports, firmwares, N, metrics) for the report.
SMALL_TABLES = (
    "lead_histogram",
    "worst_devices",
    "by_firmware",
    "by_transport",
    "loss_over_time",
    "latency",
    "summary",
)


def build_tables(
    inputs: Inputs,
    window_seconds: int = DEFAULT_WINDOW_SECONDS,
    worst_n: int = 10,
    dates: DateRange | None = None,
    keep: Any = None,
    cut: Any = None,
    log: Any = None,
) -> dict[str, DataFrame]:
    """All output tables as DataFrames over one scan of the arrivals per part of the stage, and
    one exchange of the arrival rows.

    The channel windows come from the arrivals hash-partitioned by device (`dev`: the lead-domain
    windows run on that partitioning, no further exchange). The latency values and the rollout
    inputs read the export again, each only its few columns, aggregated partially in the scan's
    tasks; the per-device latency percentiles have an exchange by device of three columns (the
    bucketed shapes: they read the kept first pass). That
    costs less than keeping `dev` for several readers: an in-memory cache of every arrival column
    cost more CPU to build than the scans and the narrow exchange it saved (docs/design/
    fleet-job.md). Only the bucketed shapes keep `dev` (`keep`: run_job persists it until the
    stage is computed): their carried state and second pass both read the first pass. Every part
    is stacked into one DataFrame and passed through `cut` (run_job: computed once and its lineage
    cut, so that the plans of the tables read from it stay small: with the whole per-arrival plan
    under every join, planning them cost more than running them). Everything else reads those
    results: thousands of rows, not millions.

    Fleet-level latency percentiles (latency, summary, by_firmware, by_transport) are exact, from
    the counts of each latency value per firmware, transport and rollout window (which the
    rollout tables' percentiles read too), computed with the stage (part `fpct`). Whether any lead
    domain can be longer than a bucket (then both lead-domain passes run in bounded pieces) comes
    from profile_input (one small job, run while this thread builds the parts that do not
    depend on its answer: shape_free_parts).
    """
    keep = keep or (lambda df: df)
    cut = cut or (lambda df: df)
    log = log or (lambda msg: None)
    dates = dates or DateRange()
    since, until = dates.since_us(), dates.until_us()
    # the profile job runs while this thread builds the parts that do not depend on its answer
    # (each DataFrame built is analysed by the driver's JVM: a few seconds on a new JVM)
    with ThreadPoolExecutor(1, thread_name_prefix="fleet-profile") as pool:
        profiled = pool.submit(profile_input, inputs.arrivals)
        arr = T.transform_arrivals(inputs.arrivals, window_seconds)
        counted = arr.where(T.in_range(F.col("rx_us"), since, until))
        shared = shape_free_parts(inputs, counted, window_seconds, since, until)
        span, total = profiled.result()
    shape = lead_shape(inputs.arrivals, span, total, log)
    if shape == WHOLE:  # no device has more arrivals than a bucket holds: fewer steps
        dev = first_pass(arr, shape)
        rows = T.transform_order(T.transform_leads(dev, None), None)
    else:  # the first pass (bounded buckets) is read twice: by the carried state and the join
        dev = keep(first_pass(arr, shape))
        rows = T.transform_order(T.transform_lead_carry(dev, broadcast=shape == HOT), T.BUCKET_BITS)
    rows = rows.where(T.in_range(F.col("rx_us"), since, until))
    # per-device percentiles on rows partitioned by device: the shuffle of three columns, or in
    # the bucketed shapes the persisted first pass (by device and bucket: partial aggregates, so
    # that a hot device's values are not one task's)
    by_device_counted = (
        T.transform_by_device(counted)
        if shape == WHOLE
        else dev.where(T.in_range(F.col("rx_us"), since, until))
    )
    parts = {
        "cw": T.transform_channel_windows(rows, with_mismatches=True),
        "lat_dev": T.transform_device_latency(T.transform_latency_values(by_device_counted)),
        **shared,
    }
    stage = cut(T.transform_stack(parts))
    cw = T.transform_unstack(stage, "cw", T.CHANNEL_WINDOW_COLS)
    lat_dev = T.transform_unstack(stage, "lat_dev", ["device_id", *T.LATENCY_WIDE])
    pct = T.transform_unstack(stage, "fpct", T.FLEET_PCT_COLS)
    rec = T.transform_unstack(stage, "rec", T.RECOVERY_COLS)
    rst = T.transform_unstack(stage, "rst", T.RESTART_COLS)
    return {
        "_by_device": dev,
        **rollout_parts(stage, inputs.boots),
        # the rows that disagree with the bridge (usually none) came with the channel windows:
        # a second consumer of the per-arrival rows would run their window sorts twice
        "_mismatches": T.transform_window_mismatches(
            T.transform_unstack(stage, "cw", [*T.CHANNEL_WINDOW_COLS, "mismatch_rows"])
        ),
        **rollup_tables(cw, rec, rst, Latency(lat_dev, pct), worst_n, cut),
    }


def shape_free_parts(
    inputs: Inputs, counted: DataFrame, window_seconds: int, since: int | None, until: int | None
) -> dict[str, DataFrame]:
    """The parts of build_tables' stage that do not depend on the lead domains' shape: recoveries,
    restarts, the latency value counts' percentiles and the rollout inputs. `counted`: the
    arrivals (transform_arrivals) in the range counted."""
    started = F.unix_micros("started_ts")
    counts = T.transform_latency_counts(counted, R.rollout_window(window_seconds))
    return {
        # recoveries and restarts (small inputs) in the same job: one job, not three
        "rec": T.transform_recoveries(inputs.losses.where(T.in_range(started, since, until)), window_seconds),
        "rst": T.transform_restarts(inputs.boots, window_seconds, since, until),
        # the latency percentiles from one count of the values (its exchange shared: the same
        # plan), computed in the stage's tasks: the fleet-level ones and the rollout tables'
        "fpct": T.transform_fleet_percentiles(counts),
        # what the rollout tables read from the arrivals: computed with the stage
        **R.rollout_inputs(counted, R.rollout_window(window_seconds), counts),
    }


def rollout_parts(stage: DataFrame, boots: DataFrame) -> dict[str, DataFrame]:
    """The rollout stage's inputs (rollout_stage.stage_rollout): the unit times and latency
    percentiles the stage computed (parts `rtimes`, `rlat`), and the boots."""
    return {
        "_rollout_times": T.transform_unstack(stage, "rtimes", R.TIME_COLS),
        "_rollout_latency": T.transform_unstack(stage, "rlat", R.LATENCY_PCT_COLS),
        "_boots": boots,
    }


@dataclass(frozen=True)
class Latency:
    """The latency inputs of the roll-ups: per-device percentiles and the fleet-level ones
    (transforms.transform_fleet_percentiles output)."""

    per_device: DataFrame
    fleet: DataFrame


def rollup_tables(
    cw: DataFrame, rec: DataFrame, rst: DataFrame, lat: Latency, worst_n: int, cut: Any
) -> dict[str, DataFrame]:
    """The dated tables as given and every table rolled up from them: devices (passed through
    `cut`: the small tables read it), worst devices, comparisons, loss over time, latency, summary."""
    devices = cut(T.transform_devices(cw, rec, rst, lat.per_device))
    pct = lat.fleet
    fleet_latency = T.transform_fleet_latency(pct)
    return {
        "channel_windows": cw,
        "lead_histogram": T.transform_lead_histogram(cw),
        "recoveries": rec,
        "restarts": rst,
        "devices": devices,
        "worst_devices": T.transform_worst(devices, worst_n),
        "by_firmware": T.transform_compare(cw, rec, rst, pct, "firmware_version"),
        "by_transport": T.transform_compare(cw, rec, rst, pct, "transport"),
        "loss_over_time": T.transform_loss_over_time(cw, rec, rst),
        "latency": fleet_latency,
        "summary": T.transform_summary(devices, fleet_latency),
    }


# A device is hot when it holds more arrivals than this many buckets and more than its share of
# a shuffle task (all arrivals / shuffle partitions): a shuffle by device alone would put it in
# one task, the critical path of the job.
HOT_BUCKETS = 4
# The shapes of the lead-domain passes (lead_shape): one window per domain; per (domain, bucket)
# on the rows shuffled by device; per (domain, bucket) on the rows shuffled by (device, bucket).
WHOLE, BUCKETS, HOT = "whole", "in buckets", "in buckets, shuffled by device and bucket"


def is_hot(span: int, total: int, tasks: int) -> bool:
    return span > HOT_BUCKETS << T.BUCKET_BITS and span > total / max(tasks, 1)


def lead_shape(arrivals: DataFrame, span: int, total: int, log: Any) -> str:
    """How the lead-domain passes run, from profile_input's figures (logged): WHOLE when no device
    has more arrivals than a bucket holds; HOT when one holds more than a shuffle task's share
    (is_hot); BUCKETS otherwise. The full run and the incremental one (on its new rows) alike."""
    tasks = int(arrivals.sparkSession.conf.get("spark.sql.shuffle.partitions", "200") or 200)
    shape = WHOLE
    if span > 1 << T.BUCKET_BITS:
        shape = HOT if is_hot(span, total, tasks) else BUCKETS
    log("lead domains: %s (largest device: %d of %d arrivals)" % (shape, span, total))
    return shape


def first_pass(arr: DataFrame, shape: str) -> DataFrame:
    """transform_arrivals output shuffled for the lead-domain passes (the one shuffle of the
    arrivals), and for BUCKETS and HOT the first pass per (domain, arrival bucket), which keeps
    every arrival column: the carried state and the second pass read it (the job persists it).
    HOT: shuffled by (device, arrival bucket), so that a hot device's rows spread over the tasks
    (its carried state is then broadcast to them)."""
    if shape == WHOLE:
        return T.transform_by_device(arr)
    if shape == HOT:
        return T.transform_lead_buckets(T.transform_by_device_bucket(arr, T.BUCKET_BITS), T.BUCKET_BITS)
    return T.transform_lead_buckets(T.transform_by_device(arr), T.BUCKET_BITS)


def profile_input(arrivals: DataFrame) -> tuple[int, int]:
    """One small job over the arrivals read (one narrow scan, one aggregation to a row per device
    and bridge, added up on the driver): the most arrivals a device can have in one lead domain
    (the span of its `arrival` counter, summed over its bridges) and the arrivals of all devices
    (their spans added up)."""
    agg = arrivals.groupBy("device_id", "bridge_id").agg(
        F.expr("min(arrival) AS lo"),
        F.expr("max(arrival) AS hi"),
    )
    span: dict[str, int] = {}
    for r in to_arrow(agg).to_pylist():
        span[r["device_id"]] = span.get(r["device_id"], 0) + r["hi"] - r["lo"] + 1
    return max(span.values(), default=0), sum(span.values())


# Sort keys of the tables: the driver sorts the small ones (no global sort in Spark); the oracle
# compares on them.
TABLE_ORDER: dict[str, list[str]] = {
    "channel_windows": T.DIMS,
    "lead_histogram": ["kind", "firmware_version", "transport", "bucket_order"],
    "recoveries": T.RECOVERY_DIMS,
    "restarts": T.RESTART_DIMS,
    "devices": ["device_id"],
    "worst_devices": ["rank"],
    "by_firmware": ["firmware_version"],
    "by_transport": ["transport"],
    "loss_over_time": ["window_start", "transport"],
    "latency": ["metric"],
    "summary": [],
}


# ------------------------------------------------------------------------------------------ load
def sort_table(tbl: Any, keys: list[str]) -> Any:
    return tbl.sort_by([(k, "ascending") for k in keys]) if keys and tbl.num_rows else tbl


def collect_small(tables: dict[str, DataFrame]) -> dict[str, Any]:
    """The small tables in ONE Spark job (stacked, one toArrow), split and sorted on the driver."""
    import pyarrow.compute as pc

    stacked = to_arrow(T.transform_stack(tables))
    out = {}
    for name, df in tables.items():
        part = stacked.filter(pc.equal(stacked.column("_part"), name)).select(df.columns)
        out[name] = sort_table(part, TABLE_ORDER.get(name, []))
    return out
