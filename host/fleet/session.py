"""The SparkSession of the fleet job: the configuration it sets (runtime, tuning, static), and a
local session that leadwire starts and stops itself (the JVM's options: C1 for small inputs,
the planning code kept off C2 for the others (jvm_compiler), the class-data archive of
jvm_archive)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from py4j.protocol import Py4JError
from pyspark.sql import SparkSession

from leadwire.fleet import jvm_compiler
from leadwire.fleet.fs import local_path, scheme
from leadwire.fleet.jvm_archive import ClassArchive

RUNTIME_CONF = {
    "spark.sql.session.timeZone": "UTC",
    # keep `date` a string (YYYY-MM-DD) as the contract says, not an inferred DateType
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}
# Performance defaults, applied only where the session does not set the key itself (spark-submit
# --conf, build_session(extra=...) win). Measured at 1M and 10M rows (docs/fleet.md, "Structure":
# the tuning table):
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
    # generates more than that, so with the default every run compiles them all again and the
    # JVM JIT-compiles them again (at 250k rows more CPU than the tasks: docs/design/fleet-job.md).
    "spark.sql.codegen.cache.maxEntries": "2000",
}
# Local masters (one machine, small data): adaptive query execution re-plans every stage and
# costs more than it saves (docs/design/fleet-job.md, "A small job's fixed costs"). On a cluster it
# stays on (Spark's default): it coalesces the 200 default shuffle partitions to what the data needs.
LOCAL_CONF = {"spark.sql.adaptive.enabled": "false"}
# Local runs on a small export: a short job is mostly the JVM compiling Spark's code paths, and the
# optimising JIT (C2) is the larger share of that CPU, so C1 only (TieredStopAtLevel=1) costs
# less CPU on a small export (docs/design/fleet-job.md, "A small job's fixed costs"). Long runs
# want C2's faster code: only below SMALL_INPUT_BYTES of arrivals (~37 B a row: ~1.8M rows), and
# only where leadwire starts the JVM itself (`leadwire fleet`, the demo): under spark-submit the
# launch's own options stand. C1 alone gets the JVM's non-tiered code cache, 48 MB, which Spark's
# generated code fills ("CodeCache is full. Compiler has been disabled": the rest runs interpreted):
# it gets the 240 MB the JVM reserves with both compilers.
SMALL_INPUT_BYTES = 64 << 20
C1_ONLY = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
SMALL_INPUT_CONF = {"spark.driver.extraJavaOptions": C1_ONLY}


def input_bytes(input_dir: str) -> int | None:
    """Bytes of arrivals under a local export (None: not a local path, or not there)."""
    if scheme(input_dir) not in (None, "file"):
        return None
    root = os.path.join(local_path(input_dir), "arrivals")
    if not os.path.isdir(root):
        return None
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


def small_input_conf(master: str, nbytes: int | None) -> dict[str, str]:
    """SMALL_INPUT_CONF for a local master and an input known to be small, else nothing."""
    small = master.startswith("local") and nbytes is not None and nbytes <= SMALL_INPUT_BYTES
    return dict(SMALL_INPUT_CONF) if small else {}


def launch_conf(master: str, nbytes: int | None, archive: ClassArchive | None) -> dict[str, str]:
    """The JVM options of a session leadwire starts itself: C1 only for a small input on a local
    master (small_input_conf), else the driver's planning code kept off C2 (jvm_compiler), and
    the class-data archive (jvm_archive) for any local master."""
    key = "spark.driver.extraJavaOptions"
    c1 = small_input_conf(master, nbytes).get(key, "")
    opts = [c1 or (jvm_compiler.java_options() if master.startswith("local") else "")]
    if archive is not None and master.startswith("local"):
        opts.append(archive.java_options())
    joined = " ".join(o for o in opts if o)
    return {key: joined} if joined else {}


# spark.driver.memory of a session leadwire starts (local mode: executors run in the driver's JVM)
DRIVER_MEMORY = "4g"


def local_shuffle_partitions() -> int:
    return 2 * (os.cpu_count() or 2)


def build_session(
    master: str = "local[*]",
    shuffle_partitions: int | None = None,
    driver_memory: str = DRIVER_MEMORY,
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
        .config("spark.log.level", "ERROR")
        .config("spark.sql.adaptive.enabled", "true" if adaptive else "false")
    )
    if shuffle_partitions or local:
        b = b.config("spark.sql.shuffle.partitions", str(shuffle_partitions or local_shuffle_partitions()))
    for k, v in {**RUNTIME_CONF, **TUNING_CONF, **STATIC_CONF, **(extra or {})}.items():
        b = b.config(k, v)
    return b.getOrCreate()


@dataclass
class LocalSession:
    """A session leadwire started itself (local_session)."""

    spark: SparkSession
    java_options: str  # what launch_conf gave spark.driver.extraJavaOptions ("": nothing)
    start_s: float  # build_session's time: the JVM's start
    owned: bool = True  # False: getOrCreate() returned a session that was already running


@contextlib.contextmanager
def local_session(
    master: str,
    nbytes: int | None,
    shuffle_partitions: int | None = None,
    driver_memory: str = DRIVER_MEMORY,
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
    (jvm_archive).

    Only what this call started is ended. In a process that already has a session, the builder's
    getOrCreate() hands that one back: it is left running, and its JVM (started with other options)
    is never asked for an archive. In a process whose JVM outlived a stopped session, the new
    session is stopped but the JVM, not launched here, is left alone too."""
    from pyspark import SparkContext

    had_jvm = SparkContext._gateway is not None
    had_session = SparkContext._active_spark_context is not None
    with starting if starting is not None else contextlib.nullcontext():
        archive = ClassArchive() if launch and not had_jvm else None
        conf = launch_conf(master, nbytes, archive) if launch and not had_jvm else {}
        t = time.monotonic()
        spark = build_session(
            master, shuffle_partitions, driver_memory, app_name, adaptive, {**conf, **(extra or {})}
        )
        start_s = time.monotonic() - t
    try:
        yield LocalSession(
            spark, conf.get("spark.driver.extraJavaOptions", ""), start_s, owned=not had_session
        )
    finally:
        if not had_session:
            try:
                spark.stop()
            except (ConnectionError, Py4JError) as e:
                # the JVM already gone (killed, or its stdin closed): nothing left to stop, and
                # raising here would hide what the body raised
                log("spark: the session's JVM had already exited (%s)" % type(e).__name__)
        if archive is not None:
            archive.finish(log)


def is_connect(spark: Any) -> bool:
    """A Spark Connect session (``spark.remote``, Databricks serverless and shared clusters): no
    SparkContext, no JVM in this process."""
    # by the class's module: importing pyspark.sql.connect without its dependencies (grpcio)
    # ends the process
    return type(spark).__module__.startswith("pyspark.sql.connect")


def master_of(spark: SparkSession) -> str:
    """The session's master URL ("" where the session does not say: Spark Connect)."""
    return str(spark.conf.get("spark.master", "") or "")


def is_local_master(spark: SparkSession) -> bool:
    return master_of(spark).startswith("local")


def apply_conf(spark: SparkSession) -> None:
    """RUNTIME_CONF always; tuning only where the launch (spark-submit --conf, builder) set nothing."""
    for k, v in RUNTIME_CONF.items():
        spark.conf.set(k, v)
    tuning = dict(TUNING_CONF)
    if is_local_master(spark):
        tuning.update(LOCAL_CONF)
        tuning["spark.sql.shuffle.partitions"] = str(local_shuffle_partitions())
    for k, v in tuning.items():
        if not _launched(spark, k):
            spark.conf.set(k, v)


def _launched(spark: SparkSession, key: str) -> bool:
    """True when the session has its own value of `key` (spark-submit --conf, the builder, or a
    spark.conf.set): a key nobody set reads as the default given to conf.get, not Spark's."""
    return spark.conf.get(key, None) is not None
