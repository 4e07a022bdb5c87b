"""`leadwire flash`: compile the firmware and the core for a board, copy them with mpremote, write
the device config, reset.

    leadwire flash --port /dev/ttyACM0 --board rp2 --config pico.json
    leadwire flash --port /dev/ttyUSB0 --board esp32 --dry-run --new-key

Authentication (issue 6): the board's config.json gets the choice, one of
  --key HEX    that key (32..128 hex digits)
  --new-key    a random 32-byte key; the bridge config line (`key = "..."`) is printed once to
               stdout: it is the operator's secret, shown nowhere else
  --no-auth    "auth": false (explicitly off)
one of them is required unless --config already has "key" or "auth". The key is never printed
otherwise (the plan shows `config.json (key set)`), and the config with it goes to the board from
a private temporary file (the --config file is left as it is). Without --config, the board's
config.json becomes the auth choice alone (every other setting at its default).

Boards: esp32 (mpy-cross -march=xtensawin), rp2 (armv6m), unix (x64: a virtual board started with
`leadwire board --transport repl`, which mpremote reaches with `resume`, i.e. without a soft reset).
"""

from __future__ import annotations

import json
import os
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


def check_config(config: Path) -> dict:
    try:
        d = json.loads(config.read_text())
    except (OSError, ValueError) as e:
        raise click.ClickException("config %s: %s" % (config, e)) from e
    if not isinstance(d, dict):
        raise click.ClickException("config %s: not a JSON object" % config)
    return d


def auth_config(d: dict, key: str | None, new_key: bool, no_auth: bool) -> tuple[dict, str | None]:
    """The device config `d` with the auth choice applied -> (config, the new key's hex if
    --new-key). ClickException (never naming a key) when the choice is missing, twice, or bad."""
    from leadwire import auth

    if (key is not None) + new_key + no_auth > 1:
        raise click.ClickException("give one of --key, --new-key, --no-auth")
    out = dict(d)
    if no_auth:
        out.pop("key", None)
        out["auth"] = False
        return out, None
    if new_key:
        key = os.urandom(32).hex()
    if key is not None:
        try:
            auth.parse_key(key)
        except ValueError as e:
            raise click.ClickException("--key: %s" % e) from None
        out.pop("auth", None)
        out["key"] = key.strip().lower()
        return out, key if new_key else None
    if out.get("auth") is False:
        return out, None
    k = out.get("key")
    if k is None:
        raise click.ClickException(
            'authentication: give --key HEX, --new-key or --no-auth (or "key" / "auth": false in --config)'
        )
    try:
        auth.parse_key(k)
    except ValueError as e:
        raise click.ClickException("config key: %s" % e) from None
    return out, None


@click.command()
@click.option("--port", required=True, help="Serial port of the board (a virtual board's pty for unix).")
@click.option("--board", "kind", type=click.Choice(sorted(MARCH)), required=True, help="Board kind.")
@click.option("--config", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="Device config.")
@click.option("--dry-run", is_flag=True, help="Print the plan; touch nothing.")
@click.option("--key", metavar="HEX", help="Auth key for the board (32..128 hex digits).")
@click.option("--new-key", is_flag=True, help="A new random auth key; prints the bridge config line once.")
@click.option("--no-auth", is_flag=True, help='Authentication off ("auth": false in config.json).')
def flash(
    port: str, kind: str, config: Path | None, dry_run: bool, key: str | None, new_key: bool, no_auth: bool
) -> None:
    """Compile firmware + core with mpy-cross, copy them to the board, write config.json, reset."""
    d = check_config(config) if config is not None else {}
    dev, shown = auth_config(d, key, new_key, no_auth)
    with tempfile.TemporaryDirectory(prefix="leadwire-flash-") as tmp:
        stage = Path(tmp)
        given = config
        if config is None or dev != d:
            # the config as it goes to the board (with the key: only in this private directory)
            config = stage / "config.json"
            fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(dev, f, indent=1)
        items = plan(kind)
        click.echo("plan for %s on %s (mpy-cross -march=%s):" % (kind, port, MARCH[kind]))
        for it in items:
            how = "compile" if it.compile else "copy"
            click.echo("  %-8s %s -> :%s" % (how, it.src.relative_to(it.src.parents[1]), it.dest))
        what = ("new key" if new_key else "key set") if dev.get("key") else "auth off"
        click.echo(
            "  config   %s -> :config.json (%s)"
            % (given if config == given else "(with the auth choice)", what)
        )
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
            # mpremote's output (both streams) goes to stdout as progress; a failure is one line on
            # stderr naming the port, the step and mpremote's last words
            said = ""
            with subprocess.Popen(s, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
                assert proc.stdout is not None
                for line in proc.stdout:
                    click.echo(line, nl=False)
                    said = line.strip() or said
                code = proc.wait(timeout=300)
            if code != 0 and not (kind == "unix" and i == len(steps)):
                # the unix board's "reset" ends its interpreter: mpremote then reports the lost port
                raise click.ClickException(
                    "cannot reach the board on %s (mpremote, step %d of %d, exit %d): %s"
                    % (port, i, len(steps), code, said or "no output")
                )
        click.echo("flashed %s: %d files + config.json" % (port, len(items)))
        if shown is not None:
            # the operator's secret, shown once: the line for this device in the bridge config
            click.echo("bridge config for this device ([[device]]):")
            click.echo('key = "%s"' % shown)
        sys.stdout.flush()
