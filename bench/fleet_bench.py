"""Fleet job benchmark: Spark (local[2]) vs a single-process DuckDB oracle on the same data.

For each size it generates telemetry with known loss, duplication, reordering, restarts and
overruns (leadwire.fleet.synth), runs the Spark job (tables, no HTML report) and the DuckDB oracle
(same tables, in memory), and prints both times, the ratio, whether every table is equal, and
whether the Spark summary matches the injected ground truth.

    .venv/bin/python bench/fleet_bench.py                         # 1M and 10M rows
    .venv/bin/python bench/fleet_bench.py --rows 250000 1000000   # demo size and 1M
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

import argparse
import os
import shutil
import sys
import time
from typing import Any

from leadwire.fleet.job import TABLE_ORDER, build_session, run_job
from leadwire.fleet.oracle import compare_tables, read_job_tables, run_oracle
from leadwire.fleet.synth import SUMMARY_TRUTH, SynthConfig, generate, write_export


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


def one(rows: int, out: str, spark: Any, threads: int, hot: float = 0.0) -> dict[str, Any]:
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
    want = run_oracle(export, threads=threads)
    duck_s = time.monotonic() - t
    duck_cpu = time.process_time() - c
    duck_load = os.getloadavg()[0]
    print(
        "[bench] duckdb oracle %.1fs, %.1f CPU s (load average %.1f)" % (duck_s, duck_cpu, duck_load),
        flush=True,
    )

    got = read_job_tables(result, TABLE_ORDER)
    diffs = compare_tables(got, want, TABLE_ORDER)
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "out", "fleet"))
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--threads", type=int, default=2, help="DuckDB threads (match the Spark cores)")
    ap.add_argument("--shuffle-partitions", type=int, default=None, help="default: the job's (2 x cores)")
    ap.add_argument("--adaptive", action="store_true", help="AQE on (the job's local default: off)")
    ap.add_argument("--driver-memory", default="8g")
    ap.add_argument(
        "--hot-device-share",
        type=float,
        default=0.0,
        help="skewed fleet: one device holds this share of the rows in one boot (one lead domain)",
    )
    ap.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark conf at session start (repeatable), as spark-submit --conf",
    )
    ap.add_argument("--keep", action="store_true", help="keep the generated export and Spark output")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    t = time.monotonic()
    spark = build_session(
        a.master,
        a.shuffle_partitions,
        a.driver_memory,
        app_name="leadwire-fleet-bench",
        adaptive=a.adaptive or None,
        extra={
            **({"spark.sql.adaptive.enabled": "true"} if a.adaptive else {}),
            **dict(kv.split("=", 1) for kv in a.conf),
        },
    )
    jvm_s = time.monotonic() - t
    print("[bench] spark session (%s) started in %.1fs" % (a.master, jvm_s), flush=True)
    results = []
    try:
        for n in a.rows:
            r = one(n, a.out, spark, a.threads, a.hot_device_share)
            results.append(r)
            if not a.keep:
                shutil.rmtree(os.path.join(a.out, "export-%d" % n), ignore_errors=True)
        mem = jvm_memory(spark)
    finally:
        spark.stop()
    print()
    print(
        "JVM start %.1fs (not in the Spark times); AQE %s; shuffle partitions %s; driver memory %s;"
        " hot device share %s; conf %s; %s"
        % (
            jvm_s,
            "on" if a.adaptive else "off",
            a.shuffle_partitions or "2 x cores",
            a.driver_memory,
            a.hot_device_share,
            " ".join(a.conf) or "-",
            mem,
        )
    )
    print(
        "%12s %10s %10s %8s %7s %7s %11s %12s %16s"
        % (
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
    )
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
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
