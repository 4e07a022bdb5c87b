"""The fleet job's HTML report: ``index.html`` and its PNG plots, an operations page.

Top down: the state of the fleet (tiles, thresholds coloured by THRESHOLDS, the change against
the previous report into the same folder and the newest release against the one before it), the
rollouts (rollout_report: the regression verdict, releases with intervals, rollout.png, cohorts,
the same devices before and after), the worst devices (plot, loss over time with its volume, and
the device table: every device as JSON in the page, paged, filtered and sorted by inline script),
then the protocol detail (the two loss counts and how they reconcile, lead histogram, by firmware
and link, latency, consistency, definitions). No CDN: the page works offline, from a file.

Input (``write_report(out_dir, tables, summary)``), the small tables the job collects, as pyarrow
Tables, read with pyarrow only (no pandas):

* required: ``devices``, ``worst_devices``, ``by_firmware``, ``by_transport``, ``loss_over_time``,
  ``lead_histogram``, ``latency``;
* optional: ``mismatches`` (first rows of the consistency check); ``channel_windows`` or any table
  with ``kind`` and ``lost`` (splits the gaps into event rings and report sessions exactly; without
  it the page reconciles the two loss counts with per-device lower bounds); the rollout tables
  (``rollout_releases``, ``rollout_windows``, ``rollout_regressions``, ``rollout_cohorts``,
  ``rollout_before_after``);
* ``summary``: the dict ``run_job`` returns (fleet totals, ``rows``, ``seconds``,
  ``window_seconds``, ``input_dir``, ``mismatch_rows``); a missing number shows as "-".

Numbers are for people: thousands separators, percentages, latency in µs / ms / s, durations in
minutes and hours; each table heading carries the CSV column name and its definition as a
tooltip.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from . import rollout_report
from .report_devices import _DEVICE_COLS, DEVICE_JS, Col, devices_section
from .report_format import FORMAT as _FORMAT
from .report_format import col_sum as _sum
from .report_format import esc as _e
from .report_format import fmt_int, fmt_pct, fmt_us, fmt_window
from .report_format import plural as _plural
from .report_format import rows as _rows
from .report_plots import CAPTIONS, PLOTS, plot_compare, plot_lead_histogram, plot_loss_over_time, plot_worst

__all__ = ["PLOTS", "THRESHOLDS", "fmt_int", "fmt_pct", "fmt_us", "fmt_window", "level", "write_report"]
MISMATCH_ROWS = 20
# (good below, bad at or above): a tile between the two is a warning. Loss, duplicate and late rates
# as ratios; latencies in microseconds; restarts per device.
THRESHOLDS: dict[str, tuple[float, float]] = {
    "loss_rate": (0.01, 0.05),
    "dup_rate": (0.01, 0.05),
    "late_rate": (0.01, 0.05),
    "restarts_per_device": (0.1, 0.5),
    "rx_to_commit_p99_us": (10_000, 100_000),
    "gen_to_rx_p99_us": (100_000, 1_000_000),
}
# the summary of the last run that wrote a report into the same folder: the deltas' baseline
LAST_SUMMARY = "_report_last_summary.json"

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
main{max-width:1380px;margin:0 auto;padding:24px 20px 60px}
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
.two{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:14px}
@media (max-width:820px){.two{grid-template-columns:minmax(0,1fr)}}
.tile,.card,.banner,.meta,.note{overflow-wrap:anywhere}
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
.tile .d{font-size:12.5px;color:#5b6475;margin-top:3px}.worse{color:#c0392b;font-weight:600}
.better{color:#2e8540;font-weight:600}.same{color:#5b6475}
.tile.warn{border-left:5px solid #d68910}.tile.warn .v{color:#b9770e}
.banner{border-radius:8px;padding:10px 16px;margin:0 0 12px;background:#fff;border:1px solid #dde1e7}
.banner.good{border-left:6px solid #2e8540}.banner.bad{border-left:6px solid #c0392b;background:#fdf0ee}
.banner ul{margin:4px 0 0;padding-left:20px}
.scroll.x{max-height:none;overflow-x:auto;margin-bottom:12px}td small{color:#5b6475}
.pager{display:flex;flex-wrap:wrap;gap:8px;align-items:center;margin:8px 0}
.pager input{flex:1 1 220px;padding:5px 8px;font:inherit;border:1px solid #c5ccd6;border-radius:6px}
.pager button,.pager select{font:inherit;padding:4px 10px}
table.paged th{cursor:pointer;user-select:none}th[data-kind=text]{text-align:left}
table.paged th::after{content:" \\2195";color:#a3abb8;font-size:11px}
table.paged th[aria-sort=ascending]::after{content:" \\25B2";color:#1d2330}
table.paged th[aria-sort=descending]::after{content:" \\25BC";color:#1d2330}
@media (max-width:700px){main{padding:14px 10px 40px}.opt{display:none}
.tiles{grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:8px}.tile{padding:8px 10px}
.tile .v{font-size:21px}
.tile.lat .v{font-size:16px;line-height:22px}th,td{padding:4px 6px}
dl{grid-template-columns:minmax(0,1fr)}dd{margin-bottom:6px}}
dd{overflow-wrap:anywhere}
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


# ------------------------------------------------------------------------------------ HTML parts
def _tile(key: str, label: str, value: str, sub: str, state: str = "", extra: str = "") -> str:
    return (
        '<div class="tile %s" id="tile-%s"><div class="k">%s</div><div class="v">%s</div>'
        '<div class="s">%s</div>%s</div>' % (state, key, label, value, sub, extra)
    )


def level(key: str, v: Any) -> str:
    """'good', 'warn' or 'bad' for value v of THRESHOLDS[key]; '' when unknown."""
    if v is None or key not in THRESHOLDS:
        return ""
    good, bad = THRESHOLDS[key]
    return "good" if v < good else "bad" if v >= bad else "warn"


def _delta(cur: Any, prev: Any, kind: str, neutral: bool = False) -> str:
    """A change against a baseline, for a number where less is better: '▲ +0.42 pp' (worse, red),
    '▼ -1.20 ms' (better, green), '= 0' (the same)."""
    if cur is None or prev is None:
        return ""
    d = float(cur) - float(prev)
    if kind == "pct":
        text = "%+.2f pp" % (100 * d)
    elif kind == "us":
        text = ("+" if d > 0 else "") + fmt_us(d)
    else:
        text = "{:+,}".format(round(d))
    if d == 0:
        return '<span class="same">= %s</span>' % text.lstrip("+")
    cls, arrow = ("worse", "&#9650;") if d > 0 else ("better", "&#9660;")
    if neutral:
        cls = "same"
    return '<span class="%s">%s %s</span>' % (cls, arrow, text)


def _releases(tables: dict[str, pa.Table]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(newest release, the one before it) from rollout_releases, by version order."""
    rel = _rows(tables.get("rollout_releases"))
    if len(rel) < 2:
        return None
    rel.sort(key=lambda r: rollout_report.version_key(r["firmware_version"]))
    return rel[-1], rel[-2]


# The state-of-the-fleet tiles in page order, one after another (over ~100 lines): each is a few
# lines of its own, and reading them in the order the page shows them is the point.
def _tiles(s: dict[str, Any], tables: dict[str, pa.Table], prev: dict[str, Any] | None = None) -> str:
    g = s.get
    p = (prev or {}).get
    nfw = tables["by_firmware"].num_rows if "by_firmware" in tables else 0
    ntr = tables["by_transport"].num_rows if "by_transport" in tables else 0
    lat = {r["metric"]: r for r in _rows(tables.get("latency"))}
    nmis = (g("lead_mismatches") or 0) + (g("dup_flag_mismatches") or 0)
    rel = _releases(tables)

    def vs_run(col: str, kind: str, neutral: bool = False) -> str:
        d = _delta(g(col), p(col), kind, neutral) if prev else ""
        return '<div class="d">vs previous run: %s</div>' % d if d else ""

    def vs_release(rate: str) -> str:
        if rel is None:
            return ""
        new, old = rel
        return '<div class="d">%s vs %s: %s vs %s %s</div>' % (
            _e(new["firmware_version"]),
            _e(old["firmware_version"]),
            fmt_pct(new.get(rate + "_rate")),
            fmt_pct(old.get(rate + "_rate")),
            _delta(new.get(rate + "_rate"), old.get(rate + "_rate"), "pct"),
        )

    def latency(m: str) -> str:
        return "<small>p50</small>%s<br><small>p99</small>%s" % (
            fmt_us(g(m + "_p50_us")),
            fmt_us(g(m + "_p99_us")),
        )

    def measured(m: str) -> str:
        n = lat.get(m, {}).get("n")
        return "" if n is None else ", %s measured" % fmt_int(n)

    per_dev = (g("restarts") or 0) / g("devices") if g("devices") else None
    tiles = [
        _tile(
            "devices",
            "Devices",
            fmt_int(g("devices")),
            "%s boots seen · %d firmware versions · %d links" % (fmt_int(g("boots_seen")), nfw, ntr),
            extra=vs_run("devices", "int", neutral=True),
        ),
        _tile(
            "loss",
            "Loss rate",
            fmt_pct(g("loss_rate")),
            "%s messages never arrived (gaps never filled)" % fmt_int(g("lost")),
            level("loss_rate", g("loss_rate")),
            vs_run("loss_rate", "pct") + vs_release("loss"),
        ),
        _tile(
            "duplicates",
            "Duplicate rate",
            fmt_pct(g("dup_rate")),
            "%s duplicates of %s arrivals" % (fmt_int(g("duplicates")), fmt_int(g("messages"))),
            level("dup_rate", g("dup_rate")),
            vs_run("dup_rate", "pct") + vs_release("dup"),
        ),
        _tile(
            "late",
            "Late rate",
            fmt_pct(g("late_rate")),
            "%s arrivals overtaken (reordered)" % fmt_int(g("late")),
            level("late_rate", g("late_rate")),
            vs_run("late_rate", "pct") + vs_release("late"),
        ),
        _tile(
            "restarts",
            "Restarts",
            fmt_int(g("restarts")),
            "%s losses of unknown size (restarts, first contacts)" % fmt_int(g("unknown_loss_recoveries")),
            level("restarts_per_device", per_dev),
            vs_run("restarts", "int"),
        ),
        _tile(
            "bridge-latency",
            "Bridge latency",
            latency("rx_to_commit"),
            "received → committed%s" % measured("rx_to_commit"),
            "lat " + level("rx_to_commit_p99_us", g("rx_to_commit_p99_us")),
            vs_run("rx_to_commit_p99_us", "us").replace("run:", "run (p99):"),
        ),
        _tile(
            "e2e-latency",
            "End-to-end latency",
            latency("gen_to_rx"),
            "generated → received%s" % measured("gen_to_rx"),
            "lat " + level("gen_to_rx_p99_us", g("gen_to_rx_p99_us")),
            vs_run("gen_to_rx_p99_us", "us").replace("run:", "run (p99):"),
        ),
        _tile(
            "messages",
            "Messages",
            fmt_int(g("unique")),
            "unique; %s arrivals with %s duplicates, %s late"
            % (fmt_int(g("messages")), fmt_int(g("duplicates")), fmt_int(g("late"))),
        ),
        _tile(
            "overruns",
            "Lost in overruns",
            fmt_int(g("events_lost_exact")),
            "events, exact, in %s ring overruns" % fmt_int(g("overruns")),
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
    return '<div class="scroll x">%s</div>' % _table(rows, cols, sortable=False)


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


def _baseline_note(prev: dict[str, Any] | None, tables: dict[str, pa.Table]) -> str:
    """What the deltas compare with."""
    run = (
        "Changes against the previous run into this folder (%s)." % _e(prev.get("generated_at") or "earlier")
        if prev
        else "No previous run in this folder: no change against one."
    )
    rel = _releases(tables)
    if rel is not None:
        run += " Release lines: the newest release against the one before it (rollout section)."
    return run


def _page(
    s: dict[str, Any],
    tables: dict[str, pa.Table],
    prev: dict[str, Any] | None = None,
    rollout_plotted: bool = False,
) -> str:
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
        '<h2 id="state">State of the fleet</h2>',
        '<p class="note">%s Colours: green below the first threshold, amber between, red above '
        "(loss, duplicate and late rates 1%% / 5%%; restarts per device 0.1 / 0.5; bridge p99 10 ms / "
        "100 ms; end-to-end p99 100 ms / 1 s).</p>" % _baseline_note(prev, tables),
        _tiles(s, tables, prev),
        '<h2 id="rollouts">Rollouts</h2>',
        rollout_report.section(tables, rollout_plotted),
        '<h2 id="devices-h">Devices, worst first</h2>',
        '<div class="two">%s%s</div>' % (_figure("worst_devices.png"), _figure("loss_over_time.png")),
        devices_section(tables),
        '<h2 id="protocol">Protocol detail</h2>',
        "<h3>Loss, counted two ways</h3>",
        _loss_split(s, tables),
        "<h3>Order of arrival, recoveries and restarts</h3>",
        '<div class="two">%s%s</div>' % (_figure("lead_histogram.png"), _order_card(s)),
        "<h3>By firmware version</h3>",
        _figure("by_firmware.png", "wide"),
        _compare_section(tables, "firmware_version", "Firmware", "firmware version"),
        "<h3>By link</h3>",
        _figure("by_transport.png", "wide"),
        _compare_section(tables, "transport", "Link", "transport"),
        "<h3>Latency, whole fleet</h3>",
        _latency_section(tables),
        "<h3>Consistency with the bridge</h3>",
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
        "<script>%s%s</script></body></html>\n" % (_CSS, "\n".join(body), _JS, DEVICE_JS)
    )


def write_report(out_dir: str, tables: dict[str, pa.Table], summary: dict[str, Any]) -> str:
    """Write index.html and the PNG plots into out_dir; return the index path. The deltas compare
    with the summary the last report into out_dir saved (LAST_SUMMARY), and this one is saved."""
    plot_lead_histogram(tables["lead_histogram"], os.path.join(out_dir, "lead_histogram.png"))
    plot_loss_over_time(tables["loss_over_time"], os.path.join(out_dir, "loss_over_time.png"))
    plot_worst(tables["worst_devices"], os.path.join(out_dir, "worst_devices.png"))
    for dim, name in (("firmware_version", "by_firmware"), ("transport", "by_transport")):
        plot_compare(tables[name], dim, os.path.join(out_dir, name + ".png"), PLOTS[name + ".png"])
    plotted = rollout_report.plot_rollout(tables, os.path.join(out_dir, rollout_report.PLOT))
    last = os.path.join(out_dir, LAST_SUMMARY)
    prev = None
    try:
        with open(last) as f:
            prev = json.load(f)
    except (FileNotFoundError, ValueError):
        pass
    path = os.path.join(out_dir, "index.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write(_page(summary, tables, prev, plotted))
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    with open(last + ".tmp", "w") as f:
        json.dump({**summary, "generated_at": now}, f, default=str)
    os.replace(last + ".tmp", last)
    return path
