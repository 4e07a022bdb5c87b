"""The fleet report (host/fleet/report.py): no Spark.

From small hand-made tables: the number formats exactly; the tiles, the two loss counts and how
they reconcile, the consistency section; the page in headless Chromium: every plot loads, the
per-device table sorts by a click, the screenshot is not blank. From the DuckDB oracle's tables of
a synthetic rollout (120 devices, one release made worse): the operations page in Chromium at
1400 and 390 px: state against the previous run and release, the regression, the device table
fitting, filtering and paging; numbers read from the page's text; screenshots kept in
/tmp/leadwire-report/ (REPORT_SHOTS) to be looked at.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from leadwire.fleet.report import PLOTS, fmt_int, fmt_pct, fmt_us, fmt_window, level, write_report

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def test_numbers_are_formatted_for_people() -> None:
    assert [fmt_int(v) for v in (0, 999, 1000, 236504, 1234567.6, None)] == [
        "0",
        "999",
        "1,000",
        "236,504",
        "1,234,568",
        "-",
    ]
    assert [fmt_pct(v) for v in (0, 0.00934924, 0.1485369, 0.00001234, 1.0, None)] == [
        "0%",
        "0.93%",
        "14.9%",
        "0.0012%",
        "100.0%",
        "-",
    ]
    us = (850, 999.7, 1499.0, 4792.39, 9996, 80830.0, 999_700, 1.04317e06, 59.999e6, 372e6, 24794081336, 3e11)
    assert [fmt_us(v) for v in us] == [
        "850 µs",
        "1.00 ms",
        "1.50 ms",
        "4.79 ms",
        "10.0 ms",
        "80.8 ms",
        "1.00 s",
        "1.04 s",
        "1 min 00 s",
        "6 min 12 s",
        "6.9 h",
        "3.5 d",
    ]
    assert fmt_us(-2500) == "-2.50 ms"  # a generation clock ahead of the host
    assert [fmt_window(v) for v in (3600, 900, 90, 86400)] == ["1 h", "15 min", "90 s", "1 d"]


# ------------------------------------------------------------------------------ synthetic tables
def _device(device_id: str, unique: int, lost: int, **kw: Any) -> dict[str, Any]:
    row = {
        "device_id": device_id,
        "firmware_versions": "1.0.0",
        "transports": "udp",
        "messages": unique + kw.get("duplicates", 0),
        "unique": unique,
        "duplicates": 0,
        "late": 0,
        "lost": lost,
        "loss_rate": lost / (unique + lost),
        "events_lost_exact": 0,
        "overruns": 0,
        "restarts": 0,
        "unknown_loss_recoveries": 1,
        "lead_mismatches": 0,
        "dup_flag_mismatches": 0,
        "rx_to_commit_p50_us": 1500.0,
        "rx_to_commit_p99_us": 4800.0,
        "gen_to_rx_p50_us": 20000.0,
        "gen_to_rx_p99_us": 80000.0,
    }
    row.update(kw)
    return row


# Three devices whose orders by loss rate, by gaps and by name all differ; "dev-10" after "dev-2"
# only in a natural sort. Gaps: 2,000 + 200 + 32 = 2,232; lost in overruns 2,623: 2,200 events
# in gaps, so 423 were lost before a boot's first stored event, and 32 reports never arrived
# inside their sessions.
DEVICES = [
    _device("dev-1", 50_000, 2_000, events_lost_exact=2_423, overruns=5, restarts=1, duplicates=300),
    _device("dev-2", 1_000, 200, events_lost_exact=200, overruns=2, transports="serial", late=20),
    _device("dev-10", 49_000, 32, firmware_versions="1.1.0", gen_to_rx_p99_us=None, duplicates=45),
]
SUMMARY: dict[str, Any] = {
    "devices": 3,
    "messages": 100_345,
    "rows": 100_345,
    "unique": 100_000,
    "duplicates": 345,
    "late": 20,
    "lost": 2_232,
    "loss_rate": 2_232 / 102_232,
    "dup_rate": 345 / 100_345,
    "late_rate": 20 / 100_345,
    "skipped": 2_252,
    "lead_eq1": 99_900,
    "lead_eq0": 345,
    "lead_gt1": 80,
    "lead_lt0": 20,
    "lateness_seq_max": 4,
    "reorder_depth_max": 3,
    "lateness_us_max": 2_500_000,
    "retransmissions": 7,
    "report_head_missing": 0,
    "boots_seen": 4,
    "restarts": 1,
    "recovery_phases": 11,
    "overruns": 7,
    "events_lost_exact": 2_623,
    "unknown_loss_recoveries": 4,
    "recovery_us_max": 1_250_000,
    "rx_to_commit_p50_us": 1499.0,
    "rx_to_commit_p99_us": 4798.0,
    "gen_to_rx_p50_us": 20016.0,
    "gen_to_rx_p99_us": 1.04317e06,
    "lead_mismatches": 0,
    "dup_flag_mismatches": 0,
    "mismatch_rows": 0,
    "seconds": 12.5,
    "window_seconds": 3600,
    "input_dir": "/data/export",
}


def _compare(dim: str, values: list[str]) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                dim: v,
                "devices": 1 + i,
                "unique": 50_000,
                "duplicates": 100,
                "late": 10,
                "lost": 1_116,
                "loss_rate": 0.0218,
                "dup_rate": 0.002,
                "late_rate": 0.0002,
                "events_lost_exact": 1_300,
                "overruns": 3,
                "restarts": i,
                "rx_to_commit_p50_us": 1500.0,
                "rx_to_commit_p99_us": 4800.0,
                "gen_to_rx_p50_us": 20000.0,
                "gen_to_rx_p99_us": 1.04e6,
            }
            for i, v in enumerate(values)
        ]
    )


def _tables(channel_windows: bool = True) -> dict[str, pa.Table]:
    worst = [{"rank": i + 1, **d} for i, d in enumerate(sorted(DEVICES, key=lambda d: -d["loss_rate"]))]
    t: dict[str, pa.Table] = {
        "devices": pa.Table.from_pylist(DEVICES),
        "worst_devices": pa.Table.from_pylist(worst),
        "by_firmware": _compare("firmware_version", ["1.0.0", "1.1.0"]),
        "by_transport": _compare("transport", ["serial", "udp"]),
        "loss_over_time": pa.Table.from_pylist(
            [
                {"window_start": T0 + dt.timedelta(hours=h), "transport": tr, "unique": 25_000, "lost": lo}
                for h, lo in enumerate((500, 600))
                for tr in ("udp", "serial")
            ]
        ),
        "lead_histogram": pa.Table.from_pylist(
            [
                {"kind": k, "bucket_order": o, "bucket": b, "n": n}
                for k, o, b, n in (
                    ("event", 5, "1", 70_000),
                    ("report", 5, "1", 29_900),
                    ("event", 3, "-1", 20),
                )
            ]
        ),
        "latency": pa.Table.from_pylist(
            [
                {"metric": "rx_to_commit", "n": 100_345, "p50": 1499.0, "p95": 3418.0, "p99": 4798.0},
                {"metric": "gen_to_rx", "n": 95_000, "p50": 20016.0, "p95": 53780.0, "p99": 1.04317e06},
            ]
        ),
    }
    if channel_windows:
        t["channel_windows"] = pa.Table.from_pylist(
            [
                {"device_id": "dev-1", "kind": "event", "lost": 2_000},
                {"device_id": "dev-2", "kind": "event", "lost": 200},
                {"device_id": "dev-10", "kind": "report", "lost": 32},
            ]
        )
    return t


def _tile(page: str, key: str) -> tuple[str, str]:
    """(value, sub-line) of a headline tile, tags stripped."""
    m = re.search(r'id="tile-%s">.*?<div class="v">(.*?)</div><div class="s">(.*?)</div>' % key, page, re.S)
    assert m, key
    value, sub = (" ".join(re.sub(r"<[^>]+>", " ", g).split()) for g in m.groups())
    return value, sub


@pytest.fixture()
def report(tmp_path: Path) -> Path:
    write_report(str(tmp_path), _tables(), SUMMARY)
    return tmp_path


def test_tiles_and_the_two_loss_counts(report: Path) -> None:
    page = (report / "index.html").read_text()
    assert _tile(page, "devices")[0] == "3"
    assert _tile(page, "messages") == ("100,000", "unique; 100,345 arrivals with 345 duplicates, 20 late")
    assert _tile(page, "loss") == ("2.18%", "2,232 messages never arrived (gaps never filled)")
    assert _tile(page, "overruns") == ("2,623", "events, exact, in 7 ring overruns")
    assert _tile(page, "bridge-latency")[0] == "p50 1.50 ms p99 4.80 ms"
    assert _tile(page, "e2e-latency") == ("p50 20.0 ms p99 1.04 s", "generated → received, 95,000 measured")
    assert _tile(page, "restarts")[0] == "1"
    assert _tile(page, "consistency")[0] == "OK"
    # the two loss counts, split and reconciled with this run's numbers
    assert "2,200 in event rings + 32 in report sessions" in page
    assert "<b>423</b> events were lost in overruns before the first event the bridge stored" in page
    assert "<b>32</b> gaps are not overrun losses but reports that never arrived inside their push" in page
    assert "<b>4</b> recoveries had a loss of unknown size" in page
    assert "Every stored lead and duplicate flag equals the recomputation." in page
    for png in PLOTS:
        assert (report / png).stat().st_size > 5_000
        assert 'src="%s"' % png in page
    # no column names where words belong; raw values only in data-v (for sorting) and tooltips
    assert "loss_rate 0." not in page and "events_lost_exact 2623" not in page
    # every device in the page's data (the script pages through it): [text, raw value] per cell
    data = json.loads(
        re.search(r'<script type="application/json" id="device-data">(.*?)</script>', page).group(1)
    )
    assert [r[0][0] for r in data["rows"]] == ["dev-2", "dev-1", "dev-10"]
    assert data["rows"][1][6] == ["2,000", 2000]
    # thresholds: 2.18% loss is between 1% and 5% (amber); no previous run, no release lines
    assert 'class="tile warn" id="tile-loss"' in page and 'class="tile good" id="tile-duplicates"' in page
    assert "No previous run in this folder" in page and "vs previous run" not in page
    assert not re.search(r'(src|href)="(https?:)?//', page)  # nothing fetched from a network


def test_without_channel_windows_and_with_mismatches(tmp_path: Path) -> None:
    s = {**SUMMARY, "lead_mismatches": 2, "dup_flag_mismatches": 1, "mismatch_rows": 3}
    tables = _tables(channel_windows=False)
    tables["devices"] = pa.Table.from_pylist([{**DEVICES[0], "lead_mismatches": 2}, *DEVICES[1:]])
    tables["mismatches"] = pa.Table.from_pylist(
        [
            {
                "device_id": "dev-1",
                "boot_epoch": 7,
                "kind": "event",
                "session": 0,
                "channel": 1,
                "seq": 41,
                "arrival": 9,
                "lead": 1,
                "lead_calc": 2,
                "duplicate": False,
                "dup_calc": False,
                "rx_us": 1_767_225_600_000_000 + 1_500,
            }
        ]
    )
    page = Path(write_report(str(tmp_path), tables, s)).read_text()
    assert _tile(page, "consistency") == ("3", "2 lead and 1 duplicate-flag mismatches")
    assert 'class="tile bad" id="tile-consistency"' in page
    assert "2 stored leads and 1 duplicate flags disagree with the recomputation (3 rows" in page
    assert '<td class="t">2026-01-01 00:00:00.001</td>' in page
    assert ">Mismatches</th>" in page  # the per-device column appears only when there are some
    # without per-kind gaps: lower bounds from the device table (here they are exact)
    assert "At least <b>423</b> events (on 1 device whose overruns lost more than their gaps show)" in page
    assert "At least <b>32</b> gaps (on 1 device with more gaps than events lost in overruns) are not" in page
    assert "2,232</div><p>in event rings and report sessions: measured" in page


# ------------------------------------------------------------------------------------- Chromium
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]

# Appended to a copy of the page (same folder, so the plots resolve): after the page's own load
# handler, click headings of the device table and record the device order after each click.
CHECK = """<script>
window.addEventListener('load', function(){ setTimeout(function(){
  var t = document.getElementById('devices'), out = {};
  function order(){ return Array.prototype.map.call(t.tBodies[0].rows, function(r){
    return r.cells[0].textContent + '=' + r.cells[6].textContent; }); }
  function head(label){ return Array.prototype.filter.call(t.tHead.rows[0].cells, function(th){
    return th.textContent === label; })[0]; }
  out.initial = order();
  head('Gaps never filled').click(); out.gaps_first = order();
  out.aria = head('Gaps never filled').getAttribute('aria-sort');
  head('Gaps never filled').click(); out.gaps_again = order();
  head('Device').click(); out.device = order();
  head('End-to-end p99').click(); out.e2e = order();
  var pre = document.createElement('pre'); pre.id = 'check'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}, 0); });
</script>"""


def _chromium(tmp: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium once, in its own process group, killed whole at the end."""
    assert CHROMIUM
    cmd = [CHROMIUM, *FLAGS, "--user-data-dir=%s" % (tmp / "profile"), *args, url]
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True
    )
    try:
        out, _ = p.communicate(timeout=90)
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    return subprocess.CompletedProcess(cmd, p.returncode, out, "")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian: apt-get install chromium)")
def test_page_in_headless_chromium(report: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("chromium")
    page = (report / "index.html").read_text()
    (report / "check.html").write_text(page.replace("</body>", CHECK + "</body>"))
    dom = _chromium(tmp, (report / "check.html").as_uri(), "--virtual-time-budget=10000", "--dump-dom").stdout
    assert re.search(r'<body data-plots-loaded="5/5"', dom), dom[:300]
    assert '<p class="bad">plot not found' not in dom
    m = re.search(r'<pre id="check">(.*?)</pre>', dom, re.S)
    assert m, "the check script did not run"
    got = json.loads(m.group(1).replace("&quot;", '"'))
    assert got == {
        "initial": ["dev-2=200", "dev-1=2,000", "dev-10=32"],  # worst loss rate first
        "gaps_first": ["dev-1=2,000", "dev-2=200", "dev-10=32"],  # a number: high to low first
        "aria": "descending",
        "gaps_again": ["dev-10=32", "dev-2=200", "dev-1=2,000"],
        "device": ["dev-1=2,000", "dev-2=200", "dev-10=32"],  # text: natural order
        "e2e": ["dev-1=2,000", "dev-2=200", "dev-10=32"],  # dev-10 has none: last
    }
    assert _tile(dom, "loss")[0] == "2.18%" and _tile(dom, "e2e-latency")[0] == "p50 20.0 ms p99 1.04 s"

    # a plot that is missing says so on the page
    os.remove(report / "by_transport.png")
    dom = _chromium(tmp, (report / "index.html").as_uri(), "--virtual-time-budget=5000", "--dump-dom").stdout
    assert 'data-plots-loaded="4/5"' in dom and '<p class="bad">plot not found: by_transport.png</p>' in dom

    # what a person sees: the screenshot is not blank (many colours, dark text on light ground)
    shot = tmp / "report.png"
    _chromium(tmp, (report / "index.html").as_uri(), "--window-size=1280,1600", "--screenshot=%s" % shot)
    from PIL import Image

    with Image.open(shot) as im:
        assert im.size == (1280, 1600)
        colours = im.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 200


# ------------------------------------------------------------------- the operations page, Chromium
REPORT_SHOTS = Path("/tmp/leadwire-report")
OPS_CHECK = """<script>
window.addEventListener('load', function(){ setTimeout(function(){
  var t = document.getElementById('devices'), out = {};
  function info(){ return document.getElementById('device-info').textContent; }
  function first(){ return t.tBodies[0].rows[0].cells[0].textContent; }
  function head(label){ return Array.prototype.filter.call(t.tHead.rows[0].cells, function(th){
    return th.textContent === label; })[0]; }
  out.page_width = document.documentElement.scrollWidth;
  out.table_fits = t.parentNode.scrollWidth <= t.parentNode.clientWidth;
  out.info = info(); out.rows = t.tBodies[0].rows.length; out.first = first();
  document.getElementById('device-next').click(); out.next = info();
  document.getElementById('device-next').click(); out.last = info();
  out.last_rows = t.tBodies[0].rows.length;
  var f = document.getElementById('device-filter'); f.value = 'dev-001';
  f.dispatchEvent(new Event('input')); out.filtered = info();
  out.filtered_ids = Array.prototype.map.call(t.tBodies[0].rows, function(r){
    return r.cells[0].textContent; });
  f.value = ''; f.dispatchEvent(new Event('input'));
  head('Gaps never filled').click(); out.most_gaps = first();
  var pre = document.createElement('pre'); pre.id = 'check'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
  if (window.parent !== window) window.parent.postMessage(JSON.stringify(out), '*');
}, 0); });
</script>"""
# Headless Chromium lays a page out at least 500 px wide, whatever --window-size says; a phone
# width is checked in an iframe of that width (the page inside reports back by postMessage).
FRAME = """<!doctype html><body style="margin:0"><iframe src="check.html" width="%d" height="3000"
style="border:0"></iframe><script>window.addEventListener('message', function(e){
var p = document.createElement('pre'); p.id = 'check'; p.textContent = e.data;
document.body.appendChild(p); });</script></body>"""


def _ops_report(tmp: Path) -> tuple[Path, dict[str, Any], dict[str, pa.Table]]:
    """A synthetic rollout (120 devices, 1.1.0 made worse) through the DuckDB oracle, written as a
    report twice into one folder: the second run's page shows the change against the first."""
    pytest.importorskip("duckdb")
    from leadwire.fleet.oracle import run_oracle
    from leadwire.fleet.rollout_oracle import run_rollout_oracle
    from leadwire.fleet.rollout_synth import RolloutConfig, rollout_synth_config, write_rollout

    exp, out = tmp / "export", tmp / "report"
    out.mkdir()
    first: dict[str, Any] = {}
    for rows, worse in ((10_000, None), (16_000, "1.1.0")):
        cfg = rollout_synth_config(rows=rows, devices=120, seed=3)
        write_rollout(cfg, RolloutConfig(worse=worse, extra_loss=0.05, latency_factor=2.0), str(exp))
        frames = {**run_oracle(str(exp)), **run_rollout_oracle(str(exp))}
        summary = {**frames["summary"].iloc[0].to_dict(), "window_seconds": 3600, "input_dir": str(exp)}
        tables = {k: pa.Table.from_pandas(v, preserve_index=False) for k, v in frames.items()}
        write_report(str(out), tables, summary)
        first = first or summary
    return out, {"first": first, "second": summary}, tables


@pytest.mark.timeout(240)
@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian: apt-get install chromium)")
def test_report_operations_page_in_chromium_1400_and_390(tmp_path: Path) -> None:
    out, runs, tables = _ops_report(tmp_path)
    page = (out / "index.html").read_text()
    # the order of an operations page: state, rollouts, worst devices, then the protocol detail
    heads = [page.index(h) for h in ('id="state"', 'id="rollouts"', 'id="devices-h"', 'id="protocol"')]
    assert heads == sorted(heads)
    (out / "check.html").write_text(page.replace("</body>", OPS_CHECK + "</body>"))
    devices = tables["devices"].to_pylist()
    most_gaps = max(devices, key=lambda d: (d["lost"], -devices.index(d)))["device_id"]
    REPORT_SHOTS.mkdir(exist_ok=True)
    for width in (1400, 390):
        prof = tmp_path / ("chromium-%d" % width)
        prof.mkdir()
        (out / "frame.html").write_text(FRAME % width)
        url = (out / ("check.html" if width >= 500 else "frame.html")).as_uri()
        size = "--window-size=%d,2400" % max(width, 500)
        dom = _chromium(prof, url, size, "--virtual-time-budget=10000", "--dump-dom").stdout
        m = re.search(r'<pre id="check">(.*?)</pre>', dom, re.S)
        assert m, dom[:300]
        got = json.loads(m.group(1).replace("&quot;", '"'))
        assert got["page_width"] <= width  # nothing cut at the page's edge
        if width == 1400:
            assert got["table_fits"]  # every column of the device table visible without scrolling it
            _check_ops_text(dom, runs["second"], runs["first"], tables)
        assert (got["info"], got["rows"]) == ("devices 1\u201350 of 120", 50)
        assert (got["next"], got["last"], got["last_rows"]) == (
            "devices 51\u2013100 of 120",
            "devices 101\u2013120 of 120",
            20,
        )
        assert got["filtered"] == "devices 1\u201310 of 10 (filtered from 120)"
        assert sorted(got["filtered_ids"]) == ["dev-%04d" % i for i in range(10, 20)]
        assert got["most_gaps"] == most_gaps
        shot = REPORT_SHOTS / ("report-%d.png" % width)
        _chromium(
            prof, (out / "index.html").as_uri(), "--window-size=%d,3000" % width, "--screenshot=%s" % shot
        )
        from PIL import Image

        with Image.open(shot) as im:
            assert im.size == (width, 3000)
            colours = im.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colours is not None and len(colours) > 200


def _check_ops_text(dom: str, s: dict[str, Any], prev: dict[str, Any], tables: dict[str, pa.Table]) -> None:
    """The numbers on the page, read from its text, against the tables and the two summaries."""
    assert 'data-plots-loaded="6/6"' in dom, dom[:300]
    assert _tile(dom, "loss")[0] == fmt_pct(s["loss_rate"])
    assert _tile(dom, "devices")[0] == "120"
    loss_tile = re.search(r'id="tile-loss">(.*?)</div></div>', dom, re.S).group(1)
    assert (
        "vs previous run: " in loss_tile
        and "%+.2f pp" % (100 * (s["loss_rate"] - prev["loss_rate"])) in loss_tile
    )
    assert ("tile %s" % level("loss_rate", s["loss_rate"])) in dom.split('id="tile-loss"')[0][-30:]
    verdict = re.sub(r"<[^>]+>", "", re.search(r'id="rollout-verdict">(.*?)</div>', dom, re.S).group(1))
    reg = [r for r in tables["rollout_regressions"].to_pylist() if r["regression"]]
    assert [(r["firmware_version"], r["metric"]) for r in reg] == [("1.1.0", "loss")]
    want = "1.1.0 loss rate %s vs 1.0.0 %s" % (fmt_pct(reg[0]["rate"]), fmt_pct(reg[0]["previous_rate"]))
    assert want in verdict, verdict
    rel = {r["firmware_version"]: r for r in tables["rollout_releases"].to_pylist()}
    row = re.search(r'<tr data-release="1.1.0">(.*?)</tr>', dom, re.S).group(1)
    assert '<td class="bad">%s' % fmt_pct(rel["1.1.0"]["loss_rate"]) in row
