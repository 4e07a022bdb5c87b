"""The fleet job's HTML report: ``index.html`` and five PNG plots beside it, for people.

The page opens with headline tiles (devices, messages, loss, overrun losses, latency, restarts,
consistency), explains the two loss counts side by side ("gaps never filled" is measured from
the arrivals, "lost in overruns" is the bridge's exact count from RECOVERY answers; with this
run's numbers), shows the plots, a sortable per-device table (inline JavaScript, no CDN: the
page works offline, from a file), the comparisons by firmware and link, the latency
percentiles and the consistency check, and ends with what each number means.

Input (``write_report(out_dir, tables, summary)``), the small tables the job collects, as pyarrow
Tables, read with pyarrow only (no pandas):

* required: ``devices``, ``worst_devices``, ``by_firmware``, ``by_transport``, ``loss_over_time``,
  ``lead_histogram``, ``latency``;
* optional: ``mismatches`` (first rows of the consistency check); ``channel_windows`` or any table
  with ``kind`` and ``lost`` (splits the gaps into event rings and report sessions exactly; without
  it the page reconciles the two loss counts with per-device lower bounds);
* ``summary``: the dict ``run_job`` returns (fleet totals, ``rows``, ``seconds``,
  ``window_seconds``, ``input_dir``, ``mismatch_rows``); a missing number shows as "-".

Numbers are for people: thousands separators, percentages, latency in µs / ms / s, durations in
minutes and hours; each table heading carries the CSV column name and its definition as a
tooltip. The per-device table holds at most ``DEVICE_ROWS`` devices (worst loss rate first);
every device is in ``csv/devices.csv``.
"""

from __future__ import annotations

import datetime as dt
import html
import os
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pyarrow as pa
import pyarrow.compute as pc

PLOTS = {
    "lead_histogram.png": "Lead of each arrival (spec 000)",
    "loss_over_time.png": "Loss rate over time (gaps never filled)",
    "worst_devices.png": "Worst devices by loss rate",
    "by_firmware.png": "By firmware version",
    "by_transport.png": "By link (transport)",
}
CAPTIONS = {
    "lead_histogram.png": "Lead = seq minus the highest seq received before it in the same lead domain. "
    "1: in order; >1: after a gap (the skipped seqs may still arrive late); 0: a duplicate; <0: a late "
    "arrival or a delayed duplicate. Log scale.",
    "loss_over_time.png": "Share of messages missing per time window, by link, and for the whole fleet "
    "(black): gaps never filled / (unique messages + gaps never filled).",
    "worst_devices.png": "The devices with the highest loss rate, with their gaps never filled.",
    "by_firmware.png": "Loss, duplicate and late rates, and latency percentiles, per firmware version.",
    "by_transport.png": "Loss, duplicate and late rates, and latency percentiles, per link.",
}
DEVICE_ROWS = 1000  # per-device table rows in the page (worst first); csv/devices.csv has them all
MISMATCH_ROWS = 20

# (column, heading, kind, definition). kind: text, int, pct (ratio 0..1), us (microseconds)
Col = tuple[str, str, str, str]
_DEVICE_COLS: list[Col] = [
    ("device_id", "Device", "text", "device id"),
    ("firmware_versions", "Firmware", "text", "firmware versions seen"),
    ("transports", "Link", "text", "transports seen (udp, serial, sim)"),
    ("unique", "Messages", "int", "unique messages stored (events and reports), duplicates not counted"),
    ("duplicates", "Duplicates", "int", "arrivals whose seq had already arrived in the same lead domain"),
    ("late", "Late", "int", "arrivals behind a higher seq received before them (lead < 0), not duplicates"),
    ("lost", "Gaps never filled", "int", "seqs between the lowest and highest received that never arrived"),
    ("loss_rate", "Loss rate", "pct", "gaps never filled / (messages + gaps never filled)"),
    ("events_lost_exact", "Lost in overruns", "int", "events the ring overwrote before they were polled"),
    ("overruns", "Overruns", "int", "recoveries after a ring overrun (spec 004)"),
    ("restarts", "Restarts", "int", "boots after the first one seen"),
    ("unknown_loss_recoveries", "Unknown-size losses", "int", "recoveries after a restart or first contact"),
    ("rx_to_commit_p99_us", "Bridge p99", "us", "99th percentile of receive -> commit at the bridge"),
    ("gen_to_rx_p99_us", "End-to-end p99", "us", "99th percentile of generated -> received"),
]
_MISMATCH_COL: Col = ("_mismatches", "Mismatches", "int", "stored lead or duplicate flag != recomputed")
_COMPARE_COLS: list[Col] = [
    ("devices", "Devices", "int", "devices seen"),
    ("unique", "Messages", "int", "unique messages stored"),
    ("duplicates", "Duplicates", "int", _DEVICE_COLS[4][3]),
    ("late", "Late", "int", _DEVICE_COLS[5][3]),
    ("lost", "Gaps never filled", "int", _DEVICE_COLS[6][3]),
    ("loss_rate", "Loss rate", "pct", _DEVICE_COLS[7][3]),
    ("events_lost_exact", "Lost in overruns", "int", _DEVICE_COLS[8][3]),
    ("overruns", "Overruns", "int", _DEVICE_COLS[9][3]),
    ("restarts", "Restarts", "int", _DEVICE_COLS[10][3]),
    ("rx_to_commit_p50_us", "Bridge p50", "us", "median of receive -> commit at the bridge"),
    ("rx_to_commit_p99_us", "Bridge p99", "us", _DEVICE_COLS[12][3]),
    ("gen_to_rx_p50_us", "End-to-end p50", "us", "median of generated -> received"),
    ("gen_to_rx_p99_us", "End-to-end p99", "us", _DEVICE_COLS[13][3]),
]
_METRIC_WORDS = {
    "rx_to_commit": "Bridge: received → committed to the store",
    "gen_to_rx": "End to end: generated on the device → received by the bridge",
}

_CSS = """
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2330;background:#f5f6f8}
main{max-width:1240px;margin:0 auto;padding:24px 28px 60px}
h1{font-size:26px;margin:0 0 4px}h2{font-size:20px;margin:36px 0 10px;padding-top:6px;
border-top:1px solid #dde1e7}h3{font-size:16px;margin:16px 0 6px}
.meta{color:#5b6475;margin:0 0 18px}code{background:#eceef2;padding:0 4px;border-radius:3px;font-size:13px}
.tiles{display:grid;grid-template-columns:repeat(auto-fill,minmax(270px,1fr));gap:12px}
.tile{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:12px 16px}
.tile .k{font-size:13px;color:#5b6475;text-transform:uppercase;letter-spacing:.04em}
.tile .v{font-size:28px;font-weight:650;margin:2px 0;font-variant-numeric:tabular-nums}
.tile .v small{font-size:14px;font-weight:500;color:#5b6475;margin:0 4px 0 0}
.tile.lat .v{font-size:22px;line-height:30px}.tile.lat .v small{display:inline-block;width:36px}
.tile .s{font-size:13px;color:#5b6475}.tile.good{border-left:5px solid #2e8540}
.tile.bad{border-left:5px solid #c0392b}.tile.bad .v{color:#c0392b}
.two{display:grid;grid-template-columns:1fr 1fr;gap:14px}
@media (max-width:820px){.two{grid-template-columns:1fr}}
.card{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:12px 18px}
.card h3{margin:4px 0 6px}.card .big{font-size:22px;font-weight:650}.card dl{font-size:14px;margin-bottom:8px}
.card p{margin:6px 0}.card ul{margin:6px 0;padding-left:20px}
figure{margin:0;background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:10px}
figure img{width:100%;height:auto;display:block}figure.wide{margin-bottom:12px}
figcaption{font-size:13px;color:#5b6475;margin-top:6px}
.scroll{max-height:620px;overflow:auto;border:1px solid #dde1e7;border-radius:8px;background:#fff}
table{border-collapse:collapse;font-size:13px;width:100%;font-variant-numeric:tabular-nums}
th,td{padding:4px 9px;text-align:right;white-space:nowrap;border-bottom:1px solid #eceef2}
th{background:#eef1f5;position:sticky;top:0;font-weight:600;vertical-align:bottom;white-space:normal;
min-width:64px}
th:first-child,td:first-child{text-align:left}td.t{text-align:left}
tbody tr:hover{background:#f3f7ff}
table.sortable th{cursor:pointer;user-select:none}
table.sortable th::after{content:" \\2195";color:#a3abb8;font-size:11px}
table.sortable th[aria-sort=ascending]::after{content:" \\25B2";color:#1d2330}
table.sortable th[aria-sort=descending]::after{content:" \\25BC";color:#1d2330}
.bad{color:#c0392b;font-weight:600}.ok{color:#2e8540;font-weight:600}.note{color:#5b6475;font-size:13px}
dl{display:grid;grid-template-columns:max-content 1fr;gap:4px 18px;margin:0}dt{font-weight:600}dd{margin:0}
"""

# Sortable tables: a click (or Enter) on a heading sorts by that column; numbers by their raw value
# (data-v), text by its words; first click: numbers high to low, text A to Z; again: reversed.
# Then a check that every plot loaded: a missing PNG is replaced by a line saying so, and
# <body data-plots-loaded="k/n"> records the count (the report's test reads it).
_JS = """
(function(){
function key(td,num){if(!num)return td.textContent;var v=td.getAttribute('data-v');
return v===null||v===''?-Infinity:parseFloat(v);}
function sortBy(table,i,th){
var num=th.getAttribute('data-kind')!=='text';var cur=th.getAttribute('aria-sort');
var desc=cur?cur==='ascending':num;var body=table.tBodies[0];
var rows=Array.prototype.slice.call(body.rows).map(function(r,j){return [key(r.cells[i],num),j,r];});
rows.sort(function(a,b){var c=num?a[0]-b[0]:a[0].localeCompare(b[0],undefined,{numeric:true});
if(c!==c)c=0;return (desc?-c:c)||a[1]-b[1];});
rows.forEach(function(r){body.appendChild(r[2]);});
Array.prototype.forEach.call(table.tHead.rows[0].cells,function(h){h.removeAttribute('aria-sort');});
th.setAttribute('aria-sort',desc?'descending':'ascending');}
document.querySelectorAll('table.sortable').forEach(function(table){
Array.prototype.forEach.call(table.tHead.rows[0].cells,function(th,i){th.tabIndex=0;
th.addEventListener('click',function(){sortBy(table,i,th);});
th.addEventListener('keydown',function(e){if(e.key==='Enter')sortBy(table,i,th);});});});
window.addEventListener('load',function(){var imgs=document.querySelectorAll('img.plot'),ok=0;
imgs.forEach(function(im){if(im.complete&&im.naturalWidth>0){ok++;return;}
var p=document.createElement('p');p.className='bad';
p.textContent='plot not found: '+im.getAttribute('src');im.replaceWith(p);});
document.body.setAttribute('data-plots-loaded',ok+'/'+imgs.length);});
})();
"""


# ------------------------------------------------------------------------------------ formatting
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


_FORMAT: dict[str, Callable[[Any], str]] = {"int": fmt_int, "pct": fmt_pct, "us": fmt_us, "text": str}


def _plural(n: int, word: str) -> str:
    return "%s %s%s" % (fmt_int(n), word, "" if n == 1 else "s")


def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


# ----------------------------------------------------------------------------------- table access
def _rows(t: pa.Table | None, cols: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Rows as dicts (only the named columns that exist); [] for a missing table."""
    if t is None:
        return []
    if cols is not None:
        t = t.select([c for c in dict.fromkeys(cols) if c in t.column_names])
    return t.to_pylist()


def _sum(t: pa.Table | None, col: str) -> int:
    if t is None or col not in t.column_names or t.num_rows == 0:
        return 0
    return int(pc.sum(t.column(col)).as_py() or 0)


# ----------------------------------------------------------------------------------------- plots
def _save(fig: Any, path: str) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_lead_histogram(h: pa.Table, path: str) -> None:
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    n: dict[tuple[str, int], int] = defaultdict(int)
    labels: dict[int, str] = {}
    for r in _rows(h, ["kind", "bucket_order", "bucket", "n"]):
        n[(r["kind"], r["bucket_order"])] += r["n"]
        labels[r["bucket_order"]] = r["bucket"]
    if n:
        order = sorted(labels)
        x = {o: i for i, o in enumerate(order)}
        kinds = sorted({k for k, _ in n})
        width = 0.8 / len(kinds)
        for j, k in enumerate(kinds):
            os_ = [o for o in order if (k, o) in n]
            ax.bar([x[o] + j * width for o in os_], [n[(k, o)] for o in os_], width=width, label=k + "s")
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(order))], [labels[o] for o in order])
        ax.set_yscale("log")
        ax.legend()
    ax.set_xlabel("lead (1 = in order)")
    ax.set_ylabel("arrivals (log scale)")
    ax.set_title(PLOTS["lead_histogram.png"])
    _save(fig, path)


def _plot_loss_over_time(lt: pa.Table, path: str) -> None:
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    rows = _rows(lt, ["window_start", "transport", "unique", "lost"])
    by_tr: dict[str, dict[Any, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for r in rows:
        for key in (str(r["transport"]), "\0fleet"):
            acc = by_tr[key][r["window_start"]]
            acc[0] += r["unique"] or 0
            acc[1] += r["lost"] or 0
    for key in sorted(by_tr):
        pts = sorted((t, 100.0 * lo / (u + lo)) for t, (u, lo) in by_tr[key].items() if u + lo > 0)
        if not pts:
            continue
        xs, ys = zip(*pts, strict=True)
        if key == "\0fleet":
            ax.plot(xs, ys, color="black", lw=2, label="fleet")
        else:
            ax.plot(xs, ys, marker=".", lw=1, alpha=0.8, label=key)
    if rows:
        ax.legend(fontsize=8)
    ax.set_ylabel("loss rate (%)")
    ax.set_xlabel("time window start (UTC)")
    ax.set_title(PLOTS["loss_over_time.png"])
    fig.autofmt_xdate()
    _save(fig, path)


def _plot_worst(w: pa.Table, path: str) -> None:
    rows = sorted(_rows(w, ["rank", "device_id", "loss_rate", "lost"]), key=lambda r: -r["rank"])
    fig, ax = plt.subplots(figsize=(7.5, max(2.5, 0.32 * len(rows) + 1.2)))
    if rows:
        ax.barh([r["device_id"] for r in rows], [100 * r["loss_rate"] for r in rows], color="#c0392b")
        for y, r in enumerate(rows):
            ax.text(
                100 * r["loss_rate"],
                y,
                " %s (%s gaps)" % (fmt_pct(r["loss_rate"]), fmt_int(r["lost"])),
                va="center",
                fontsize=8,
            )
        ax.set_xlim(0, 100 * max(r["loss_rate"] for r in rows) * 1.3 or 1)
    ax.set_xlabel("loss rate (%)")
    ax.set_title(PLOTS["worst_devices.png"])
    _save(fig, path)


def _plot_compare(c: pa.Table, dim: str, path: str, title: str) -> None:
    rows = sorted(_rows(c), key=lambda r: str(r[dim]))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 2.8))
    if rows:
        labels = [str(r[dim]) for r in rows]
        rates = [("loss_rate", "loss"), ("dup_rate", "duplicates"), ("late_rate", "late")]
        width = 0.8 / len(rates)
        for j, (col, lab) in enumerate(rates):
            ax1.bar(
                [i + j * width for i in range(len(rows))],
                [100 * (r[col] or 0) for r in rows],
                width=width,
                label=lab,
            )
        ax1.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))], labels)
        ax1.set_ylabel("% of messages")
        ax1.legend(fontsize=8)
        lat = [
            ("rx_to_commit_p50_us", "bridge p50"),
            ("rx_to_commit_p99_us", "bridge p99"),
            ("gen_to_rx_p50_us", "end-to-end p50"),
            ("gen_to_rx_p99_us", "end-to-end p99"),
        ]
        for j, (col, lab) in enumerate(lat):
            ax2.bar(
                [i + j * 0.2 for i in range(len(rows))],
                [(r.get(col) or 0) / 1000 for r in rows],
                width=0.2,
                label=lab,
            )
        ax2.set_xticks([i + 0.3 for i in range(len(rows))], labels)
        ax2.set_ylabel("latency (ms)")
        ax2.legend(fontsize=7)
    ax1.set_title("loss, duplicate and late rates", fontsize=10)
    ax2.set_title("latency percentiles", fontsize=10)
    fig.suptitle(title)
    _save(fig, path)


# ------------------------------------------------------------------------------------ HTML parts
def _tile(key: str, label: str, value: str, sub: str, state: str = "") -> str:
    return (
        '<div class="tile %s" id="tile-%s"><div class="k">%s</div><div class="v">%s</div>'
        '<div class="s">%s</div></div>' % (state, key, label, value, sub)
    )


def _tiles(s: dict[str, Any], tables: dict[str, pa.Table]) -> str:
    g = s.get
    nfw = tables["by_firmware"].num_rows if "by_firmware" in tables else 0
    ntr = tables["by_transport"].num_rows if "by_transport" in tables else 0
    lat = {r["metric"]: r for r in _rows(tables.get("latency"))}
    nmis = (g("lead_mismatches") or 0) + (g("dup_flag_mismatches") or 0)

    def latency(m: str) -> str:
        return "<small>p50</small>%s<br><small>p99</small>%s" % (
            fmt_us(g(m + "_p50_us")),
            fmt_us(g(m + "_p99_us")),
        )

    def measured(m: str) -> str:
        n = lat.get(m, {}).get("n")
        return "" if n is None else ", %s measured" % fmt_int(n)

    tiles = [
        _tile(
            "devices",
            "Devices",
            fmt_int(g("devices")),
            "%s boots seen · %d firmware versions · %d links" % (fmt_int(g("boots_seen")), nfw, ntr),
        ),
        _tile(
            "messages",
            "Messages",
            fmt_int(g("unique")),
            "unique; %s arrivals with %s duplicates, %s late"
            % (fmt_int(g("messages")), fmt_int(g("duplicates")), fmt_int(g("late"))),
        ),
        _tile(
            "loss",
            "Loss rate",
            fmt_pct(g("loss_rate")),
            "%s messages never arrived (gaps never filled)" % fmt_int(g("lost")),
        ),
        _tile(
            "overruns",
            "Lost in overruns",
            fmt_int(g("events_lost_exact")),
            "events, exact, in %s ring overruns" % fmt_int(g("overruns")),
        ),
        _tile(
            "bridge-latency",
            "Bridge latency",
            latency("rx_to_commit"),
            "received → committed%s" % measured("rx_to_commit"),
            "lat",
        ),
        _tile(
            "e2e-latency",
            "End-to-end latency",
            latency("gen_to_rx"),
            "generated → received%s" % measured("gen_to_rx"),
            "lat",
        ),
        _tile(
            "restarts",
            "Restarts",
            fmt_int(g("restarts")),
            "%s losses of unknown size (restarts, first contacts)" % fmt_int(g("unknown_loss_recoveries")),
        ),
        _tile(
            "consistency",
            "Consistency with the bridge",
            "OK" if nmis == 0 else fmt_int(nmis),
            "stored lead and duplicate flags = recomputation"
            if nmis == 0
            else "%s lead and %s duplicate-flag mismatches"
            % (fmt_int(g("lead_mismatches")), fmt_int(g("dup_flag_mismatches"))),
            "good" if nmis == 0 else "bad",
        ),
    ]
    return '<div class="tiles">%s</div>' % "".join(tiles)


_HEAD_LOSS = (
    "lost in overruns before the first event the bridge stored from that boot (the ring overran again "
    "between the first contact and the first answer with events): the bridge counts them exactly, but "
    "no gap can show them, since a gap needs a received message on both sides"
)
_NO_RECORD = (
    "event-ring gaps without an overrun record in the input (a <code>losses/</code> table that is "
    "absent, or a date range that cuts off the recovery record of an overrun)"
)
_REPORT_GAPS = (
    "reports that never arrived inside their push sessions (lost on the way and never resent; reports "
    "are pushed, not kept in the ring)"
)


def _by_kind(s: dict[str, Any], cw: pa.Table) -> tuple[str, list[str]]:
    """Exact reconciliation from per-kind gaps (a table with kind and lost, e.g. channel_windows)."""
    exact = int(s.get("events_lost_exact") or 0)
    ev = _sum(cw.filter(pc.equal(cw.column("kind"), "event")), "lost")
    rep = _sum(cw.filter(pc.equal(cw.column("kind"), "report")), "lost")
    parts = []
    if exact > ev:
        parts.append("<b>%s</b> events were %s." % (fmt_int(exact - ev), _HEAD_LOSS))
    elif exact < ev:
        parts.append("<b>%s</b> %s." % (fmt_int(ev - exact), _NO_RECORD))
    else:
        parts.append("Every event lost in an overrun shows as a gap in its event ring: the two agree.")
    if rep:
        parts.append("<b>%s</b> gaps are not overrun losses but %s." % (fmt_int(rep), _REPORT_GAPS))
    return "%s in event rings + %s in report sessions" % (fmt_int(ev), fmt_int(rep)), parts


def _by_device(dev: pa.Table | None) -> list[str]:
    """Bounds from the per-device totals when gaps are not split by kind: on a device, gaps = event
    gaps + report gaps, and (every event gap having its overrun record) events lost before a boot's
    first stored event = lost in overruns - event gaps >= lost in overruns - gaps."""
    rows = _rows(dev, ["lost", "events_lost_exact"])
    diff = [int(r["events_lost_exact"] or 0) - int(r["lost"] or 0) for r in rows]
    more = [d for d in diff if d > 0]
    less = [-d for d in diff if d < 0]
    parts = []
    if more:
        parts.append(
            "At least <b>%s</b> events (on %s whose overruns lost more than their gaps show) were %s."
            % (fmt_int(sum(more)), _plural(len(more), "device"), _HEAD_LOSS)
        )
    if less:
        parts.append(
            "At least <b>%s</b> gaps (on %s with more gaps than events lost in overruns) are not overrun "
            "losses: %s, or %s."
            % (fmt_int(sum(less)), _plural(len(less), "device"), _REPORT_GAPS, _NO_RECORD)
        )
    if rows and not more and not less:
        parts.append("On every device the gaps never filled equal the events lost in overruns.")
    parts.append(
        "Per device, the two counts are side by side in the device table below: sort by either. "
        "(Without the gaps split into event rings and report sessions, these are lower bounds.)"
    )
    return parts


def _loss_split(s: dict[str, Any], tables: dict[str, pa.Table]) -> str:
    """The two loss counts side by side, what each sees, and how this run's numbers reconcile."""
    g = s.get
    lost, exact = int(g("lost") or 0), int(g("events_lost_exact") or 0)
    cw = tables.get("channel_windows")
    if cw is not None and {"kind", "lost"} <= set(cw.column_names):
        split, parts = _by_kind(s, cw)
    else:
        split, parts = "in event rings and report sessions", _by_device(tables.get("devices"))
    head = int(g("report_head_missing") or 0)
    if head:
        parts.append(
            "<b>%s</b> reports are missing at the head of a session (numbers start at 1, spec 003; the "
            "lowest received was higher): in neither count." % fmt_int(head)
        )
    parts.append(
        "<b>%s</b> recoveries had a loss of unknown size (a restart takes the old boot's unpolled events "
        "with its RAM; a first contact finds older events already gone): in neither count."
        % fmt_int(g("unknown_loss_recoveries"))
    )
    return (
        '<div class="two"><div class="card"><h3>Gaps never filled</h3><div class="big">%s</div>'
        "<p>%s: measured by this job from the arrivals alone: per lead domain (one boot's event ring, "
        "or one channel's report session), the sequence numbers between the lowest and highest "
        "received that never arrived, after all late arrivals. Any link, any cause. "
        "The loss rate is gaps / (unique messages + gaps) = <b>%s</b>.</p></div>"
        '<div class="card"><h3>Lost in overruns</h3><div class="big">%s</div>'
        "<p>events in %s overruns. Counted exactly by the bridge when the device answered a poll with "
        "RECOVERY (spec 004): its ring had overwritten events not yet polled, lost = n0 &minus; s(n) in the "
        "same boot. Events only (reports are not kept in the ring); includes events lost before the "
        "first one stored from a boot, which no gap can show.</p></div></div>"
        '<div class="card" style="margin-top:14px"><h3>Why the two differ here</h3><ul>%s</ul></div>'
        % (
            fmt_int(lost),
            split,
            fmt_pct(g("loss_rate")),
            fmt_int(exact),
            fmt_int(g("overruns")),
            "".join("<li>%s</li>" % p for p in parts),
        )
    )


def _table(
    rows: list[dict[str, Any]],
    cols: Sequence[Col],
    sort_col: str | None = None,
    table_id: str = "",
    sortable: bool = True,
) -> str:
    """An HTML table; numbers carry their raw value in data-v (for sorting), text is left-aligned."""
    head = []
    for key, label, kind, desc in cols:
        aria = ' aria-sort="descending"' if key == sort_col else ""
        head.append(
            '<th data-kind="%s" data-col="%s" title="%s: %s"%s>%s</th>'
            % (kind, key, _e(key.lstrip("_")), _e(desc), aria, _e(label))
        )
    body = []
    for r in rows:
        cells = []
        for key, _, kind, _ in cols:
            v = r.get(key)
            if kind == "text":
                cells.append('<td class="t">%s</td>' % _e("-" if v is None else v))
            else:
                raw = "" if v is None else repr(float(v)) if kind != "int" else str(int(v))
                cells.append('<td data-v="%s">%s</td>' % (raw, _e(_FORMAT[kind](v))))
        body.append("<tr>%s</tr>" % "".join(cells))
    return '<table%s class="%s"><thead><tr>%s</tr></thead><tbody>%s</tbody></table>' % (
        ' id="%s"' % table_id if table_id else "",
        "sortable" if sortable else "",
        "".join(head),
        "\n".join(body),
    )


def _devices_section(tables: dict[str, pa.Table]) -> str:
    dev = tables.get("devices")
    if dev is None:
        dev = tables["worst_devices"]
    n = dev.num_rows
    order = [
        ("loss_rate", "descending"),
        ("lost", "descending"),
        ("late", "descending"),
        ("device_id", "ascending"),
    ]
    top = dev.sort_by([o for o in order if o[0] in dev.column_names]).slice(0, DEVICE_ROWS)
    cols = list(_DEVICE_COLS)
    rows = _rows(top, [c[0] for c in cols] + ["lead_mismatches", "dup_flag_mismatches"])
    if any(r.get("lead_mismatches") or r.get("dup_flag_mismatches") for r in rows):
        cols.append(_MISMATCH_COL)
        for r in rows:
            r["_mismatches"] = (r.get("lead_mismatches") or 0) + (r.get("dup_flag_mismatches") or 0)
    shown = (
        "all %s devices" % fmt_int(n)
        if n <= DEVICE_ROWS
        else "the %s devices with the highest loss rate of %s" % (fmt_int(DEVICE_ROWS), fmt_int(n))
    )
    return (
        '<p class="note">Showing %s, worst loss rate first. Click a heading to sort (again to reverse); '
        'hover a heading for its definition. Every device: <a href="csv/devices.csv">csv/devices.csv</a>.'
        '</p><div class="scroll">%s</div>' % (shown, _table(rows, cols, "loss_rate", "devices"))
    )


def _compare_section(tables: dict[str, pa.Table], dim: str, label: str, desc: str) -> str:
    t = tables.get("by_firmware" if dim == "firmware_version" else "by_transport")
    if t is None:
        return ""
    rows = sorted(_rows(t), key=lambda r: str(r[dim]))
    return '<div class="scroll">%s</div>' % _table(rows, [(dim, label, "text", desc), *_COMPARE_COLS])


def _latency_section(tables: dict[str, pa.Table]) -> str:
    rows = _rows(tables.get("latency"))
    for r in rows:
        r["what"] = _METRIC_WORDS.get(r["metric"], r["metric"])
    cols: list[Col] = [
        ("what", "Latency", "text", "metric"),
        ("n", "Messages measured", "int", "messages with this latency known"),
        ("p50", "Median (p50)", "us", "half the messages took at most this"),
        ("p95", "p95", "us", "95% of the messages took at most this"),
        ("p99", "p99", "us", "99% of the messages took at most this"),
    ]
    return _table(rows, cols, sortable=False)


def _consistency_section(s: dict[str, Any], tables: dict[str, pa.Table]) -> str:
    lm, dm = int(s.get("lead_mismatches") or 0), int(s.get("dup_flag_mismatches") or 0)
    if not lm + dm:
        return (
            '<p class="ok">Every stored lead and duplicate flag equals the recomputation.</p>'
            '<p class="note">The bridge stores the lead (spec 000) and a duplicate flag with every '
            "arrival; this job recomputes both from the arrival order and compares.</p>"
        )
    out = (
        '<p class="bad">%s stored leads and %s duplicate flags disagree with the recomputation '
        "(%s rows; all in <code>mismatches/</code>, the first in <code>csv/mismatches.csv</code>).</p>"
        % (fmt_int(lm), fmt_int(dm), fmt_int(s.get("mismatch_rows")))
    )
    rows = _rows(tables.get("mismatches"))[:MISMATCH_ROWS]
    if rows:
        for r in rows:
            r["time"] = _time(r.get("rx_us"))
        cols: list[Col] = [
            ("device_id", "Device", "text", "device id"),
            ("boot_epoch", "Boot epoch", "text", "boot"),
            ("kind", "Kind", "text", "event or report"),
            ("session", "Session", "text", "push session"),
            ("channel", "Channel", "text", "channel"),
            ("seq", "Seq", "text", "offset or MessageNumber"),
            ("arrival", "Arrival", "text", "bridge arrival counter"),
            ("lead", "Stored lead", "text", "lead the bridge stored"),
            ("lead_calc", "Recomputed lead", "text", "lead recomputed here"),
            ("duplicate", "Stored duplicate", "text", "flag the bridge stored"),
            ("dup_calc", "Recomputed duplicate", "text", "flag recomputed here"),
            ("time", "Received (UTC)", "text", "host receive time"),
        ]
        out += '<div class="scroll">%s</div>' % _table(rows, cols, sortable=False)
    return out


def _time(us: Any) -> str:
    if us is None:
        return "-"
    return dt.datetime.fromtimestamp(us / 1e6, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _span(lt: pa.Table | None, window_s: Any) -> str:
    """'2026-01-01 00:00 - 2026-01-03 15:00 UTC' (an en dash) from the loss-over-time windows."""
    if lt is None or lt.num_rows == 0 or "window_start" not in lt.column_names:
        return ""
    lo, hi = pc.min_max(lt.column("window_start")).as_py().values()
    if lo is None:
        return ""
    hi = hi + dt.timedelta(seconds=int(window_s or 0))
    f = "%Y-%m-%d %H:%M" if int(window_s or 0) % 60 == 0 else "%Y-%m-%d %H:%M:%S"
    return "%s &ndash; %s UTC" % (lo.strftime(f), hi.strftime(f))


_GLOSSARY = [
    (
        "Message",
        "one event (polled from the device's ring; seq = ring offset) or report (pushed; seq = "
        "MessageNumber). <i>Arrivals</i> count every copy received; <i>messages</i> count each once.",
    ),
    (
        "Lead domain",
        "one boot's event ring (all channels share its offsets), or one channel's report session.",
    ),
    ("Lead", "seq &minus; highest seq received before in the lead domain (spec 000), wrap-safe at 2^32."),
    ("Duplicate", "an arrival whose seq had already arrived in its lead domain."),
    (
        "Late",
        "not a duplicate, and behind a higher seq received before it (lead < 0). Reorder depth: "
        "arrivals from the first one that overtook it up to it.",
    ),
    (
        "Gaps never filled",
        "seqs between the lowest and highest received in a lead domain that never "
        "arrived (CSV column <code>lost</code>).",
    ),
    ("Loss rate", "gaps never filled / (messages + gaps never filled)."),
    (
        "Lost in overruns",
        "events the device's ring overwrote before they were polled, counted exactly "
        "from RECOVERY answers in the same boot (CSV column <code>events_lost_exact</code>).",
    ),
    (
        "Unknown-size losses",
        "recoveries after a restart or a first contact, where what was lost cannot "
        "be known (<code>unknown_loss_recoveries</code>).",
    ),
    (
        "Restarts",
        "boots of a device after the first one seen (the same boot seen by two bridges counts once).",
    ),
    ("Bridge latency", "host commit time &minus; host receive time (<code>rx_to_commit</code>)."),
    (
        "End-to-end latency",
        "host receive time &minus; generation time, where the generation time is known "
        "(<code>gen_to_rx</code>). Percentiles are exact, interpolated at (n&minus;1)p.",
    ),
]


def _figure(name: str, cls: str = "") -> str:
    return '<figure class="%s"><img class="plot" src="%s" alt="%s"><figcaption>%s</figcaption></figure>' % (
        cls,
        name,
        _e(PLOTS[name]),
        _e(CAPTIONS[name]),
    )


def _share(n: Any, total: Any) -> str:
    return "" if not total or n is None else " (%s)" % fmt_pct(n / total)


def _order_card(s: dict[str, Any]) -> str:
    """The ordering and recovery totals of the summary, in words, beside the lead histogram."""
    g = s.get
    arr = g("messages")
    order = [
        ("In order (lead 1)", fmt_int(g("lead_eq1")) + _share(g("lead_eq1"), arr)),
        (
            "After a gap (lead > 1)",
            "%s; %s seqs skipped at arrival" % (fmt_int(g("lead_gt1")), fmt_int(g("skipped"))),
        ),
        ("Same seq again (lead 0)", fmt_int(g("lead_eq0"))),
        ("Behind (lead < 0)", fmt_int(g("lead_lt0"))),
        ("Duplicates", fmt_int(g("duplicates")) + _share(g("duplicates"), arr)),
        ("Late arrivals", fmt_int(g("late")) + _share(g("late"), arr)),
        (
            "Worst lateness",
            "%s seqs behind; reorder depth %s arrivals; %s after the arrival that overtook it"
            % (fmt_int(g("lateness_seq_max")), fmt_int(g("reorder_depth_max")), fmt_us(g("lateness_us_max")))
            if g("late")
            else "no late arrivals",
        ),
        ("Reports resent", "%s (spec 003 retransmissions)" % fmt_int(g("retransmissions"))),
        ("Missing at a session head", "%s reports" % fmt_int(g("report_head_missing"))),
    ]
    rec = [
        ("Recovery phases", fmt_int(g("recovery_phases"))),
        ("… after an overrun", fmt_int(g("overruns"))),
        ("… of unknown size", "%s (restart or first contact)" % fmt_int(g("unknown_loss_recoveries"))),
        ("Longest recovery", fmt_us(g("recovery_us_max"))),
        ("Restarts", "%s; %s boots seen" % (fmt_int(g("restarts")), fmt_int(g("boots_seen")))),
    ]

    def dl(items: list[tuple[str, str]]) -> str:
        return "<dl>%s</dl>" % "".join("<dt>%s</dt><dd>%s</dd>" % (_e(k), _e(v)) for k, v in items)

    return '<div class="card"><h3>Order of arrival</h3>%s<h3>Recoveries and restarts</h3>%s</div>' % (
        dl(order),
        dl(rec),
    )


def _page(s: dict[str, Any], tables: dict[str, pa.Table]) -> str:
    span = _span(tables.get("loss_over_time"), s.get("window_seconds"))
    meta = "Input <code>%s</code>%s · time windows of %s · %s arrival rows · job time %s" % (
        _e(s.get("input_dir", "-")),
        " · " + span if span else "",
        fmt_window(s.get("window_seconds")),
        fmt_int(s.get("rows", s.get("messages"))),
        fmt_us(None if s.get("seconds") is None else 1e6 * s["seconds"]),
    )
    links = " · ".join('<a href="csv/%s.csv">%s</a>' % (n, n) for n in sorted(tables) if n != "mismatches")
    glossary = "".join("<dt>%s</dt><dd>%s</dd>" % (k, v) for k, v in _GLOSSARY)
    body = [
        "<h1>leadwire fleet report</h1>",
        '<p class="meta">%s</p>' % meta,
        _tiles(s, tables),
        "<h2>Loss, counted two ways</h2>",
        _loss_split(s, tables),
        '<div class="two" style="margin-top:14px">%s%s</div>'
        % (_figure("loss_over_time.png"), _figure("worst_devices.png")),
        "<h2>Order of arrival, recoveries and restarts</h2>",
        '<div class="two">%s%s</div>' % (_figure("lead_histogram.png"), _order_card(s)),
        "<h2>Devices</h2>",
        _devices_section(tables),
        "<h2>By firmware version</h2>",
        _figure("by_firmware.png", "wide"),
        _compare_section(tables, "firmware_version", "Firmware", "firmware version"),
        "<h2>By link</h2>",
        _figure("by_transport.png", "wide"),
        _compare_section(tables, "transport", "Link", "transport"),
        "<h2>Latency, whole fleet</h2>",
        _latency_section(tables),
        "<h2>Consistency with the bridge</h2>",
        _consistency_section(s, tables),
        "<h2>What the numbers mean</h2>",
        "<dl>%s</dl>" % glossary,
        "<h2>Tables</h2>",
        "<p>CSV: %s; the same as Parquet under <code>parquet/</code>; the fleet totals in "
        "<code>summary.json</code>. Definitions in full: docs/fleet.md.</p>" % links,
    ]
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        "<title>leadwire fleet report</title><style>%s</style></head><body><main>%s</main>"
        "<script>%s</script></body></html>\n" % (_CSS, "\n".join(body), _JS)
    )


def write_report(out_dir: str, tables: dict[str, pa.Table], summary: dict[str, Any]) -> str:
    """Write index.html and the PNG plots into out_dir; return the index path."""
    _plot_lead_histogram(tables["lead_histogram"], os.path.join(out_dir, "lead_histogram.png"))
    _plot_loss_over_time(tables["loss_over_time"], os.path.join(out_dir, "loss_over_time.png"))
    _plot_worst(tables["worst_devices"], os.path.join(out_dir, "worst_devices.png"))
    for dim, name in (("firmware_version", "by_firmware"), ("transport", "by_transport")):
        _plot_compare(tables[name], dim, os.path.join(out_dir, name + ".png"), PLOTS[name + ".png"])
    path = os.path.join(out_dir, "index.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write(_page(summary, tables))
    return path
