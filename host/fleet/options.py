"""Options of the fleet job shared by `leadwire fleet` (cli.py) and the spark-submit entry
(job.py main): date range, incremental modes, and the job's one-line error. No Spark import here,
so the CLI can check its arguments before a JVM starts."""

from __future__ import annotations

import datetime as dt
from typing import Any

import click

# A gap after an arrival near the end of a date range can be filled by a seq that arrives after
# it: the job reads this many days past --to so that `lost` of in-range rows equals a full run's.
DEFAULT_LOOKAHEAD_DAYS = 1
# An incremental run lists the export's partitions from this many days before the newest date it
# has read: a file a bridge exports later into an older day is not read.
DEFAULT_LATE_DAYS = 2


class BadInput(Exception):
    """The input cannot be analysed; str(e) is one line telling why."""


def check_date(name: str, d: str | None) -> None:
    if d is None:
        return
    try:
        ok = len(d) == 10 and dt.date.fromisoformat(d) is not None
    except ValueError:
        ok = False
    if not ok:
        raise BadInput("%s: a date is YYYY-MM-DD, got %r" % (name, d))


def date_options(f: Any) -> Any:
    """--from/--to/--since/--day/--daily/--lookback-days/--lookahead-days (shared with the CLI)."""
    opts = [
        click.option("--from", "date_from", default=None, help="First date counted (YYYY-MM-DD, UTC)."),
        click.option("--to", "date_to", default=None, help="Last date counted (YYYY-MM-DD, UTC)."),
        click.option("--since", default=None, help="Same as --from DATE with no --to: new days only."),
        click.option("--day", default=None, help="One day: --from DAY --to DAY (re-run replaces that day)."),
        click.option("--daily", is_flag=True, help="From the last date the previous run into --out saw."),
        click.option(
            "--lookback-days",
            type=click.IntRange(0),
            default=None,
            help="Days read before --from for lead-domain state (default: all history, exact).",
        ),
        click.option(
            "--lookahead-days",
            type=click.IntRange(0),
            default=DEFAULT_LOOKAHEAD_DAYS,
            show_default=True,
            help="Days read after --to for gaps filled later.",
        ),
        click.option(
            "--incremental",
            is_flag=True,
            help="Read only the export files no earlier run into --out read; carry lead domains over.",
        ),
        click.option(
            "--late-days",
            type=click.IntRange(0),
            default=DEFAULT_LATE_DAYS,
            show_default=True,
            help="--incremental: list partitions from this many days before the newest read.",
        ),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def resolve_dates(
    date_from: str | None,
    date_to: str | None,
    since: str | None,
    day: str | None,
    daily: bool,
    incremental: bool = False,
) -> tuple[str | None, str | None]:
    """--since / --day folded into (from, to); conflicting options are a BadInput."""
    given = [n for n, v in (("--from/--to", date_from or date_to), ("--since", since), ("--day", day)) if v]
    if len(given) > 1 or (daily and given):
        raise BadInput("use one of --from/--to, --since, --day, --daily")
    if incremental and (given or daily):
        raise BadInput("--incremental reads what is new: no --from/--to, --since, --day or --daily with it")
    if since:
        return since, None
    if day:
        return day, day
    return date_from, date_to
