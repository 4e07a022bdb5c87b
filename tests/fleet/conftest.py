"""Fleet job test fixtures: ONE SparkSession (one JVM) for the whole test run, a Spark Connect
server and a standalone cluster each started once for this package (tests that need them share
them), and row factories."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark")

from pyspark.sql import DataFrame, SparkSession  # noqa: E402

from leadwire.fleet.schema import spark_schema  # noqa: E402
from leadwire.fleet.session import C1_ONLY  # noqa: E402

T0 = dt.datetime(2026, 1, 1, 0, 0, tzinfo=dt.UTC)
SPARK_HOME = Path(pyspark.__file__).parent
BOOT_TIMEOUT = 240  # seconds for a Connect server or a cluster to come up on a loaded 2-core machine


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The run's SparkSession, launched as leadwire launches its own on a small input (the tests'
    exports are): C1 only, and the class-data archive (made once per machine at a session's end,
    mapped by every later JVM start; jvm_archive): short jobs on small data are mostly the JVM
    compiling Spark, and C2 is the larger share of that CPU (session.SMALL_INPUT_CONF)."""
    from leadwire.fleet.session import local_session

    extra = {
        "spark.default.parallelism": "2",
        "spark.sql.warehouse.dir": "/tmp/leadwire-fleet-tests-warehouse",
    }
    with local_session("local[2]", 0, 2, "1g", "leadwire-fleet-tests", adaptive=False, extra=extra) as ls:
        ended = _watch_jvm()
        yield ls.spark
        if ended:  # before local_session's stop: its own end of the JVM is not an early one
            warnings.warn(
                "the session's Spark JVM exited before the run's end, rc %(rc)s, during %(during)s; "
                "its stdin %(stdin)s" % ended,
                stacklevel=1,
            )


def _watch_jvm() -> dict[str, object]:
    """Filled when the gateway JVM this process launched exits: its exit status (-9: killed, as by
    the kernel's OOM killer; 0: its stdin closed), the test running then, and what became of its
    stdin pipe in this process."""
    from pyspark import SparkContext

    ended: dict[str, object] = {}
    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None:
        return ended

    fd = proc.stdin.fileno()
    pipe = os.fstat(fd).st_ino

    def wait() -> None:
        rc = proc.wait()
        # rc 0 is the JVM reading EOF on its stdin: by proc.stdin.close(), or by other code of this
        # process closing the pipe's fd number (a descriptor closed twice, the second time after
        # the number went to this pipe)
        try:
            now = "pipe %d" % os.fstat(fd).st_ino
        except OSError:
            now = "closed"
        ended.update(
            rc=rc,
            during=os.environ.get("PYTEST_CURRENT_TEST", "no test"),
            stdin="fd %d, pipe %d: file object %s, descriptor now %s"
            % (fd, pipe, "closed" if proc.stdin.closed else "open", now),
        )

    threading.Thread(target=wait, name="spark-jvm-watch", daemon=True).start()
    return ended


ARRIVAL_DEFAULTS: dict[str, Any] = {
    "device_id": "d1",
    "boot_epoch": 7,
    "boots": 1,
    "channel": 0,
    "kind": "event",
    "session": 0,
    "lead_channel": -1,
    "seq": 0,
    "arrival": 1,
    "lead": 1,
    "duplicate": False,
    "retransmission": False,
    "priority": 0,
    "payload_bytes": 10,
    "frame_bytes": 22,
    "gen_ts": None,
    "host_rx_ts": T0,
    "host_commit_ts": T0,
    "firmware_version": "1.0.0",
    "transport": "udp",
    "bridge_id": "b1",
}


def stream(
    seqs: list[int], first_arrival: int = 1, t0: dt.datetime = T0, step_s: float = 1.0, **common: Any
) -> list[dict[str, Any]]:
    """Arrival rows for seqs in arrival order: arrival counter and receive time step by one."""
    rows = []
    for i, s in enumerate(seqs):
        rx = t0 + dt.timedelta(seconds=i * step_s)
        rows.append(
            {
                **common,
                "seq": s,
                "arrival": first_arrival + i,
                "host_rx_ts": rx,
                "host_commit_ts": rx + dt.timedelta(milliseconds=1),
            }
        )
    return rows


def arrivals_df(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    schema = spark_schema("arrivals", with_partition=False)
    data = [tuple({**ARRIVAL_DEFAULTS, **r}[f.name] for f in schema.fields) for r in rows]
    return spark.createDataFrame(data, schema)


def table_df(spark: SparkSession, table: str, rows: list[dict[str, Any]]) -> DataFrame:
    schema = spark_schema(table, with_partition=False)
    return spark.createDataFrame([tuple(r.get(f.name) for f in schema.fields) for r in rows], schema)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Jvms:
    """Spark processes started by the tests (pyspark's bin/ scripts), each in its own process group
    with its log in `base`; stop() ends them all (SIGTERM, SIGKILL after 20 s). The JVMs run small
    exports: C1 only (session.C1_ONLY), as leadwire's own local sessions on a small input."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
                    "SPARK_DAEMON_JAVA_OPTS": C1_ONLY}  # fmt: skip
        self.env.pop("SPARK_CONF_DIR", None)

    def start(self, name: str, script: str, *args: str) -> None:
        with open(self.base / (name + ".log"), "wb") as log:
            self.procs.append(
                subprocess.Popen([str(SPARK_HOME / "bin" / script), *args], stdout=log,
                                 stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
            )  # fmt: skip

    def wait(self, ready: Callable[[], bool], what: str, timeout: float = BOOT_TIMEOUT) -> None:
        """Poll `ready` every 0.2 s until it holds; fail naming `what` when a process exits first or
        the time is up."""
        deadline = time.monotonic() + timeout
        while not ready():
            assert all(p.poll() is None for p in self.procs), "a Spark process exited: logs in %s" % self.base
            assert time.monotonic() < deadline, "%s not within %d s: logs in %s" % (what, timeout, self.base)
            time.sleep(0.2)

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


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


class ConnectServer:
    """A Spark Connect server (local[2]) on 127.0.0.1, starting in the background."""

    def __init__(self, jvms: Jvms) -> None:
        self.jvms = jvms
        self.port = free_port()
        jvms.start(
            "connect", "spark-submit",
            "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--master", "local[2]",
            "--driver-memory", "1g",
            "--driver-java-options", C1_ONLY,
            "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", "spark.connect.grpc.binding.port=%d" % self.port,
            "--conf", "spark.ui.enabled=false",
            "--conf", "spark.sql.warehouse.dir=%s" % (jvms.base / "warehouse"),
            "--conf", "spark.sql.shuffle.partitions=2",
        )  # fmt: skip

    def url(self) -> str:
        """The server's sc:// URL, once it listens."""
        self.jvms.wait(lambda: _listening(self.port), "the Connect server listening")
        return "sc://127.0.0.1:%d" % self.port


class StandaloneCluster:
    """A Spark standalone master and two workers (1 core, 2g each, their own work directories),
    starting in the background."""

    WORKERS = 2

    def __init__(self, jvms: Jvms) -> None:
        self.jvms = jvms
        port, self.ui = free_port(), free_port()
        self.master = "spark://127.0.0.1:%d" % port
        jvms.start("master", "spark-class", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                   "--port", str(port), "--webui-port", str(self.ui))  # fmt: skip
        self.work = [jvms.base / ("worker%d" % i) for i in range(1, self.WORKERS + 1)]
        for i, work in enumerate(self.work, 1):
            work.mkdir()
            jvms.start("worker%d" % i, "spark-class", "org.apache.spark.deploy.worker.Worker",
                       "--host", "127.0.0.1", "--cores", "1", "--memory", "2g", "--work-dir", str(work),
                       "--webui-port", str(free_port()), self.master)  # fmt: skip

    def _alive_workers(self) -> int:
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/json/" % self.ui, timeout=5) as r:
                return int(json.load(r).get("aliveworkers", 0))
        except OSError:
            return 0

    def url(self) -> str:
        """The master's URL, once both workers have registered."""
        self.jvms.wait(lambda: self._alive_workers() == self.WORKERS, "the cluster's workers registered")
        return self.master

    def apps(self) -> list[set[str]]:
        """Per worker, the applications that ran executors there (their work directories)."""
        return [{p.name for p in w.iterdir()} for w in self.work]


@pytest.fixture(scope="package")
def spark_connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """The package's Spark Connect server (stopped after the package's last test)."""
    pytest.importorskip("grpc", reason="Spark Connect needs pyspark[connect] (grpcio)")
    jvms = Jvms(tmp_path_factory.mktemp("connect"))
    try:
        yield ConnectServer(jvms)
    finally:
        jvms.stop()


@pytest.fixture(scope="package")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """The package's standalone cluster (every JVM stopped after the package's last test)."""
    jvms = Jvms(tmp_path_factory.mktemp("cluster"))
    try:
        yield StandaloneCluster(jvms)
    finally:
        jvms.stop()


# The small export that the Spark Connect and the standalone cluster tests run the job on (2 dates,
# so 3 incremental runs of it as it grows: the first, one that also republishes a lagging bridge's
# day, one with only the lagging day; 2 injected lead errors)
SMALL_EXPORT = {"rows": 4000, "devices": 4, "days": 1, "lead_errors": 2, "seed": 9}


@pytest.fixture(scope="package")
def small_export(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """SMALL_EXPORT's tables, and the export they were written to."""
    from leadwire.fleet.synth import SynthConfig, generate, write_export

    tables, _ = generate(SynthConfig(**SMALL_EXPORT))
    export = tmp_path_factory.mktemp("small_export") / "export"
    write_export(tables, str(export))
    return tables, export


@dataclass
class LocalRun:
    """small_export, and the job's local run of it in the session's JVM (its tables in `out`, its
    summary, its seconds)."""

    tables: dict[str, Any]
    export: Path
    out: Path
    summary: dict[str, Any]
    seconds: float


@pytest.fixture(scope="package")
def small_run(
    spark: SparkSession, small_export: tuple[dict[str, Any], Path], tmp_path_factory: pytest.TempPathFactory
) -> LocalRun:
    """The package's local run of small_export (the Connect and cluster tests compare theirs with
    it; they request it once their server, cluster or client is starting: it runs meanwhile)."""
    from leadwire.fleet.job import run_job

    tables, export = small_export
    out = tmp_path_factory.mktemp("small_run") / "local"
    t = time.monotonic()
    summary = run_job(str(export), str(out), spark, progress=False, report=False)
    return LocalRun(tables, export, out, summary, time.monotonic() - t)
