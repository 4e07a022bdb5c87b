"""The fleet job: extract -> transforms -> load, as one Spark plan written by the executors.

Entry points:
* :func:`run_job` - the public function (the CLI, the benchmark and the bridge's end-to-end test
  call it): reads an export (any Hadoop URI), writes tables and the HTML report, returns summary
  numbers.
* ``leadwire fleet --input URI --out URI`` (host/fleet/cli.py) - the same, with an embedded
  local SparkSession.
* ``spark-submit host/fleet/job.py --input URI --out URI`` - the same module on any cluster (a
  click command, :func:`main`). It needs no installed leadwire: when run as a script it loads its
  sibling modules (schema, transforms, report) from its own folder. Executors run no Python code
  of ours (no UDFs), so nothing has to be shipped with --py-files; the driver needs pyarrow and
  matplotlib for the report.

Paths are Hadoop URIs end to end (``hdfs://``, ``s3a://``, ``file://``; a path without a scheme is
on the session's default filesystem, as everywhere in Spark). Row-scale tables (channel windows,
recoveries, restarts, devices, mismatching rows) are written by the executors with Spark's
DataFrameWriter (the dated ones partitioned by ``date``); only the small tables (histograms,
comparisons, latency, summary, top-N) come to the driver, which writes them with pyarrow next to
the report (through a local staging folder and the Hadoop FileSystem API when --out is not local).
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

import contextlib
import datetime as dt
import json
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import click
from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from leadwire.fleet import transforms as T
from leadwire.fleet.jvm_archive import ClassArchive
from leadwire.fleet.options import DEFAULT_LOOKAHEAD_DAYS, BadInput, check_date, date_options, resolve_dates
from leadwire.fleet.schema import PARTITION_COLUMN, TABLES, spark_schema

DEFAULT_WINDOW_SECONDS = 3600
MISMATCH_CSV_ROWS = 100_000
DAY_US = 86_400_000_000
# Marks the message of a raise_error() of the null-key guard, so run_job can turn the executor's
# exception into BadInput.
_GUARD = "leadwire-bad-input: "
STATE_FILE = "_leadwire_fleet.json"


@dataclass
class Inputs:
    arrivals: DataFrame
    losses: DataFrame
    boots: DataFrame


@dataclass(frozen=True)
class DateRange:
    """Which arrivals the tables count, and which partitions are read to count them right.

    Output: rows whose date (UTC, of host_rx_ts / started_ts / first_seen_ts) is in
    [first, last] (None = open). Read: every partition from `lookback_days` before `first` (None:
    all history, exact) to `lookahead_days` after `last`. Lead, duplicate flag, reorder depth,
    report head and restarts of a row depend on everything earlier in its lead domain; the gap
    after it on the next higher seq received later. Reading the margins makes every in-range
    row's values equal a full run's (exact with lookback None and a lookahead that covers the
    latest fill of a gap).
    """

    first: str | None = None
    last: str | None = None
    lookback_days: int | None = None
    lookahead_days: int = DEFAULT_LOOKAHEAD_DAYS

    @property
    def bounded(self) -> bool:
        return self.first is not None or self.last is not None

    def since_us(self) -> int | None:
        return _day_us(self.first) if self.first else None

    def until_us(self) -> int | None:
        return _day_us(self.last) + DAY_US if self.last else None

    def read_from(self) -> str | None:
        if self.first is None or self.lookback_days is None:
            return None
        return _shift(self.first, -self.lookback_days)

    def read_to(self) -> str | None:
        return _shift(self.last, self.lookahead_days) if self.last else None

    def describe(self) -> str:
        return " between %s and %s" % (self.first or "-", self.last or "-") if self.bounded else ""


def _day_us(day: str) -> int:
    d = dt.date.fromisoformat(day)
    return (d - dt.date(1970, 1, 1)).days * DAY_US


def _shift(day: str, days: int) -> str:
    return (dt.date.fromisoformat(day) + dt.timedelta(days=days)).isoformat()


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
    # The lead-domain passes join each (domain, bucket) to its carried prefix state (transforms:
    # _carry_join). Both sides are hash-partitioned by device_id, a subset of the join keys; with
    # Spark's default (true) the join would shuffle every arrival again by all its keys.
    "spark.sql.requireAllClusterKeysForCoPartition": "false",
}
# Static SQL confs: only at session start (build_session; spark-submit --conf on a cluster).
STATIC_CONF = {
    # Spark keeps 100 compiled generated classes (Janino) by default; one run of this job
    # generates more than that, so every run compiled them all again and the JVM JIT-compiled
    # them again: at 250k rows the JIT threads used more CPU than the tasks. Measured (local[2],
    # warm JVM, 250k rows): 12.4-13.2 s -> 8.1-10.1 s per run; JIT CPU 9.7-11.3 s -> 6.3-8.0 s.
    "spark.sql.codegen.cache.maxEntries": "2000",
}
# Local masters (one machine, small data): adaptive query execution re-plans every stage and
# costs more than it saves (docs/benchmarks.md: measured side by side). On a cluster it stays
# on (Spark's default): it coalesces the 200 default shuffle partitions to what the data needs.
LOCAL_CONF = {"spark.sql.adaptive.enabled": "false"}
# Local runs on a small export: a short job is mostly the JVM compiling Spark's code paths, and the
# optimising JIT (C2) is the larger share of that CPU. With C1 only (TieredStopAtLevel=1), measured
# (bench/fleet_bench.py --conf, local[2], cold JVM, load 7-10, docs/benchmarks.md): 250k rows
# 56.7 -> 38.6 CPU s, 1M rows 83.1 -> 69.9 CPU s. Long runs want C2's faster code: only below
# SMALL_INPUT_BYTES of arrivals (~37 B a row: ~1.8M rows), and only where leadwire starts the JVM
# itself (`leadwire fleet`, the demo): under spark-submit the launch's own options stand.
SMALL_INPUT_BYTES = 64 << 20
SMALL_INPUT_CONF = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}


def input_bytes(input_dir: str) -> int | None:
    """Bytes of arrivals under a local export (None: not a local path, or not there)."""
    if _scheme(input_dir) not in (None, "file"):
        return None
    root = os.path.join(_local(input_dir), "arrivals")
    if not os.path.isdir(root):
        return None
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


def small_input_conf(master: str, nbytes: int | None) -> dict[str, str]:
    """SMALL_INPUT_CONF for a local master and an input known to be small, else nothing."""
    small = master.startswith("local") and nbytes is not None and nbytes <= SMALL_INPUT_BYTES
    return dict(SMALL_INPUT_CONF) if small else {}


def launch_conf(master: str, nbytes: int | None, archive: ClassArchive | None) -> dict[str, str]:
    """The JVM options of a session leadwire starts itself: C1 only for a small input on a local
    master (small_input_conf), and the class-data archive (jvm_archive) for any local master."""
    key = "spark.driver.extraJavaOptions"
    opts = [small_input_conf(master, nbytes).get(key, "")]
    if archive is not None and master.startswith("local"):
        opts.append(archive.java_options())
    joined = " ".join(o for o in opts if o)
    return {key: joined} if joined else {}


def local_shuffle_partitions() -> int:
    return 2 * (os.cpu_count() or 2)


def build_session(
    master: str = "local[*]",
    shuffle_partitions: int | None = None,
    driver_memory: str = "4g",
    app_name: str = "leadwire-fleet",
    adaptive: bool | None = None,
    extra: dict[str, str] | None = None,
) -> SparkSession:
    """The embedded default: a local SparkSession with the UI off and few shuffle partitions.

    adaptive=None: off for local masters (LOCAL_CONF), on otherwise.
    """
    local = master.startswith("local")
    if adaptive is None:
        adaptive = not local
    b = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.adaptive.enabled", "true" if adaptive else "false")
    )
    if shuffle_partitions or local:
        b = b.config("spark.sql.shuffle.partitions", str(shuffle_partitions or local_shuffle_partitions()))
    for k, v in {**RUNTIME_CONF, **TUNING_CONF, **STATIC_CONF, **(extra or {})}.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@dataclass
class LocalSession:
    """A session leadwire started itself (local_session)."""

    spark: SparkSession
    java_options: str  # what launch_conf gave spark.driver.extraJavaOptions ("": nothing)
    start_s: float  # build_session's time: the JVM's start


@contextlib.contextmanager
def local_session(
    master: str,
    nbytes: int | None,
    shuffle_partitions: int | None = None,
    driver_memory: str = "4g",
    app_name: str = "leadwire-fleet",
    adaptive: bool | None = None,
    extra: dict[str, str] | None = None,
    *,
    launch: bool = True,
    starting: contextlib.AbstractContextManager[object] | None = None,
    log: Callable[[str], None] = lambda _m: None,
) -> Iterator[LocalSession]:
    """A SparkSession that leadwire starts and stops itself (run_job without a session, the demo's
    Spark child, bench/fleet_bench.py): build_session with the JVM options of launch_conf (C1 for
    an input of nbytes known to be small, the class-data archive; extra wins over them), or none
    with launch=False (the JVM's defaults). `starting` (a Progress stage) is entered around the
    start. On leaving, also by an exception: spark.stop(), then the archive's finish(log), which
    puts an archive this run's JVM wrote at exit in place only when the JVM exited cleanly
    (jvm_archive)."""
    with starting if starting is not None else contextlib.nullcontext():
        archive = ClassArchive() if launch else None
        conf = launch_conf(master, nbytes, archive) if launch else {}
        t = time.monotonic()
        spark = build_session(
            master, shuffle_partitions, driver_memory, app_name, adaptive, {**conf, **(extra or {})}
        )
        start_s = time.monotonic() - t
    try:
        yield LocalSession(spark, conf.get("spark.driver.extraJavaOptions", ""), start_s)
    finally:
        spark.stop()
        if archive is not None:
            archive.finish(log)


def _apply_conf(spark: SparkSession) -> None:
    """RUNTIME_CONF always; tuning only where the launch (spark-submit --conf, builder) set nothing."""
    launched = spark.sparkContext.getConf()
    for k, v in RUNTIME_CONF.items():
        spark.conf.set(k, v)
    tuning = dict(TUNING_CONF)
    if spark.sparkContext.master.startswith("local"):
        tuning.update(LOCAL_CONF)
        tuning["spark.sql.shuffle.partitions"] = str(local_shuffle_partitions())
    for k, v in tuning.items():
        if not launched.contains(k):
            spark.conf.set(k, v)


# ---------------------------------------------------------------------------------------- paths
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*):")


def _scheme(path: str) -> str | None:
    m = _SCHEME.match(path)
    return m.group(1).lower() if m else None


def _jvm(spark: SparkSession) -> Any:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    return jvm


def _hconf(spark: SparkSession) -> Any:
    return spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]


def _hadoop_path(spark: SparkSession, path: str) -> Any:
    """(qualified org.apache.hadoop.fs.Path, its FileSystem): scheme-less = the default FS."""
    p = _jvm(spark).org.apache.hadoop.fs.Path(path)
    fs = p.getFileSystem(_hconf(spark))
    return fs.makeQualified(p), fs


def qualify(spark: SparkSession, path: str) -> str:
    """The path as a full URI on the filesystem it lives on (scheme-less -> default FS)."""
    return str(_hadoop_path(spark, path)[0].toString())


def path_exists(spark: SparkSession, path: str) -> bool:
    p, fs = _hadoop_path(spark, path)
    return bool(fs.exists(p))


def _is_local(spark: SparkSession, path: str) -> bool:
    """True when `path` is on the driver's local disk: file: scheme, or no scheme and the default
    filesystem is file: (false where fs.defaultFS is hdfs://, as on most clusters)."""
    return _scheme(qualify(spark, path)) == "file"


def _local(path: str) -> str:
    """A file: URI (or plain path) as an OS path."""
    if path.startswith("file://"):
        return path[len("file://") :]
    if path.startswith("file:"):
        return path[len("file:") :]
    return path


def _join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


def _list_dates(spark: SparkSession, table_path: str) -> list[str]:
    """The YYYY-MM-DD of every `date=` directory directly under table_path (one listing, no files)."""
    p, fs = _hadoop_path(spark, table_path)
    out = []
    for st in fs.listStatus(p):
        name = st.getPath().getName()
        if st.isDirectory() and name.startswith(PARTITION_COLUMN + "="):
            out.append(name[len(PARTITION_COLUMN) + 1 :])
    return sorted(out)


def copy_tree(spark: SparkSession, local_dir: str, out_dir: str) -> None:
    """Copy every file under local_dir to the same relative path under the Hadoop URI out_dir,
    creating directories first (copyFromLocalFile into a missing directory would copy the first
    entry *as* that directory), replacing files that exist."""
    dst_root, fs = _hadoop_path(spark, out_dir)
    jvm = _jvm(spark)
    for dirpath, _, files in os.walk(local_dir):
        rel = os.path.relpath(dirpath, local_dir)
        dst_dir = dst_root if rel == "." else jvm.org.apache.hadoop.fs.Path(dst_root, rel)
        fs.mkdirs(dst_dir)
        for name in files:
            src = jvm.org.apache.hadoop.fs.Path("file://" + os.path.abspath(os.path.join(dirpath, name)))
            fs.copyFromLocalFile(False, True, src, jvm.org.apache.hadoop.fs.Path(dst_dir, name))


def _delete(spark: SparkSession, path: str) -> None:
    p, fs = _hadoop_path(spark, path)
    if fs.exists(p):
        fs.delete(p, True)


def _read_text(spark: SparkSession, path: str) -> str | None:
    p, fs = _hadoop_path(spark, path)
    if not fs.exists(p):
        return None
    jvm = _jvm(spark)
    stream = fs.open(p)
    try:
        return str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
    finally:
        stream.close()


def _write_text(spark: SparkSession, path: str, text: str) -> None:
    p, fs = _hadoop_path(spark, path)
    out = fs.create(p, True)
    try:
        out.write(bytearray(text.encode()))
    finally:
        out.close()


# --------------------------------------------------------------------------------------- extract
def _guard(name: str, df: DataFrame) -> DataFrame:
    """Every NOT NULL column of the contract, checked row by row as it is read (no extra job): a
    null (a file without the column, a broken writer) stops the job with a one-line error naming
    the file. Columns the plan never reads are pruned, and their checks with them."""
    required = {f.name for f in TABLES[name] if not f.nullable}
    cols = []
    for c in df.columns:
        if c in required:
            msg = "concat('%s%s: null %s (NOT NULL in the contract) in ', input_file_name())" % (
                _GUARD,
                name,
                c,
            )
            cols.append("CASE WHEN `%s` IS NULL THEN raise_error(%s) ELSE `%s` END AS `%s`" % (c, msg, c, c))
        else:
            cols.append("`%s`" % c)
    return df.selectExpr(*cols)  # SQL text: one Py4J round trip per column, not ~50


def extract(
    spark: SparkSession,
    input_dir: str,
    dates: DateRange | None = None,
    progress: Progress | None = None,
) -> Inputs:
    """Read the three tables with the contract's schema (no inference), only the date partitions
    the range needs. Types are checked by the Parquet reader in every file it opens (a mismatch
    fails the first action; run_job turns it into BadInput), NOT NULL columns by _guard."""
    progress = progress or Progress(enabled=False)
    dates = dates or DateRange()
    check_date("--from", dates.first)
    check_date("--to", dates.last)
    if not path_exists(spark, input_dir):
        raise BadInput("input not found: %s" % input_dir)
    lo, hi = dates.read_from(), dates.read_to()
    frames: dict[str, DataFrame] = {}
    for name in TABLES:
        path = _join(input_dir, name)
        schema = spark_schema(name)
        df: DataFrame | None = None
        if path_exists(spark, path):
            present = _list_dates(spark, path)
            if not present and name == "arrivals":
                raise BadInput(
                    "%s: not partitioned by %s=YYYY-MM-DD (the `leadwire export` layout)"
                    % (path, PARTITION_COLUMN)
                )
            wanted = [d for d in present if (lo is None or d >= lo) and (hi is None or d <= hi)]
            if wanted:
                parts = [_join(path, "%s=%s" % (PARTITION_COLUMN, d)) for d in wanted]
                try:
                    df = spark.read.schema(schema).option("basePath", path).parquet(*parts)
                except AnalysisException as e:
                    raise BadInput("%s: cannot read (%s)" % (path, str(e).splitlines()[0][:160])) from None
                df = _guard(name, df)
        elif name == "arrivals":
            raise BadInput("%s: not found (expected DIR/arrivals/date=YYYY-MM-DD/*.parquet)" % path)
        else:
            progress.log("%s: no data at %s, taken as empty" % (name, path))
        if df is None:
            df = spark.createDataFrame([], schema)
        frames[name] = df.select(*(f.name for f in schema.fields))
    return Inputs(frames["arrivals"], frames["losses"], frames["boots"])


_MISMATCH = re.compile(
    r"(?:Error while reading file|Encountered error while reading file) (\S+?)\.?\s.*?"
    r"(?:Parquet column|column) \[?([A-Za-z_0-9]+)\]?.*?"
    r"(?:Expected Spark type|Expected:) \"?([A-Za-z0-9_()]+)\"?"
    r".*?(?:actual Parquet type|Found:) \"?([A-Za-z0-9_()]+)\"?",
    re.S,
)


def bad_input_from(e: Exception) -> BadInput | None:
    """The one-line BadInput an executor failure stands for (a null guard, a Parquet file whose
    column has another type), or None for any other failure."""
    text = str(e)
    i = text.find(_GUARD)
    if i >= 0:
        return BadInput(text[i + len(_GUARD) :].splitlines()[0].strip())
    m = _MISMATCH.search(text)
    if m:
        return BadInput(
            "%s: wrong schema: column %r is %s, expected %s (contract in docs/fleet.md)"
            % (m.group(1), m.group(2), m.group(4).lower(), m.group(3).lower())
        )
    if "PARQUET_COLUMN_DATA_TYPE_MISMATCH" in text or "SchemaColumnConvertNotSupported" in text:
        return BadInput("wrong schema: %s" % text.splitlines()[0][:200])
    return None


# ------------------------------------------------------------------------------------- transform
def by_device(arrivals: DataFrame, window_seconds: int = DEFAULT_WINDOW_SECONDS) -> DataFrame:
    """The selected arrival columns, hash-partitioned by device (the one shuffle of the arrivals)."""
    return T.transform_by_device(T.transform_arrivals(arrivals, window_seconds))


# Written by the executors (DataFrameWriter), never collected: they grow with rows or devices.
# The dated ones are partitioned by the date of window_start.
DATED_TABLES = ("channel_windows", "recoveries", "restarts")
EXECUTOR_TABLES = (*DATED_TABLES, "devices")
# Collected to the driver (bounded by windows x transports, firmwares, N, metrics) for the report.
SMALL_TABLES = (
    "lead_histogram",
    "worst_devices",
    "by_firmware",
    "by_transport",
    "loss_over_time",
    "latency",
    "summary",
)


def build_tables(
    inputs: Inputs,
    window_seconds: int = DEFAULT_WINDOW_SECONDS,
    worst_n: int = 10,
    dates: DateRange | None = None,
    keep: Any = None,
    cut: Any = None,
    exact_max_values: int = T.EXACT_MAX_VALUES,
    log: Any = None,
) -> dict[str, DataFrame]:
    """All output tables as DataFrames over ONE scan and ONE exchange of the arrivals.

    The channel windows, the per-device latency percentiles and the latency multiset all come from
    the arrivals hash-partitioned by device (`dev`, passed through `keep`: run_job persists it
    until the stage is computed). They read different columns of it, so without keeping it the
    optimizer would prune each branch's scan differently and Spark could not reuse the exchange:
    two scans, two shuffles. They are stacked into one DataFrame and passed through `cut`
    (run_job: computed once and its lineage cut, so that the plans of the tables read from it stay
    small: with the whole per-arrival plan under every join, planning them cost more than running
    them). Everything else reads those results: thousands of rows, not millions.

    Fleet-level latency percentiles (latency, summary, by_firmware, by_transport) are exact for
    groups of at most exact_max_values values and approximate above (transforms.APPROX_ACCURACY).
    Which groups are large, and whether any lead domain can be longer than a bucket (then both
    lead-domain passes run in bounded pieces), comes from profile_input (one small job).
    """
    keep = keep or (lambda df: df)
    cut = cut or (lambda df: df)
    log = log or (lambda msg: None)
    dates = dates or DateRange()
    since, until = dates.since_us(), dates.until_us()
    # the first lead-domain pass (bounded buckets) keeps every arrival column: it is what the
    # windows, the carried state and the latency all read, so it is the one persisted
    span, big = profile_input(inputs.arrivals, since, until, exact_max_values)
    if span > 1 << T.BUCKET_BITS:
        # a lead domain may be longer than a bucket: both passes in bounded pieces; the first one
        # keeps every arrival column: the carried state, the second pass and the latency read it
        dev = keep(T.transform_lead_buckets(by_device(inputs.arrivals, window_seconds), T.BUCKET_BITS))
        rows = T.transform_order(T.transform_lead_carry(dev), T.BUCKET_BITS)
    else:  # no device has more arrivals than a bucket holds: one window per domain, fewer steps
        dev = keep(by_device(inputs.arrivals, window_seconds))
        rows = T.transform_order(T.transform_leads(dev, None), None)
    log(
        "lead domains: %s (largest device: %d arrivals)"
        % ("in buckets" if span > 1 << T.BUCKET_BITS else "whole", span)
    )
    log(
        "latency percentiles approximate for %s"
        % (", ".join("%s %s %s" % g for g in sorted(big, key=str)) or "no group")
    )
    rows = rows.where(T.in_range(F.col("rx_us"), since, until))
    values = T.transform_latency_values(dev.where(T.in_range(F.col("rx_us"), since, until)))
    started = F.unix_micros("started_ts")
    parts = {
        "cw": T.transform_channel_windows(rows, with_mismatches=True),
        "lat_dev": T.transform_device_latency(values),
        "lat": T.transform_latency_counts(values),
        # recoveries and restarts (small inputs) in the same job: one job, not three
        "rec": T.transform_recoveries(inputs.losses.where(T.in_range(started, since, until)), window_seconds),
        "rst": T.transform_restarts(inputs.boots, window_seconds, since, until),
    }
    approx = T.transform_latency_groups(values, big)
    if approx is not None:  # counts and approximate percentiles of the large fleet-level groups
        parts["lat_grp"] = approx
    stage = cut(T.transform_stack(parts))
    cw = T.transform_unstack(stage, "cw", T.CHANNEL_WINDOW_COLS)
    lat_dev = T.transform_unstack(stage, "lat_dev", ["device_id", *T.LATENCY_WIDE])
    lat = T.transform_unstack(stage, "lat", T.LATENCY_COUNT_COLS)
    groups = T.transform_unstack(stage, "lat_grp", T.LATENCY_GROUP_COLS) if "lat_grp" in parts else None
    rec = T.transform_unstack(stage, "rec", T.RECOVERY_COLS)
    rst = T.transform_unstack(stage, "rst", T.RESTART_COLS)
    devices = cut(T.transform_devices(cw, rec, rst, lat_dev))
    fleet_latency = T.transform_fleet_latency(lat, groups, big)
    return {
        "_by_device": dev,
        # the rows that disagree with the bridge (usually none) came with the channel windows:
        # a second consumer of the per-arrival rows would run their window sorts twice
        "_mismatches": T.transform_window_mismatches(
            T.transform_unstack(stage, "cw", [*T.CHANNEL_WINDOW_COLS, "mismatch_rows"])
        ),
        "channel_windows": cw,
        "lead_histogram": T.transform_lead_histogram(cw),
        "recoveries": rec,
        "restarts": rst,
        "devices": devices,
        "worst_devices": T.transform_worst(devices, worst_n),
        "by_firmware": T.transform_compare(cw, rec, rst, lat, "firmware_version", groups, big),
        "by_transport": T.transform_compare(cw, rec, rst, lat, "transport", groups, big),
        "loss_over_time": T.transform_loss_over_time(cw, rec, rst),
        "latency": fleet_latency,
        "summary": T.transform_summary(devices, fleet_latency),
    }


def profile_input(
    arrivals: DataFrame, since: int | None, until: int | None, exact_max: int
) -> tuple[int, set[tuple[str, str | None, str]]]:
    """One small job over the arrivals read (one narrow scan, one aggregation to a row per device,
    bridge, firmware and transport, added up on the driver): the most arrivals a device can have
    in one lead domain (the span of its `arrival` counter, summed over its bridges), and the
    fleet-level latency groups (kind, key, metric) of the counted rows with more than exact_max
    values (transforms.transform_latency_groups)."""
    counted = T.in_range(F.unix_micros("host_rx_ts"), since, until)
    prof = (
        arrivals.withColumn("_in", counted)
        .groupBy("device_id", "bridge_id", "firmware_version", "transport")
        .agg(
            F.expr("min(arrival) AS lo"),
            F.expr("max(arrival) AS hi"),
            F.expr("count_if(_in) AS n"),
            F.expr("count_if(_in AND gen_ts IS NOT NULL) AS n_gen"),
        )
        .toArrow()
        .to_pylist()
    )
    lo: dict[tuple[str, str], int] = {}
    hi: dict[tuple[str, str], int] = {}
    n: dict[tuple[str, str | None, str], int] = {}
    for r in prof:
        k = (r["device_id"], r["bridge_id"])
        lo[k], hi[k] = min(lo.get(k, r["lo"]), r["lo"]), max(hi.get(k, r["hi"]), r["hi"])
        for kind, key in (
            ("firmware_version", r["firmware_version"]),
            ("transport", r["transport"]),
            ("fleet", None),
        ):
            for metric, c in (("rx_to_commit", r["n"]), ("gen_to_rx", r["n_gen"])):
                n[(kind, key, metric)] = n.get((kind, key, metric), 0) + c
    span: dict[str, int] = {}
    for (dev, _), low in lo.items():
        span[dev] = span.get(dev, 0) + hi[(dev, _)] - low + 1
    return max(span.values(), default=0), {g for g, c in n.items() if c > exact_max}


# Sort keys of the tables: the driver sorts the small ones (no global sort in Spark); the oracle
# compares on them.
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
def _sorted(tbl: Any, keys: list[str]) -> Any:
    return tbl.sort_by([(k, "ascending") for k in keys]) if keys and tbl.num_rows else tbl


def collect_small(tables: dict[str, DataFrame]) -> dict[str, Any]:
    """The small tables in ONE Spark job (stacked, one toArrow), split and sorted on the driver."""
    import pyarrow.compute as pc

    stacked = T.transform_stack(tables).toArrow()
    out = {}
    for name, df in tables.items():
        part = stacked.filter(pc.equal(stacked.column("_part"), name)).select(df.columns)
        out[name] = _sorted(part, TABLE_ORDER.get(name, []))
    return out


def write_executor_table(name: str, df: DataFrame, out_dir: str, dynamic: bool) -> None:
    """DataFrameWriter into OUT/parquet/<name>.parquet/ (a directory of part files); the dated
    tables partitioned by date, and with dynamic=True (a date-range run) only the dates this run
    wrote are replaced."""
    path = _join(out_dir, "parquet", name + ".parquet")
    w = df
    if name in DATED_TABLES:
        w = df.withColumn(PARTITION_COLUMN, F.date_format("window_start", "yyyy-MM-dd"))
    writer = w.write.mode("overwrite").option("partitionOverwriteMode", "dynamic" if dynamic else "static")
    if name in DATED_TABLES:
        writer = writer.partitionBy(PARTITION_COLUMN)
    writer.parquet(path)


def _write_local_tables(tables: dict[str, Any], local_dir: str) -> None:
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    os.makedirs(os.path.join(local_dir, "parquet"), exist_ok=True)
    os.makedirs(os.path.join(local_dir, "csv"), exist_ok=True)
    for name, tbl in tables.items():
        pq.write_table(tbl, os.path.join(local_dir, "parquet", name + ".parquet"))
        pacsv.write_csv(tbl, os.path.join(local_dir, "csv", name + ".csv"))


def _state(spark: SparkSession, out_dir: str) -> dict[str, Any]:
    text = _read_text(spark, _join(out_dir, STATE_FILE))
    return json.loads(text) if text else {}


def daily_range(spark: SparkSession, input_dir: str, out_dir: str) -> DateRange:
    """The daily mode's range: from the last date the previous run of this --out saw (that day
    again: the export may have added rows to it since) to the end; a full run the first time."""
    last = _state(spark, out_dir).get("last_date")
    return DateRange(first=last) if last else DateRange()


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
    lookback_days: int | None = None,
    lookahead_days: int = DEFAULT_LOOKAHEAD_DAYS,
    daily: bool = False,
    report: bool = True,
    progress: Progress | bool = True,
    shuffle_partitions: int | None = None,
    driver_memory: str = "4g",
    exact_max_values: int = T.EXACT_MAX_VALUES,
) -> dict[str, Any]:
    """Analyse the export at input_dir, write tables and report to out_dir, return the summary.

    input_dir and out_dir are Hadoop URIs (scheme-less: the default filesystem). date_from /
    date_to bound the rows counted (inclusive dates); lookback_days / lookahead_days bound what is
    read around them (DateRange). daily=True: from the last date of the previous run into the same
    out_dir (daily_range) on. exact_max_values: fleet-level latency percentiles are exact for
    groups of at most this many values, approximate above (build_tables).

    Raises BadInput for a missing path, a wrong schema, null keys or empty data. The returned dict
    holds the fleet summary numbers (see docs/fleet.md), plus 'mismatch_rows', 'seconds' and 'out_dir'.
    """
    prog = progress if isinstance(progress, Progress) else Progress(enabled=bool(progress))
    check_date("--from", date_from)
    check_date("--to", date_to)
    if date_from and date_to and date_from > date_to:
        raise BadInput("--from %s is after --to %s" % (date_from, date_to))
    if _scheme(input_dir) in (None, "file") and not os.path.isdir(_local(input_dir)) and spark is None:
        # fail before starting a JVM (a scheme-less path is local in the embedded session)
        raise BadInput("input not found: %s" % input_dir)
    if spark is None:
        spark = SparkSession.getActiveSession()
    own = contextlib.ExitStack()  # a session started here: stopped (local_session) on leaving
    if spark is None:
        with prog.stage("start spark (%s)" % master):
            size = input_bytes(input_dir)
            session = local_session(master, size, shuffle_partitions, driver_memory, log=prog.log)
            spark = own.enter_context(session).spark
    try:
        _apply_conf(spark)
        prog.watch(spark)
    except BaseException:
        own.close()  # (before the try below: a session started here is stopped all the same)
        raise
    t0 = time.monotonic()
    cached: list[DataFrame] = []

    def keep(df: DataFrame) -> DataFrame:
        cached.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        return df

    def cut(df: DataFrame) -> DataFrame:
        # computed now, kept on the executors (like a cache, MEMORY_AND_DISK), and the plans built
        # on it start from here. Unlike a cache it is not recomputed if an executor is lost: run
        # with static executors (or dynamic allocation's default cachedExecutorIdleTimeout)
        cp = df.localCheckpoint(eager=True)
        cached.append(cp)
        # a union of parts has the sum of their partitions (5 x shuffle partitions for the
        # stage): what reads it (a few thousand rows) runs in one task per core instead
        return cp.coalesce(spark.sparkContext.defaultParallelism)

    try:
        dates = (
            daily_range(spark, input_dir, out_dir)
            if daily
            else DateRange(date_from, date_to, lookback_days, lookahead_days)
        )
        if dates.bounded and DAY_US % (window_seconds * 1_000_000):
            raise BadInput("a date range needs a window that divides a day (got %ds)" % window_seconds)
        try:
            return _run(
                spark,
                input_dir,
                out_dir,
                dates,
                (window_seconds, worst_n, exact_max_values),
                report,
                prog,
                (keep, cut),
                t0,
            )
        except BadInput:
            raise
        except Exception as e:
            bad = bad_input_from(e)
            if bad is not None:
                raise bad from None
            raise
    finally:
        prog.close()
        for df in cached:
            df.unpersist()
        own.close()


def _run(
    spark: SparkSession,
    input_dir: str,
    out_dir: str,
    dates: DateRange,
    sizes: tuple[int, int, int],
    report: bool,
    prog: Progress,
    hooks: tuple[Any, Any],
    t0: float,
) -> dict[str, Any]:
    window_seconds, worst_n, exact_max = sizes
    with prog.stage("extract %s%s" % (input_dir, dates.describe())):
        inputs = extract(spark, input_dir, dates, prog)
        last_input_date = (_list_dates(spark, _join(input_dir, "arrivals")) or [None])[-1]
    with prog.stage("leads, ordering, channel windows, devices (one scan, one shuffle)"):
        import pyarrow.compute as pc

        tables = build_tables(
            inputs,
            window_seconds,
            worst_n,
            dates,
            keep=hooks[0],
            cut=hooks[1],
            exact_max_values=exact_max,
            log=lambda msg: prog.log("  " + msg),
        )
        tables["_by_device"].unpersist()  # the stage is computed: the arrivals are not read again
        devices = _sorted(tables["devices"].toArrow(), ["device_id"])
        nrows = int(pc.sum(devices.column("messages")).as_py() or 0)
        if nrows == 0:
            raise BadInput("%s: no arrival rows%s" % (_join(input_dir, "arrivals"), dates.describe()))
        prog.log("  %d arrival rows, %d devices" % (nrows, devices.num_rows))
    small_parts = _small_partitions(spark)
    local_out = _is_local(spark, out_dir)
    with prog.stage("write row-scale tables (executors) to %s" % out_dir):
        for name in EXECUTOR_TABLES:
            write_executor_table(name, tables[name], out_dir, dynamic=dates.bounded)
            if local_out:  # a CSV of an earlier version of the job (the table was collected then)
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(_local(qualify(spark, out_dir)), "csv", name + ".csv"))
    with prog.stage("small tables (one job)"):
        small = collect_small({n: tables[n] for n in SMALL_TABLES})
        for n, t in small.items():
            prog.log("  %s: %d rows" % (n, t.num_rows))
    summary_row = small["summary"].to_pylist()[0]
    n_mismatch = int(summary_row["lead_mismatches"]) + int(summary_row["dup_flag_mismatches"])
    local_dir = _local(qualify(spark, out_dir)) if local_out else tempfile.mkdtemp(prefix="leadwire-fleet-")
    try:
        with prog.stage("load %s" % out_dir):
            os.makedirs(local_dir, exist_ok=True)
            mismatch_rows, head = _mismatches(spark, tables["_mismatches"], out_dir, n_mismatch)
            collected: dict[str, Any] = dict(small)
            if head is not None:
                collected["mismatches"] = head
                prog.log(
                    "  consistency: %d rows disagree with the bridge (lead or duplicate flag)" % mismatch_rows
                )
            else:
                prog.log("  consistency: stored lead and duplicate flags all agree with the recomputation")
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(local_dir, "csv", "mismatches.csv"))
            _write_local_tables(collected, local_dir)
            summary = {k: _plain(v) for k, v in summary_row.items()}
            summary.update(
                rows=nrows,
                mismatch_rows=mismatch_rows,
                window_seconds=window_seconds,
                input_dir=input_dir,
                out_dir=out_dir,
                date_from=dates.first,
                date_to=dates.last,
                seconds=round(time.monotonic() - t0, 3),
            )
            with open(os.path.join(local_dir, "summary.json"), "w") as f:
                json.dump(summary, f, indent=2, sort_keys=True)
        if report:
            with prog.stage("report"):
                from leadwire.fleet.report import write_report

                write_report(local_dir, {**collected, "devices": devices}, summary)
                prog.log("  %s" % _join(out_dir, "index.html"))
        if not local_out:
            copy_tree(spark, local_dir, out_dir)
        state = {"last_date": max(filter(None, [last_input_date, _state(spark, out_dir).get("last_date")]))}
        _write_text(spark, _join(out_dir, STATE_FILE), json.dumps(state))
    finally:
        if not local_out:
            shutil.rmtree(local_dir, ignore_errors=True)
        if small_parts is not None:
            spark.conf.set("spark.sql.shuffle.partitions", small_parts)
    summary["seconds"] = round(time.monotonic() - t0, 3)
    return summary


def _small_partitions(spark: SparkSession) -> str | None:
    """Local runs: what is left after the stage (joins and roll-ups of a few thousand rows) runs
    in one shuffle partition, not 2 x cores: fewer tasks, the same result. Returns the value to
    restore, or None when nothing was changed (a cluster: AQE coalesces)."""
    if not spark.sparkContext.master.startswith("local"):
        return None
    old = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    return old


def _mismatches(spark: SparkSession, mm: DataFrame, out_dir: str, n_mismatch: int) -> tuple[int, Any]:
    """Write the rows that disagree with the bridge (computed with the stage, no second pass) to
    OUT/mismatches/ (executors); return their count and the first MISMATCH_CSV_ROWS of them,
    sorted on the driver, for the report."""
    path = _join(out_dir, "mismatches")
    if not n_mismatch:
        _delete(spark, path)  # a stale earlier run
        return 0, None
    mm.write.mode("overwrite").parquet(path)
    head = mm.limit(MISMATCH_CSV_ROWS + 1).toArrow()  # the count comes with it when it is small
    n = head.num_rows if head.num_rows <= MISMATCH_CSV_ROWS else mm.count()
    return n, _sorted(head.slice(0, MISMATCH_CSV_ROWS), [*T.LEAD_KEY, "arrival"])


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


@click.command("job.py", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--input", "input_dir", required=True, help="Export URI (hdfs://, s3a://, file://, or a path).")
@click.option("--out", "out_dir", required=True, help="Output URI: tables, index.html, plots.")
@click.option("--window", default="1h", show_default=True, help="Time window: seconds or 15m, 1h, 1d ...")
@date_options
@click.option("--worst", type=click.IntRange(1), default=10, show_default=True)
@click.option("--no-report", is_flag=True, help="Tables only, no index.html.")
def main(
    input_dir: str,
    out_dir: str,
    window: str,
    date_from: str | None,
    date_to: str | None,
    since: str | None,
    day: str | None,
    daily: bool,
    lookback_days: int | None,
    lookahead_days: int,
    worst: int,
    no_report: bool,
) -> None:
    """leadwire fleet analytics, the spark-submit entry: uses the active or cluster SparkSession
    (the master comes from spark-submit)."""
    try:
        window_seconds = parse_window(window)
        date_from, date_to = resolve_dates(date_from, date_to, since, day, daily)
        spark = SparkSession.builder.appName("leadwire-fleet").getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        summary = run_job(
            input_dir,
            out_dir,
            spark,
            window_seconds=window_seconds,
            worst_n=worst,
            date_from=date_from,
            date_to=date_to,
            lookback_days=lookback_days,
            lookahead_days=lookahead_days,
            daily=daily,
            report=not no_report,
        )
    except BadInput as e:
        click.echo("fleet: %s" % e, err=True)
        sys.exit(2)
    click.echo(format_summary(summary))


if __name__ == "__main__":
    main()
