"""The report's rollout section (host/fleet/report.py calls it): the regression verdict, the
releases with their rates and 95% intervals, the rollout over time (loss per release and window
with its interval, and the devices on each release: the volume), cohorts and the same devices
before and after their move. Input: the rollout tables (leadwire.fleet.rollout) as pyarrow Tables;
without them the section says so in one line."""

from __future__ import annotations

import datetime as dt
import html
from collections import defaultdict
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pyarrow as pa

from .report_format import fmt_pct
from .rollout import METRIC_NAMES

PLOT = "rollout.png"
CHART_MIN_DEVICES = 5  # a release's day on fewer devices is left out of the chart (still in the tables)
METRIC_WORDS = {
    "loss": "loss rate",
    "dup": "duplicate rate",
    "late": "late rate",
    "restart": "crash-restart rate (per device-day)",
}


def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _rows(t: pa.Table | None) -> list[dict[str, Any]]:
    return [] if t is None else t.to_pylist()


def _pct(v: Any) -> str:
    return fmt_pct(v)


def rate_ci(r: dict[str, Any], m: str) -> str:
    """'5.27% (3.75-7.35%)': a rate and its 95% interval."""
    return "%s <small>(%s&ndash;%s)</small>" % (
        _pct(r.get(m + "_rate")),
        _pct(r.get(m + "_lo")),
        _pct(r.get(m + "_hi")),
    )


def version_key(v: str) -> tuple[Any, ...]:
    """The release order rollout.version_key gives in SQL: numeric parts, -1 for others."""
    parts = v.replace("+", ".").replace("-", ".").split(".")
    return (tuple(int(p) if p.isdigit() else -1 for p in parts), v)


def verdict(tables: dict[str, pa.Table]) -> tuple[str, list[dict[str, Any]]]:
    """('regression' | 'clean' | 'none', the flagged rows)."""
    reg = tables.get("rollout_regressions")
    if reg is None:
        return "none", []
    flagged = [r for r in _rows(reg) if r.get("regression")]
    return ("regression" if flagged else "clean"), flagged


def banner(tables: dict[str, pa.Table]) -> str:
    state, flagged = verdict(tables)
    if state == "none":
        return '<p class="note">No rollout tables in this run.</p>'
    if state == "clean":
        n = len({r["firmware_version"] for r in _rows(tables["rollout_regressions"])})
        return (
            '<div class="banner good" id="rollout-verdict">No release is worse than the one before it '
            "beyond the 95%% interval (%d release%s compared on loss, duplicates, late arrivals and "
            "crash restarts).</div>" % (n, "" if n == 1 else "s")
        )
    items = "".join(
        "<li><b>%s</b> %s %s vs <b>%s</b> %s: interval %s&ndash;%s above %s&ndash;%s (%d vs %d devices)</li>"
        % (
            _e(r["firmware_version"]),
            METRIC_WORDS.get(r["metric"], r["metric"]),
            _pct(r["rate"]),
            _e(r["previous_version"]),
            _pct(r["previous_rate"]),
            _pct(r["lo"]),
            _pct(r["hi"]),
            _pct(r["previous_lo"]),
            _pct(r["previous_hi"]),
            r["devices_seen"],
            r["previous_devices_seen"],
        )
        for r in sorted(flagged, key=lambda r: (version_key(r["firmware_version"]), r["metric"]))
    )
    return '<div class="banner bad" id="rollout-verdict"><b>Regression</b><ul>%s</ul></div>' % items


def releases_table(tables: dict[str, pa.Table]) -> str:
    rel = sorted(_rows(tables.get("rollout_releases")), key=lambda r: version_key(r["firmware_version"]))
    if not rel:
        return ""
    flagged = {(r["firmware_version"], r["metric"]) for r in verdict(tables)[1]}
    head = "".join(
        "<th>%s</th>" % h
        for h in (
            "Release",
            "Devices now",
            "Devices seen",
            "Messages",
            *(METRIC_WORDS[m].capitalize() for m in METRIC_NAMES),
            "End-to-end p99",
        )
    )
    body = []
    for r in rel:
        v = r["firmware_version"]
        cells = ['<td class="t">%s</td>' % _e(v)]
        cells += ["<td>{:,}</td>".format(int(r[c] or 0)) for c in ("devices", "devices_seen", "messages")]
        for m in METRIC_NAMES:
            cls = ' class="bad"' if (v, m) in flagged else ""
            cells.append("<td%s>%s</td>" % (cls, rate_ci(r, m)))
        p99 = r.get("gen_to_rx_p99_us")
        cells.append("<td>%s</td>" % ("-" if p99 is None else "%.1f ms" % (p99 / 1000)))
        body.append('<tr data-release="%s">%s</tr>' % (_e(v), "".join(cells)))
    return (
        '<div class="scroll x"><table id="releases"><thead><tr>%s</tr></thead><tbody>%s</tbody></table></div>'
        % (
            head,
            "".join(body),
        )
    )


def _small_table(rows: list[dict[str, Any]], keys: list[tuple[str, str]], table_id: str) -> str:
    head = "".join("<th>%s</th>" % h for _, h in keys) + "".join(
        "<th>%s</th>" % METRIC_WORDS[m].capitalize() for m in ("loss", "restart")
    )
    body = []
    for r in rows:
        cells = "".join(
            '<td class="t">%s</td>' % _e(r[k]) if k != "devices_seen" else "<td>%d</td>" % r[k]
            for k, _ in keys
        )
        cells += "".join("<td>%s</td>" % rate_ci(r, m) for m in ("loss", "restart"))
        body.append("<tr>%s</tr>" % cells)
    return (
        '<div class="scroll x"><table id="%s"><thead><tr>%s</tr></thead><tbody>%s</tbody></table></div>'
        % (
            table_id,
            head,
            "".join(body),
        )
    )


def cohort_tables(tables: dict[str, pa.Table]) -> str:
    co = sorted(
        _rows(tables.get("rollout_cohorts")), key=lambda r: (version_key(r["firmware_version"]), r["cohort"])
    )
    ba = sorted(
        _rows(tables.get("rollout_before_after")),
        key=lambda r: (version_key(r["to_version"]), version_key(r["from_version"]), r["side"] != "before"),
    )
    out = []
    if co:
        out.append("<h3>Cohorts: by the day a device moved to the release</h3>")
        out.append(
            _small_table(
                co,
                [("firmware_version", "Release"), ("cohort", "Moved on"), ("devices_seen", "Devices")],
                "cohorts",
            )
        )
    if ba:
        out.append("<h3>The same devices before and after their move</h3>")
        out.append(
            _small_table(
                ba,
                [
                    ("from_version", "From"),
                    ("to_version", "To"),
                    ("side", "Rows on"),
                    ("devices_seen", "Devices"),
                ],
                "before-after",
            )
        )
    return "".join(out)


def plot_rollout(tables: dict[str, pa.Table], path: str) -> bool:
    """Loss rate per release and rollout window with its 95% interval (top), devices on each
    release per window (bottom, stacked: the adoption). False when there is nothing to plot."""
    rows = _rows(tables.get("rollout_windows"))
    if not rows:
        return False
    fig, (ax1, ax2) = plt.subplots(
        2, 1, figsize=(11, 5.2), sharex=True, gridspec_kw={"height_ratios": [3, 2]}
    )
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[r["firmware_version"]].append(r)
    windows = sorted({r["window_start"] for r in rows})
    width = (windows[1] - windows[0]) if len(windows) > 1 else dt.timedelta(days=1)
    bottom = dict.fromkeys(windows, 0)
    vs = sorted(by, key=version_key)
    top = 0.0
    for i, v in enumerate(vs):
        pts = sorted(by[v], key=lambda r: r["window_start"])
        # a rate on fewer than MIN_DEVICES devices has an interval too wide to read: left out
        sure = [r for r in pts if r["devices_seen"] >= CHART_MIN_DEVICES]
        shift = width * (0.15 + 0.7 * i / max(1, len(vs)))
        xs = [r["window_start"] + shift for r in sure]
        ys = [100 * r["loss_rate"] for r in sure]
        lo = [100 * (r["loss_rate"] - (r["loss_lo"] or 0)) for r in sure]
        hi = [100 * ((r["loss_hi"] or 0) - r["loss_rate"]) for r in sure]
        ax1.errorbar(xs, ys, yerr=[lo, hi], fmt="o-", ms=4, capsize=3, lw=1.2, label=v, color="C%d" % i)
        top = max([top, *(100 * r["loss_rate"] for r in sure)])
        cnt = {r["window_start"]: r["devices"] for r in pts}
        ax2.bar(
            windows,
            [cnt.get(w, 0) for w in windows],
            width=width * 0.9,
            align="edge",
            bottom=[bottom[w] for w in windows],
            color="C%d" % i,
            label=v,
        )
        for w in windows:
            bottom[w] += cnt.get(w, 0)
    # an interval reaching past 3x the highest rate is cut at the top (its bar runs off the chart)
    ax1.set_ylim(0, top * 3 or 1)
    ax1.set_ylabel("loss rate (%), 95% interval")
    ax1.legend(fontsize=8, title="release", title_fontsize=8)
    ax1.set_title("Loss per release and day")
    ax2.set_ylabel("devices on it")
    ax2.set_xlabel("day (UTC)")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def section(tables: dict[str, pa.Table], plotted: bool) -> str:
    fig = (
        '<figure class="wide"><img class="plot" src="%s" alt="rollout over time"><figcaption>Loss rate per '
        "release and day with its 95%% interval (Wilson on the device-clustered effective sample; days "
        "with fewer than %d devices on a release left out, intervals cut at 3x the highest rate); "
        "below, the devices on each release at the end of the day.</figcaption></figure>"
        % (PLOT, CHART_MIN_DEVICES)
        if plotted
        else ""
    )
    return banner(tables) + releases_table(tables) + fig + cohort_tables(tables)
