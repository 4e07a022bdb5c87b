"""The report's PNG plots (matplotlib, Agg): lead histogram, loss over time with its volume,
worst devices, and the comparisons by firmware and link (latency on a log axis)."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pyarrow as pa

from .report_format import fmt_int, fmt_pct
from .report_format import rows as _rows

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
    "loss_over_time.png": "Share of messages missing: gaps never filled / (unique messages + gaps never "
    "filled). Grey points: the fleet per time window; lines: pooled over 5 windows (black: the fleet), "
    "so a window with few messages does not swing them. Below: messages per window, by link.",
    "worst_devices.png": "The devices with the highest loss rate, with their gaps never filled.",
    "by_firmware.png": "Loss, duplicate and late rates, and latency percentiles (log scale), per firmware "
    "version (all rows each version sent; the rollout section above compares releases with intervals).",
    "by_transport.png": "Loss, duplicate and late rates, and latency percentiles (log scale), per link.",
}
SMOOTH_WINDOWS = 5  # loss over time: pooled over this many windows, centred


def _save(fig: Any, path: str) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_lead_histogram(h: pa.Table, path: str) -> None:
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


def _smooth(pts: list[tuple[Any, int, int]], k: int) -> list[float]:
    """Loss rate pooled over k windows centred on each one: sum(lost) / sum(unique + lost), so a
    window of few messages weighs little (a mean of rates would let it swing the line)."""
    out = []
    for i in range(len(pts)):
        lo, hi = max(0, i - k // 2), min(len(pts), i + k // 2 + 1)
        u = sum(p[1] for p in pts[lo:hi])
        lost = sum(p[2] for p in pts[lo:hi])
        out.append(100.0 * lost / (u + lost) if u + lost else 0.0)
    return out


def plot_loss_over_time(lt: pa.Table, path: str) -> None:
    """Top: loss rate per window (points: the fleet; lines: pooled over SMOOTH_WINDOWS windows, the
    fleet and each link). Bottom: the volume, messages per window by link."""
    fig, (ax, axv) = plt.subplots(
        2, 1, figsize=(7.5, 4.6), sharex=True, gridspec_kw={"height_ratios": [3, 1.3]}
    )
    rows = _rows(lt, ["window_start", "transport", "unique", "lost"])
    by_tr: dict[str, dict[Any, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for r in rows:
        for key in (str(r["transport"]), "\0fleet"):
            acc = by_tr[key][r["window_start"]]
            acc[0] += r["unique"] or 0
            acc[1] += r["lost"] or 0
    windows = sorted(by_tr.get("\0fleet", {}))
    width = (windows[1] - windows[0]) * 0.9 if len(windows) > 1 else dt.timedelta(hours=1)
    bottom = dict.fromkeys(windows, 0)
    for i, key in enumerate(sorted(by_tr)):
        pts = sorted((t, u, lo) for t, (u, lo) in by_tr[key].items())
        if not pts:
            continue
        xs = [p[0] for p in pts]
        if key == "\0fleet":
            raw = [100.0 * lo / (u + lo) if u + lo else 0.0 for _, u, lo in pts]
            ax.plot(xs, raw, ".", color="#9aa3b2", ms=3, label="fleet, per window")
            ax.plot(xs, _smooth(pts, SMOOTH_WINDOWS), color="black", lw=2, label="fleet, smoothed")
        else:
            ax.plot(xs, _smooth(pts, SMOOTH_WINDOWS), lw=1.2, alpha=0.9, label=key, color="C%d" % i)
            vol = {p[0]: p[1] + p[2] for p in pts}
            axv.bar(xs, [vol[x] for x in xs], width=width, bottom=[bottom[x] for x in xs], color="C%d" % i)
            for x in xs:
                bottom[x] += vol[x]
    if rows:
        ax.legend(fontsize=7, ncol=2)
    ax.set_ylabel("loss rate (%)")
    ax.set_ylim(bottom=0)
    ax.set_title(PLOTS["loss_over_time.png"])
    axv.set_ylabel("messages")
    axv.set_xlabel("time window start (UTC)")
    fig.autofmt_xdate()
    _save(fig, path)


def plot_worst(w: pa.Table, path: str) -> None:
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


def plot_compare(c: pa.Table, dim: str, path: str, title: str) -> None:
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
                [max(r.get(col) or 0, 1) / 1000 for r in rows],
                width=0.2,
                label=lab,
            )
        ax2.set_xticks([i + 0.3 for i in range(len(rows))], labels)
        # log axis: the bridge's ~1 ms and end-to-end ~100 ms side by side, both readable
        ax2.set_yscale("log")
        ax2.set_ylabel("latency (ms, log scale)")
        ax2.legend(fontsize=7)
    ax1.set_title("loss, duplicate and late rates", fontsize=10)
    ax2.set_title("latency percentiles", fontsize=10)
    fig.suptitle(title)
    _save(fig, path)
