"""The fleet job under Spark Connect: the package's Spark Connect server (conftest.spark_connect:
its own JVM on 127.0.0.1), the job run through a remote session (no SparkContext, no JVM in this
process: a client process with SPARK_REMOTE set), its tables compared with a local-mode run of
the same export; the same for incremental runs of a growing export. The local runs go on while
the client runs; the client is stopped, also when the test fails; the whole test is bounded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from leadwire.fleet.job import DATED_TABLES, TABLE_ORDER, run_job
from leadwire.fleet.oracle import compare_tables, read_job_tables
from leadwire.fleet.synth import SynthConfig, generate, write_export
from leadwire.fleet.synth_days import export_days, publish_run

from .conftest import ConnectServer

pytestmark = pytest.mark.spark

CONNECT_TIMEOUT = 600  # seconds, server start to stop, on a loaded 2-core machine
# SynthConfig: 2 dates, so 3 incremental runs (the first, one that also republishes a lagging
# bridge's day, one with only the lagging day)
SYNTH = {"rows": 4000, "devices": 4, "days": 1, "lead_errors": 2, "seed": 9}

# An operator's process: SPARK_REMOTE set, no JVM of its own; the job full, then incremental
# after each export run of a growing export.
CLIENT = """
import json
import sys
from pyspark.sql import SparkSession
from leadwire.fleet.job import run_job
from leadwire.fleet.session import is_connect
from leadwire.fleet.synth import SynthConfig, generate
from leadwire.fleet.synth_days import export_days, publish_run

base = sys.argv[1]
spark = SparkSession.builder.getOrCreate()
assert is_connect(spark), type(spark)
s = run_job(base + "/export", base + "/remote", spark, progress=True, report=False)
print("rows", s["rows"], "mismatch_rows", s["mismatch_rows"])
tables, _ = generate(SynthConfig(**json.loads(sys.argv[2])))
days = export_days(tables)
for k in range(len(days) + 1):
    publish_run(tables, base + "/grow", k, days)
    run_job(base + "/grow", base + "/inc", spark, progress=True, report=False, incremental=True)
spark.stop()
"""


@pytest.mark.timeout(CONNECT_TIMEOUT)
def test_the_job_under_spark_connect_equals_local_mode(
    spark: SparkSession, spark_connect: ConnectServer, tmp_path: Path
) -> None:
    tables, _ = generate(SynthConfig(**SYNTH))
    write_export(tables, str(tmp_path / "export"))
    days = export_days(tables)
    for k in range(len(days) + 1):  # the grown export as the client's export runs leave it
        publish_run(tables, str(tmp_path / "grown"), k, days)
    env = {**os.environ, "SPARK_REMOTE": spark_connect.url()}
    with open(tmp_path / "client.out", "w") as out, open(tmp_path / "client.err", "w") as err:
        client = subprocess.Popen(
            [sys.executable, "-c", CLIENT, str(tmp_path), json.dumps(SYNTH)],
            stdout=out,
            stderr=err,
            env=env,
        )
        try:
            # the local runs, while the client's go on in the server's JVM
            local = run_job(
                str(tmp_path / "export"), str(tmp_path / "local"), spark, progress=False, report=False
            )
            run_job(str(tmp_path / "grown"), str(tmp_path / "full"), spark, progress=False, report=False)
            rc = client.wait(CONNECT_TIMEOUT - 60)
        finally:
            if client.poll() is None:
                client.kill()
                client.wait(10)
    assert rc == 0, (tmp_path / "client.err").read_text()[-3000:]
    assert "rows %d mismatch_rows 2" % local["rows"] in (tmp_path / "client.out").read_text()
    got = read_job_tables(str(tmp_path / "remote"), TABLE_ORDER)
    assert compare_tables(got, read_job_tables(str(tmp_path / "local"), TABLE_ORDER), TABLE_ORDER) == []
    # the incremental runs under Connect equal a local full run of the grown export
    got = read_job_tables(str(tmp_path / "inc"), DATED_TABLES)
    assert compare_tables(got, read_job_tables(str(tmp_path / "full"), DATED_TABLES), TABLE_ORDER) == []
