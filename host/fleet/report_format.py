"""Number formats and table access shared by the report's modules (report, report_plots,
report_devices, rollout_report): pyarrow only."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc


def fmt_int(v: Any) -> str:
    """12345 -> '12,345'; None -> '-'."""
    return "-" if v is None else "{:,}".format(round(v))


def fmt_pct(ratio: Any) -> str:
    """A ratio 0..1 as a percentage with sensible precision: 0.1485 -> '14.9%', 0.00935 -> '0.93%'."""
    if ratio is None:
        return "-"
    v = 100.0 * float(ratio)
    if v == 0:
        return "0%"
    if abs(v) >= 10:
        return "%.1f%%" % v
    if abs(v) >= 0.1:
        return "%.2f%%" % v
    return "%.2g%%" % v


def fmt_us(us: Any) -> str:
    """Microseconds for people: '850 µs', '4.80 ms', '1.04 s', '6 min 12 s', '6.9 h'."""
    if us is None:
        return "-"
    v = float(us)
    a = abs(v)
    if a < 999.5:
        return "%d µs" % round(v)
    # three significant digits; the bounds are where rounding would carry into the next unit
    for unit, scale, top in (("ms", 1e3, 999.5e3), ("s", 1e6, 59.995e6)):
        if a < top:
            x = abs(v / scale)
            fmt = "%.2f %s" if x < 9.995 else "%.1f %s" if x < 99.95 else "%.0f %s"
            return fmt % (v / scale, unit)
    if a < 3600e6:
        m, s = divmod(round(v / 1e6), 60)
        return "%d min %02d s" % (m, s)
    if a < 86400e6:
        return "%.1f h" % (v / 3600e6)
    return "%.1f d" % (v / 86400e6)


def fmt_window(seconds: Any) -> str:
    """3600 -> '1 h', 900 -> '15 min', 90 -> '90 s'."""
    if seconds is None:
        return "-"
    s = int(seconds)
    for unit, n in (("d", 86400), ("h", 3600), ("min", 60)):
        if s % n == 0:
            return "%d %s" % (s // n, unit)
    return "%d s" % s


FORMAT: dict[str, Callable[[Any], str]] = {"int": fmt_int, "pct": fmt_pct, "us": fmt_us, "text": str}


def plural(n: int, word: str) -> str:
    return "%s %s%s" % (fmt_int(n), word, "" if n == 1 else "s")


def esc(v: Any) -> str:
    return html.escape(str(v), quote=True)


# ----------------------------------------------------------------------------------- table access
def rows(t: pa.Table | None, cols: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Rows as dicts (only the named columns that exist); [] for a missing table."""
    if t is None:
        return []
    if cols is not None:
        t = t.select([c for c in dict.fromkeys(cols) if c in t.column_names])
    return t.to_pylist()


def col_sum(t: pa.Table | None, col: str) -> int:
    if t is None or col not in t.column_names or t.num_rows == 0:
        return 0
    return int(pc.sum(t.column(col)).as_py() or 0)
