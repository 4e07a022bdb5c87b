"""The report's device table: every device as JSON in the page, rendered a page at a time by an
inline script that filters and sorts it (no network, no row limit)."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from .report_format import FORMAT, esc, plural
from .report_format import rows as _rows

PAGE_ROWS = 50  # device table rows per page; the page holds every device (client-side paging)

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

# Every device, as JSON in the page (one [text, raw value] pair per cell); the script renders one
# page of it at a time, filters by the text columns and sorts by a heading (numbers by raw value,
# first click high to low; text A to Z; again: reversed; stable: ties keep the order before).
DEVICE_JS = """
(function(){
var el=document.getElementById('device-data');if(!el)return;
var d=JSON.parse(el.textContent),cols=d.cols,rows=d.rows,base=rows.slice(),view=base;
var t=document.getElementById('devices'),body=t.tBodies[0];
var info=document.getElementById('device-info'),prev=document.getElementById('device-prev'),
next=document.getElementById('device-next'),size=document.getElementById('device-size'),
filt=document.getElementById('device-filter');
var st={q:'',sort:-1,desc:true,page:0,size:d.page};
function esc(s){return String(s).replace(/&/g,'&amp;').replace(/</g,'&lt;');}
function n(x){return x.toLocaleString('en-US');}
function sort(){var i=st.sort,num=cols[i][2]!=='text';
base=base.map(function(r,j){var v=num?(r[i][1]===null?-Infinity:r[i][1]):r[i][0];return [v,j,r];});
base.sort(function(a,b){var c=num?a[0]-b[0]:String(a[0]).localeCompare(String(b[0]),undefined,{numeric:true});
if(c!==c)c=0;return (st.desc?-c:c)||a[1]-b[1];});base=base.map(function(x){return x[2];});}
function apply(){var q=st.q.toLowerCase();
view=q?base.filter(function(r){return d.text.some(function(i){
return String(r[i][0]).toLowerCase().indexOf(q)>=0;});}):base;
render();}
function render(){var total=view.length,pages=Math.max(1,Math.ceil(total/st.size));
if(st.page>=pages)st.page=pages-1;var a=st.page*st.size,b=Math.min(total,a+st.size),h=[];
for(var k=a;k<b;k++){var r=view[k],c=[];for(var i=0;i<cols.length;i++){
var txt=cols[i][2]==='text',cls=(txt?'t':'')+(cols[i][3]?' opt':'');
c.push('<td class="'+cls+'"'+(txt?'':' data-v="'+(r[i][1]===null?'':r[i][1])+'"')+'>'+esc(r[i][0])+'</td>');}
h.push('<tr>'+c.join('')+'</tr>');}
body.innerHTML=h.join('');
info.textContent=total?('devices '+n(a+1)+'\u2013'+n(b)+' of '+n(total)+
(total<rows.length?' (filtered from '+n(rows.length)+')':'')):'no device matches';
prev.disabled=st.page===0;next.disabled=st.page>=pages-1;}
Array.prototype.forEach.call(t.tHead.rows[0].cells,function(th,i){th.tabIndex=0;
function go(){var num=cols[i][2]!=='text';st.desc=st.sort===i?!st.desc:num;st.sort=i;st.page=0;
Array.prototype.forEach.call(t.tHead.rows[0].cells,function(x){x.removeAttribute('aria-sort');});
th.setAttribute('aria-sort',st.desc?'descending':'ascending');sort();apply();}
th.addEventListener('click',go);th.addEventListener('keydown',function(e){if(e.key==='Enter')go();});});
filt.addEventListener('input',function(){st.q=filt.value;st.page=0;apply();});
prev.addEventListener('click',function(){st.page--;render();});
next.addEventListener('click',function(){st.page++;render();});
size.addEventListener('change',function(){st.size=parseInt(size.value,10);st.page=0;render();});
apply();})();
"""
# columns hidden on a narrow screen (the table keeps device, loss and gaps there)
_NARROW_HIDDEN = {
    "firmware_versions",
    "transports",
    "duplicates",
    "late",
    "overruns",
    "unknown_loss_recoveries",
}
_NARROW_HIDDEN |= {"rx_to_commit_p99_us", "events_lost_exact", "restarts"}


def _cell(kind: str, v: Any) -> list[Any]:
    """[text, raw]: what the page shows and what it sorts by."""
    if kind == "text":
        return ["-" if v is None else str(v), None]
    raw = None if v is None else int(v) if kind == "int" else float(v)
    return [FORMAT[kind](v), raw]


def devices_section(tables: dict[str, pa.Table]) -> str:
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
    top = dev.sort_by([o for o in order if o[0] in dev.column_names])
    cols = list(_DEVICE_COLS)
    rows = _rows(top, [c[0] for c in cols] + ["lead_mismatches", "dup_flag_mismatches"])
    if any(r.get("lead_mismatches") or r.get("dup_flag_mismatches") for r in rows):
        cols.append(_MISMATCH_COL)
        for r in rows:
            r["_mismatches"] = (r.get("lead_mismatches") or 0) + (r.get("dup_flag_mismatches") or 0)
    data = {
        "cols": [[k, label, kind, k in _NARROW_HIDDEN] for k, label, kind, _ in cols],
        "text": [i for i, c in enumerate(cols) if c[2] == "text"],
        "page": PAGE_ROWS,
        "rows": [[_cell(kind, r.get(k)) for k, _, kind, _ in cols] for r in rows],
    }
    head = "".join(
        '<th data-kind="%s" data-col="%s" title="%s: %s"%s%s>%s</th>'
        % (
            kind,
            k,
            esc(k.lstrip("_")),
            esc(desc),
            ' aria-sort="descending"' if k == "loss_rate" else "",
            ' class="opt"' if k in _NARROW_HIDDEN else "",
            esc(label),
        )
        for k, label, kind, desc in cols
    )
    sizes = "".join(
        "<option%s>%d</option>" % (" selected" if z == PAGE_ROWS else "", z) for z in (25, 50, 100, 500)
    )
    blob = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return (
        '<p class="note">%s, worst loss rate first. Filter by device, firmware or link; click a heading '
        "to sort (again to reverse); hover a heading for its definition. Also in "
        '<a href="csv/devices.csv">csv/devices.csv</a>.</p>'
        '<div class="pager"><input id="device-filter" type="search" placeholder="Filter: device, firmware, '
        'link" aria-label="filter devices"><button id="device-prev" type="button">&lsaquo; Previous</button>'
        '<span id="device-info"></span><button id="device-next" type="button">Next &rsaquo;</button>'
        '<label>rows <select id="device-size">%s</select></label></div>'
        '<div class="scroll x"><table id="devices" class="paged"><thead><tr>%s</tr></thead><tbody></tbody>'
        '</table></div><script type="application/json" id="device-data">%s</script>'
        % (plural(n, "device"), sizes, head, blob)
    )
