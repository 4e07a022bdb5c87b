"""`leadwire demo`: the click command. The demo itself is a scenario on the testbed
(tools/demo_scenario.py: stages, tools/demo_checks.py: checks, tools/demo_report.py: summary);
`--core` runs the in-process protocol core demonstration (core_demo.py). Also the Spark child the
demo starts (`python -m leadwire.cli.demo --spark-child EXPORT REPORT`)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from leadwire.tools.demo_scenario import MARKER_ENV, Demo, Options, Progress

__all__ = ["MARKER_ENV", "Demo", "Options", "Progress", "demo", "spark_child"]


@click.command()
@click.option(
    "--boards",
    default=4,
    show_default=True,
    type=click.IntRange(0, 16),
    help="Virtual boards (MicroPython unix port), alternately UDP and serial.",
)
@click.option(
    "--simulated",
    default=300,
    show_default=True,
    type=click.IntRange(0, 5000),
    help="Simulated devices (light simulator, UDP).",
)
@click.option(
    "--seconds",
    default=60.0,
    show_default=True,
    type=click.FloatRange(4, 3600),
    help="How long the devices generate events.",
)
@click.option(
    "--out",
    "out_dir",
    default="demo-out",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Output directory (store, export, report, logs).",
)
@click.option("--seed", default=1, show_default=True, help="Seed for netem and the simulators.")
@click.option("--no-spark", is_flag=True, help="Skip the Spark fleet job (quick runs).")
@click.option("--no-restart", is_flag=True, help="Do not restart a board midway.")
@click.option("--core", is_flag=True, help="Instead: the in-process protocol core demonstration.")
@click.option(
    "--events",
    default=5000,
    show_default=True,
    type=click.IntRange(10, 10_000_000),
    help="With --core: events generated.",
)
@click.option(
    "--capacity", default=64, show_default=True, type=click.IntRange(2, 65535), help="With --core: ring size."
)
def demo(
    boards: int,
    simulated: int,
    seconds: float,
    out_dir: str,
    seed: int,
    no_spark: bool,
    no_restart: bool,
    core: bool,
    events: int,
    capacity: int,
) -> None:
    """Run the whole system end to end: virtual boards and simulated devices behind netem, the
    bridge, export, the Spark fleet job; check every count against ground truth; print a summary."""
    if core:
        from leadwire.cli import core_demo

        sys.exit(core_demo.run(events, capacity, seed))
    if boards + simulated == 0:
        raise click.UsageError("nothing to run: give --boards or --simulated")
    opts = Options(boards, simulated, seconds, Path(out_dir), seed, not no_spark, not no_restart)
    sys.exit(Demo(opts, Progress(), sys.stdout).run())


def spark_child(argv: list[str]) -> int:
    """`python -m leadwire.cli.demo --spark-child EXPORT REPORT`: the fleet job (`run_job`) in a
    local[2] session sized for small data: adaptive query execution off and 2 shuffle partitions,
    as the fleet tests' session (`leadwire fleet`'s default session, with AQE on, takes 2-3 x as
    long on a demo-sized export: docs/operations.md). A subprocess, so the demo can stop its JVM."""
    if len(argv) != 3 or argv[0] != "--spark-child":
        print("usage: python -m leadwire.cli.demo --spark-child EXPORT_DIR REPORT_DIR", file=sys.stderr)
        return 2
    from leadwire.fleet.job import BadInput, Progress, format_summary, input_bytes, local_session, run_job

    prog = Progress()
    starting = prog.stage("start spark (local[2], adaptive execution off, 2 shuffle partitions)")
    size, extra = input_bytes(argv[1]), {"spark.default.parallelism": "2"}
    with local_session(
        "local[2]", size, 2, "1g", "leadwire-demo", False, extra, starting=starting, log=prog.log
    ) as session:
        try:
            summary = run_job(argv[1], argv[2], session.spark, window_seconds=10, progress=prog)
        except BadInput as e:
            print("fleet: %s" % e, file=sys.stderr)
            return 2
    print(format_summary(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(spark_child(sys.argv[1:]))
