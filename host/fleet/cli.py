"""`leadwire fleet`: run the fleet analytics job on an export directory (Spark imported on use)."""

from __future__ import annotations

import sys

import click


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
@click.option("--worst", default=10, show_default=True, help="How many worst devices to list.")
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
        summary = run_job(
            input_dir,
            out_dir,
            master=master,
            window_seconds=parse_window(window),
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
