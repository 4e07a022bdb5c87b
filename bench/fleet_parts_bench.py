"""Parts of the fleet job side by side in one JVM: each part's DataFrame over the same export run
into Spark's `noop` sink (or the whole job), alternated for --rounds rounds, JVM CPU seconds and
wall seconds per run; the first round is the JVM's warm-up and is printed but not in the medians.

\b
    nice .venv/bin/python bench/fleet_parts_bench.py --rows 10000000            # every part
    nice .venv/bin/python bench/fleet_parts_bench.py --rows 10000000 --parts fleet_approx fleet_exact
    nice .venv/bin/python bench/fleet_parts_bench.py --export DIR --parts job   # an existing export

Parts (PARTS): the fleet-level percentiles as percentile_approx sketches (three aggregations of
every latency value, for the comparison) and as exact ones from value counts, the latency value
counts alone (per firmware, transport, day and metric: what the fleet percentiles and the rollout
tables read), the per-device percentiles (the job's `percentile` map per device, and from a count
per device and value, for the comparison), and the whole job. --remote runs them through a Spark
Connect server (its JVM's CPU read from /proc by --server-pid).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import click
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from leadwire.fleet import rollout as R
from leadwire.fleet import transforms as T
from leadwire.fleet.extract import DateRange, extract
from leadwire.fleet.job import local_session, run_job
from leadwire.fleet.progress import Progress
from leadwire.fleet.synth import SynthConfig
from leadwire.tools.fleet_measure import ROW_BYTES, cpu_seconds_of, generate_export, jvm_pid, jvm_thread_cpu

APPROX_ACCURACY = 10_000


def fleet_approx(values: DataFrame) -> DataFrame:
    """Fleet-level percentiles as three percentile_approx aggregations (per firmware, transport,
    fleet) over every latency value: what exact percentiles from counts are measured against."""
    pa = "percentile_approx(value_us, array(%s), %d) AS _pa" % (
        ", ".join("%rD" % p for p in T.PERCENTILES),
        APPROX_ACCURACY,
    )
    out = None
    for by in (["firmware_version"], ["transport"], []):
        d = values.groupBy(*by, "metric").agg(F.expr("count(1) AS n"), F.expr(pa))
        d = d.selectExpr("'%s' AS kind" % (by[0] if by else "fleet"), "metric", "n", "_pa")
        out = d if out is None else out.unionByName(d)
    assert out is not None
    return out


def device_counts(values: DataFrame) -> DataFrame:
    """Per-device percentiles as the fleet-level ones are made: a count per (device, metric, value)
    and a window per device and metric (transforms.transform_exact_percentiles), what Spark's
    `percentile` map per device (transforms.transform_device_latency) is measured against."""
    counts = values.groupBy("device_id", "metric", "value_us").agg(F.expr("CAST(sum(n) AS BIGINT) AS n"))
    return T.latency_wide(T.transform_exact_percentiles(counts, ["device_id"]), ["device_id"])


PARTS: dict[str, Callable[[DataFrame], DataFrame]] = {
    "fleet_approx": lambda arr: fleet_approx(T.transform_latency_values(arr)),
    "latency_counts": lambda arr: T.transform_latency_counts(arr, R.ROLLOUT_WINDOW_SECONDS),
    "fleet_exact": lambda arr: T.transform_fleet_percentiles(
        T.transform_latency_counts(arr, R.ROLLOUT_WINDOW_SECONDS)
    ),
    "device_pct": lambda arr: T.transform_device_latency(
        T.transform_latency_values(T.transform_by_device(arr))
    ),
    # the same from a count: on the arrivals shuffled by device (no further exchange), or counted
    # in the scan's tasks first (an exchange of the counts by device, metric and value)
    "device_counts": lambda arr: device_counts(T.transform_latency_values(T.transform_by_device(arr))),
    "device_counts_scan": lambda arr: device_counts(T.transform_latency_values(arr)),
}


def run_part(spark: SparkSession, pid: int, export: str, name: str) -> tuple[float, float, dict[str, float]]:
    """One run of a part: (JVM CPU seconds, wall seconds, CPU seconds per kind of JVM thread); `pid`
    the JVM that runs it (local: the driver's; --remote: the Connect server's)."""
    t, c, k = time.monotonic(), cpu_seconds_of(pid), jvm_thread_cpu(pid)
    if name == "job":
        out = tempfile.mkdtemp(prefix="fleet-parts-job-")
        try:
            run_job(export, out, spark, report=False, progress=False)
        finally:
            shutil.rmtree(out, ignore_errors=True)
    else:
        inputs = extract(spark, export, DateRange(), Progress(enabled=False))
        df = PARTS[name](T.transform_arrivals(inputs.arrivals, 3600))
        df.write.format("noop").mode("overwrite").save()
    kinds = {n: round(v - k[n], 1) for n, v in jvm_thread_cpu(pid).items()}
    return cpu_seconds_of(pid) - c, time.monotonic() - t, kinds


@click.command(help=__doc__, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--rows", type=int, default=10_000_000, show_default=True)
@click.option("--export", default=None, help="an existing export (else one of --rows is generated)")
@click.option("--parts", multiple=True, help="parts to run (repeatable; default every part and the job)")
@click.argument("more_parts", nargs=-1)
@click.option("--rounds", type=int, default=3, show_default=True)
@click.option("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "out", "fleet-parts"))
@click.option("--driver-memory", default="8g", show_default=True)
@click.option("--conf", multiple=True, metavar="KEY=VALUE", help="extra Spark conf at session start")
@click.option("--remote", default=None, help="run through this Spark Connect server (sc://HOST:PORT)")
@click.option("--server-pid", type=int, default=None, help="--remote: the server JVM's pid (its CPU)")
@click.option("--json", "as_json", is_flag=True, help="one JSON object on stdout")
def main(**o: Any) -> None:
    names = [*o["parts"], *o["more_parts"]] or [*PARTS, "job"]
    bad = [n for n in names if n != "job" and n not in PARTS]
    if bad:
        sys.exit("unknown part(s): %s (known: %s, job)" % (", ".join(bad), ", ".join(PARTS)))
    export = o["export"]
    if export is None:
        export = os.path.join(o["out"], "export-%d" % o["rows"])
        if not os.path.isdir(export):
            cfg = SynthConfig(rows=o["rows"], lead_errors=5, dup_flag_errors=3, seed=o["rows"] % 997)
            generate_export(cfg, export, 1_000_000)
    log = sys.stderr if o["as_json"] else sys.stdout
    runs: dict[str, list[tuple[float, float, float, dict[str, float]]]] = {n: [] for n in names}
    with contextlib.ExitStack() as stack:
        if o["remote"]:  # a Spark Connect server's JVM: its CPU from /proc (--server-pid)
            if not o["server_pid"]:
                sys.exit("--remote needs --server-pid (the Connect server's JVM)")
            spark, pid = SparkSession.builder.remote(o["remote"]).getOrCreate(), o["server_pid"]
            stack.callback(spark.stop)
        else:
            session = stack.enter_context(
                local_session(
                    "local[2]",
                    o["rows"] * ROW_BYTES,
                    None,
                    o["driver_memory"],
                    app_name="leadwire-fleet-parts",
                    extra=dict(kv.split("=", 1) for kv in o["conf"]),
                )
            )
            spark, pid = session.spark, jvm_pid(session.spark)
        for k in range(o["rounds"]):
            for n in names:
                cpu, wall, kinds = run_part(spark, pid, export, n)
                runs[n].append((cpu, wall, os.getloadavg()[0], kinds))
                print(
                    "[parts] round %d %-15s %7.1f JVM CPU s %6.1f s load %.1f (threads: %s)"
                    % (k, n, cpu, wall, runs[n][-1][2], " ".join("%s %s" % kv for kv in kinds.items())),
                    file=log,
                    flush=True,
                )
    doc = {}
    for n, rs in runs.items():
        warm = rs[1:] or rs
        doc[n] = {
            "jvm_cpu_median": round(statistics.median(r[0] for r in warm), 2),
            "seconds_median": round(statistics.median(r[1] for r in warm), 2),
            "jvm_cpu": [round(r[0], 2) for r in rs],
            "load": [round(r[2], 1) for r in rs],
            "threads": [r[3] for r in rs],
        }
        print(
            "%-15s warm median %7.1f JVM CPU s %6.1f s  (every round: %s)"
            % (n, doc[n]["jvm_cpu_median"], doc[n]["seconds_median"], doc[n]["jvm_cpu"]),
            file=log,
        )
    if o["as_json"]:
        print(json.dumps({"rows": o["rows"], "export": export, "parts": doc}))


if __name__ == "__main__":
    main()
