"""`leadwire flash`: compile the firmware and the core for a board, copy them with mpremote, write
the device config, reset.

    leadwire flash --port /dev/ttyACM0 --board rp2 --config pico.json
    leadwire flash --port /dev/ttyUSB0 --board esp32 --dry-run

Boards: esp32 (mpy-cross -march=xtensawin), rp2 (armv6m), unix (x64: a virtual board started with
`leadwire board --transport repl`, which mpremote reaches with `resume`, i.e. without a soft reset).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import click

from leadwire.tools.firmware_build import MARCH, build, plan, tool


def mpremote_steps(port: str, kind: str, stage: Path, config: Path | None) -> list[list[str]]:
    """The mpremote command lines, one per step (each prints what it copies)."""
    base = [tool("mpremote"), "connect", port]
    if kind == "unix":
        base.append("resume")  # the unix port has no soft reset: keep the running interpreter
    steps = []
    items = plan(kind)
    dirs = sorted({it.dest.rsplit("/", 1)[0] for it in items if "/" in it.dest})
    # `mkdir` fails on an existing directory: make them with one exec that ignores that
    mk = "import os\nfor d in %r:\n    try:\n        os.mkdir(d)\n    except OSError:\n        pass" % (dirs,)
    steps.append([*base, "exec", mk])
    cp = [*base]
    for it in items:
        cp += ["fs", "cp", str(stage / it.dest), ":" + it.dest, "+"]
    if config is not None:
        cp += ["fs", "cp", str(config), ":config.json", "+"]
    steps.append(cp[:-1])
    if kind == "unix":
        # "reset" of a virtual board: the interpreter exits (power off); `leadwire board --dir DIR
        # --no-build` powers it on from the flashed files
        steps.append([*base, "exec", "import sys\nsys.exit(0)"])
    else:
        steps.append([*base, "reset"])
    return steps


def check_config(config: Path) -> None:
    try:
        d = json.loads(config.read_text())
    except (OSError, ValueError) as e:
        raise click.ClickException("config %s: %s" % (config, e)) from e
    if not isinstance(d, dict):
        raise click.ClickException("config %s: not a JSON object" % config)


@click.command()
@click.option("--port", required=True, help="Serial port of the board (a virtual board's pty for unix).")
@click.option("--board", "kind", type=click.Choice(sorted(MARCH)), required=True, help="Board kind.")
@click.option("--config", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="Device config.")
@click.option("--dry-run", is_flag=True, help="Print the plan; touch nothing.")
def flash(port: str, kind: str, config: Path | None, dry_run: bool) -> None:
    """Compile firmware + core with mpy-cross, copy them to the board, write config.json, reset."""
    if config is not None:
        check_config(config)
    with tempfile.TemporaryDirectory(prefix="leadwire-flash-") as tmp:
        stage = Path(tmp)
        items = plan(kind)
        click.echo("plan for %s on %s (mpy-cross -march=%s):" % (kind, port, MARCH[kind]))
        for it in items:
            how = "compile" if it.compile else "copy"
            click.echo("  %-8s %s -> :%s" % (how, it.src.relative_to(it.src.parents[1]), it.dest))
        if config is not None:
            click.echo("  config   %s -> :config.json" % config)
        steps = mpremote_steps(port, kind, stage, config)
        if dry_run:
            for s in steps:
                click.echo("  $ " + shlex.join(s).replace("\n", "\\n"))
            return
        build(kind, stage)
        total = sum((stage / it.dest).stat().st_size for it in items)
        click.echo("compiled %d files, %d bytes" % (len(items), total))
        for i, s in enumerate(steps, 1):
            click.echo("[%d/%d] %s" % (i, len(steps), ("make directories", "copy files", "reset")[i - 1]))
            r = subprocess.run(s, timeout=300)
            if r.returncode != 0 and not (kind == "unix" and i == len(steps)):
                # the unix board's "reset" ends its interpreter: mpremote then reports the lost port
                raise click.ClickException("mpremote failed (exit %d): %s" % (r.returncode, shlex.join(s)))
        click.echo("flashed %s: %d files%s" % (port, len(items), " + config.json" if config else ""))
        sys.stdout.flush()
