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
