"""Output columns shared by the Spark job (transforms.py) and the DuckDB oracle (oracle.py): the
contract the two independent implementations are compared on. No Spark import here."""

from __future__ import annotations

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
