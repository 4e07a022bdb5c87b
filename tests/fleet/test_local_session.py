"""job.local_session: the one start and stop of a SparkSession leadwire launches itself (run_job
without a session, the demo's Spark child, bench/fleet_bench.py). Which options the JVM gets, the
order of stop and the class archive's finish, also when the body raised, and one real run of each
caller in leadwire: run_job failing inside its own session, then the demo's child."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark import SparkContext

from leadwire.fleet import job, jvm_archive, jvm_compiler, session
from leadwire.fleet.jvm_archive import QUIET

JAVA_OPTS = "spark.driver.extraJavaOptions"


class FakeSpark:
    def __init__(self, events: list[str]) -> None:
        self.events = events

    def stop(self) -> None:
        self.events.append("stop")


class FakeJvm:
    """The gateway JVM of a first run: it writes the archive as it exits (stdin closed), then exits
    with `rc`."""

    def __init__(self, pending: Path, rc: int, events: list[str]) -> None:
        self.pending, self.rc, self.events = pending, rc, events
        self.stdin = self

    def close(self) -> None:
        self.events.append("jvm exit %d" % self.rc)
        self.pending.write_bytes(b"classes")

    def wait(self, timeout: float) -> int:
        return self.rc

    def kill(self) -> None:
        raise AssertionError("a JVM that exits is not killed")


class FakeGateway:
    def __init__(self, proc: FakeJvm) -> None:
        self.proc = proc

    def shutdown(self) -> None:
        pass


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """ClassArchive() of this test: key k1 in tmp_path/leadwire/spark-cds, the switch on; the
    session built by a fake that records what it was given."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(jvm_archive.ENV_SWITCH, raising=False)
    monkeypatch.delenv(jvm_compiler.ENV_SWITCH, raising=False)
    monkeypatch.setattr(jvm_archive, "digest", lambda: "k1")
    # a process without a JVM or a session yet (as `leadwire fleet` starts); put back afterwards
    # whatever another test's session has
    monkeypatch.setattr(SparkContext, "_gateway", None)
    monkeypatch.setattr(SparkContext, "_jvm", None)
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    return tmp_path / "leadwire" / "spark-cds"


def fake_build(events: list[str], given: list[tuple[Any, ...]]) -> Any:
    def build(*args: Any) -> FakeSpark:
        events.append("build")
        given.append(args)
        return FakeSpark(events)

    return build


def test_the_jvm_gets_launch_conf_and_extra_wins(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    given: list[tuple[Any, ...]] = []
    monkeypatch.setattr(session, "build_session", fake_build(events, given))
    cache.mkdir(parents=True)
    (cache / "spark-k1.jsa").write_bytes(b"x")
    mapped = "-XX:SharedArchiveFile=%s %s" % (cache / "spark-k1.jsa", QUIET)
    progress = job.Progress(enabled=False)
    with job.local_session(
        "local[2]", 1000, 2, "1g", "t", False, {"k": "v"}, starting=progress.stage("start")
    ) as s:
        c1 = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
        assert s.java_options == c1 + " " + mapped and s.start_s >= 0
        assert "start" in progress.timings  # the stage was left once the session was up
    assert given == [("local[2]", 2, "1g", "t", False, {JAVA_OPTS: s.java_options, "k": "v"})]
    # spark-submit style --conf of the bench wins; a big input keeps C2 (not for planning code);
    # a cluster gets nothing
    with job.local_session("local[2]", 1 << 30, extra={JAVA_OPTS: "-Xmx1g"}) as s:
        assert s.java_options == jvm_compiler.java_options() + " " + mapped
    with job.local_session("spark://127.0.0.1:7077", 1000) as s:
        assert s.java_options == ""
    # --plain-jvm: the JVM's defaults, and no archive made
    with job.local_session("local[2]", 1000, launch=False) as s:
        assert s.java_options == ""
    assert [g[5] for g in given[1:]] == [{JAVA_OPTS: "-Xmx1g"}, {}, {}]
    assert events == ["build", "stop"] * 4
    assert sorted(p.name for p in cache.iterdir()) == ["spark-k1.jsa"]


@pytest.mark.parametrize("rc", [0, 1])
def test_an_exception_stops_the_session_and_the_archive_only_after_a_clean_exit(
    cache: Path, monkeypatch: pytest.MonkeyPatch, rc: int
) -> None:
    events: list[str] = []
    pending = cache / ("spark-k1.jsa.%d.tmp" % os.getpid())
    build = fake_build(events, [])

    def launch(*args: Any) -> FakeSpark:  # the build launches the gateway JVM
        SparkContext._gateway = FakeGateway(FakeJvm(pending, rc, events))  # type: ignore[assignment]
        return build(*args)

    monkeypatch.setattr(session, "build_session", launch)
    with pytest.raises(job.BadInput, match="no arrival rows"):
        with job.local_session("local[2]", None, log=events.append) as s:
            first_run = "-XX:ArchiveClassesAtExit=%s %s" % (pending, QUIET)
            assert s.java_options == jvm_compiler.java_options() + " " + first_run
            raise job.BadInput("no arrival rows")
    saving = "saving the JVM's class archive for faster starts (once): %s" % (cache / "spark-k1.jsa")
    assert events == ["build", "stop", saving, "jvm exit %d" % rc]
    # a clean exit: the dump goes in place; any other: removed, and the next run makes it again
    assert sorted(p.name for p in cache.iterdir()) == (["spark-k1.jsa"] if rc == 0 else [])
    assert SparkContext._gateway is None  # the next session of this process starts a new JVM


def test_a_session_whose_jvm_is_gone_stops_without_an_error(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stop() of a session whose JVM already exited (py4j: connection refused) is one log line,
    and the archive's finish still runs (here: a JVM that wrote none, so nothing is put in place)."""
    events: list[str] = []

    class GoneSpark(FakeSpark):
        def stop(self) -> None:
            raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(session, "build_session", lambda *a: GoneSpark(events))
    monkeypatch.setattr(SparkContext, "_gateway", None)
    with job.local_session("local[2]", None, log=events.append):
        pass
    assert events == ["spark: the session's JVM had already exited (ConnectionRefusedError)"]
    assert not cache.exists() or sorted(p.name for p in cache.iterdir()) == []


class AliveJvm:
    """The JVM of a session already running in this process: never to be ended by a caller that
    merely joined it."""

    def __init__(self) -> None:
        self.stdin = self

    def close(self) -> None:
        raise AssertionError("the JVM of a session local_session did not start was ended")

    wait = kill = close


def test_a_running_session_is_joined_and_left_running(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """getOrCreate() hands back the process's running session (a notebook's, a test run's): no JVM
    options asked of it, not stopped, no archive from its JVM. A JVM that outlived a stopped
    session: the new session is this call's to stop, the JVM is not."""
    events: list[str] = []
    given: list[tuple[Any, ...]] = []
    monkeypatch.setattr(session, "build_session", fake_build(events, given))
    monkeypatch.setattr(SparkContext, "_gateway", FakeGateway(AliveJvm()))  # type: ignore[arg-type]
    monkeypatch.setattr(SparkContext, "_active_spark_context", object())
    with job.local_session("local[2]", 1000, log=events.append) as s:
        assert (s.owned, s.java_options) == (False, "")
    assert events == ["build"] and given[0][5] == {}
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    with job.local_session("local[2]", 1000, extra={"k": "v"}, log=events.append) as s:
        assert (s.owned, s.java_options) == (True, "")
    assert events == ["build", "build", "stop"] and given[1][5] == {"k": "v"}
    assert not cache.exists()  # no archive asked for: the JVM was not launched with its options


# run_job starts its own session on an export with a wrong schema (BadInput once the JVM is up);
# its JVM writes the class archive at exit; then the demo's child runs the job on a good export
# and its JVM maps that archive (the JVM's own log says so)
FAILING = """
import sys
from leadwire.fleet.job import BadInput, run_job
try:
    run_job(sys.argv[1], sys.argv[2], master="local[1]", driver_memory="1g", report=False)
except BadInput as e:
    print("BadInput:", e)
"""


@pytest.mark.spark
@pytest.mark.timeout(420)
def test_run_job_and_the_demo_child_stop_their_sessions_and_share_the_archive(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from leadwire.fleet.synth import SynthConfig, generate, write_export

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop(jvm_archive.ENV_SWITCH, None)
    tables, _ = generate(SynthConfig(rows=300, devices=2, seed=1))
    write_export(tables, str(tmp_path / "ok"))
    arr = tables["arrivals"]
    bad = arr.set_column(arr.schema.get_field_index("seq"), "seq", arr.column("seq").cast(pa.string()))
    (tmp_path / "wrong" / "arrivals" / "date=2026-01-01").mkdir(parents=True)
    pq.write_table(bad, tmp_path / "wrong" / "arrivals" / "date=2026-01-01" / "part-0.parquet")

    first = subprocess.run(
        [sys.executable, "-c", FAILING, str(tmp_path / "wrong"), str(tmp_path / "o1")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.stdout.startswith("BadInput: ") and "wrong schema" in first.stdout
    assert "start spark (local[1]) done in" in first.stderr
    assert "saving the JVM's class archive" in first.stderr
    made = list((tmp_path / "cache" / "leadwire" / "spark-cds").iterdir())
    assert len(made) == 1 and made[0].name.endswith(".jsa") and made[0].stat().st_size > 10 << 20

    # the driver JVM's cds log into a file (spark-submit adds SPARK_SUBMIT_OPTS to its options;
    # QUIET turned the log off on stdout only)
    cds_log = tmp_path / "cds.log"
    child = subprocess.run(
        [
            sys.executable,
            "-m",
            "leadwire.cli.demo",
            "--spark-child",
            str(tmp_path / "ok"),
            str(tmp_path / "o2"),
        ],
        env={**env, "SPARK_SUBMIT_OPTS": "-Xlog:cds=info:file=%s" % cds_log},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    assert "start spark (local[2], adaptive execution off, 2 shuffle partitions) done in" in child.stderr
    assert "class archive" not in child.stderr  # mapped: nothing to save
    text = cds_log.read_text()
    assert "Opened archive %s." % made[0] in text and "Mapped dynamic region #0" in text
    assert child.stdout.startswith("fleet: 2 devices, ") and (tmp_path / "o2" / "index.html").is_file()
    assert list((tmp_path / "cache" / "leadwire" / "spark-cds").iterdir()) == made
