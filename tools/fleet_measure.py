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
    with open("/proc/%d/stat" % jvm_pid(spark)) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
