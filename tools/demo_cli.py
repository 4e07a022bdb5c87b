"""`leadwire demo`: the click command. The demo itself is a scenario on the testbed
(tools/demo_scenario.py: stages, tools/demo_checks.py: checks, tools/demo_report.py: summary);
`--core` runs the in-process protocol core demonstration (leadwire.cli.core_demo). The Spark child
the demo starts is host code: `python -m leadwire.cli.demo --spark-child EXPORT REPORT`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from leadwire.tools.demo_scenario import Demo, Options, Progress


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
