"""`leadwire bridge`, `leadwire status`, `leadwire export`."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import click

from .config import BridgeConfig, ConfigError, load


def _load_or_exit(path: str) -> BridgeConfig:
    try:
        return load(path)
    except ConfigError as e:
        click.echo("leadwire: config error: %s" % e, err=True)
        sys.exit(2)


async def run_bridge(cfg: BridgeConfig, duration: float = 0.0, log_format: str | None = None) -> int:
    """Run until SIGTERM/SIGINT (or `duration`); the exit status: 0 a clean stop, 1 a failure while
    running (a store that failed), 2 a resource the run needs (one line on stderr, nothing created)."""
    from . import logs
    from .daemon import Bridge
    from .lock import StoreLocked
    from .preflight import ResourceError

    log = logs.setup(cfg.log_level, fmt=log_format or cfg.log_format)
    bridge = Bridge(cfg, log)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await bridge.start()
    except (ResourceError, StoreLocked) as e:
        click.echo("leadwire: %s" % e, err=True)
        return 2
    except OSError as e:
        logs.event(log, 40, "start_failed", error=str(e))
        await bridge.stop()
        return 1
    if duration:
        loop.call_later(duration, stop.set)
    waiter = loop.create_task(stop.wait())
    stopped = loop.create_task(bridge.stopped.wait())
    await asyncio.wait([waiter, stopped], return_when=asyncio.FIRST_COMPLETED)
    await bridge.stop()
    waiter.cancel()
    return 1 if bridge.failed is not None else 0


@click.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False), help="bridge.toml")
@click.option("--check", is_flag=True, help="Check the configuration and exit.")
@click.option(
    "--duration", type=float, default=0.0, help="Stop after this many seconds (0: run until SIGTERM)."
)
@click.option(
    "--log-format",
    type=click.Choice(["auto", "text", "json"]),
    default=None,
    help="Log lines as text or JSON (default: [bridge] log_format; auto: text on a terminal).",
)
@click.option(
    "--processes",
    type=click.IntRange(1, 64),
    default=1,
    help="Run the config as this many shard processes (bridge.shard i/K each; docs/bridge.md).",
)
def bridge(config_path: str, check: bool, duration: float, log_format: str | None, processes: int) -> None:
    """Run the bridge daemon: poll devices into the durable store (SIGTERM stops it cleanly).

    --check checks the config and what a run needs (the store path writable and free, the metrics
    address, the UDP socket and a route to each UDP device, the serial ports), creating nothing."""
    cfg = _load_or_exit(config_path)
    if check:
        from .preflight import check as preflight

        problems, warnings = preflight(cfg)
        for w in warnings:
            click.echo("leadwire: warning: %s" % w, err=True)
        for p in problems:
            click.echo("leadwire: %s" % p, err=True)
        if problems:
            sys.exit(2)
        click.echo(
            "config ok: %d devices (%d in shard %d/%d)"
            % (len(cfg.devices), len(cfg.my_devices()), *cfg.shard)
        )
        return
    from .rlimit import raise_nofile

    raise_nofile()
    if processes > 1:
        from . import shards

        if cfg.shard != (0, 1):
            click.echo("leadwire: --processes splits an unsharded config; bridge.shard is %d/%d" % cfg.shard,
                       err=True)  # fmt: skip
            sys.exit(2)
        sys.exit(shards.run(cfg, processes, duration, log_format))
    sys.exit(asyncio.run(run_bridge(cfg, duration, log_format)))


def _shown(name: str, default: float, kind: click.ParamType, help_text: str) -> Any:
    """An option whose --help shows its default."""
    return click.option(name, default=default, show_default=True, type=kind, help=help_text)


def _store_path(config_path: str | None, store: str | None) -> str:
    if store:
        return store
    if config_path:
        return _load_or_exit(config_path).store
    click.echo("leadwire: give --config or --store", err=True)
    sys.exit(2)


STATUS_COLUMNS = (
    ("device", "device"),
    ("transport", "transport"),
    ("boot_epoch", "boot epoch"),
    ("boots", "boots"),
    ("n", "offset n"),
    ("events", "events"),
    ("reports", "reports"),
    ("received", "received"),
    ("duplicates", "dups"),
    ("late", "late"),
    ("gaps", "gaps"),
    ("overrun_lost", "overrun lost"),
    ("restarts", "restarts"),
    ("crc_errors", "crc err"),
    ("bad_frames", "bad"),
    ("auth_forged", "forged"),
    ("auth_replayed", "replayed"),
    ("auth_unsigned", "unsigned"),
    ("timeouts", "timeouts"),
    ("round_trips", "round trips"),
    ("last_contact", "last contact"),
)


def ago(us: int | None, now_us: int) -> str:
    """A last contact as people read it: "4s ago", "12m ago", "3h ago", "2d ago", or "never"."""
    if us is None:
        return "never"
    s = max(0, (now_us - us) // 1_000_000)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return "%d%s ago" % (s // size, unit)
    return "%ds ago" % s


def last_contacts(conn: sqlite3.Connection) -> dict[int, int | None]:
    """Each device's last valid answer (us since the epoch), as the bridge stored it (reach.py);
    empty for a store written before the bridge kept it."""
    cols = {r[1] for r in conn.execute("PRAGMA table_info(devices)")}
    if "last_seen_us" not in cols:
        return {}
    return dict(conn.execute("SELECT dev, last_seen_us FROM devices").fetchall())


def status_rows(store_path: str) -> list[dict[str, Any]]:
    from .client import CHANNEL_COUNTERS
    from .store_reader import StoreReader

    with StoreReader(store_path) as r:
        ev = r.events_per_device()
        rp = r.reports_per_device()
        seen = last_contacts(r.conn)
        out = []
        for d in sorted(r.devices(), key=lambda d: d.device_id):
            c = d.counters
            row: dict[str, Any] = {
                "device": d.device_id,
                "transport": d.transport,
                "boot_epoch": "%08x" % d.boot_epoch if d.boot_epoch is not None else "-",
                "boots": d.boots,
                "n": d.n,
                "events": ev.get(d.dev, 0),
                "reports": rp.get(d.dev, 0),
                "last_contact_us": seen.get(d.dev),
            }
            for name in CHANNEL_COUNTERS:
                row[name] = sum(int(ch.get(name, 0)) for ch in c.get("channels", {}).values())
            row.update({k: int(v) for k, v in c.get("device", {}).items()})
            out.append(row)
        return out


@click.command()
@click.option(
    "--config", "config_path", type=click.Path(dir_okay=False), help="bridge.toml (for the store path)"
)
@click.option("--store", type=click.Path(dir_okay=False), help="the store file (instead of --config)")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per device.")
def status(config_path: str | None, store: str | None, as_json: bool) -> None:
    """Show devices and counters from the store (works while the bridge runs)."""
    path = _store_path(config_path, store)
    if not Path(path).exists():
        click.echo("leadwire: store %s not found" % path, err=True)
        sys.exit(2)
    rows = status_rows(path)
    if as_json:
        for r in rows:
            click.echo(json.dumps(r))
        return
    now = time.time_ns() // 1000
    for r in rows:
        r["last_contact"] = ago(r["last_contact_us"], now)
    heads = [h for _, h in STATUS_COLUMNS]
    cells = [[str(r.get(k, 0)) for k, _ in STATUS_COLUMNS] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(heads)]
    click.echo(
        "  ".join(
            h.ljust(w) if i < 3 else h.rjust(w) for i, (h, w) in enumerate(zip(heads, widths, strict=True))
        )
    )
    for c in cells:
        click.echo(
            "  ".join(
                v.ljust(w) if i < 3 else v.rjust(w) for i, (v, w) in enumerate(zip(c, widths, strict=True))
            )
        )
    click.echo("%d devices" % len(rows))


@click.command()
@click.option(
    "--config", "config_path", type=click.Path(dir_okay=False), help="bridge.toml (for the store path)"
)
@click.option("--store", type=click.Path(dir_okay=False), help="the store file (instead of --config)")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="export directory")
@click.option("--since", default=None, help="only partitions from this date (YYYY-MM-DD or ISO time, UTC)")
@_shown("--compact-files", 8, click.IntRange(min=1),
        "merge a day's small files of this bridge when they would exceed this many")  # fmt: skip
@_shown("--retain-days", 7.0, click.FloatRange(min=0), "days run manifests and replaced day versions "
        "are kept (run an incremental fleet job more often)")  # fmt: skip
@click.option(
    "--repair", is_flag=True, help="clean up after a crashed export or a damaged manifest; exports nothing"
)
def export(
    config_path: str | None,
    store: str | None,
    out: str,
    since: str | None,
    compact_files: int,
    retain_days: float,
    repair: bool,
) -> None:
    """Export the store as Hive-partitioned Parquet (arrivals, losses, boots); safe to repeat."""
    from .export import export as do_export
    from .export import parse_since
    from .export_manifest import repair as do_repair
    from .export_publish import ExportError

    if repair:
        for line in do_repair(Path(out)):
            click.echo(line)
        return
    path = _store_path(config_path, store)
    if since:
        try:
            parse_since(since)
        except ValueError as e:
            click.echo("leadwire: %s" % e, err=True)
            sys.exit(2)
    if not Path(path).exists():
        click.echo("leadwire: store %s not found" % path, err=True)
        sys.exit(2)
    try:
        counts = do_export(path, out, since, compact_files=compact_files, retain_days=retain_days)
    except ExportError as e:
        click.echo("leadwire: %s" % e, err=True)
        sys.exit(1)
    click.echo(json.dumps({"out": str(out), **counts}))
