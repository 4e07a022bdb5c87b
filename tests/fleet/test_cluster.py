"""The fleet job on a real Spark standalone cluster: a master and two workers, each its own JVM
with its own work directory (pyspark's spark-class), the job submitted with spark-submit in client
mode, its tables compared with a local run of the same export. Every JVM is stopped, also when
the test fails; the whole test is bounded (CLUSTER_TIMEOUT)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession

from leadwire.fleet.job import TABLE_ORDER, run_job
from leadwire.fleet.oracle import compare_tables, read_job_tables
from leadwire.fleet.synth import SynthConfig, generate, write_export

pytestmark = pytest.mark.spark

SPARK_HOME = Path(pyspark.__file__).parent
JOB = Path(__file__).resolve().parents[2] / "host" / "fleet" / "job.py"
CLUSTER_TIMEOUT = 420  # seconds, start to stop (~2 min on an idle 2-core machine; shared ones are slower)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """Processes started by this test, each in its own process group, all stopped by stop()."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1"}
        self.env.pop("SPARK_CONF_DIR", None)

    def start(self, name: str, cls: str, *args: str) -> None:
        log = open(self.base / (name + ".log"), "wb")  # closed by the process exit
        cmd = [str(SPARK_HOME / "bin" / "spark-class"), cls, *args]
        self.procs.append(
            subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        )

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.stop()


def start_cluster(c: Cluster) -> tuple[str, int]:
    """Master and two workers, started in the background: (master URL, master web UI port)."""
    port, ui = _free_port(), _free_port()
    c.start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
            "--webui-port", str(ui))  # fmt: skip
    url = "spark://127.0.0.1:%d" % port
    for i in (1, 2):
        work = c.base / ("worker%d" % i)
        work.mkdir()
        c.start("worker%d" % i, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                "--cores", "1", "--memory", "2g", "--work-dir", str(work),
                "--webui-port", str(_free_port()), url)  # fmt: skip
    return url, ui


def wait_workers(c: Cluster, ui: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    alive = 0
    while time.monotonic() < deadline:
        assert all(p.poll() is None for p in c.procs), "a cluster JVM exited: see %s" % c.base
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/json/" % ui, timeout=5) as r:
                alive = int(json.load(r).get("aliveworkers", 0))
        except OSError:
            alive = 0
        if alive == 2:
            return
        time.sleep(1)
    raise AssertionError("the two workers did not register within %d s (logs in %s)" % (timeout, c.base))


@pytest.mark.timeout(CLUSTER_TIMEOUT)
def test_spark_submit_on_a_standalone_cluster_equals_local(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    c = cluster
    t = time.monotonic()
    url, ui = start_cluster(c)  # the JVMs start while the local run goes on
    tables, _ = generate(SynthConfig(rows=10_000, devices=6, lead_errors=2, seed=3))
    write_export(tables, str(tmp_path / "export"))
    t = time.monotonic()
    local = run_job(str(tmp_path / "export"), str(tmp_path / "local"), spark, progress=False, report=False)
    local_s = time.monotonic() - t
    wait_workers(c, ui)
    cmd = [
        str(SPARK_HOME / "bin" / "spark-submit"),
        "--master", url,
        "--deploy-mode", "client",
        "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.driver.bindAddress=127.0.0.1",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.executor.memory=1g",
        "--conf", "spark.executor.cores=1",
        "--conf", "spark.sql.shuffle.partitions=4",
        str(JOB), "--input", str(tmp_path / "export"), "--out", str(tmp_path / "cluster"), "--no-report",
    ]  # fmt: skip
    env = {**c.env, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    t = time.monotonic()
    with open(tmp_path / "submit.log", "w") as log:
        res = subprocess.run(
            cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env, timeout=CLUSTER_TIMEOUT - 30
        )
    submit_s = time.monotonic() - t
    assert res.returncode == 0, (tmp_path / "submit.log").read_text()[-3000:]
    assert "fleet: 6 devices, %d arrivals" % local["rows"] in res.stdout
    # the executors ran on the workers: each worker's work dir has this application's executor
    apps = [p.name for w in (1, 2) for p in (tmp_path / ("worker%d" % w)).iterdir()]
    assert len(apps) == 2 and len(set(apps)) == 1, apps
    got = read_job_tables(str(tmp_path / "cluster"), TABLE_ORDER)
    assert compare_tables(got, read_job_tables(str(tmp_path / "local"), TABLE_ORDER), TABLE_ORDER) == []
    print(
        "\n[cluster] %d rows: spark-submit on 2 workers %.1fs (driver JVM and job), "
        "local run in the test session %.1fs; load average %.1f"
        % (local["rows"], submit_s, local_s, os.getloadavg()[0])
    )
