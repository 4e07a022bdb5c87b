"""The `leadwire` command: one entry point, a table of subcommands loaded on use.

Each subcommand lives with the code it drives; COMMANDS maps its name to "module:attribute" of a
click command, so `leadwire --help` stays fast and does not import Spark or asyncio stacks.
"""

from __future__ import annotations

import importlib
import os
import sqlite3
import sys
from typing import Any, NoReturn

import click

from leadwire import __version__

COMMANDS: dict[str, tuple[str, str]] = {
    # name: (module:attribute, one-line help shown by `leadwire --help`)
    "demo": ("leadwire.tools.demo_cli:demo", "Run the system end to end and print what it measured."),
    "fleet": ("leadwire.fleet.cli:fleet", "Analyse exported fleet telemetry with Spark."),
    "board": ("leadwire.tools.board:board", "Run a virtual board (the firmware on MicroPython)."),
    "flash": ("leadwire.tools.flash:flash", "Compile and copy the firmware and core to a board."),
    "bridge": ("leadwire.bridge.cli:bridge", "Run the bridge daemon: poll devices into the durable store."),
    "status": ("leadwire.bridge.cli:status", "Show devices and counters from the store."),
    "events": ("leadwire.cli.events:events", "Show stored events as a table or JSON lines; --follow."),
    "export": ("leadwire.bridge.cli:export", "Export the store as Parquet for the fleet job."),
    "netem": ("leadwire.tools.netem:netem", "Impair the bridge-board link (loss, dup, reorder, corruption)."),
    "chaos": ("leadwire.tools.chaos:chaos", "Kill boards and the bridge under netem; check every event."),
}


# The optional parts of the install: a module of an extra that is not installed -> the extra
# (pyproject.toml, [project.optional-dependencies]). The base install runs bridge, status, events,
# export and flash.
EXTRAS: dict[str, str] = {
    "pyspark": "fleet",
    "pandas": "fleet",
    "matplotlib": "fleet",
    "numpy": "fleet",
    "grpc": "fleet",
    "duckdb": "dev",
    "pytest": "dev",
    "hypothesis": "dev",
}


def install_hint(module: str) -> str:
    """The one pip line that brings `module` (a top-level module name), for "missing" messages."""
    extra = EXTRAS.get(module.partition(".")[0])
    return "pip install 'leadwire[%s]'" % extra if extra else "pip install --upgrade leadwire"


def _one_line(text: str) -> str:
    return " ".join(text.split())[:500]


class LazyGroup(click.Group):
    """The command table, and one rule for every command's errors: bad input (a usage error, a
    missing or unreadable file, a store that is not one, a port that cannot be opened, a device that
    cannot be reached) is one line on stderr and exit 2; anything else is a bug: one line and exit 1
    (LEADWIRE_DEBUG=1 shows the traceback)."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:  # type: ignore[override]
        if not standalone_mode or os.environ.get("LEADWIRE_DEBUG"):
            return super().main(*args, standalone_mode=standalone_mode, **kwargs)
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)
        except click.exceptions.Abort:
            click.echo("leadwire: interrupted", err=True)
            sys.exit(130)
        except click.ClickException as e:
            where = e.ctx.command_path if isinstance(e, click.UsageError) and e.ctx else "leadwire"
            hint = " (%s --help)" % where if isinstance(e, click.UsageError) else ""
            click.echo("%s: error: %s%s" % (where, _one_line(e.format_message()), hint), err=True)
            sys.exit(2)
        except ModuleNotFoundError as e:  # an optional part of the install is missing: say which
            name = e.name or "?"
            if name.partition(".")[0] == "leadwire":  # a module of ours: a broken install or a bug
                self._internal(e)
            msg = "%s: error: this command needs %s, which is not installed: %s"
            click.echo(msg % (self._invoked(), name.partition(".")[0], install_hint(name)), err=True)
            sys.exit(2)
        except OSError as e:
            click.echo("%s: error: %s" % (self._invoked(), _one_line(str(e) or type(e).__name__)), err=True)
            sys.exit(2)
        except sqlite3.DatabaseError as e:
            msg = "%s: error: store: %s"
            click.echo(msg % (self._invoked(), _one_line(str(e))), err=True)
            sys.exit(2)
        except Exception as e:
            self._internal(e)
        sys.exit(rv if isinstance(rv, int) else 0)

    def _internal(self, e: Exception) -> NoReturn:
        """A bug: say it in one line, keep the exit code apart from bad input."""
        msg = "%s: internal error: %s: %s (LEADWIRE_DEBUG=1 shows the traceback)"
        click.echo(msg % (self._invoked(), type(e).__name__, _one_line(str(e))), err=True)
        sys.exit(1)

    @staticmethod
    def _invoked() -> str:
        words = [w for w in sys.argv[1:3] if not w.startswith("-")]
        if words and words[0] in COMMANDS:
            return " ".join(["leadwire", *words[: 2 if words[0] == "netem" else 1]])
        return "leadwire"

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attr = target[0].split(":")
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="leadwire")
def main() -> None:
    """leadwire: move device events to a host with every loss, duplicate, reorder and restart counted."""


if __name__ == "__main__":  # pragma: no cover
    main()
