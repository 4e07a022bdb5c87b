"""The fleet job on a real Spark standalone cluster: the package's master and two workers
(conftest.spark_cluster: each its own JVM with its own work directory), the job submitted with
spark-submit in client mode, its tables compared with a local run of the same export (the
package's small_run, shared with the Connect test). The cluster starts while the local run goes
on; the whole test is bounded (CLUSTER_TIMEOUT)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leadwire.fleet.job import TABLE_ORDER
from leadwire.fleet.oracle import compare_tables, read_job_tables

from .conftest import C1_ONLY, SPARK_HOME, LocalRun, StandaloneCluster

pytestmark = pytest.mark.spark

JOB = Path(__file__).resolve().parents[2] / "host" / "fleet" / "job.py"
CLUSTER_TIMEOUT = 420  # seconds, start to stop (~1 min on an idle 2-core machine; shared ones are slower)


@pytest.mark.timeout(CLUSTER_TIMEOUT)
def test_spark_submit_on_a_standalone_cluster_equals_local(
    spark_cluster: StandaloneCluster, small_run: LocalRun, tmp_path: Path
) -> None:
    c = spark_cluster  # its JVMs start while the local run (small_run) goes on
    local, local_s = small_run.summary, small_run.seconds
    url = c.url()
    apps_before = c.apps()
    cmd = [
        str(SPARK_HOME / "bin" / "spark-submit"),
        "--master", url,
        "--deploy-mode", "client",
        "--driver-java-options", C1_ONLY,
        "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.driver.bindAddress=127.0.0.1",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.executor.memory=1g",
        "--conf", "spark.executor.cores=1",
        "--conf", "spark.executor.extraJavaOptions=%s" % C1_ONLY,
        "--conf", "spark.sql.shuffle.partitions=4",
        str(JOB), "--input", str(small_run.export), "--out", str(tmp_path / "cluster"), "--no-report",
    ]  # fmt: skip
    env = {**c.jvms.env, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    t = time.monotonic()
    with open(tmp_path / "submit.log", "w") as log:
        res = subprocess.run(
            cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env, timeout=CLUSTER_TIMEOUT - 30
        )
    submit_s = time.monotonic() - t
    assert res.returncode == 0, (tmp_path / "submit.log").read_text()[-3000:]
    assert "fleet: 4 devices, %d arrivals" % local["rows"] in res.stdout
    # the executors ran on the workers: each worker's work dir has this application's executor
    apps = [after - before for before, after in zip(apps_before, c.apps(), strict=True)]
    assert [len(a) for a in apps] == [1, 1] and apps[0] == apps[1], apps
    got = read_job_tables(str(tmp_path / "cluster"), TABLE_ORDER)
    assert compare_tables(got, read_job_tables(str(small_run.out), TABLE_ORDER), TABLE_ORDER) == []
    print(
        "\n[cluster] %d rows: spark-submit on 2 workers %.1fs (driver JVM and job), "
        "local run in the test session %.1fs; load average %.1f"
        % (local["rows"], submit_s, local_s, os.getloadavg()[0])
    )
