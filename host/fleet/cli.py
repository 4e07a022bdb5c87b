"""`leadwire fleet`: run the fleet analytics job on an export directory (Spark imported on use)."""

from __future__ import annotations

import re
import socket
import sys
from pathlib import Path
from typing import Any

import click

from leadwire.fleet.options import BadInput, check_date, date_options, resolve_dates


def _local_path(path: str) -> Path | None:
    """The OS path of a file: URI or a path without a scheme (the embedded session's default
    filesystem is the local disk); None for other schemes (hdfs://, s3a://, ...: Spark checks them)."""
    m = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*):", path)
    if m is None:
        return Path(path)
    if m.group(1).lower() != "file":
        return None
    return Path(re.sub(r"^file:(//)?", "", path))


def _check_input(input_dir: str, out_dir: str) -> str | None:
    """What is wrong with local paths, found before Spark starts (it takes 10-60 s), or None."""
    src = _local_path(input_dir)
    if src is not None:
        if not src.is_dir():
            return "input not found: %s" % input_dir
        if not (src / "arrivals").is_dir():
            return (
                "%s: not an export (no arrivals/ in it; `leadwire export --out DIR` writes one)" % input_dir
            )
    dst = _local_path(out_dir)
    if dst is not None and dst.exists() and not dst.is_dir():
        return "--out %s is a file" % out_dir
    return None


CONNECT_PORT = 15002  # Spark Connect's default
CONNECT_REACH_S = 5.0


def _connect_address(url: str) -> tuple[str, int]:
    """sc://HOST[:PORT][/;params] -> (HOST, PORT); BadInput for anything else."""
    m = re.fullmatch(r"sc://(\[[0-9a-fA-F:]+\]|[^/:;\[\]]+)(?::(\d+))?/?(;.*)?", url)
    if m is None:
        raise BadInput("--remote %s: not a Spark Connect URL (sc://HOST[:PORT])" % url)
    return m.group(1).strip("[]"), int(m.group(2) or CONNECT_PORT)


def _remote_session(url: str) -> Any:
    """A Spark Connect session to `url`, once its server answers a TCP connect: pyspark's client
    retries an unreachable server for minutes before it says so."""
    host, port = _connect_address(url)
    try:
        socket.create_connection((host, port), CONNECT_REACH_S).close()
    except OSError as e:
        raise BadInput("no Spark Connect server at %s (%s)" % (url, e.strerror or e)) from None
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(url).getOrCreate()


@click.command("fleet")
@click.option(
    "--input",
    "input_dir",
    required=True,
    help="Export (DIR/arrivals, DIR/losses, DIR/boots): a path or a Hadoop URI (hdfs://, s3a://, file://).",
)
@click.option("--out", "out_dir", required=True, help="Output path or URI: tables, index.html, plots.")
@click.option(
    "--master", default="local[*]", show_default=True, help="Spark master for the embedded session."
)
@click.option(
    "--remote",
    envvar="SPARK_REMOTE",
    default=None,
    help="Run through this Spark Connect server (sc://HOST[:PORT]; default: $SPARK_REMOTE) instead of "
    "an embedded session: a server that stays up keeps its JVM warm between daily runs. "
    "--master, --driver-memory and --shuffle-partitions are then the server's.",
)
@click.option("--window", default="1h", show_default=True, help="Time window: seconds or 15m, 1h, 1d ...")
@date_options
@click.option(
    "--worst", type=click.IntRange(1), default=10, show_default=True, help="How many worst devices to list."
)
@click.option(
    "--shuffle-partitions", type=int, default=None, help="spark.sql.shuffle.partitions (default 2 x cores)."
)
@click.option("--driver-memory", default="4g", show_default=True)
@click.option("--no-report", is_flag=True, help="Tables only, no index.html.")
@click.option("--webhook", default=None, help="POST the rollout regression flags (JSON) to this URL.")
@click.option(
    "--fail-on-regression",
    is_flag=True,
    help="Exit 3 when a release is flagged as a regression (OUT/regressions.json has them).",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
def fleet(
    input_dir: str,
    out_dir: str,
    master: str,
    remote: str | None,
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
    shuffle_partitions: int | None,
    driver_memory: str,
    no_report: bool,
    webhook: str | None,
    fail_on_regression: bool,
    quiet: bool,
) -> None:
    """Analyse exported fleet telemetry with Spark: leads, loss, duplicates, reordering, restarts,
    overruns, recoveries, latency; tables (Parquet + CSV) and an HTML report in --out."""
    # without the fleet extra: ModuleNotFoundError, which `leadwire` says as the pip line to run
    from leadwire.fleet.job import format_summary, parse_window, run_job

    try:
        window_seconds = parse_window(window)
        date_from, date_to = resolve_dates(date_from, date_to, since, day, daily, incremental)
        for name, d in (("--from", date_from), ("--to", date_to)):
            check_date(name, d)
    except BadInput as e:
        click.echo("leadwire fleet: %s" % e, err=True)
        sys.exit(2)
    wrong = None if remote else _check_input(input_dir, out_dir)  # remote: the server's disk
    if wrong:
        click.echo("leadwire fleet: %s" % wrong, err=True)
        sys.exit(2)
    spark = None
    try:
        spark = _remote_session(remote) if remote else None
        summary = run_job(
            input_dir,
            out_dir,
            spark,
            master=master,
            window_seconds=window_seconds,
            worst_n=worst,
            date_from=date_from,
            date_to=date_to,
            lookback_days=lookback_days,
            lookahead_days=lookahead_days,
            daily=daily,
            report=not no_report,
            incremental=incremental,
            late_days=late_days,
            progress=not quiet,
            shuffle_partitions=shuffle_partitions,
            driver_memory=driver_memory,
            webhook=webhook,
        )
    except BadInput as e:
        click.echo("leadwire fleet: %s" % e, err=True)
        sys.exit(2)
    finally:
        if remote and spark is not None:
            spark.stop()  # this client's session; the server goes on
    click.echo(format_summary(summary))
    from leadwire.fleet.webhook import exit_for

    flagged = exit_for(summary, fail_on_regression)
    if flagged:
        click.echo("leadwire fleet: %s" % flagged[1], err=True)
        sys.exit(flagged[0])
