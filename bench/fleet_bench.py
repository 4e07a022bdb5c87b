"""Fleet job benchmark: Spark (local[2]) vs a single-process DuckDB oracle on the same data.

For each size it generates telemetry with known loss, duplication, reordering, restarts and
overruns (leadwire.fleet.synth.write_synth, in a child process, streamed --chunk-rows at a time so
its memory does not grow with the size), runs the Spark job (tables, no HTML report) and the DuckDB
oracle (same tables, in memory; --duckdb-memory caps it and spills under --out), and prints
both times, the ratio, whether every table is equal, cell by cell (latency percentiles
included: exact in both), and whether the Spark summary matches the injected ground truth.

\b
    .venv/bin/python bench/fleet_bench.py                         # 1M and 10M rows
    .venv/bin/python bench/fleet_bench.py --rows 250000 1000000   # demo size and 1M (sizes: N [N ...])
    .venv/bin/python bench/fleet_bench.py --adaptive              # the same with AQE on
    .venv/bin/python bench/fleet_bench.py --rows 3000000 --hot-device-share 0.5 --driver-memory 1g
                                        # skewed: one device, half the rows, one boot; 1 GB JVM
    nice .venv/bin/python bench/fleet_bench.py --skewed 10000000 --duckdb-memory 6GB --json
                                        # skewed with the job's defaults (4 GB JVM): largest
                                        # per-arrival task against the median, rows and seconds
    .venv/bin/python bench/fleet_bench.py --rows 10000000 30000000 --driver-memory 6g \
        --duckdb-memory 4GB             # the linearity check on a 24 GB machine
    nice .venv/bin/python bench/fleet_bench.py --rows 10000000 --duckdb-memory 6GB --warm --json
                                        # the job twice in one JVM: cold (its first run) and
                                        # warm (what a long-lived session or Connect server
                                        # sees daily): spark_seconds_cold/_warm, ratio_warm,
                                        # cpu_ratio_warm, both runs compared with the oracle
    .venv/bin/python bench/fleet_bench.py --days 14 [--day-rows 20000] [--json]
                                        # incremental: one export run a day, each followed by
                                        # `--incremental` and a full recompute to compare with;
                                        # per day wall and JVM CPU seconds, and the last day
                                        # against day 2 on both (ratio_seconds, ratio_cpu_seconds)

The JVM is started as `leadwire fleet` starts a local one (C1 only for small exports, else the
driver's planning code kept off C2; Spark's classes mapped from the class-data archive in
~/.cache/leadwire/spark-cds: its first run writes it at exit); --plain-jvm for the JVM's defaults.
JVM start-up is timed separately (printed beside) and not included in the Spark time. The Spark
time is the job after session start: reading the export, the row-scale tables written by the
executors, the small ones collected and written by the driver (no HTML report); the DuckDB time
includes reading the export and building the same tables in memory. The machine's 1-minute load
average is printed next to each time: on a shared machine the absolute times move with it, the
ratio less. Time per million rows is printed for the linearity check (10M vs 30M). CPU seconds
(Spark: the local-mode JVM, driver and executors, plus this Python process; DuckDB: this process)
are printed too, and the JVM's alone (/proc/PID/stat): they move less with other load than wall
time. Per size the stages of one exchange's tasks that read at least half the arrival rows from
the shuffle (the per-arrival work) are listed with their largest task against the median task,
in shuffled rows read and in run seconds, from Spark's status store (the task metrics its UI
shows). Memory per size: the generator's peak RSS, the JVM's peak RSS during the job, this
process's (DuckDB, the checks) and the machine's lowest MemAvailable. The export and Spark output
of a size are deleted before the next.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import sys
import threading
import time
from contextlib import AbstractContextManager
from typing import Any

import click

from leadwire.fleet.job import TABLE_ORDER, LocalSession, Progress, local_session, run_job
from leadwire.fleet.oracle import compare_tables, read_job_tables, run_oracle
from leadwire.fleet.session import DRIVER_MEMORY
from leadwire.fleet.synth import SUMMARY_TRUTH, SynthConfig, SynthTruth
from leadwire.tools.fleet_measure import (
    ROW_BYTES,
    generate_export,
    jvm_cpu_seconds,
    jvm_pid,
    jvm_thread_cpu,
    peak_rss_mb,
)


def cpu_seconds(spark: Any) -> float:
    """CPU seconds of the driver JVM (jvm_cpu_seconds) and this Python process."""
    return jvm_cpu_seconds(spark) + time.process_time()


def stage_ids(spark: Any) -> set[int]:
    """The Spark stages of every job the session has run so far (its status tracker)."""
    tr = spark.sparkContext.statusTracker()
    return {
        sid
        for j in tr.getJobIdsForGroup(None)
        for sid in (tr.getJobInfo(j).stageIds if tr.getJobInfo(j) else ())
    }


def task_metrics(spark: Any, before: set[int]) -> list[dict[str, Any]]:
    """Per Spark stage run since `before` (stage_ids), its tasks' rows read (input records plus
    shuffle records read) and run seconds (executorRunTime), from Spark's status store: the task
    metrics the UI and its REST API show, kept with the UI off too, in the order of the tasks'
    partition index. Skipped stages (no tasks) and retried attempts are left out."""
    sc = spark.sparkContext
    store = sc._jsc.sc().statusStore()
    out = []
    for sid in sorted(stage_ids(spark) - before):
        tasks = store.taskList(sid, 0, 1 << 20)
        got = []
        for i in range(tasks.size()):
            t = tasks.apply(i)
            m = t.taskMetrics()
            if m.isDefined():
                m = m.get()
                got.append((t.index(), m.shuffleReadMetrics().recordsRead(), m.executorRunTime() / 1000))
        if got:
            got.sort()
            out.append({"stage": sid, "shuffled": [g[1] for g in got], "seconds": [g[2] for g in got]})
    return out


def task_balance(stages: list[dict[str, Any]], arrivals: int, partitions: int) -> dict[str, Any]:
    """The per-arrival stages: those of `partitions` tasks (one exchange's reducers; a stage that
    computes a union of parts has more, and there which part's task read a shared exchange first
    depends on timing) that read at least half the arrival rows from the shuffle (the scans'
    tasks follow the files' splits, not the devices): per stage the largest task against the
    median task, in shuffled rows read and in run seconds; `largest_task_ratio` (rows) and
    `largest_task_ratio_s`: the worst of them."""
    import statistics

    heavy = []
    for st in stages:
        rows, secs = st["shuffled"], st["seconds"]
        if len(rows) != partitions or len(rows) < 2 or sum(rows) < arrivals / 2:
            continue
        med_r, med_s = statistics.median(rows), statistics.median(secs)
        heavy.append(
            {
                "stage": st["stage"],
                "tasks": len(rows),
                "rows_max": max(rows),
                "rows_median": med_r,
                "rows_ratio": round(max(rows) / med_r, 2) if med_r else None,
                "seconds_max": round(max(secs), 2),
                "seconds_median": round(med_s, 2),
                "seconds_ratio": round(max(secs) / med_s, 2) if med_s else None,
            }
        )
    worst = [h["rows_ratio"] for h in heavy if h["rows_ratio"] is not None]
    worst_s = [h["seconds_ratio"] for h in heavy if h["seconds_ratio"] is not None]
    return {
        "largest_task_ratio": max(worst, default=None),
        "largest_task_ratio_s": max(worst_s, default=None),
        "stages": heavy,
    }


def reset_peak(pid: int | str = "self") -> None:
    """Restart a process's VmHWM from its current RSS (Linux: 5 > /proc/PID/clear_refs)."""
    with open("/proc/%s/clear_refs" % pid, "w") as f:
        f.write("5")


def jvm_memory(spark: Any) -> str:
    """The JVM's peak resident set (VmHWM, since start or the last reset_peak) and heap limit."""
    heap = spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory()
    return "JVM peak RSS %.0f MB, max heap %.0f MB" % (peak_rss_mb(jvm_pid(spark)), heap / 2**20)


def mem_available_mb() -> float:
    with open("/proc/meminfo") as f:
        return int(next(line.split()[1] for line in f if line.startswith("MemAvailable:"))) / 1024


class MemWatch:
    """The machine's lowest MemAvailable while running (sampled every 0.5 s in a thread)."""

    def __init__(self) -> None:
        self.low = mem_available_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.low = min(self.low, mem_available_mb())

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return min(self.low, mem_available_mb())


def run_spark(export: str, result: str, spark: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Spark job on the export: (its summary, its timings, load, JVM peak RSS, and the balance
    of its per-arrival tasks: task_balance)."""
    pid = jvm_pid(spark)
    reset_peak(pid)
    before = stage_ids(spark)
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    t, c, j, k = time.monotonic(), cpu_seconds(spark), jvm_cpu_seconds(spark), jvm_thread_cpu(pid)
    prog = Progress()
    summary = run_job(export, result, spark, report=False, progress=prog)
    r = {"spark_s": time.monotonic() - t, "spark_cpu": cpu_seconds(spark) - c}
    r["jvm_cpu"] = jvm_cpu_seconds(spark) - j
    # of which the JIT's compiler threads and the garbage collector's (jvm_thread_cpu)
    r["jvm_threads"] = {n: round(v - k[n], 1) for n, v in jvm_thread_cpu(pid).items()}
    r["spark_load"], r["jvm_peak_mb"] = os.getloadavg()[0], peak_rss_mb(pid)
    r["stage_seconds"] = {k: round(v, 2) for k, v in prog.timings.items()}
    r.update(task_balance(task_metrics(spark, before), summary["rows"], partitions))
    print(
        "[bench] spark job %.1fs, %.1f CPU s (JVM %.1f, of which JIT %.1f, GC %.1f; load average %.1f); %s; "
        "largest task / median: %s rows, %s s"
        % (
            r["spark_s"],
            r["spark_cpu"],
            r["jvm_cpu"],
            r["jvm_threads"]["jit"],
            r["jvm_threads"]["gc"],
            r["spark_load"],
            jvm_memory(spark),
            r["largest_task_ratio"],
            r["largest_task_ratio_s"],
        ),
        flush=True,
    )
    return summary, r


def run_duckdb(export: str, out: str, threads: int, duck_memory: str | None) -> tuple[Any, dict[str, Any]]:
    """The DuckDB oracle (in this process; spills to OUT/duckdb-spill under a memory limit)."""
    reset_peak()
    t, c = time.monotonic(), time.process_time()
    spill = os.path.join(out, "duckdb-spill") if duck_memory else None
    want = run_oracle(export, threads=threads, memory_limit=duck_memory, spill_dir=spill)
    r = {"duckdb_s": time.monotonic() - t, "duckdb_cpu": time.process_time() - c}
    r["duck_load"], r["py_peak_mb"] = os.getloadavg()[0], peak_rss_mb()
    if spill:
        shutil.rmtree(spill, ignore_errors=True)
    print(
        "[bench] duckdb oracle %.1fs, %.1f CPU s (load average %.1f); this process peak RSS %.0f MB"
        % (r["duckdb_s"], r["duckdb_cpu"], r["duck_load"], r["py_peak_mb"]),
        flush=True,
    )
    return want, r


def check(result: str, want: Any, summary: dict[str, Any], truth: SynthTruth) -> dict[str, Any]:
    """Spark's tables against the oracle's, every cell; its summary against the truth."""
    got = read_job_tables(result, TABLE_ORDER)
    diffs = compare_tables(got, want, TABLE_ORDER)
    del want
    gc.collect()
    truth_diffs = [
        "%s: spark %s, truth %s" % (k, summary[k], truth.totals[v])
        for k, v in SUMMARY_TRUTH.items()
        if summary[k] != truth.totals[v]
    ]
    return {"equal": not diffs, "diffs": diffs, "truth_ok": not truth_diffs, "truth_diffs": truth_diffs}


def one(rows: int, out: str, spark: Any, o: dict[str, Any]) -> dict[str, Any]:
    """One size: generate (child process), Spark, DuckDB, compare; frees everything after."""
    export = os.path.join(out, "export-%d" % rows)
    result = os.path.join(out, "spark-%d" % rows)
    shutil.rmtree(export, ignore_errors=True)
    watch = MemWatch()
    cfg = SynthConfig(
        rows=rows, lead_errors=5, dup_flag_errors=3, seed=rows % 997, hot_device_share=o["hot_device_share"]
    )
    truth, gen_s, gen_peak = generate_export(cfg, export, o["chunk_rows"])
    print(
        "[bench] %d rows generated and written in %.1fs (generator peak RSS %.0f MB)"
        % (truth.totals["rows"], gen_s, gen_peak),
        flush=True,
    )
    summary, r_spark = run_spark(export, result, spark)
    warm: dict[str, Any] = {}
    if o["warm"]:  # the same job again in the same JVM: what a long-lived session or server sees
        print("[bench] the same job again in this JVM (--warm)", flush=True)
        warm_result = result + "-warm"
        warm_summary, warm = run_spark(export, warm_result, spark)
    want, r_duck = run_duckdb(export, out, o["threads"], o["duckdb_memory"])
    r = {"rows": truth.totals["rows"], "generate_s": gen_s, "gen_peak_mb": gen_peak, **r_spark, **r_duck}
    if warm:
        got = check(warm_result, want, warm_summary, truth)
        diffs = got["diffs"] + got["truth_diffs"]
        r["warm"] = {**warm, "equal": not diffs, "diffs": diffs}
        shutil.rmtree(warm_result, ignore_errors=True)
    r.update(check(result, want, summary, truth))
    r["ratio"] = r["spark_s"] / r["duckdb_s"]
    r["py_peak_mb"] = max(r["py_peak_mb"], peak_rss_mb())
    r["mem_low_mb"] = watch.stop()
    if not o["keep"]:
        shutil.rmtree(export, ignore_errors=True)
        shutil.rmtree(result, ignore_errors=True)
    gc.collect()
    return r


def bench_session(o: dict[str, Any], sizes: list[int]) -> AbstractContextManager[LocalSession]:
    """The bench's SparkSession (one JVM for every size), with its start-up time and the JVM
    options leadwire gave it; stopped (and the class archive saved) on leaving.

    The JVM gets what `leadwire fleet` gives a local one it starts (job.launch_conf: C1 only when
    every size's export is small, the class-data archive) unless --plain-jvm; --conf wins."""
    return local_session(
        o["master"],
        max(sizes) * ROW_BYTES,
        o["shuffle_partitions"],
        o["driver_memory"],
        app_name="leadwire-fleet-bench",
        adaptive=o["adaptive"] or None,
        extra={
            **({"spark.sql.adaptive.enabled": "true"} if o["adaptive"] else {}),
            **dict(kv.split("=", 1) for kv in o["conf"]),
        },
        launch=not o["plain_jvm"],
        log=lambda m: print("[bench] " + m, flush=True),
    )


HEAD = "%12s %9s %9s %6s %5s %5s %11s %9s %9s %14s %22s" % (
    "rows", "spark s", "duckdb s", "ratio", "equal", "truth", "load s/d", "spark us/row",
    "duck us/row", "CPU s spk/duck", "peak MB gen/jvm/py/avail",
)  # fmt: skip


def print_row(r: dict[str, Any]) -> None:
    print(
        "%12d %9.1f %9.1f %6.2f %5s %5s %5.1f/%-5.1f %9.3f %9.3f %8.1f/%-5.1f %7.0f/%.0f/%.0f/%.0f"
        % (
            r["rows"], r["spark_s"], r["duckdb_s"], r["ratio"], "yes" if r["equal"] else "NO",
            "yes" if r["truth_ok"] else "NO", r["spark_load"], r["duck_load"],
            r["spark_s"] / r["rows"] * 1e6, r["duckdb_s"] / r["rows"] * 1e6, r["spark_cpu"], r["duckdb_cpu"],
            r["gen_peak_mb"], r["jvm_peak_mb"], r["py_peak_mb"], r["mem_low_mb"],
        )
    )  # fmt: skip


def print_results(results: list[dict[str, Any]]) -> bool:
    """The results table (and the first differences), then the time per row of every size against
    the first (the linearity check: 30M/10M <= 1 means no worse per row); True when all exact."""
    print(HEAD)
    ok = True
    for r in results:
        print_row(r)
        for d in r["diffs"][:20] + r["truth_diffs"]:
            print("    " + d)
        ok = ok and r["equal"] and r["truth_ok"]
        if "warm" in r:
            w = r["warm"]
            print(
                "%12s %9.1f %9s %6.2f %5s %5s %5.1f  (the same job again in this JVM: --warm; JVM CPU %.1f"
                " cold, %.1f warm, against DuckDB %.1f: %.2f, %.2f)"
                % (
                    "warm", w["spark_s"], "", w["spark_s"] / r["duckdb_s"], "yes" if w["equal"] else "NO", "",
                    w["spark_load"], r["jvm_cpu"], w["jvm_cpu"], r["duckdb_cpu"],
                    r["jvm_cpu"] / r["duckdb_cpu"], w["jvm_cpu"] / r["duckdb_cpu"],
                )
            )  # fmt: skip
            for d in w["diffs"][:20]:
                print("    " + d)
            ok = ok and w["equal"]
    for r in results[1:]:
        base = results[0]
        per_row = {
            k: (r[k] / r["rows"]) / (base[k] / base["rows"]) for k in ("spark_s", "duckdb_s", "spark_cpu")
        }
        print(
            "time per row %d / %d: spark %.2f, duckdb %.2f, spark CPU %.2f"
            % (r["rows"], base["rows"], per_row["spark_s"], per_row["duckdb_s"], per_row["spark_cpu"])
        )
    print("(peak MB: generator child, JVM during the job, this process during DuckDB + checks; avail: the")
    print(" machine's lowest MemAvailable during the size)")
    return ok


@click.command(help=__doc__, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--rows", type=int, multiple=True, help="Size to run (rows); more sizes may follow it: --rows N N ..."
)
@click.argument("more_rows", nargs=-1, type=int)
@click.option("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "out", "fleet"))
@click.option("--master", default="local[2]", show_default=True)
@click.option(
    "--threads", type=int, default=2, show_default=True, help="DuckDB threads (match the Spark cores)"
)
@click.option("--shuffle-partitions", type=int, default=None, help="default: the job's (2 x cores)")
@click.option("--adaptive", is_flag=True, help="AQE on (the job's local default: off)")
@click.option(
    "--driver-memory", default=None, help="default: 8g; with --skewed the job's (%s)" % DRIVER_MEMORY
)
@click.option(
    "--hot-device-share",
    type=float,
    default=0.0,
    help="skewed fleet: one device holds this share of the rows in one boot (one lead domain)",
)
@click.option(
    "--conf",
    multiple=True,
    metavar="KEY=VALUE",
    help="extra Spark conf at session start (repeatable), as spark-submit --conf",
)
@click.option("--keep", is_flag=True, help="keep the generated export and Spark output")
@click.option(
    "--plain-jvm",
    is_flag=True,
    help="the JVM without what `leadwire fleet` gives a local one (C1 for small exports, class archive)",
)
@click.option(
    "--chunk-rows",
    type=int,
    default=1_000_000,
    show_default=True,
    help="the generator writes the export every this many rows (bounds its memory)",
)
@click.option(
    "--duckdb-memory", default=None, help="memory_limit of the DuckDB oracle, e.g. 6GB (spills to --out)"
)
@click.option(
    "--skewed",
    type=int,
    default=0,
    help="one skewed fleet of this many rows (one device holds half of them, one boot) run with the "
    "job's defaults (driver memory included); prints the largest per-arrival task against the median",
)
@click.option(
    "--warm",
    is_flag=True,
    help="run the Spark job twice per size in the same JVM and report both (the second: what a "
    "long-lived session or Spark Connect server runs a daily job at)",
)
@click.option("--days", type=int, default=0, help="incremental mode: this many daily export runs")
@click.option("--day-rows", type=int, default=20_000, show_default=True, help="--days: arrival rows a day")
@click.option("--json", "as_json", is_flag=True, help="one JSON object on stdout (the table goes to stderr)")
def main(**o: Any) -> None:
    if o["skewed"]:
        o["hot_device_share"] = o["hot_device_share"] or 0.5
    o["driver_memory"] = o["driver_memory"] or (DRIVER_MEMORY if o["skewed"] else "8g")
    if o["days"]:
        sys.exit(0 if run_days(o) else 1)
    sizes = [o["skewed"]] if o["skewed"] else [*o["rows"], *o["more_rows"]] or [1_000_000, 10_000_000]
    os.makedirs(o["out"], exist_ok=True)
    results = []
    with bench_session(o, sizes) as session:
        jvm_s = session.start_s
        print("[bench] spark session (%s) started in %.1fs" % (o["master"], jvm_s), flush=True)
        for n in sizes:
            results.append(one(n, o["out"], session.spark, o))
        mem = "JVM peak RSS per size: %s MB" % ", ".join("%.0f" % r["jvm_peak_mb"] for r in results)
    jvm_opts = dict(kv.split("=", 1) for kv in o["conf"]).get("spark.driver.extraJavaOptions")
    jvm_opts = jvm_opts or session.java_options or "-"
    out = sys.stderr if o["as_json"] else sys.stdout
    print(file=out)
    print(
        "JVM start %.1fs (not in the Spark times); AQE %s; shuffle partitions %s; driver memory %s;"
        " hot device share %s; conf %s; JVM options %s; %s"
        % (
            jvm_s,
            "on" if o["adaptive"] else "off",
            o["shuffle_partitions"] or "2 x cores",
            o["driver_memory"],
            o["hot_device_share"],
            " ".join(o["conf"]) or "-",
            jvm_opts,
            mem,
        ),
        file=out,
    )
    with contextlib.redirect_stdout(out):
        ok = print_results(results)
    if o["as_json"]:
        print(json.dumps({"runs": [json_row(r, o, jvm_s) for r in results]}))
    sys.exit(0 if ok else 1)


def json_row(r: dict[str, Any], o: dict[str, Any], jvm_start_s: float) -> dict[str, Any]:
    """One size's figures for --json (seconds rounded; the first differences only)."""
    keys = (
        "rows", "spark_s", "jvm_cpu", "jvm_threads", "spark_cpu", "duckdb_s", "duckdb_cpu", "ratio", "equal",
        "truth_ok", "largest_task_ratio", "largest_task_ratio_s", "stages", "stage_seconds", "spark_load",
        "duck_load", "jvm_peak_mb", "py_peak_mb", "mem_low_mb",
    )  # fmt: skip
    out = {k: round(r[k], 3) if isinstance(r[k], float) else r[k] for k in keys}
    out["diffs"] = (r["diffs"] + r["truth_diffs"])[:20]
    if "warm" in r:
        w = r["warm"]
        out.update(
            spark_seconds_cold=round(r["spark_s"], 3),
            spark_seconds_warm=round(w["spark_s"], 3),
            jvm_cpu_cold=round(r["jvm_cpu"], 3),
            jvm_cpu_warm=round(w["jvm_cpu"], 3),
            jvm_threads_warm=w["jvm_threads"],
            ratio_warm=round(w["spark_s"] / r["duckdb_s"], 3),
            cpu_ratio_warm=round(w["jvm_cpu"] / r["duckdb_cpu"], 3) if r["duckdb_cpu"] else None,
            equal_warm=w["equal"],
            spark_load_warm=round(w["spark_load"], 2),
            stage_seconds_warm=w["stage_seconds"],
        )
        out["diffs"] += w["diffs"][:20]
    out.update(
        jvm_start_s=round(jvm_start_s, 2),
        driver_memory=o["driver_memory"],
        hot_device_share=o["hot_device_share"],
        cpu_ratio=round(r["jvm_cpu"] / r["duckdb_cpu"], 3) if r["duckdb_cpu"] else None,
    )
    return out


def run_days(o: dict[str, Any]) -> bool:
    """The incremental bench: a synthetic export of o['days'] days that grows one export run a day
    (leadwire.fleet.synth_days: a lagging bridge's files a day late, into the earlier day), the
    job with --incremental after each run, then a full recompute of the same files to compare the
    dated tables with. Per day: the rows the run brought, the rows the incremental job read, its
    seconds, and whether its tables equal the recompute's. True when every day is equal."""
    from leadwire.fleet.job import DATED_TABLES
    from leadwire.fleet.synth import generate
    from leadwire.fleet.synth_days import export_days, publish_run

    base = os.path.join(o["out"], "days")
    shutil.rmtree(base, ignore_errors=True)
    cfg = SynthConfig(rows=o["days"] * o["day_rows"], days=o["days"], seed=o["days"], lead_errors=2)
    tables, _ = generate(cfg)
    days = export_days(tables)[: o["days"]]
    export, inc = os.path.join(base, "export"), os.path.join(base, "incremental")
    log = sys.stderr if o["as_json"] else sys.stdout
    out: list[dict[str, Any]] = []
    with bench_session(o, [o["days"] * o["day_rows"]]) as session:
        spark = session.spark
        for k in range(len(days)):
            new = publish_run(tables, export, k, days)
            t, c = time.monotonic(), jvm_cpu_seconds(spark)
            s = run_job(export, inc, spark, report=False, progress=False, incremental=True)
            seconds, cpu = time.monotonic() - t, jvm_cpu_seconds(spark) - c
            full = os.path.join(base, "full")
            t, c = time.monotonic(), jvm_cpu_seconds(spark)
            run_job(export, full, spark, report=False, progress=False)
            full_s, full_cpu = time.monotonic() - t, jvm_cpu_seconds(spark) - c
            diffs = compare_tables(
                read_job_tables(inc, DATED_TABLES), read_job_tables(full, DATED_TABLES), TABLE_ORDER
            )
            row = {
                "day": k + 1,
                "new_rows": new,
                "rows_read": s["rows_read"],
                "seconds": round(seconds, 2),
                "cpu_seconds": round(cpu, 2),
                "equals_full": not diffs,
                "full_seconds": round(full_s, 2),
                "full_cpu_seconds": round(full_cpu, 2),
                "load": os.getloadavg()[0],
            }
            out.append(row)
            print(
                "[bench] day %(day)2d: new rows %(new_rows)d, read %(rows_read)d, %(seconds).1fs, "
                "%(cpu_seconds).1f JVM CPU s (full recompute %(full_seconds).1fs, "
                "%(full_cpu_seconds).1f CPU s), equals full: %(equals_full)s, load %(load).1f" % row,
                file=log,
                flush=True,
            )
            for d in diffs[:10]:
                print("    " + d, file=log)
            shutil.rmtree(full, ignore_errors=True)
    ok = all(r["equals_full"] for r in out)
    doc: dict[str, Any] = {"days": out}
    if len(out) >= 2:  # the last day against day 2 (day 1 starts from nothing)
        last, second = out[-1], out[1]
        doc["ratio_seconds"] = round(last["seconds"] / second["seconds"], 3)
        doc["ratio_cpu_seconds"] = round(last["cpu_seconds"] / second["cpu_seconds"], 3)
        print(
            "day %d / day 2: %.2f wall seconds, %.2f JVM CPU seconds"
            % (last["day"], doc["ratio_seconds"], doc["ratio_cpu_seconds"]),
            file=log,
        )
    if o["as_json"]:
        print(json.dumps(doc))
    if not o["keep"]:
        shutil.rmtree(base, ignore_errors=True)
    return ok


if __name__ == "__main__":
    main()
