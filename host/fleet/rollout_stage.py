"""The fleet job's rollout stages (stages.STAGES runs them): the rollout tables beside the small
tables (written with them, shown in the report), then the regression flags delivered
(webhook.deliver: OUT/regressions.json, a POST to the run's webhook, the exit status in the
summary as `regression_status`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from leadwire.fleet import transforms as T
from leadwire.fleet.plan import collect_small, sort_table
from leadwire.fleet.rollout import ROLLOUT_WINDOW_SECONDS, rollout_tables
from leadwire.fleet.webhook import deliver

if TYPE_CHECKING:
    from leadwire.fleet.stages import Run

ROLLOUT_ORDER = {
    "rollout_windows": ["firmware_version", "window_start"],
    "rollout_releases": ["firmware_version"],
    "rollout_cohorts": ["firmware_version", "cohort"],
    "rollout_before_after": ["from_version", "to_version", "side"],
    "rollout_regressions": ["firmware_version", "metric"],
}


def rollout_window(window_seconds: int) -> int:
    """A day when the job's window divides one (the rollout tables need a multiple of it), else
    the job's window."""
    return ROLLOUT_WINDOW_SECONDS if ROLLOUT_WINDOW_SECONDS % window_seconds == 0 else window_seconds


def stage_rollout(run: Run) -> None:
    """The ROLLOUT_TABLES from the stage's channel windows, the arrivals in range (a second, narrow
    read: device, firmware and times) and the boots, collected into run.collected."""
    spec = run.spec
    assert run.inputs is not None
    with run.prog.stage("rollouts (per release and day, intervals, regressions)"):
        since, until = spec.dates.since_us(), spec.dates.until_us()
        arrivals = T.transform_arrivals(run.inputs.arrivals, spec.window_seconds)
        arrivals = arrivals.where(T.in_range(F.col("rx_us"), since, until))
        tables = rollout_tables(
            run.tables["channel_windows"],
            arrivals,
            run.inputs.boots,
            rollout_window(spec.window_seconds),
            since,
            until,
            cut=run.cut,
        )
        # one Spark job for the five (stacked), split and sorted on the driver
        for name, t in collect_small(tables).items():
            run.collected[name] = sort_table(t, ROLLOUT_ORDER[name])
            run.prog.log("  %s: %d rows" % (name, t.num_rows))


def stage_flags(run: Run) -> None:
    """The flagged regressions to OUT/regressions.json and, when the run has a webhook, to it."""
    reg = run.collected.get("rollout_regressions")
    rows = reg.to_pylist() if reg is not None else []
    doc = {"out": run.spec.out_dir, "from": run.spec.dates.first, "to": run.spec.dates.last}
    status = deliver(rows, run.local_dir, run.spec.webhook, doc, log=lambda m: run.prog.log("  " + m))
    run.summary["regressions"] = sum(1 for r in rows if r.get("regression"))
    run.summary["regression_status"] = status
