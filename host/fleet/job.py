"""The fleet job: extract -> transforms -> load.

Entry points:
* :func:`run_job` - the public function (the CLI, the benchmark and the bridge's end-to-end test
  call it): reads an export directory, writes tables and the HTML report, returns summary numbers.
* ``leadwire fleet --input DIR --out DIR`` (host/fleet/cli.py) - the same, with an embedded
  local SparkSession.
* ``spark-submit host/fleet/job.py --input DIR --out DIR`` - the same module on any cluster. It
  needs neither click nor an installed leadwire: when run as a script it loads its sibling
  modules (schema, transforms, report) from its own folder. Executors run no Python code of
  ours (no UDFs), so nothing has to be shipped with --py-files; the driver needs pyarrow and
  matplotlib for the report.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and not __package__:  # spark-submit host/fleet/job.py

    def _bootstrap_package() -> None:
        """Make `leadwire.fleet` importable from this folder when leadwire is not installed."""
        try:
            import leadwire.fleet  # noqa: F401

            return
        except ImportError:
            pass
        import importlib.util
        import types

        here = os.path.dirname(os.path.abspath(__file__))
        root = sys.modules.setdefault("leadwire", types.ModuleType("leadwire"))
        if not hasattr(root, "__path__"):
            root.__path__ = []
        spec = importlib.util.spec_from_file_location(
            "leadwire.fleet", os.path.join(here, "__init__.py"), submodule_search_locations=[here]
        )
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules["leadwire.fleet"] = mod
        spec.loader.exec_module(mod)

    _bootstrap_package()

import argparse
import contextlib
import json
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from leadwire.fleet import transforms as T
from leadwire.fleet.schema import PARTITION_COLUMN, TABLES, spark_schema

DEFAULT_WINDOW_SECONDS = 3600
MISMATCH_CSV_ROWS = 100_000


class BadInput(Exception):
    """The input cannot be analysed; str(e) is one line telling why."""


@dataclass
class Inputs:
    arrivals: DataFrame
    losses: DataFrame
    boots: DataFrame


# ------------------------------------------------------------------------------------ progress
class Progress:
    """Progress lines on stderr: stage names, row counts, timings; and Spark stage completion for
    stages that run longer than `tick` seconds."""

    def __init__(self, stream: IO[str] | None = None, enabled: bool = True, tick: float = 10.0) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tick = tick
        self.t0 = time.monotonic()
        self.timings: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def log(self, msg: str) -> None:
        if self.enabled:
            print("[fleet %7.1fs] %s" % (time.monotonic() - self.t0, msg), file=self.stream, flush=True)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t = time.monotonic()
        self.log("%s ..." % name)
        yield
        self.timings[name] = time.monotonic() - t
        self.log("%s done in %.1fs" % (name, self.timings[name]))

    def watch(self, spark: SparkSession) -> None:
        if not self.enabled or self._thread is not None:
            return
        tracker = spark.sparkContext.statusTracker()

        def run() -> None:
            while not self._stop.wait(self.tick):
                try:
                    for sid in tracker.getActiveStageIds():
                        info = tracker.getStageInfo(sid)
                        if info is not None and info.numTasks > 0:
                            self.log(
                                "  spark stage %d: %d/%d tasks" % (sid, info.numCompletedTasks, info.numTasks)
                            )
                except Exception:  # the JVM may be going away
                    return

        self._thread = threading.Thread(target=run, name="fleet-progress", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()


# ------------------------------------------------------------------------------------- session
RUNTIME_CONF = {
    "spark.sql.session.timeZone": "UTC",
    # keep `date` a string (YYYY-MM-DD) as the contract says, not an inferred DateType
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}
# Performance defaults, applied only where the session does not set the key itself (spark-submit
# --conf, build_session(extra=...) win). Measured at 1M and 10M rows (docs/benchmarks.md):
TUNING_CONF = {
    # A window operator buffers one lead domain at a time; past this many rows Spark moves the
    # buffer into an external sorter (its default is 4096, and an event domain is often 10k+
    # rows): that cost about half the CPU of the per-arrival plan. 2^18 rows is ~50 MB per buffer.
    "spark.sql.windowExec.buffer.in.memory.threshold": str(1 << 18),
    # The exact `percentile` keeps a map of values per group; past 128 groups in one task Spark
    # switches to a sort-based aggregation that serialises every map. Per-device percentiles have
    # 2 groups per device in a task.
    "spark.sql.objectHashAggregate.sortBased.fallbackThreshold": "4096",
}


def build_session(
    master: str = "local[*]",
    shuffle_partitions: int | None = None,
    driver_memory: str = "4g",
    app_name: str = "leadwire-fleet",
    adaptive: bool = True,
    extra: dict[str, str] | None = None,
) -> SparkSession:
    """The embedded default: a local SparkSession with the UI off and few shuffle partitions.

    For small data (the demo, the tests) adaptive=False: adaptive query execution's re-planning
    costs more than it saves there (a demo-sized export: 195 s with it, 93 s without).
    """
    b = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions or (2 * (os.cpu_count() or 2))))
        .config("spark.sql.adaptive.enabled", "true" if adaptive else "false")
    )
    for k, v in {**RUNTIME_CONF, **TUNING_CONF, **(extra or {})}.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _hadoop_path(spark: SparkSession, path: str) -> Any:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    p = jvm.org.apache.hadoop.fs.Path(path)
    return p, p.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())  # type: ignore[union-attr]


def path_exists(spark: SparkSession, path: str) -> bool:
    if _is_local(path):
        return os.path.exists(_local(path))
    p, fs = _hadoop_path(spark, path)
    return bool(fs.exists(p))


def _is_local(path: str) -> bool:
    m = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*):", path)
    return m is None or m.group(1) == "file"


def _local(path: str) -> str:
    return (
        path[len("file://") :]
        if path.startswith("file://")
        else path[5:]
        if path.startswith("file:")
        else path
    )


def _join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


# --------------------------------------------------------------------------------------- extract
def _check_schema(name: str, df: DataFrame, path: str) -> None:
    actual = {f.name: f.dataType for f in df.schema.fields}
    if PARTITION_COLUMN not in actual:
        raise BadInput(
            "%s: not partitioned by %s=YYYY-MM-DD (the `leadwire export` layout)" % (path, PARTITION_COLUMN)
        )
    for f in spark_schema(name).fields:
        if f.name not in actual:
            raise BadInput(
                "%s: wrong schema: column %r is missing (contract in docs/fleet.md)" % (path, f.name)
            )
        if actual[f.name] != f.dataType:
            raise BadInput(
                "%s: wrong schema: column %r is %s, expected %s"
                % (path, f.name, actual[f.name].simpleString(), f.dataType.simpleString())
            )


def extract(
    spark: SparkSession,
    input_dir: str,
    date_from: str | None = None,
    date_to: str | None = None,
    progress: Progress | None = None,
) -> Inputs:
    """Read the three tables, check their schema, prune partitions by date (inclusive bounds)."""
    progress = progress or Progress(enabled=False)
    if not path_exists(spark, input_dir):
        raise BadInput("input not found: %s" % input_dir)
    for d in (date_from, date_to):
        if d is not None and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", d):
            raise BadInput("bad date %r: expected YYYY-MM-DD" % d)
    frames: dict[str, DataFrame] = {}
    for name in TABLES:
        path = _join(input_dir, name)
        df: DataFrame | None = None
        if path_exists(spark, path):
            try:
                df = spark.read.option("basePath", path).parquet(path)
            except AnalysisException as e:
                if name == "arrivals":
                    raise BadInput(
                        "%s: no Parquet data (%s)" % (path, str(e).splitlines()[0][:160])
                    ) from None
        elif name == "arrivals":
            raise BadInput("%s: not found (expected DIR/arrivals/date=YYYY-MM-DD/*.parquet)" % path)
        if df is None:
            progress.log("%s: no data at %s, taken as empty" % (name, path))
            df = spark.createDataFrame([], spark_schema(name))
        else:
            _check_schema(name, df, path)
        if date_from:
            df = df.where(F.col(PARTITION_COLUMN) >= date_from)
        if date_to:
            df = df.where(F.col(PARTITION_COLUMN) <= date_to)
        frames[name] = df.select(*(f.name for f in spark_schema(name).fields))
    return Inputs(frames["arrivals"], frames["losses"], frames["boots"])


def _range(date_from: str | None, date_to: str | None) -> str:
    if not (date_from or date_to):
        return ""
    return " between %s and %s" % (date_from or "-", date_to or "-")


# ------------------------------------------------------------------------------------- transform
def by_device(inputs: Inputs, window_seconds: int = DEFAULT_WINDOW_SECONDS) -> DataFrame:
    """The selected arrival columns, hash-partitioned by device (the one shuffle of the arrivals)."""
    return T.transform_by_device(T.transform_arrivals(inputs.arrivals, window_seconds))


def transform_rows(inputs: Inputs, window_seconds: int = DEFAULT_WINDOW_SECONDS) -> DataFrame:
    """Per-arrival rows: the selected arrival columns plus recomputed lead and ordering facts."""
    return T.transform_order(T.transform_leads(by_device(inputs, window_seconds)))


def _same(df: DataFrame) -> DataFrame:
    return df


def build_tables(
    rows: DataFrame,
    inputs: Inputs,
    window_seconds: int = DEFAULT_WINDOW_SECONDS,
    worst_n: int = 10,
    keep: Callable[[DataFrame], DataFrame] = _same,
) -> dict[str, DataFrame]:
    """All output tables as lazy DataFrames. `keep` is applied to the intermediates read by
    several tables (run_job persists them)."""
    cw = keep(T.transform_channel_windows(rows))
    rec = keep(T.transform_recoveries(inputs.losses, window_seconds))
    rst = keep(T.transform_restarts(inputs.boots, window_seconds))
    # per-device percentiles group by device_id: partitioned by device first (measured at 10M rows:
    # 40-45 s of CPU instead of 70-87 s for a partial aggregation of every map before the shuffle)
    lat_values = T.transform_latency_values(by_device(inputs, window_seconds))
    # the multiset is grouped by value, not device: partial counts straight from the scan
    all_values = T.transform_latency_values(T.transform_arrivals(inputs.arrivals, window_seconds))
    lat = keep(T.transform_latency_counts(all_values))  # firmware, transport and fleet percentiles
    devices = keep(T.transform_devices(cw, rec, rst, lat_values))
    fleet_latency = keep(T.transform_fleet_latency(lat))
    return {
        "channel_windows": cw,
        "lead_histogram": T.transform_lead_histogram(cw),
        "recoveries": rec,
        "restarts": rst,
        "devices": devices,
        "worst_devices": T.transform_worst(devices, worst_n),
        "by_firmware": T.transform_compare(cw, rec, rst, lat, "firmware_version"),
        "by_transport": T.transform_compare(cw, rec, rst, lat, "transport"),
        "loss_over_time": T.transform_loss_over_time(cw, rec, rst),
        "latency": fleet_latency,
        "summary": T.transform_summary(devices, fleet_latency),
    }


# Sort keys for the written tables: stable output, and what the oracle compares against.
TABLE_ORDER: dict[str, list[str]] = {
    "channel_windows": T.DIMS,
    "lead_histogram": ["kind", "firmware_version", "transport", "bucket_order"],
    "recoveries": T.RECOVERY_DIMS,
    "restarts": T.RESTART_DIMS,
    "devices": ["device_id"],
    "worst_devices": ["rank"],
    "by_firmware": ["firmware_version"],
    "by_transport": ["transport"],
    "loss_over_time": ["window_start", "transport"],
    "latency": ["metric"],
    "summary": [],
}


# ------------------------------------------------------------------------------------------ load
def _write_local_tables(tables: dict[str, Any], local_dir: str) -> None:
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    os.makedirs(os.path.join(local_dir, "parquet"), exist_ok=True)
    os.makedirs(os.path.join(local_dir, "csv"), exist_ok=True)
    for name, tbl in tables.items():
        pq.write_table(tbl, os.path.join(local_dir, "parquet", name + ".parquet"))
        pacsv.write_csv(tbl, os.path.join(local_dir, "csv", name + ".csv"))


def _copy_to(spark: SparkSession, local_dir: str, out_dir: str) -> None:
    if _is_local(out_dir):
        return
    src = spark.sparkContext._jvm.org.apache.hadoop.fs.Path(local_dir)  # type: ignore[union-attr]
    dst, fs = _hadoop_path(spark, out_dir)
    for entry in os.listdir(local_dir):
        fs.copyFromLocalFile(False, True, src.suffix("/" + entry), dst)


def run_job(
    input_dir: str,
    out_dir: str,
    spark: SparkSession | None = None,
    *,
    master: str = "local[*]",
    window_seconds: int = DEFAULT_WINDOW_SECONDS,
    worst_n: int = 10,
    date_from: str | None = None,
    date_to: str | None = None,
    report: bool = True,
    progress: Progress | bool = True,
    shuffle_partitions: int | None = None,
    driver_memory: str = "4g",
) -> dict[str, Any]:
    """Analyse the export at input_dir, write tables and report to out_dir, return the summary.

    Raises BadInput for a missing path, a wrong schema or empty data. The returned dict holds the
    fleet summary numbers (see docs/fleet.md), plus 'mismatch_rows', 'seconds' and 'out_dir'.
    """
    prog = progress if isinstance(progress, Progress) else Progress(enabled=bool(progress))
    if _is_local(input_dir) and not os.path.isdir(_local(input_dir)):  # fail before starting a JVM
        raise BadInput("input not found: %s" % input_dir)
    if spark is None:
        spark = SparkSession.getActiveSession()
    own = spark is None
    if own:
        with prog.stage("start spark (%s)" % master):
            spark = build_session(master, shuffle_partitions, driver_memory)
    assert spark is not None
    for k, v in RUNTIME_CONF.items():
        spark.conf.set(k, v)
    for k, v in TUNING_CONF.items():
        if spark.conf.get(k, None) is None:  # not set by spark-submit --conf or the session builder
            spark.conf.set(k, v)
    prog.watch(spark)
    t0 = time.monotonic()
    cached: list[DataFrame] = []

    def keep(df: DataFrame) -> DataFrame:
        cached.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        return df

    try:
        with prog.stage("extract %s" % input_dir):
            inputs = extract(spark, input_dir, date_from, date_to, prog)
        collected: dict[str, Any] = {}
        with prog.stage("leads, ordering and channel windows"):
            rows = transform_rows(inputs, window_seconds)  # per arrival: not cached, read once
            tables = build_tables(rows, inputs, window_seconds, worst_n, keep=keep)
            cw = tables["channel_windows"]
            collected["channel_windows"] = cw.orderBy(*TABLE_ORDER["channel_windows"]).toArrow()
            ncw = collected["channel_windows"].num_rows
            nrows = int(pc.sum(collected["channel_windows"].column("messages")).as_py() or 0)
            if nrows == 0:
                raise BadInput(
                    "%s: no arrival rows%s" % (_join(input_dir, "arrivals"), _range(date_from, date_to))
                )
            prog.log("  %d arrival rows -> %d device-channel-window rows" % (nrows, ncw))
        with prog.stage("aggregate"):
            for name, df in tables.items():
                if name in collected:
                    continue
                order = TABLE_ORDER[name]
                collected[name] = (df.orderBy(*order) if order else df).toArrow()
                prog.log("  %s: %d rows" % (name, collected[name].num_rows))
        summary_row = collected["summary"].to_pylist()[0]
        n_mismatch = int(summary_row["lead_mismatches"]) + int(summary_row["dup_flag_mismatches"])
        with prog.stage("load %s" % out_dir):
            local_dir = _local(out_dir) if _is_local(out_dir) else tempfile.mkdtemp(prefix="leadwire-fleet-")
            os.makedirs(local_dir, exist_ok=True)
            mismatch_rows = 0
            mismatch_head = None
            if n_mismatch:
                # the per-arrival plan runs once more here, only when the bridge disagrees, and only
                # for the devices that have mismatches (lead domains never span devices)
                bad = [
                    r["device_id"]
                    for r in collected["devices"].to_pylist()
                    if r["lead_mismatches"] or r["dup_flag_mismatches"]
                ]
                bad_in = Inputs(
                    inputs.arrivals.where(F.col("device_id").isin(bad)), inputs.losses, inputs.boots
                )
                mm = T.transform_mismatches(transform_rows(bad_in, window_seconds))
                mm.write.mode("overwrite").parquet(_join(out_dir, "mismatches"))
                written = spark.read.parquet(_join(out_dir, "mismatches"))
                mismatch_rows = written.count()
                mismatch_head = written.orderBy(*T.LEAD_KEY, "arrival").limit(MISMATCH_CSV_ROWS).toArrow()
                collected["mismatches"] = mismatch_head
                prog.log(
                    "  consistency: %d rows disagree with the bridge (lead or duplicate flag)" % mismatch_rows
                )
            else:
                prog.log("  consistency: stored lead and duplicate flags all agree with the recomputation")
                shutil.rmtree(
                    os.path.join(local_dir, "mismatches"), ignore_errors=True
                )  # a stale earlier run
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(local_dir, "csv", "mismatches.csv"))
                    os.remove(os.path.join(local_dir, "parquet", "mismatches.parquet"))
            _write_local_tables(collected, local_dir)
            seconds = time.monotonic() - t0
            summary = {k: _plain(v) for k, v in summary_row.items()}
            summary.update(
                rows=nrows,
                mismatch_rows=mismatch_rows,
                window_seconds=window_seconds,
                input_dir=input_dir,
                out_dir=out_dir,
                seconds=round(seconds, 3),
            )
            with open(os.path.join(local_dir, "summary.json"), "w") as f:
                json.dump(summary, f, indent=2, sort_keys=True)
        if report:
            with prog.stage("report"):
                from leadwire.fleet.report import write_report

                write_report(local_dir, collected, summary)
                prog.log("  %s" % os.path.join(out_dir, "index.html"))
        _copy_to(spark, local_dir, out_dir)
        if not _is_local(out_dir):
            shutil.rmtree(local_dir, ignore_errors=True)
        summary["seconds"] = round(time.monotonic() - t0, 3)
        return summary
    finally:
        prog.close()
        for df in cached:
            df.unpersist()
        if own:
            spark.stop()


def _plain(v: Any) -> Any:
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return v


def parse_window(text: str) -> int:
    """'90s', '15m', '1h', '1d' or plain seconds -> seconds."""
    m = re.fullmatch(r"\s*(\d+)\s*([smhd]?)\s*", text)
    if not m or int(m.group(1)) <= 0:
        raise BadInput("bad window %r: use e.g. 900, 15m, 1h or 1d" % text)
    return int(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def format_summary(s: dict[str, Any]) -> str:
    lines = [
        "fleet: %d devices, %d arrivals (%d unique) in %.1fs"
        % (s["devices"], s["rows"], s["unique"], s["seconds"]),
        "  lost (gaps never filled) %d, loss rate %.4f%%; duplicates %d; late %d (max reorder depth %d)"
        % (s["lost"], 100 * s["loss_rate"], s["duplicates"], s["late"], s["reorder_depth_max"]),
        "  lead: 1=%d 0=%d >1=%d <0=%d" % (s["lead_eq1"], s["lead_eq0"], s["lead_gt1"], s["lead_lt0"]),
        "  restarts %d, overruns %d (%d events lost exactly), recovery phases %d; retransmissions %d"
        % (s["restarts"], s["overruns"], s["events_lost_exact"], s["recovery_phases"], s["retransmissions"]),
        "  consistency: %d lead and %d duplicate-flag mismatches with the bridge"
        % (s["lead_mismatches"], s["dup_flag_mismatches"]),
        "  report: %s" % _join(s["out_dir"], "index.html"),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """spark-submit entry: uses the active/cluster SparkSession (master comes from spark-submit)."""
    ap = argparse.ArgumentParser(prog="job.py", description="leadwire fleet analytics (spark-submit entry)")
    ap.add_argument("--input", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--window", default="1h")
    ap.add_argument("--from", dest="date_from")
    ap.add_argument("--to", dest="date_to")
    ap.add_argument("--worst", type=int, default=10)
    ap.add_argument("--no-report", action="store_true")
    a = ap.parse_args(argv)
    try:
        window = parse_window(a.window)
        spark = SparkSession.builder.appName("leadwire-fleet").getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        summary = run_job(
            a.input,
            a.out,
            spark,
            window_seconds=window,
            worst_n=a.worst,
            date_from=a.date_from,
            date_to=a.date_to,
            report=not a.no_report,
        )
    except BadInput as e:
        print("fleet: %s" % e, file=sys.stderr)
        return 2
    print(format_summary(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
