"""Incremental runs (``--incremental``): each run reads the export files no earlier run into the
same OUT read, seeds every lead domain from the state the last run left (carry.py), adds the new
rows' channel windows and recoveries to the days they belong to (and a late fill's revisions to
the days of the windows it changes), and leaves the state for the next run. The dated tables then
equal those of one full run over everything read so far.

What a run records, in OUT/_leadwire_fleet.json (`incremental`):
* `version`: the state it left, in OUT/_state/slot<version mod 2>/ (domains, points, boots);
* `files`: per export table, the files it has read in the partitions it still lists: the dates
  from `late_days` before the newest date read on (older partitions are taken as complete and
  not listed again: a file added there later is not read);
* `dates`: per dated table, the dates written (the partitions a later run merges into);
* `runs`: per bridge, the newest export run manifest read (manifests.py: the next run reads the
  files of the later ones instead of listing partitions);
* `pending`: set while a run writes the dated tables, cleared with its state. A run that finds it
  set (the one before stopped in between: the tables may hold rows its state does not) starts
  over from no state, a full recompute written the same way.

The small tables and `devices` describe the days this run wrote (the latency of its new rows).
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from leadwire.fleet import carry as C
from leadwire.fleet import rollout as R
from leadwire.fleet import transforms as T
from leadwire.fleet.arrow import to_arrow
from leadwire.fleet.extract import read_files
from leadwire.fleet.fs import join, list_files, write_text
from leadwire.fleet.manifests import new_files
from leadwire.fleet.options import BadInput
from leadwire.fleet.plan import (
    HOT,
    WHOLE,
    Latency,
    first_pass,
    lead_shape,
    profile_input,
    rollup_tables,
)
from leadwire.fleet.rollout_stage import stage_flags, stage_rollout
from leadwire.fleet.schema import PARTITION_COLUMN, TABLES
from leadwire.fleet.stages import (
    STATE_FILE,
    Run,
    Stage,
    concurrent,
    publish_remote,
    read_state,
    stage_load,
    stage_report,
    stage_small_tables,
    write_executor_table,
    write_table,
)

STATE_DIR = "_state"
# the dated tables a run writes by day: the channel windows (merged into the days written), the
# recoveries (of whole losses days: they replace theirs), and the rollout units' arrival times
# (OUT/_state/rollout_times/date=..., merged)
MERGED = ("channel_windows", "recoveries", "_rollout_times")
_MERGED_COLS = {"channel_windows": T.CHANNEL_WINDOW_COLS, "_rollout_times": R.TIME_COLS}


def _dated_path(out: str, name: str) -> str:
    if name == "_rollout_times":
        return join(out, STATE_DIR, "rollout_times")
    return join(out, "parquet", name + ".parquet")


def _version_dir(out: str, version: int) -> str:
    """Where state `version` lives: two slots taken in turn, so that writing the next one never
    touches the one the state file names (and nothing has to be deleted)."""
    return join(out, STATE_DIR, "slot%d" % (version % 2))


def stage_new_files(run: Run) -> None:
    """Which export files are new to this run (run.extra['files']: table -> [(uri, date)])."""
    spark, spec = run.spark, run.spec
    state = read_state(spark, spec.out_dir, run.out_local).get("incremental") or {}
    if state.get("pending") is not None:
        run.prog.log("the previous incremental run stopped before it recorded its state: starting over")
        state = {}
    run.extra["state"] = state
    seen = {t: set(state.get("files", {}).get(t, [])) for t in TABLES}
    newest = state.get("newest")
    since = _shift(newest, -spec.late_days) if newest else None
    with run.prog.stage("list new files in %s%s" % (spec.input_dir, " from %s" % since if since else "")):
        dates = _days(since, max(_today(), _shift(newest, 31))) if since and newest else None
        found = new_files(
            spark,
            spec.input_dir,
            state,
            lambda: {t: list_files(spark, join(spec.input_dir, t), dates) for t in TABLES},
        )
        listed, new = found.listed, found.new
        if not listed["arrivals"] and not seen["arrivals"] and not state.get("runs"):
            raise BadInput(
                "%s: no arrivals (expected DIR/arrivals/date=YYYY-MM-DD/*.parquet)" % spec.input_dir
            )
        for t in TABLES:
            run.prog.log("  %s: %d files listed, %d new" % (t, len(listed[t]), len(new[t])))
    run.extra["listed"], run.extra["files"], run.extra["runs"] = listed, new, found.runs
    if not new["arrivals"] and not new["losses"] and not new["boots"]:
        raise BadInput(
            "%s: no export files new to this run (incremental; state in %s)" % (spec.input_dir, spec.out_dir)
        )


def stage_carried_tables(run: Run) -> None:
    """The new rows through the carried lead domains; the dated tables of the days they touch
    merged with what earlier runs wrote; the roll-ups of those days."""
    spark, spec = run.spark, run.spec
    state, new = run.extra["state"], run.extra["files"]
    version = state.get("version")
    frames = {t: read_files(spark, spec.input_dir, t, [u for u, _ in new[t]]) for t in TABLES}
    domains = _state_table(spark, spec.out_dir, version, "domains", C.state_ddl(C.DOMAIN_STATE_COLS))
    points = _state_table(spark, spec.out_dir, version, "points", C.state_ddl(C.POINT_COLS))
    boots0 = _state_table(spark, spec.out_dir, version, "boots", _boots_ddl())
    with run.prog.stage("carried lead domains, new rows' windows and revisions"):
        span, total = profile_input(frames["arrivals"])
        shape = lead_shape(frames["arrivals"], span, total, lambda msg: run.prog.log("  " + msg))
        bits = None if shape == WHOLE else T.BUCKET_BITS
        dev = run.keep(first_pass(T.transform_arrivals(frames["arrivals"], spec.window_seconds), shape))
        if bits is None:
            leads = run.keep(C.transform_seeded_leads(dev, domains))
        else:  # a hot device's carried prefix state broadcast to the tasks its buckets went to
            leads = run.keep(C.transform_seeded_lead_carry(dev, domains, broadcast=shape == HOT))
        order = run.cut(C.transform_seeded_order(leads, points, bits))
        rows = C.transform_seeded_rows(order)
        counts = T.transform_latency_counts(dev, R.rollout_window(spec.window_seconds))
        parts = {
            "cw": T.transform_channel_windows(rows, with_mismatches=True),
            "rev": C.transform_revisions(order),
            "lat_dev": T.transform_device_latency(T.transform_latency_values(dev)),
            "rec": T.transform_recoveries(frames["losses"], spec.window_seconds),
            "bad": order.where("order_violation")
            .selectExpr(*T._bq(T.LEAD_KEY), "arrival", "bridge_id")
            .limit(1),
            # the fleet-level and rollout latency percentiles from one count of the values
            "fpct": T.transform_fleet_percentiles(counts),
            **R.rollout_inputs(dev, R.rollout_window(spec.window_seconds), counts),
        }
        stage = run.cut(T.transform_stack(parts))
        day = "date_format(window_start, 'yyyy-MM-dd')"
        touched = (
            stage.where("_part IN ('cw', 'rev', 'rec', 'bad')")
            .groupBy("_part", F.expr("%s AS day" % day))
            .agg(F.expr("CAST(coalesce(sum(messages), 0) AS BIGINT) AS n"))
            .collect()
        )
    bad = [r for r in touched if r["_part"] == "bad"]
    if bad:
        one = stage.where("_part = 'bad'").first()
        raise BadInput(
            "%s: device %s: a new row (arrival %s, %s) comes before rows an earlier incremental run "
            "counted in its lead domain: run once without --incremental state (delete %s)"
            % (
                spec.input_dir,
                one["device_id"],
                one["arrival"],
                one["bridge_id"],
                join(spec.out_dir, STATE_DIR),
            )
        )
    run.rows_read = sum(r["n"] for r in touched if r["_part"] == "cw")
    days = {t: sorted({r["day"] for r in touched if r["_part"] in k}) for t, k in _PARTS.items()}
    run.extra["days"] = days
    written = state.get("dates", {})
    cw_new = T.transform_unstack(stage, "cw", T.CHANNEL_WINDOW_COLS)
    rev = T.transform_unstack(stage, "rev", C.REVISION_COLS)
    rec_new = T.transform_unstack(stage, "rec", T.RECOVERY_COLS)
    with run.prog.stage("merge the days touched: %s" % (", ".join(days["channel_windows"]) or "-")):
        old_cw = _old_days(spark, spec.out_dir, "channel_windows", days["channel_windows"], written)
        old_times = _old_days(spark, spec.out_dir, "_rollout_times", days["_rollout_times"], written)
        cw = run.cut(C.transform_merge_windows(*old_cw, cw_new, rev))
        rec = run.cut(rec_new)  # of whole losses days (new_files): they replace those days
        times = run.cut(
            R.transform_merge_times(*old_times, T.transform_unstack(stage, "rtimes", R.TIME_COLS))
        )
        boots = run.cut(frames["boots"].unionByName(boots0))
        rst_all = T.transform_restarts(boots, spec.window_seconds)
        in_days = "%s IN (%s)" % (day, ", ".join("'%s'" % d for d in days["channel_windows"]) or "''")
        lat = Latency(
            T.transform_unstack(stage, "lat_dev", ["device_id", *T.LATENCY_WIDE]),
            T.transform_unstack(stage, "fpct", T.FLEET_PCT_COLS),
        )
        run.tables = {
            **rollup_tables(cw, rec, rst_all.where(in_days), lat, spec.worst_n, run.cut),
            "restarts": rst_all,
            "_mismatches": T.transform_window_mismatches(
                T.transform_unstack(stage, "cw", [*T.CHANNEL_WINDOW_COLS, "mismatch_rows"])
            ),
            # the rollout tables of the days written: their units' first and last arrival over
            # every run (merged like the windows), the latency of the new rows (as `latency`)
            "_rollout_times": times,
            "_rollout_latency": T.transform_unstack(stage, "rlat", R.LATENCY_PCT_COLS),
            "_boots": boots,
        }
        run.extra["rollout_days"] = days["channel_windows"]
        if days["channel_windows"]:  # the summary's dates: the first and last written
            run.extra["date_from"], run.extra["date_to"] = (
                days["channel_windows"][0],
                days["channel_windows"][-1],
            )
        run.devices = to_arrow(run.tables["devices"]).sort_by("device_id")
        run.rows = int(sum(run.devices.column("messages").to_pylist()))
        run.prog.log("  %d new arrival rows; the days written hold %d" % (run.rows_read, run.rows))
    run.extra["next"] = {
        "domains": C.transform_carry_state(domains, C.transform_next_domains(leads, domains)),
        "points": C.transform_carry_state(points, C.transform_next_points(order, bits)),
        "boots": boots,
    }


_PARTS = {"channel_windows": ("cw", "rev"), "recoveries": ("rec",), "_rollout_times": ("cw", "rev")}


def stage_write_dated(run: Run) -> None:
    """The merged days (dynamic partition overwrite: the other days stay), restarts and devices
    whole; `pending` recorded first (stage_new_files)."""
    out = run.spec.out_dir
    state = dict(run.extra["state"])
    _write_state_file(run, {**state, "pending": int(state.get("version") or 0) + 1})
    with run.prog.stage("write the days touched (executors) to %s" % out):
        for name in MERGED:
            if run.extra["days"][name]:
                write_table(run.tables[name], _dated_path(out, name), dated=True, dynamic=bool(state))
        write_executor_table("restarts", run.tables["restarts"], out, dynamic=False)
        write_executor_table("devices", run.tables["devices"], out, dynamic=False)


def stage_record_state(run: Run) -> None:
    """The next state written to the slot the current one does not use, then named in the state
    file (the switch)."""
    spec = run.spec
    state = run.extra["state"]
    version = int(state.get("version") or 0) + 1
    with run.prog.stage("record the state (version %d)" % version):
        for name, df in run.extra["next"].items():
            df.write.mode("overwrite").parquet(join(_version_dir(spec.out_dir, version), name))
        listed = run.extra["listed"]
        newest = max([d for t in TABLES for _, d in listed[t]] + [state.get("newest") or ""])
        keep_from = _shift(newest, -spec.late_days)
        files = {t: sorted(u for u, d in listed[t] if d >= keep_from) for t in TABLES}
        dates = {
            t: sorted(set(state.get("dates", {}).get(t, [])) | set(run.extra["days"].get(t, [])))
            for t in MERGED
        }
        inc = {
            "version": version,
            "newest": newest,
            "files": files,
            "dates": dates,
            "runs": run.extra["runs"],
        }
        _write_state_file(run, inc, last_date=newest)
    run.summary["rows_read"] = run.rows_read
    publish_remote(run)


INCREMENTAL_STAGES: list[Stage] = [
    stage_new_files,
    stage_carried_tables,
    concurrent(stage_write_dated, stage_small_tables, stage_rollout),
    stage_load,
    stage_flags,
    stage_report,
    stage_record_state,
]


def _write_state_file(run: Run, inc: dict[str, Any], last_date: str | None = None) -> None:
    spark, out = run.spark, run.spec.out_dir
    doc = read_state(spark, out, run.out_local)
    doc["incremental"] = inc
    if last_date:
        doc["last_date"] = last_date
    write_text(spark, join(out, STATE_FILE), json.dumps(doc, sort_keys=True), run.out_local)


def _state_table(spark: SparkSession, out: str, version: int | None, name: str, ddl: str) -> DataFrame:
    if version is None:
        return spark.createDataFrame([], ddl)
    return spark.read.schema(ddl).parquet(join(_version_dir(out, version), name))


def _boots_ddl() -> str:
    from leadwire.fleet.schema import spark_schema

    return spark_schema("boots", with_partition=False).simpleString()[len("struct<") : -1].replace(":", " ")


def _old_days(
    spark: SparkSession, out: str, name: str, days: list[str], written: dict[str, list[str]]
) -> list[DataFrame]:
    """The partitions of OUT's dated table `name` for `days` that earlier runs wrote ([] or one)."""
    have = sorted(set(days) & set(written.get(name, [])))
    if not have:
        return []
    path, cols = _dated_path(out, name), _MERGED_COLS[name]
    parts = [join(path, "%s=%s" % (PARTITION_COLUMN, d)) for d in have]
    return [spark.read.option("basePath", path).parquet(*parts).selectExpr(*T._bq(cols))]


def _today() -> str:
    return (dt.datetime.now(dt.UTC).date() + dt.timedelta(days=1)).isoformat()


def _shift(day: str, days: int) -> str:
    return (dt.date.fromisoformat(day) + dt.timedelta(days=days)).isoformat()


def _days(first: str, last: str) -> list[str]:
    """Every date from first to last (inclusive), at least first."""
    a, b = dt.date.fromisoformat(first), dt.date.fromisoformat(last)
    return [(a + dt.timedelta(days=i)).isoformat() for i in range(max((b - a).days, 0) + 1)]
