"""The fleet job under Spark Connect: a local Spark Connect server started from the pyspark install
(its own JVM, on 127.0.0.1), the job run through a remote session (no SparkContext, no JVM in this
process: a client process with SPARK_REMOTE set), its tables compared with a local-mode run of
the same export; the same for incremental runs of a growing export. The server is stopped, also
when the test fails; the whole test is bounded."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession

from leadwire.fleet.job import DATED_TABLES, TABLE_ORDER, run_job
from leadwire.fleet.oracle import compare_tables, read_job_tables
from leadwire.fleet.synth import SynthConfig, generate, write_export

pytestmark = pytest.mark.spark

pytest.importorskip("grpc", reason="Spark Connect needs pyspark[connect] (grpcio)")

SPARK_HOME = Path(pyspark.__file__).parent
CONNECT_TIMEOUT = 600  # seconds, server start to stop, on a loaded 2-core machine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark Connect server (local[2], its own process group): its URL."""
    base = tmp_path_factory.mktemp("connect")
    port = _free_port()
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("SPARK_CONF_DIR", None)
    cmd = [
        str(SPARK_HOME / "bin" / "spark-submit"),
        "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master", "local[2]",
        "--driver-memory", "1g",
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", "spark.connect.grpc.binding.port=%d" % port,
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.warehouse.dir=%s" % (base / "warehouse"),
        "--conf", "spark.sql.shuffle.partitions=2",
    ]  # fmt: skip
    log = open(base / "server.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, "the Connect server exited: see %s" % (base / "server.log")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "the Connect server did not listen within 240 s"
            time.sleep(1)
        yield "sc://127.0.0.1:%d" % port
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        log.close()


# An operator's process: SPARK_REMOTE set, no JVM of its own; the job full, then incremental
# after each export run of a growing export.
CLIENT = """
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
tables, _ = generate(SynthConfig(rows=4000, devices=4, days=2, lead_errors=2, seed=9))
days = export_days(tables)
for k in range(len(days) + 1):
    publish_run(tables, base + "/grow", k, days)
    run_job(base + "/grow", base + "/inc", spark, progress=True, report=False, incremental=True)
spark.stop()
"""


@pytest.mark.timeout(CONNECT_TIMEOUT)
def test_the_job_under_spark_connect_equals_local_mode(
    spark: SparkSession, connect: str, tmp_path: Path
) -> None:
    tables, _ = generate(SynthConfig(rows=4000, devices=4, days=2, lead_errors=2, seed=9))
    write_export(tables, str(tmp_path / "export"))
    env = {**os.environ, "SPARK_REMOTE": connect}
    res = subprocess.run(
        [sys.executable, "-c", CLIENT, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=CONNECT_TIMEOUT - 60,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    local = run_job(str(tmp_path / "export"), str(tmp_path / "local"), spark, progress=False, report=False)
    assert "rows %d mismatch_rows 2" % local["rows"] in res.stdout
    got = read_job_tables(str(tmp_path / "remote"), TABLE_ORDER)
    assert compare_tables(got, read_job_tables(str(tmp_path / "local"), TABLE_ORDER), TABLE_ORDER) == []
    # the incremental runs under Connect equal a local full run of the grown export
    run_job(str(tmp_path / "grow"), str(tmp_path / "full"), spark, progress=False, report=False)
    got = read_job_tables(str(tmp_path / "inc"), DATED_TABLES)
    assert compare_tables(got, read_job_tables(str(tmp_path / "full"), DATED_TABLES), TABLE_ORDER) == []
