"""`leadwire events`: the stored events, as a table or JSON lines, filtered, optionally followed.

    leadwire events --store leadwire.db --device pico-1 --channel 1 --since 10m
    leadwire events --config bridge.toml --json --follow

Every arrival of an event is one row, in the order the bridge committed them (the arrival id): the
first arrival with its payload, a later copy (a duplicate or late retransmission) flagged
``dup`` with no payload. Reads the store read-only (works while the bridge runs); ``--follow``
prints new rows as the bridge commits them until interrupted. Anything beyond these filters is a
query on the store (docs/events.md, "SQL on the store", "DuckDB (or Spark) on the export").
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from pathlib import Path

import click

from leadwire.bridge.cli import _store_path
from leadwire.bridge.store_reader import EventArrival, StoreReader, parse_time

HEAD = ("id", "received (UTC)", "device", "boot", "ch", "offset", "lead", "dup", "payload")
PAYLOAD_SHOWN = 16  # bytes of payload shown (hex) in the table; --json has all of it
PAGE = 5000  # rows read per query


def _when(us: int) -> str:
    t = dt.datetime.fromtimestamp(us / 1e6, dt.UTC)
    return t.strftime("%Y-%m-%d %H:%M:%S.") + "%03d" % (t.microsecond // 1000)


def _cells(e: EventArrival) -> list[str]:
    if e.data is None:
        shown = "-"
    else:
        more = len(e.data) > PAYLOAD_SHOWN
        shown = e.data[:PAYLOAD_SHOWN].hex() + ("..(%d B)" % len(e.data) if more else "")
    return [
        str(e.id), _when(e.rx_us), e.device_id, "%08x" % e.boot_epoch, str(e.channel), str(e.offset),
        str(e.lead), "dup" if e.duplicate else "", shown,
    ]  # fmt: skip


def _table(rows: list[list[str]], widths: list[int]) -> None:
    for r in rows:
        click.echo(
            "  ".join(
                c.ljust(w) if i in (1, 2, 7) else c.rjust(w)
                for i, (c, w) in enumerate(zip(r[:-1], widths, strict=True))
            )
            + "  "
            + r[-1]
        )


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="bridge.toml (its store)")
@click.option("--store", type=click.Path(dir_okay=False), help="the store file (instead of --config)")
@click.option("--device", "devices", multiple=True, help="Only this device id (repeatable).")
@click.option("--channel", "channels", type=click.IntRange(0, 255), multiple=True, help="Only this channel.")
@click.option("--since", default=None, help="Received from: YYYY-MM-DD, ISO time (UTC), an age (10m).")
@click.option("--last", type=click.IntRange(0), default=None, help="Only the last N matching rows.")
@click.option("--no-duplicates", is_flag=True, help="First arrivals only (leave out flagged copies).")
@click.option("--json", "json_lines", is_flag=True, help="One JSON object per arrival (payload in hex).")
@click.option("--follow", is_flag=True, help="Keep printing new arrivals as the bridge commits them.")
@click.option("--interval", type=click.FloatRange(0.01, 60), default=0.5, help="--follow: seconds per read.")
def events(
    config_path: str | None,
    store: str | None,
    devices: tuple[str, ...],
    channels: tuple[int, ...],
    since: str | None,
    last: int | None,
    no_duplicates: bool,
    json_lines: bool,
    follow: bool,
    interval: float,
) -> None:
    """Show stored events (every arrival: offset, lead, duplicate flag, payload) from the store."""
    path = _store_path(config_path, store)
    try:
        since_us = parse_time(since) if since else None
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    if not Path(path).exists():
        raise click.ClickException("store %s not found" % path)
    with StoreReader(path) as r:
        known = {d.device_id for d in r.devices()}
        unknown = [d for d in devices if d not in known]
        if unknown and not follow:  # followed: the bridge may not have met the device yet
            have = ", ".join(sorted(known)) or "none"
            raise click.ClickException("no device %s in %s (devices: %s)" % (unknown[0], path, have))
        query = {"devices": devices, "channels": channels, "since_us": since_us}
        query["duplicates"] = not no_duplicates
        # fixed widths (a followed table cannot know its rows): ids and offsets up to 10 digits
        widths = [10, 23, max([6, *map(len, devices or known)]), 8, 3, 10, 6, 3]
        if not json_lines:
            _table([list(HEAD)], widths)
        after, shown = 0, 0
        if last is not None:  # start just before the last `last` matching arrivals
            tail = r.event_arrivals(0, limit=last, newest=True, **query) if last else []
            after = tail[0].id - 1 if tail else r.last_arrival_id()
        while True:
            page = r.event_arrivals(after, limit=PAGE, **query)
            if page:
                after = page[-1].id
                shown += len(page)
                if json_lines:
                    for e in page:
                        click.echo(json.dumps(e.as_json(), separators=(",", ":")))
                else:
                    _table([_cells(e) for e in page], widths)
                sys.stdout.flush()
                continue
            if not follow:
                break
            time.sleep(interval)
        if not json_lines:
            click.echo("%d arrivals" % shown)
