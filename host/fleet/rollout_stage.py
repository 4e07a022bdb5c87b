"""The fleet job's rollout stages (stages.STAGES runs them): the rollout tables beside the small
tables (written with them, shown in the report), then the regression flags delivered
(webhook.deliver: OUT/regressions.json, a POST to the run's webhook, the exit status in the
summary as `regression_status`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from leadwire.fleet.plan import collect_small, sort_table
from leadwire.fleet.rollout import rollout_tables, rollout_window
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


def stage_rollout(run: Run) -> None:
    """The ROLLOUT_TABLES from the run's channel windows, the unit times and latency percentiles its
    per-arrival stage computed (plan.rollout_parts) and the boots, over the run's range (an
    incremental run: the days it wrote, run.extra['rollout_days']), collected into run.collected."""
    spec = run.spec
    with run.prog.stage("rollouts (per release and day, intervals, regressions)"):
        days = run.extra.get("rollout_days")
        since, until = (None, None) if days is not None else (spec.dates.since_us(), spec.dates.until_us())
        tables = rollout_tables(
            run.tables["channel_windows"],
            run.tables["_rollout_times"],
            run.tables["_rollout_latency"],
            run.tables["_boots"],
            rollout_window(spec.window_seconds),
            since,
            until,
            cut=run.cut,
            days=days,
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
