"""Output columns shared by the Spark job (transforms.py) and the DuckDB oracle (oracle.py): the
contract the two independent implementations are compared on. No Spark import here."""

from __future__ import annotations

from typing import Any

# per-window message counts, summed (or maxed, for *_max) when rolled up
COUNT_COLS = [
    "messages",
    "unique",
    "duplicates",
    "duplicate_flagged",
    "dup_flag_mismatches",
    "retransmissions",
    "late",
    "lateness_seq_sum",
    "lateness_seq_max",
    "lateness_us_max",
    "reorder_depth_sum",
    "reorder_depth_max",
    "lead_eq1",
    "lead_eq0",
    "lead_gt1",
    "lead_lt0",
    "skipped",
    "lost",
    "report_head_missing",
    "lead_mismatches",
    "payload_bytes",
]
SUM_COLS = [c for c in COUNT_COLS if not c.endswith("_max")]
MAX_COLS = [c for c in COUNT_COLS if c.endswith("_max")]

# per-device recovery and restart totals, summed (recovery_us_max: maxed) when rolled up to the fleet
RECOVERY_SUMS = [
    "boots_seen",
    "restarts",
    "recovery_phases",
    "overruns",
    "events_lost_exact",
    "unknown_loss_recoveries",
    "recovery_us_sum",
]
ROLLUP_SUMS = [*SUM_COLS, *RECOVERY_SUMS]
ROLLUP_MAXES = [*MAX_COLS, "recovery_us_max"]
RATE_COLS = ["loss_rate", "dup_rate", "late_rate"]

# The fleet-level latency percentile columns. The job's are exact (compared cell for cell with
# the DuckDB oracle); check_fleet_latency checks them against numpy on the raw values, a group
# over a size bound only within a rank error (an exact answer passes either check).
LATENCY_METRIC_NAMES = ("rx_to_commit", "gen_to_rx")
LATENCY_QUANTILES = (50, 95, 99)
LATENCY_WIDE_COLS = ["%s_p%d_us" % (m, q) for m in LATENCY_METRIC_NAMES for q in LATENCY_QUANTILES]
APPROX_COLUMNS: dict[str, list[str]] = {
    "latency": ["p%d" % q for q in LATENCY_QUANTILES],
    "summary": LATENCY_WIDE_COLS,
    "by_firmware": LATENCY_WIDE_COLS,
    "by_transport": LATENCY_WIDE_COLS,
}


def without_approx(tables: dict[str, Any]) -> dict[str, Any]:
    """The tables (pandas) without the fleet-level percentile columns (APPROX_COLUMNS): what to
    compare cell for cell with a job whose fleet-level percentiles may be approximate."""
    return {
        n: t.drop(columns=[c for c in APPROX_COLUMNS.get(n, []) if c in t.columns]) for n, t in tables.items()
    }


def check_fleet_latency(export_dir: str, tables: dict[str, Any], exact_max: int, accuracy: int) -> list[str]:
    """Every fleet-level percentile of the job's tables (pandas) against the latency values of the
    whole export (numpy): a group of at most exact_max values equal to numpy's linear percentile
    (relative 1e-9); a larger one a value whose rank is within n / accuracy (+1) of p * n.
    Returns the differences ([] when all hold)."""
    import numpy as np
    import pyarrow.dataset as ds

    a = ds.dataset(export_dir.rstrip("/") + "/arrivals", format="parquet", partitioning="hive").to_table(
        columns=["firmware_version", "transport", "host_rx_ts", "host_commit_ts", "gen_ts"]
    )

    def us(c: str) -> Any:
        return a.column(c).cast("int64").to_numpy(zero_copy_only=False)

    rx, gen_null = us("host_rx_ts"), np.asarray(a.column("gen_ts").is_null())
    gen = a.column("gen_ts").fill_null(0).cast("int64").to_numpy()
    metric = {
        "rx_to_commit": (us("host_commit_ts") - rx, np.ones(len(rx), bool)),
        "gen_to_rx": (rx - gen, ~gen_null),
    }
    dims = {
        d: np.array(a.column(d).cast("string").to_pylist(), dtype=object)
        for d in ("firmware_version", "transport")
    }
    cells: list[tuple[str, str, Any, str, int, float]] = []  # (table, dim, key, metric, quantile, got)
    for _, r in tables["latency"].iterrows():
        cells += [("latency", "", None, r["metric"], q, r["p%d" % q]) for q in LATENCY_QUANTILES]
    for name, dim in (("summary", ""), ("by_firmware", "firmware_version"), ("by_transport", "transport")):
        for _, r in tables[name].iterrows():
            for m in LATENCY_METRIC_NAMES:
                cells += [
                    (name, dim, r[dim] if dim else None, m, q, r["%s_p%d_us" % (m, q)])
                    for q in LATENCY_QUANTILES
                ]
    diffs = []
    for name, dim, key, m, q, got in cells:
        values, known = metric[m]
        v = np.sort(values[known & (dims[dim] == key)] if dim else values[known])
        n, p = len(v), q / 100
        if n == 0:
            ok = got is None or got != got
        elif n <= exact_max:
            want = float(np.percentile(v, q))
            ok = abs(float(got) - want) <= 1e-9 * max(abs(want), 1.0)
        else:
            lo, hi = np.searchsorted(v, got, "left"), np.searchsorted(v, got, "right")
            ok = hi >= p * n - n / accuracy - 1 and lo <= p * n + n / accuracy + 1
        if not ok:
            diffs.append("%s %s %s p%d: %r (n=%d)" % (name, key or "fleet", m, q, got, n))
    return diffs


# the rollout's regression table (rollout.py): one row per (release, metric) against the release
# before it; the webhook's document (webhook.py) carries a subset of these by name
REGRESSION_COLS = [
    "firmware_version",
    "previous_version",
    "metric",
    "devices_seen",
    "rate",
    "lo",
    "hi",
    "previous_devices_seen",
    "previous_rate",
    "previous_lo",
    "previous_hi",
    "regression",
    "moved_devices",
    "before_rate",
    "before_lo",
    "before_hi",
    "after_rate",
    "after_lo",
    "after_hi",
    "same_devices_regression",
]
