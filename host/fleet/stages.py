"""The stages of one run of the fleet job, in order: each a function of the run (`Run`: the
session, the job's spec, what earlier stages produced). STAGES lists them; a stage added to it
(after the tables are built, before the run's state is recorded) runs in every job."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from leadwire.fleet import transforms as T
from leadwire.fleet.arrow import to_arrow
from leadwire.fleet.extract import DateRange, Inputs, extract
from leadwire.fleet.fs import join, list_dates, read_text, write_text
from leadwire.fleet.options import BadInput
from leadwire.fleet.plan import (
    DATED_TABLES,
    EXECUTOR_TABLES,
    SMALL_TABLES,
    build_tables,
    collect_small,
    sort_table,
)
from leadwire.fleet.progress import Progress
from leadwire.fleet.rollout_stage import stage_flags, stage_rollout
from leadwire.fleet.schema import PARTITION_COLUMN
from leadwire.fleet.session import is_local_master

MISMATCH_CSV_ROWS = 100_000
STATE_FILE = "_leadwire_fleet.json"


@dataclass(frozen=True)
class JobSpec:
    """What one run computes: the export, the output, the rows counted and the table sizes."""

    input_dir: str
    out_dir: str
    dates: DateRange = field(default_factory=DateRange)
    window_seconds: int = 3600
    worst_n: int = 10
    report: bool = True
    webhook: str | None = None  # where the regression flags are POSTed (rollout_stage.stage_flags)
    incremental: bool = False  # read only the files no earlier run read (incremental.py)
    late_days: int = 2  # incremental: partitions this many days before the newest are listed again


@dataclass
class Run:
    """One run: its session and spec, and what each stage hands to the next."""

    spark: SparkSession
    spec: JobSpec
    prog: Progress
    keep: Callable[[DataFrame], DataFrame]
    cut: Callable[[DataFrame], DataFrame]
    t0: float = field(default_factory=time.monotonic)
    inputs: Inputs | None = None
    last_input_date: str | None = None
    tables: dict[str, DataFrame] = field(default_factory=dict)
    devices: Any = None  # pyarrow Table of the devices table, sorted by device_id
    rows: int = 0
    rows_read: int = 0  # arrival rows read from the export
    collected: dict[str, Any] = field(default_factory=dict)  # small tables (pyarrow), by name
    summary: dict[str, Any] = field(default_factory=dict)
    out_local: str | None = None  # OUT's OS path when it is on this process's disk (fs.driver_path)
    local_dir: str = ""  # where the driver writes (OUT itself when local, else a staging folder)
    # undone when the run ends, also by an exception (staging folder, a changed conf)
    cleanup: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    extra: dict[str, Any] = field(default_factory=dict)  # what a mode's own stages hand on


Stage = Callable[[Run], None]


def stage_extract(run: Run) -> None:
    spec = run.spec
    with run.prog.stage("extract %s%s" % (spec.input_dir, spec.dates.describe())):
        run.inputs = extract(run.spark, spec.input_dir, spec.dates, run.prog)
        run.last_input_date = (list_dates(run.spark, join(spec.input_dir, "arrivals")) or [None])[-1]


def stage_tables(run: Run) -> None:
    """Every table as a DataFrame; the per-arrival stage computed (one shuffle of the arrival rows); the
    devices table collected (the report reads it, the row count comes from it)."""
    import pyarrow.compute as pc

    spec = run.spec
    assert run.inputs is not None
    with run.prog.stage("leads, ordering, channel windows, devices (one shuffle of the arrivals)"):
        run.tables = build_tables(
            run.inputs,
            spec.window_seconds,
            spec.worst_n,
            spec.dates,
            keep=run.keep,
            cut=run.cut,
            log=lambda msg: run.prog.log("  " + msg),
        )
        run.tables["_by_device"].unpersist()  # the stage is computed: the arrivals are not read again
        run.devices = sort_table(to_arrow(run.tables["devices"]), ["device_id"])
        run.rows = run.rows_read = int(pc.sum(run.devices.column("messages")).as_py() or 0)
        if run.rows == 0:
            raise BadInput(
                "%s: no arrival rows%s" % (join(spec.input_dir, "arrivals"), spec.dates.describe())
            )
        run.prog.log("  %d arrival rows, %d devices" % (run.rows, run.devices.num_rows))
    _small_partitions(run)


def stage_write_executor_tables(run: Run) -> None:
    out = run.spec.out_dir
    with run.prog.stage("write row-scale tables (executors) to %s" % out):
        for name in EXECUTOR_TABLES:
            write_executor_table(name, run.tables[name], out, dynamic=run.spec.dates.bounded)


def stage_small_tables(run: Run) -> None:
    with run.prog.stage("small tables (one job)"):
        small = collect_small({n: run.tables[n] for n in SMALL_TABLES})
        run.collected.update(small)
        for n, t in small.items():
            run.prog.log("  %s: %d rows" % (n, t.num_rows))


def stage_load(run: Run) -> None:
    """The small tables, the mismatching rows and summary.json into OUT (through a local staging
    folder when OUT is not on the driver's disk)."""
    spec = run.spec
    row = run.collected["summary"].to_pylist()[0]
    n_mismatch = int(row["lead_mismatches"]) + int(row["dup_flag_mismatches"])
    if run.out_local is not None:
        run.local_dir = run.out_local
    else:  # kept when the report is written there (stage_publish says where)
        run.local_dir = tempfile.mkdtemp(prefix="leadwire-fleet-")
        if not spec.report:
            run.cleanup.callback(shutil.rmtree, run.local_dir, ignore_errors=True)
    with run.prog.stage("load %s" % spec.out_dir):
        os.makedirs(run.local_dir, exist_ok=True)
        mismatch_rows, head = _mismatches(run, n_mismatch)
        if head is not None:
            run.collected["mismatches"] = head
            run.prog.log(
                "  consistency: %d rows disagree with the bridge (lead or duplicate flag)" % mismatch_rows
            )
        else:
            run.prog.log("  consistency: stored lead and duplicate flags all agree with the recomputation")
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(run.local_dir, "csv", "mismatches.csv"))
        _write_local_tables(run.collected, run.local_dir)
        run.summary = {k: _plain(v) for k, v in row.items()}
        run.summary.update(
            rows=run.rows,
            rows_read=run.rows_read,
            mismatch_rows=mismatch_rows,
            window_seconds=spec.window_seconds,
            input_dir=spec.input_dir,
            out_dir=spec.out_dir,
            # the dates counted (an incremental run: the first and last it wrote)
            date_from=run.extra.get("date_from", spec.dates.first),
            date_to=run.extra.get("date_to", spec.dates.last),
            seconds=round(time.monotonic() - run.t0, 3),
        )
        with open(os.path.join(run.local_dir, "summary.json"), "w") as f:
            json.dump(run.summary, f, indent=2, sort_keys=True)


def stage_report(run: Run) -> None:
    if not run.spec.report:
        return
    with run.prog.stage("report"):
        from leadwire.fleet.report import write_report

        write_report(run.local_dir, {**run.collected, "devices": run.devices}, run.summary)
        run.prog.log("  %s" % join(run.spec.out_dir, "index.html"))


def stage_publish(run: Run) -> None:
    """An OUT not on this disk gets the small tables and summary.json from Spark's writers (the
    report stays in the local folder, logged); the run's state is recorded last, so that a run
    that failed before is repeated by the next --daily."""
    publish_remote(run)
    spark, out = run.spark, run.spec.out_dir
    doc = read_state(spark, out, run.out_local)
    doc["last_date"] = max(d for d in [run.last_input_date, doc.get("last_date")] if d)
    write_text(spark, join(out, STATE_FILE), json.dumps(doc, sort_keys=True), run.out_local)


def publish_remote(run: Run) -> None:
    """For an OUT this process cannot write to: each small table as one Parquet and one CSV file
    in a directory of its name (Spark's writers, one partition), summary.json by write_text."""
    if run.out_local is not None:
        return
    spark, out = run.spark, run.spec.out_dir
    if run.spec.report:
        run.summary["report_dir"] = run.local_dir
    for name, tbl in run.collected.items():
        if not tbl.num_rows:
            continue
        df = _from_arrow(spark, tbl)
        df.coalesce(1).write.mode("overwrite").parquet(join(out, "parquet", name + ".parquet"))
        df.coalesce(1).write.mode("overwrite").option("header", "true").csv(join(out, "csv", name + ".csv"))
    write_text(spark, join(out, "summary.json"), json.dumps(run.summary, indent=2, sort_keys=True), None)
    if run.spec.report:
        run.prog.log("  report (on this machine): %s" % os.path.join(run.local_dir, "index.html"))


def concurrent(*stages: Stage) -> Stage:
    """One stage that runs `stages` at once, each in a thread of its own, and ends when all have;
    the first one's exception (in the order given) is raised. For stages that only read what
    earlier stages produced and each write their own keys of the run: the output stages after
    the per-arrival stage are Spark jobs over a few thousand rows or writers, mostly planning and
    code generation on the driver, one core each; at once they overlap (Spark runs jobs from
    several threads; docs/design/fleet-job.md, "The output stages at once")."""

    def stage(run: Run) -> None:
        with ThreadPoolExecutor(len(stages), thread_name_prefix="fleet-stage") as pool:
            futures = [pool.submit(s, run) for s in stages]
        for f in futures:
            f.result()

    stage.__name__ = "concurrent(%s)" % ", ".join(s.__name__ for s in stages)
    return stage


STAGES: list[Stage] = [
    stage_extract,
    stage_tables,
    concurrent(stage_write_executor_tables, stage_small_tables, stage_rollout),
    stage_load,
    stage_flags,
    stage_report,
    stage_publish,
]


def run_stages(run: Run, stages: list[Stage] | None = None) -> dict[str, Any]:
    """Each stage in order (STAGES by default); the run's summary, its time since run.t0."""
    with run.cleanup:
        for stage in STAGES if stages is None else stages:
            stage(run)
    run.summary["seconds"] = round(time.monotonic() - run.t0, 3)
    return run.summary


# Set to "committer" where the output committer replaces the partitions a job writes itself (the
# S3A partitioned staging committer with fs.s3a.committer.staging.conflict-mode=replace), which
# refuses Spark's dynamic partition overwrite: the dated days are then written in append mode
# and the committer replaces them (docs/fleet.md, S3).
PARTITION_OVERWRITE_CONF = "spark.leadwire.fleet.partitionOverwrite"


def write_executor_table(name: str, df: DataFrame, out_dir: str, dynamic: bool) -> None:
    """DataFrameWriter into OUT/parquet/<name>.parquet/ (a directory of part files); the dated
    tables partitioned by date, and with dynamic=True (a date-range run) only the dates this run
    wrote are replaced (Spark's dynamic partition overwrite, or the committer's: see
    PARTITION_OVERWRITE_CONF)."""
    write_table(df, join(out_dir, "parquet", name + ".parquet"), name in DATED_TABLES, dynamic)


def write_table(df: DataFrame, path: str, dated: bool, dynamic: bool) -> None:
    """write_executor_table's writing: into `path`, partitioned by the date of window_start when
    dated, only the dates written replaced when dynamic."""
    w = df
    if dated:
        w = df.withColumn(PARTITION_COLUMN, F.date_format("window_start", "yyyy-MM-dd"))
    by_committer = dynamic and df.sparkSession.conf.get(PARTITION_OVERWRITE_CONF, "spark") == "committer"
    if by_committer:
        writer = w.write.mode("append")
    else:
        writer = w.write.mode("overwrite").option(
            "partitionOverwriteMode", "dynamic" if dynamic else "static"
        )
    if dated:
        writer = writer.partitionBy(PARTITION_COLUMN)
    writer.parquet(path)


def _write_local_tables(tables: dict[str, Any], local_dir: str) -> None:
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    os.makedirs(os.path.join(local_dir, "parquet"), exist_ok=True)
    os.makedirs(os.path.join(local_dir, "csv"), exist_ok=True)
    for name, tbl in tables.items():
        pq.write_table(tbl, os.path.join(local_dir, "parquet", name + ".parquet"))
        pacsv.write_csv(tbl, os.path.join(local_dir, "csv", name + ".csv"))


def _from_arrow(spark: SparkSession, tbl: Any) -> DataFrame:
    """A small pyarrow Table as a DataFrame with its column types (a column of nulls only keeps
    its type: CSV cannot write Spark's VOID); an all-null column of Arrow's null type as string."""
    import pyarrow as pa

    for i, f in enumerate(tbl.schema):
        if pa.types.is_null(f.type):
            tbl = tbl.set_column(i, f.name, pa.nulls(tbl.num_rows, pa.string()))
    return spark.createDataFrame(tbl)


def read_state(spark: SparkSession, out_dir: str, out_local: str | None) -> dict[str, Any]:
    """What the previous run into out_dir recorded ({} when none did)."""
    text = read_text(spark, join(out_dir, STATE_FILE), out_local)
    return json.loads(text) if text else {}


def daily_range(spark: SparkSession, out_dir: str, out_local: str | None) -> DateRange:
    """The daily mode's range: from the last date the previous run of this --out saw (that day
    again: the export may have added rows to it since) to the end; a full run the first time."""
    last = read_state(spark, out_dir, out_local).get("last_date")
    return DateRange(first=last) if last else DateRange()


def _small_partitions(run: Run) -> None:
    """Local runs: what is left after the stage (joins and roll-ups of a few thousand rows) runs
    in one shuffle partition, not 2 x cores: fewer tasks, the same result; the session's value
    is put back when the run ends. A cluster keeps its own (AQE coalesces)."""
    spark = run.spark
    if not is_local_master(spark):
        return
    old = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    run.cleanup.callback(spark.conf.set, "spark.sql.shuffle.partitions", old)


def _mismatches(run: Run, n_mismatch: int) -> tuple[int, Any]:
    """Write the rows that disagree with the bridge (computed with the stage, no second pass) to
    OUT/mismatches/ (executors); return their count and the first MISMATCH_CSV_ROWS of them,
    sorted on the driver, for the report. None: a stale earlier run's rows are removed."""
    mm = run.tables["_mismatches"]
    path = join(run.spec.out_dir, "mismatches")
    if not n_mismatch:
        if run.out_local is not None:
            shutil.rmtree(os.path.join(run.out_local, "mismatches"), ignore_errors=True)
        else:
            mm.limit(0).write.mode("overwrite").parquet(path)
        return 0, None
    mm.write.mode("overwrite").parquet(path)
    head = to_arrow(mm.limit(MISMATCH_CSV_ROWS + 1))  # the count comes with it when it is small
    n = head.num_rows if head.num_rows <= MISMATCH_CSV_ROWS else mm.count()
    return n, sort_table(head.slice(0, MISMATCH_CSV_ROWS), [*T.LEAD_KEY, "arrival"])


def _plain(v: Any) -> Any:
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return v
