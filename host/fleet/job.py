"""The fleet job: extract -> transforms -> load, as one Spark plan written by the executors.

Entry points:
* :func:`run_job` - the public function (the CLI, the benchmark and the bridge's end-to-end test
  call it): reads an export (any Hadoop URI), writes tables and the HTML report, returns summary
  numbers.
* ``leadwire fleet --input URI --out URI`` (host/fleet/cli.py) - the same, with an embedded
  local SparkSession.
* ``spark-submit host/fleet/job.py --input URI --out URI`` - the same module on any cluster (a
  click command, :func:`main`). It needs no installed leadwire: when run as a script it loads its
  sibling modules from its own folder. Executors run no Python code of ours (no UDFs), so nothing
  has to be shipped with --py-files; the driver needs pyarrow and matplotlib for the report.

The job by concern: session.py (configuration, a local session), fs.py (paths and the few
filesystem calls), extract.py (reading the export), plan.py (the tables as one plan), stages.py
(one run, stage by stage), this module (run_job and the spark-submit command). Row-scale tables
(channel windows, recoveries, restarts, devices, mismatching rows) are written by the executors
with Spark's DataFrameWriter (the dated ones partitioned by ``date``); only the small tables
come to the driver, which writes them with pyarrow next to the report.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and not __package__:  # spark-submit host/fleet/job.py

    def _bootstrap_package() -> None:
        """Make `leadwire.fleet` importable from this folder when leadwire is not installed."""
        try:
            import leadwire.fleet  # noqa: F401

            return
        except ImportError:
            pass
        import importlib.util
        import types

        here = os.path.dirname(os.path.abspath(__file__))
        root = sys.modules.setdefault("leadwire", types.ModuleType("leadwire"))
        if not hasattr(root, "__path__"):
            root.__path__ = []
        spec = importlib.util.spec_from_file_location(
            "leadwire.fleet", os.path.join(here, "__init__.py"), submodule_search_locations=[here]
        )
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules["leadwire.fleet"] = mod
        spec.loader.exec_module(mod)

    _bootstrap_package()

import contextlib
import re
from typing import Any

import click
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from leadwire.fleet.extract import DAY_US, DateRange, Inputs, bad_input_from, extract
from leadwire.fleet.fs import driver_path, join, local_path, scheme
from leadwire.fleet.options import (
    DEFAULT_LATE_DAYS,
    DEFAULT_LOOKAHEAD_DAYS,
    BadInput,
    check_date,
    date_options,
    resolve_dates,
)
from leadwire.fleet.plan import (
    DATED_TABLES,
    DEFAULT_WINDOW_SECONDS,
    EXECUTOR_TABLES,
    SMALL_TABLES,
    TABLE_ORDER,
    build_tables,
    by_device,
    profile_input,
)
from leadwire.fleet.progress import Progress
from leadwire.fleet.session import (
    DRIVER_MEMORY,
    SMALL_INPUT_BYTES,
    LocalSession,
    apply_conf,
    build_session,
    input_bytes,
    launch_conf,
    local_session,
    small_input_conf,
)
from leadwire.fleet.stages import STAGES, JobSpec, Run, daily_range, run_stages
from leadwire.fleet.webhook import exit_for

__all__ = [
    "DATED_TABLES",
    "DAY_US",
    "DEFAULT_WINDOW_SECONDS",
    "EXECUTOR_TABLES",
    "SMALL_INPUT_BYTES",
    "SMALL_TABLES",
    "STAGES",
    "TABLE_ORDER",
    "BadInput",
    "DateRange",
    "Inputs",
    "JobSpec",
    "LocalSession",
    "Progress",
    "build_session",
    "build_tables",
    "by_device",
    "extract",
    "format_summary",
    "input_bytes",
    "launch_conf",
    "local_session",
    "main",
    "parse_window",
    "profile_input",
    "run_job",
    "small_input_conf",
]


# Over ~100 lines only through its public keyword list and their docstring; the work is the stages'.
def run_job(
    input_dir: str,
    out_dir: str,
    spark: SparkSession | None = None,
    *,
    master: str = "local[*]",
    window_seconds: int = DEFAULT_WINDOW_SECONDS,
    worst_n: int = 10,
    date_from: str | None = None,
    date_to: str | None = None,
    lookback_days: int | None = None,
    lookahead_days: int = DEFAULT_LOOKAHEAD_DAYS,
    daily: bool = False,
    report: bool = True,
    progress: Progress | bool = True,
    shuffle_partitions: int | None = None,
    driver_memory: str = DRIVER_MEMORY,
    webhook: str | None = None,
    incremental: bool = False,
    late_days: int = DEFAULT_LATE_DAYS,
) -> dict[str, Any]:
    """Analyse the export at input_dir, write tables and report to out_dir, return the summary.

    input_dir and out_dir are Hadoop URIs (scheme-less: the default filesystem). date_from /
    date_to bound the rows counted (inclusive dates); lookback_days / lookahead_days bound what is
    read around them (DateRange). daily=True: from the last date of the previous run into the same
    out_dir (daily_range) on. webhook: a URL the
    rollout regression flags are POSTed to (OUT/regressions.json is written either way).
    incremental=True: only the export files no earlier run into out_dir read, lead domains carried
    over (incremental.py).

    Raises BadInput for a missing path, a wrong schema, null keys or empty data. The returned dict
    holds the fleet summary numbers (see docs/fleet.md), plus 'mismatch_rows', 'seconds' and 'out_dir'.
    """
    prog = progress if isinstance(progress, Progress) else Progress(enabled=bool(progress))
    check_date("--from", date_from)
    check_date("--to", date_to)
    if date_from and date_to and date_from > date_to:
        raise BadInput("--from %s is after --to %s" % (date_from, date_to))
    if scheme(input_dir) in (None, "file") and not os.path.isdir(local_path(input_dir)) and spark is None:
        # fail before starting a JVM (a scheme-less path is local in the embedded session)
        raise BadInput("input not found: %s" % input_dir)
    if spark is None:
        spark = SparkSession.getActiveSession()
    with contextlib.ExitStack() as own:  # a session started here is stopped (local_session) on leaving
        if spark is None:
            with prog.stage("start spark (%s)" % master):
                size = input_bytes(input_dir)
                session = local_session(master, size, shuffle_partitions, driver_memory, log=prog.log)
                spark = own.enter_context(session).spark
        own.callback(prog.close)
        apply_conf(spark)
        prog.watch(spark)
        cached: list[DataFrame] = []
        own.callback(lambda: [df.unpersist() for df in cached])

        def keep(df: DataFrame) -> DataFrame:
            cached.append(df.persist(StorageLevel.MEMORY_AND_DISK))
            return df

        parallelism = _parallelism(spark)

        def cut(df: DataFrame) -> DataFrame:
            # computed now, kept on the executors (like a cache, MEMORY_AND_DISK), and the plans
            # built on it start from here. Unlike a cache it is not recomputed if an executor is
            # lost: run with static executors (or dynamic allocation's default
            # cachedExecutorIdleTimeout)
            cp = df.localCheckpoint(eager=True)
            cached.append(cp)
            # a union of parts has the sum of their partitions (5 x shuffle partitions for the
            # stage): what reads it (a few thousand rows) runs in one task per core instead
            return cp.coalesce(parallelism)

        out_local = driver_path(spark, out_dir)
        dates = (
            daily_range(spark, out_dir, out_local)
            if daily
            else DateRange(date_from, date_to, lookback_days, lookahead_days)
        )
        if dates.bounded and DAY_US % (window_seconds * 1_000_000):
            raise BadInput("a date range needs a window that divides a day (got %ds)" % window_seconds)
        spec = JobSpec(
            input_dir,
            out_dir,
            dates,
            window_seconds,
            worst_n,
            report,
            webhook=webhook,
            incremental=incremental,
            late_days=late_days,
        )
        try:
            if incremental:
                from leadwire.fleet.incremental import INCREMENTAL_STAGES

                return run_stages(Run(spark, spec, prog, keep, cut, out_local=out_local), INCREMENTAL_STAGES)
            return run_stages(Run(spark, spec, prog, keep, cut, out_local=out_local))
        except BadInput:
            raise
        except Exception as e:
            bad = bad_input_from(e)
            if bad is not None:
                raise bad from None
            raise


def _parallelism(spark: SparkSession) -> int:
    """How many tasks read a cut result: the session's default parallelism (local: the cores)."""
    value = spark.conf.get("spark.default.parallelism", None)
    if value:
        return int(value)
    from leadwire.fleet.session import master_of

    m = re.fullmatch(r"local\[(\d+|\*)(?:,\d+)?\]", master_of(spark))
    if m:
        return os.cpu_count() or 2 if m.group(1) == "*" else int(m.group(1))
    return int(spark.conf.get("spark.sql.shuffle.partitions", "200") or 200)


def parse_window(text: str) -> int:
    """'90s', '15m', '1h', '1d' or plain seconds -> seconds."""
    m = re.fullmatch(r"\s*(\d+)\s*([smhd]?)\s*", text)
    if not m or int(m.group(1)) <= 0:
        raise BadInput("bad window %r: use e.g. 900, 15m, 1h or 1d" % text)
    return int(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def format_summary(s: dict[str, Any]) -> str:
    lines = [
        "fleet: %d devices, %d arrivals (%d unique) in %.1fs"
        % (s["devices"], s["rows"], s["unique"], s["seconds"]),
        "  lost (gaps never filled) %d, loss rate %.4f%%; duplicates %d; late %d (max reorder depth %d)"
        % (s["lost"], 100 * s["loss_rate"], s["duplicates"], s["late"], s["reorder_depth_max"]),
        "  lead: 1=%d 0=%d >1=%d <0=%d" % (s["lead_eq1"], s["lead_eq0"], s["lead_gt1"], s["lead_lt0"]),
        "  restarts %d, overruns %d (%d events lost exactly), recovery phases %d; retransmissions %d"
        % (s["restarts"], s["overruns"], s["events_lost_exact"], s["recovery_phases"], s["retransmissions"]),
        "  consistency: %d lead and %d duplicate-flag mismatches with the bridge"
        % (s["lead_mismatches"], s["dup_flag_mismatches"]),
        "  rollouts: %d regression flag(s) (regressions.json)" % s.get("regressions", 0),
        "  report: %s" % join(s["out_dir"], "index.html"),
    ]
    return "\n".join(lines)


@click.command("job.py", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--input", "input_dir", required=True, help="Export URI (hdfs://, s3a://, file://, or a path).")
@click.option("--out", "out_dir", required=True, help="Output URI: tables, index.html, plots.")
@click.option("--window", default="1h", show_default=True, help="Time window: seconds or 15m, 1h, 1d ...")
@date_options
@click.option("--worst", type=click.IntRange(1), default=10, show_default=True)
@click.option("--no-report", is_flag=True, help="Tables only, no index.html.")
@click.option("--webhook", default=None, help="POST the rollout regression flags (JSON) to this URL.")
@click.option("--fail-on-regression", is_flag=True, help="Exit 3 when a release is flagged as a regression.")
def main(
    input_dir: str,
    out_dir: str,
    window: str,
    date_from: str | None,
    date_to: str | None,
    since: str | None,
    day: str | None,
    daily: bool,
    lookback_days: int | None,
    lookahead_days: int,
    incremental: bool,
    late_days: int,
    worst: int,
    no_report: bool,
    webhook: str | None,
    fail_on_regression: bool,
) -> None:
    """leadwire fleet analytics, the spark-submit entry: uses the active or cluster SparkSession
    (the master comes from spark-submit)."""
    try:
        window_seconds = parse_window(window)
        date_from, date_to = resolve_dates(date_from, date_to, since, day, daily, incremental)
        spark = (
            SparkSession.builder.appName("leadwire-fleet").config("spark.log.level", "ERROR").getOrCreate()
        )
        summary = run_job(
            input_dir,
            out_dir,
            spark,
            window_seconds=window_seconds,
            worst_n=worst,
            date_from=date_from,
            date_to=date_to,
            lookback_days=lookback_days,
            lookahead_days=lookahead_days,
            daily=daily,
            report=not no_report,
            webhook=webhook,
            incremental=incremental,
            late_days=late_days,
        )
    except BadInput as e:
        click.echo("fleet: %s" % e, err=True)
        sys.exit(2)
    click.echo(format_summary(summary))
    flagged = exit_for(summary, fail_on_regression)
    if flagged:
        click.echo("fleet: %s" % flagged[1], err=True)
        sys.exit(flagged[0])


if __name__ == "__main__":
    main()
