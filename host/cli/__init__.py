"""The `leadwire` command: one entry point, a table of subcommands loaded on use.

Each subcommand lives with the code it drives; COMMANDS maps its name to "module:attribute" of a
click command, so `leadwire --help` stays fast and does not import Spark or asyncio stacks.
"""

from __future__ import annotations

import importlib

import click

from leadwire import __version__

COMMANDS: dict[str, tuple[str, str]] = {
    # name: (module:attribute, one-line help shown by `leadwire --help`)
    "demo": ("leadwire.cli.demo:demo", "Run the system end to end and print what it measured."),
    "fleet": ("leadwire.fleet.cli:fleet", "Analyse exported fleet telemetry with Spark."),
    "board": ("leadwire.tools.board:board", "Run a virtual board (the firmware on MicroPython)."),
    "flash": ("leadwire.tools.flash:flash", "Compile and copy the firmware and core to a board."),
    "bridge": ("leadwire.bridge.cli:bridge", "Run the bridge daemon: poll devices into the durable store."),
    "status": ("leadwire.bridge.cli:status", "Show devices and counters from the store."),
    "export": ("leadwire.bridge.cli:export", "Export the store as Parquet for the fleet job."),
    "netem": ("leadwire.tools.netem:netem", "Impair the bridge-board link (loss, dup, reorder, corruption)."),
}


class LazyGroup(click.Group):
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
