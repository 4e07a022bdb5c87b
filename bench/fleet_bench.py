"""Fleet job benchmark: Spark (local[2]) vs a single-process DuckDB oracle on the same data.

For each size it generates telemetry with known loss, duplication, reordering, restarts and
overruns (leadwire.fleet.synth), runs the Spark job (tables, no HTML report) and the DuckDB oracle
(same tables, in memory), and prints both times, the ratio, whether every table is equal, and
whether the Spark summary matches the injected ground truth (fleet-level latency percentiles,
approximate for large groups, are checked against the raw values with their stated rank error).

\b
    .venv/bin/python bench/fleet_bench.py                         # 1M and 10M rows
    .venv/bin/python bench/fleet_bench.py --rows 250000 1000000   # demo size and 1M (sizes: N [N ...])
    .venv/bin/python bench/fleet_bench.py --adaptive              # the same with AQE on
    .venv/bin/python bench/fleet_bench.py --rows 3000000 --hot-device-share 0.5 --driver-memory 1g
                                        # skewed: one device, half the rows, one boot; 1 GB JVM

JVM start-up is timed separately (printed beside) and not included in the Spark time. The Spark
time is the job after session start: reading the export, the row-scale tables written by the
executors, the small ones collected and written by the driver (no HTML report); the DuckDB time
includes reading the export and building the same tables in memory. The machine's 1-minute load
average is printed next to each time: on a shared machine the absolute times move with it, the
ratio less. Time per million rows is printed for the linearity check (10M vs 30M). CPU seconds
(Spark: the local-mode JVM, driver and executors, plus this Python process; DuckDB: this process)
are printed too: they move less with other load than wall time.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from typing import Any

import click

from leadwire.fleet.columns import check_fleet_latency, without_approx
from leadwire.fleet.job import TABLE_ORDER, build_session, run_job
from leadwire.fleet.oracle import compare_tables, read_job_tables, run_oracle
from leadwire.fleet.synth import SUMMARY_TRUTH, SynthConfig, generate, write_export
from leadwire.fleet.transforms import APPROX_ACCURACY, EXACT_MAX_VALUES


def cpu_seconds(spark: Any) -> float:
    """CPU seconds (user + system) used so far by the driver JVM (local mode: the executors too)
    and this Python process: less sensitive to other load on a shared machine than wall time."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    jvm = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return jvm + time.process_time()


def jvm_memory(spark: Any) -> str:
    """The JVM's peak resident set since it started (VmHWM) and its heap limit (-Xmx)."""
    jvm = spark.sparkContext._jvm
    pid = jvm.java.lang.ProcessHandle.current().pid()
    with open("/proc/%d/status" % pid) as f:
        hwm = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
    heap = jvm.java.lang.Runtime.getRuntime().maxMemory()
    return "JVM peak RSS %.0f MB, max heap %.0f MB" % (int(hwm) / 1024, heap / 2**20)


def one(
    rows: int, out: str, spark: Any, threads: int, hot: float = 0.0, duck_memory: str | None = None
) -> dict[str, Any]:
    export = os.path.join(out, "export-%d" % rows)
    result = os.path.join(out, "spark-%d" % rows)
    shutil.rmtree(export, ignore_errors=True)
    t = time.monotonic()
    cfg = SynthConfig(rows=rows, lead_errors=5, dup_flag_errors=3, seed=rows % 997, hot_device_share=hot)
    tables, truth = generate(cfg)
    write_export(tables, export)
    del tables
    gen_s = time.monotonic() - t
    print("[bench] %d rows generated and written in %.1fs" % (truth.totals["rows"], gen_s), flush=True)

    t, c = time.monotonic(), cpu_seconds(spark)
    summary = run_job(export, result, spark, report=False, progress=True)
    spark_s = time.monotonic() - t
    spark_cpu = cpu_seconds(spark) - c
    spark_load = os.getloadavg()[0]
    print(
        "[bench] spark job %.1fs, %.1f CPU s (load average %.1f); %s"
        % (spark_s, spark_cpu, spark_load, jvm_memory(spark)),
        flush=True,
    )

    t, c = time.monotonic(), time.process_time()
    spill = os.path.join(out, "duckdb-spill") if duck_memory else None
    want = run_oracle(export, threads=threads, memory_limit=duck_memory, spill_dir=spill)
    duck_s = time.monotonic() - t
    duck_cpu = time.process_time() - c
    duck_load = os.getloadavg()[0]
    print(
        "[bench] duckdb oracle %.1fs, %.1f CPU s (load average %.1f)" % (duck_s, duck_cpu, duck_load),
        flush=True,
    )

    got = read_job_tables(result, TABLE_ORDER)
    # fleet-level percentiles: exact up to a group size, approximate above (checked on the raw values)
    diffs = compare_tables(without_approx(got), without_approx(want), TABLE_ORDER)
    diffs += check_fleet_latency(export, got, EXACT_MAX_VALUES, APPROX_ACCURACY)
    truth_diffs = [
        "%s: spark %s, truth %s" % (k, summary[k], truth.totals[v])
        for k, v in SUMMARY_TRUTH.items()
        if summary[k] != truth.totals[v]
    ]
    return {
        "rows": truth.totals["rows"],
        "generate_s": gen_s,
        "spark_s": spark_s,
        "duckdb_s": duck_s,
        "spark_cpu": spark_cpu,
        "duckdb_cpu": duck_cpu,
        "ratio": spark_s / duck_s,
        "spark_load": spark_load,
        "duck_load": duck_load,
        "equal": not diffs,
        "diffs": diffs,
        "truth_ok": not truth_diffs,
        "truth_diffs": truth_diffs,
    }


def start_session(o: dict[str, Any]) -> tuple[Any, float]:
    """The bench's SparkSession (one JVM for every size) and its start-up time."""
    t = time.monotonic()
    spark = build_session(
        o["master"],
        o["shuffle_partitions"],
        o["driver_memory"],
        app_name="leadwire-fleet-bench",
        adaptive=o["adaptive"] or None,
        extra={
            **({"spark.sql.adaptive.enabled": "true"} if o["adaptive"] else {}),
            **dict(kv.split("=", 1) for kv in o["conf"]),
        },
    )
    return spark, time.monotonic() - t


HEAD = "%12s %10s %10s %8s %7s %7s %11s %12s %16s" % (
    "rows",
    "spark s",
    "duckdb s",
    "ratio",
    "equal",
    "truth",
    "load s/d",
    "spark s/1M",
    "CPU s spark/duck",
)


def print_results(results: list[dict[str, Any]]) -> bool:
    """The results table (and the first differences); True when every size was exact."""
    print(HEAD)
    ok = True
    for r in results:
        print(
            "%12d %10.1f %10.1f %8.2f %7s %7s %5.1f/%-5.1f %12.2f %10.1f/%-5.1f"
            % (
                r["rows"],
                r["spark_s"],
                r["duckdb_s"],
                r["ratio"],
                "yes" if r["equal"] else "NO",
                "yes" if r["truth_ok"] else "NO",
                r["spark_load"],
                r["duck_load"],
                r["spark_s"] / r["rows"] * 1e6,
                r["spark_cpu"],
                r["duckdb_cpu"],
            )
        )
        for d in r["diffs"][:20] + r["truth_diffs"]:
            print("    " + d)
        ok = ok and r["equal"] and r["truth_ok"]
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
@click.option("--driver-memory", default="8g", show_default=True)
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
    "--duckdb-memory", default=None, help="memory_limit of the DuckDB oracle, e.g. 6GB (spills to --out)"
)
def main(**o: Any) -> None:
    sizes = [*o["rows"], *o["more_rows"]] or [1_000_000, 10_000_000]
    os.makedirs(o["out"], exist_ok=True)
    spark, jvm_s = start_session(o)
    print("[bench] spark session (%s) started in %.1fs" % (o["master"], jvm_s), flush=True)
    results = []
    try:
        for n in sizes:
            results.append(one(n, o["out"], spark, o["threads"], o["hot_device_share"], o["duckdb_memory"]))
            if not o["keep"]:
                shutil.rmtree(os.path.join(o["out"], "export-%d" % n), ignore_errors=True)
        mem = jvm_memory(spark)
    finally:
        spark.stop()
    print()
    print(
        "JVM start %.1fs (not in the Spark times); AQE %s; shuffle partitions %s; driver memory %s;"
        " hot device share %s; conf %s; %s"
        % (
            jvm_s,
            "on" if o["adaptive"] else "off",
            o["shuffle_partitions"] or "2 x cores",
            o["driver_memory"],
            o["hot_device_share"],
            " ".join(o["conf"]) or "-",
            mem,
        )
    )
    sys.exit(0 if print_results(results) else 1)


if __name__ == "__main__":
    main()
