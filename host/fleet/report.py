"""HTML report (index.html) with PNG plots, from the small collected output tables."""

from __future__ import annotations

import html
import os
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import pyarrow as pa

PLOTS = {
    "lead_histogram.png": "Lead histogram (recomputed, spec 000)",
    "loss_over_time.png": "Loss rate over time (gaps never filled)",
    "worst_devices.png": "Worst devices by loss rate",
    "by_firmware.png": "By firmware version",
    "by_transport.png": "By transport",
}

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;font-size:13px;margin:0.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}
.bad{color:#b00;font-weight:bold}.ok{color:#070;font-weight:bold}
img{max-width:100%;border:1px solid #eee;margin:0.5em 0}
"""


def _df(t: pa.Table) -> pd.DataFrame:
    return t.to_pandas()


def _plot_lead_histogram(h: pd.DataFrame, path: str) -> None:
    fig, ax = plt.subplots(figsize=(8, 3.8))
    if len(h):
        g = h.groupby(["bucket_order", "bucket", "kind"], as_index=False)["n"].sum()
        labels = g.drop_duplicates("bucket_order").sort_values("bucket_order")
        x = {o: i for i, o in enumerate(labels["bucket_order"])}
        kinds = sorted(g["kind"].unique())
        width = 0.8 / max(1, len(kinds))
        for j, k in enumerate(kinds):
            gk = g[g["kind"] == k]
            ax.bar([x[o] + j * width for o in gk["bucket_order"]], gk["n"], width=width, label=k)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(labels))], labels["bucket"])
        ax.set_yscale("log")
        ax.legend()
    ax.set_xlabel("lead")
    ax.set_ylabel("arrivals (log)")
    ax.set_title(PLOTS["lead_histogram.png"])
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _plot_loss_over_time(lt: pd.DataFrame, path: str) -> None:
    fig, ax = plt.subplots(figsize=(9, 3.8))
    if len(lt):
        for tr, g in lt.groupby("transport"):
            g = g.sort_values("window_start")
            ax.plot(g["window_start"], 100 * g["loss_rate"], marker=".", label=str(tr))
        tot = lt.groupby("window_start")[["unique", "lost"]].sum().sort_index()
        den = (tot["unique"] + tot["lost"]).where(lambda s: s > 0)
        ax.plot(tot.index, 100 * tot["lost"] / den, color="black", lw=2, label="fleet")
        ax.legend()
    ax.set_ylabel("loss rate (%)")
    ax.set_title(PLOTS["loss_over_time.png"])
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _plot_worst(w: pd.DataFrame, path: str) -> None:
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.35 * len(w) + 1)))
    if len(w):
        w = w.sort_values("rank", ascending=False)
        ax.barh(w["device_id"], 100 * w["loss_rate"], color="#c44")
        for y, (lr, lost) in enumerate(zip(w["loss_rate"], w["lost"], strict=True)):
            ax.text(100 * lr, y, " %d lost" % lost, va="center", fontsize=8)
    ax.set_xlabel("loss rate (%)")
    ax.set_title(PLOTS["worst_devices.png"])
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _plot_compare(c: pd.DataFrame, dim: str, path: str, title: str) -> None:
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    if len(c):
        c = c.sort_values(dim)
        labels = c[dim].astype(str).tolist()
        rates = [("loss_rate", "loss"), ("dup_rate", "duplicate"), ("late_rate", "late")]
        width = 0.8 / len(rates)
        for j, (col, lab) in enumerate(rates):
            ax1.bar([i + j * width for i in range(len(c))], 100 * c[col], width=width, label=lab)
        ax1.set_xticks([i + 0.4 - width / 2 for i in range(len(c))], labels)
        ax1.set_ylabel("% of messages")
        ax1.legend(fontsize=8)
        for j, col in enumerate(
            ["rx_to_commit_p50_us", "rx_to_commit_p99_us", "gen_to_rx_p50_us", "gen_to_rx_p99_us"]
        ):
            ax2.bar(
                [i + j * 0.2 for i in range(len(c))],
                c[col].fillna(0) / 1000,
                width=0.2,
                label=col.replace("_us", ""),
            )
        ax2.set_xticks([i + 0.3 for i in range(len(c))], labels)
        ax2.set_ylabel("latency (ms)")
        ax2.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _table_html(df: pd.DataFrame, cols: list[str] | None = None, max_rows: int = 50) -> str:
    if cols:
        df = df[[c for c in cols if c in df.columns]]
    return df.head(max_rows).to_html(index=False, float_format=lambda v: "%.6g" % v, border=0)


def write_report(out_dir: str, tables: dict[str, pa.Table], summary: dict[str, Any]) -> str:
    """Write index.html and the PNG plots into out_dir; return the index path."""
    d = {k: _df(v) for k, v in tables.items()}
    _plot_lead_histogram(d["lead_histogram"], os.path.join(out_dir, "lead_histogram.png"))
    _plot_loss_over_time(d["loss_over_time"], os.path.join(out_dir, "loss_over_time.png"))
    _plot_worst(d["worst_devices"], os.path.join(out_dir, "worst_devices.png"))
    _plot_compare(
        d["by_firmware"],
        "firmware_version",
        os.path.join(out_dir, "by_firmware.png"),
        PLOTS["by_firmware.png"],
    )
    _plot_compare(
        d["by_transport"], "transport", os.path.join(out_dir, "by_transport.png"), PLOTS["by_transport.png"]
    )

    s = summary
    nm = int(s["lead_mismatches"]) + int(s["dup_flag_mismatches"])
    if nm:
        consistency = (
            '<p class="bad">%d stored leads and %d duplicate flags disagree with the recomputation '
            "(%d rows; all in <code>mismatches/</code>, first rows in <code>csv/mismatches.csv</code>).</p>"
            % (s["lead_mismatches"], s["dup_flag_mismatches"], s["mismatch_rows"])
        )
        if "mismatches" in d:
            consistency += _table_html(d["mismatches"], max_rows=20)
    else:
        consistency = '<p class="ok">Every stored lead and duplicate flag equals the recomputation.</p>'
    keys = [
        "devices",
        "rows",
        "messages",
        "unique",
        "duplicates",
        "late",
        "lost",
        "loss_rate",
        "skipped",
        "lead_eq1",
        "lead_eq0",
        "lead_gt1",
        "lead_lt0",
        "lateness_seq_max",
        "reorder_depth_max",
        "retransmissions",
        "report_head_missing",
        "restarts",
        "overruns",
        "events_lost_exact",
        "unknown_loss_recoveries",
        "recovery_phases",
        "recovery_us_max",
        "rx_to_commit_p50_us",
        "rx_to_commit_p99_us",
        "gen_to_rx_p50_us",
        "gen_to_rx_p99_us",
        "seconds",
    ]
    summary_rows = "".join(
        "<tr><th>%s</th><td>%s</td></tr>" % (html.escape(k), html.escape(_fmt(s.get(k)))) for k in keys
    )
    links = " ".join('<a href="csv/%s.csv">%s</a>' % (n, n) for n in sorted(tables) if n != "mismatches")
    body = [
        "<h1>leadwire fleet report</h1>",
        "<p>input <code>%s</code>, window %ss</p>" % (html.escape(str(s["input_dir"])), s["window_seconds"]),
        "<h2>Fleet summary</h2><table>%s</table>" % summary_rows,
        "<h2>Consistency with the bridge</h2>%s" % consistency,
        *('<h2>%s</h2><img src="%s" alt="%s">' % (t, f, t) for f, t in PLOTS.items()),
        "<h2>Worst devices</h2>%s"
        % _table_html(
            d["worst_devices"],
            [
                "rank",
                "device_id",
                "firmware_versions",
                "transports",
                "messages",
                "lost",
                "loss_rate",
                "duplicates",
                "late",
                "restarts",
                "overruns",
                "events_lost_exact",
                "rx_to_commit_p99_us",
            ],
        ),
        "<h2>By firmware version</h2>%s" % _table_html(d["by_firmware"]),
        "<h2>By transport</h2>%s" % _table_html(d["by_transport"]),
        "<h2>Latency (fleet, us)</h2>%s" % _table_html(d["latency"]),
        "<h2>Tables</h2><p>CSV: %s; the same as Parquet under <code>parquet/</code>.</p>" % links,
    ]
    page = (
        '<!doctype html><html><head><meta charset="utf-8"><title>leadwire fleet</title><style>%s</style>'
        % _CSS
    )
    page += "</head><body>%s</body></html>\n" % "\n".join(body)
    path = os.path.join(out_dir, "index.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
    return path


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "%.6g" % v
    return str(v)
