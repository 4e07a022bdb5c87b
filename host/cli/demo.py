"""The fleet job as the demo runs it: `python -m leadwire.cli.demo --spark-child EXPORT REPORT`, a
child process of `leadwire demo` (tools/demo_cli.py, tools/demo_scenario.py) so that the demo can
stop its JVM."""

from __future__ import annotations

import sys


def spark_child(argv: list[str]) -> int:
    """`python -m leadwire.cli.demo --spark-child EXPORT REPORT`: the fleet job (`run_job`) in a
    local[2] session sized for small data: adaptive query execution off and 2 shuffle partitions,
    as the fleet tests' session (`leadwire fleet`'s default session, with AQE on, takes 2-3 x as
    long on a demo-sized export: docs/operations.md). A subprocess, so the demo can stop its JVM."""
    if len(argv) != 3 or argv[0] != "--spark-child":
        print("usage: python -m leadwire.cli.demo --spark-child EXPORT_DIR REPORT_DIR", file=sys.stderr)
        return 2
    from leadwire.fleet.job import BadInput, Progress, format_summary, input_bytes, local_session, run_job

    prog = Progress()
    starting = prog.stage("start spark (local[2], adaptive execution off, 2 shuffle partitions)")
    size, extra = input_bytes(argv[1]), {"spark.default.parallelism": "2"}
    with local_session(
        "local[2]", size, 2, "1g", "leadwire-demo", False, extra, starting=starting, log=prog.log
    ) as session:
        try:
            summary = run_job(argv[1], argv[2], session.spark, window_seconds=10, progress=prog)
        except BadInput as e:
            print("fleet: %s" % e, file=sys.stderr)
            return 2
    print(format_summary(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(spark_child(sys.argv[1:]))
