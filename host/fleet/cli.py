"""`leadwire fleet`: run the fleet analytics job on an export directory (Spark imported on use)."""

from __future__ import annotations

import datetime
import sys
from pathlib import Path

import click


def _check_input(input_dir: str, out_dir: str, date_from: str | None, date_to: str | None) -> str | None:
    """What is wrong with the arguments, found before Spark starts (it takes 10-60 s), or None."""
    for name, d in (("--from", date_from), ("--to", date_to)):
        if d is not None:
            try:
                datetime.date.fromisoformat(d)
            except ValueError:
                return "%s: a date is YYYY-MM-DD, got %r" % (name, d)
            if len(d) != 10:
                return "%s: a date is YYYY-MM-DD, got %r" % (name, d)
    if date_from and date_to and date_from > date_to:
        return "--from %s is after --to %s" % (date_from, date_to)
    src = Path(input_dir)
    if not src.is_dir():
        return "input not found: %s" % input_dir
    if not (src / "arrivals").is_dir():
        return "%s: not an export (no arrivals/ in it; `leadwire export --out DIR` writes one)" % input_dir
    if Path(out_dir).exists() and not Path(out_dir).is_dir():
        return "--out %s is a file" % out_dir
    return None


@click.command("fleet")
@click.option(
    "--input", "input_dir", required=True, help="Export directory (DIR/arrivals, DIR/losses, DIR/boots)."
)
@click.option("--out", "out_dir", required=True, help="Output directory: tables, index.html, plots.")
@click.option(
    "--master", default="local[*]", show_default=True, help="Spark master for the embedded session."
)
@click.option("--window", default="1h", show_default=True, help="Time window: seconds or 15m, 1h, 1d ...")
@click.option("--from", "date_from", default=None, help="First date partition to read (YYYY-MM-DD).")
@click.option("--to", "date_to", default=None, help="Last date partition to read (YYYY-MM-DD).")
@click.option(
    "--worst", type=click.IntRange(1), default=10, show_default=True, help="How many worst devices to list."
)
@click.option(
    "--shuffle-partitions", type=int, default=None, help="spark.sql.shuffle.partitions (default 2 x cores)."
)
@click.option("--driver-memory", default="4g", show_default=True)
@click.option("--no-report", is_flag=True, help="Tables only, no index.html.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
def fleet(
    input_dir: str,
    out_dir: str,
    master: str,
    window: str,
    date_from: str | None,
    date_to: str | None,
    worst: int,
    shuffle_partitions: int | None,
    driver_memory: str,
    no_report: bool,
    quiet: bool,
) -> None:
    """Analyse exported fleet telemetry with Spark: leads, loss, duplicates, reordering, restarts,
    overruns, recoveries, latency; tables (Parquet + CSV) and an HTML report in --out."""
    try:
        from leadwire.fleet.job import BadInput, format_summary, parse_window, run_job
    except ImportError as e:  # pragma: no cover - pyspark missing
        click.echo("leadwire fleet: cannot import Spark (%s); install pyspark>=4" % e, err=True)
        sys.exit(2)
    try:
        window_seconds = parse_window(window)
    except BadInput as e:
        click.echo("leadwire fleet: %s" % e, err=True)
        sys.exit(2)
    wrong = _check_input(input_dir, out_dir, date_from, date_to)
    if wrong:
        click.echo("leadwire fleet: %s" % wrong, err=True)
        sys.exit(2)
    try:
        summary = run_job(
            input_dir,
            out_dir,
            master=master,
            window_seconds=window_seconds,
            worst_n=worst,
            date_from=date_from,
            date_to=date_to,
            report=not no_report,
            progress=not quiet,
            shuffle_partitions=shuffle_partitions,
            driver_memory=driver_memory,
        )
    except BadInput as e:
        click.echo("leadwire fleet: %s" % e, err=True)
        sys.exit(2)
    click.echo(format_summary(summary))
