"""What the fleet benches measure a Spark run and a synthetic export with (bench/fleet_bench.py,
bench/fleet_parts_bench.py): the driver JVM's CPU seconds and peak memory from /proc (Linux), and
the export written in a child process so its memory returns to the OS before Spark runs."""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
from typing import Any

from leadwire.fleet.synth import SynthConfig, SynthTruth, write_synth

ROW_BYTES = 37  # about what a synthetic arrival row takes in the export's Parquet


def jvm_cpu_seconds(spark: Any) -> float:
    """CPU seconds (user + system, /proc/PID/stat) used so far by the driver JVM (local mode: the
    executors too): less sensitive to other load on a shared machine than wall time."""
    return cpu_seconds_of(jvm_pid(spark))


def cpu_seconds_of(pid: int) -> float:
    """CPU seconds (user + system) used so far by process `pid` (a Spark Connect server's JVM)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# The JVM's long-lived service threads by /proc comm (at most 15 characters): the JIT's compilers,
# and the garbage collector's (G1's refinement and marking, the workers of the collection pauses,
# the VM thread that runs the pauses). Spark's task threads come and go (a pool whose idle threads
# exit), so their CPU is the JVM's total less these.
THREAD_KINDS = (
    ("jit", ("C1 CompilerThre", "C2 CompilerThre")),
    ("gc", ("GC Thread", "G1 ", "VM Thread")),
)


def jvm_thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds used so far by the live threads of JVM `pid` of each THREAD_KINDS kind: how
    much of a run's JVM CPU went to compiling and to collecting. The JVM ends compiler threads
    it no longer needs (beyond one of each compiler) and their CPU goes with them, so the
    difference over a run is a lower bound (slightly negative where one ended)."""
    out = dict.fromkeys([k for k, _ in THREAD_KINDS], 0.0)
    root = "/proc/%d/task" % pid
    for tid in os.listdir(root):
        try:
            with open(os.path.join(root, tid, "stat")) as f:
                head, tail = f.read().rsplit(")", 1)
        except OSError:  # the thread exited meanwhile
            continue
        name, fields = head.split("(", 1)[1], tail.split()
        kind = next((k for k, prefixes in THREAD_KINDS if name.startswith(prefixes)), None)
        if kind is not None:
            out[kind] += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def jvm_pid(spark: Any) -> int:
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


def peak_rss_mb(pid: int | str = "self") -> float:
    """A process's peak resident set (VmHWM) in MB; reset_peak() starts a new peak."""
    with open("/proc/%s/status" % pid) as f:
        return int(next(line.split()[1] for line in f if line.startswith("VmHWM:"))) / 1024


def _gen_child(cfg: SynthConfig, export: str, chunk_rows: int, q: Any) -> None:
    t = time.monotonic()
    truth = write_synth(cfg, export, chunk_rows=chunk_rows)
    # VmHWM, not getrusage's ru_maxrss: that survives exec, so a spawned child reports its parent's
    # peak when larger (measured: 4327 MB, the bench's DuckDB peak, for a 30M generation)
    q.put((truth, time.monotonic() - t, peak_rss_mb()))


def generate_export(cfg: SynthConfig, export: str, chunk_rows: int) -> tuple[SynthTruth, float, float]:
    """Write the synthetic export in a child process (streamed in chunks of chunk_rows rows), so
    its memory is the child's and returns to the OS before Spark runs: (truth, seconds, peak MB)."""
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_gen_child, args=(cfg, export, chunk_rows, q))
    proc.start()
    try:
        while True:
            try:
                result = q.get(timeout=2)
                break
            except queue.Empty:
                if not proc.is_alive():
                    raise RuntimeError("generator died (exit code %s)" % proc.exitcode) from None
    finally:
        proc.join()
    if proc.exitcode != 0:
        raise RuntimeError("generator exited with %s" % proc.exitcode)
    return result
