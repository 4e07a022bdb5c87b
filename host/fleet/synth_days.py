"""A synthetic export that grows day by day, as bridges export it: export run k brings day k of
the devices on the punctual bridges and day k - 1 of those on a lagging bridge (its files land
in the earlier day's partitions: late arrivals for an earlier day). For the incremental tests and
bench/fleet_bench.py --days."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .schema import PARTITION_COLUMN, PARTITION_SOURCE
from .synth import _date_strings

LAGGING_BRIDGE = "bridge-b"


def export_days(tables: dict[str, pa.Table]) -> list[str]:
    """The dates of the arrivals, in order."""
    return sorted(
        set(
            _date_strings(
                tables["arrivals"].column(PARTITION_SOURCE["arrivals"]).combine_chunks()
            ).to_pylist()
        )
    )


def publish_run(tables: dict[str, pa.Table], export_dir: str, k: int, days: list[str]) -> int:
    """Export run k (0 .. len(days)): day k's rows of the punctual bridges and day k - 1's of the
    lagging one, written as new files (part-r<k>-<n>.parquet) into their date partitions.
    Returns the arrival rows written."""
    wanted = {
        d: b
        for d, b in ((days[k] if k < len(days) else None, False), (days[k - 1] if k else None, True))
        if d
    }
    written = 0
    for name, table in tables.items():
        date = _date_strings(table.column(PARTITION_SOURCE[name]).combine_chunks())
        lagging = pc.equal(table.column("bridge_id"), LAGGING_BRIDGE)
        for day, lag in wanted.items():
            mask = pc.and_(pc.equal(date, day), lagging if lag else pc.invert(lagging))
            part = table.filter(mask)
            if not part.num_rows:
                continue
            folder = os.path.join(export_dir, name, "%s=%s" % (PARTITION_COLUMN, day))
            os.makedirs(folder, exist_ok=True)
            pq.write_table(part, os.path.join(folder, "part-r%d-%d.parquet" % (k, int(lag))))
            if name == "arrivals":
                written += part.num_rows
    return written
