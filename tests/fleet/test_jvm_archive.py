"""The local Spark JVM's class-data archive (host/fleet/jvm_archive.py): which options a session
gets, the cache's housekeeping, and one real round trip: a JVM that writes the archive at exit,
then one that maps it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from leadwire.fleet import jvm_archive, jvm_compiler
from leadwire.fleet.job import launch_conf
from leadwire.fleet.jvm_archive import QUIET, ClassArchive

JAVA_OPTS = "spark.driver.extraJavaOptions"


def test_first_run_writes_then_later_runs_map(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(jvm_archive.ENV_SWITCH, raising=False)
    a = ClassArchive(tmp_path, key="k1")
    pending = tmp_path / ("spark-k1.jsa.%d.tmp" % os.getpid())
    assert a.java_options() == "-XX:ArchiveClassesAtExit=%s %s" % (pending, QUIET) and a.pending == pending
    (tmp_path / "spark-k1.jsa").write_bytes(b"x")
    b = ClassArchive(tmp_path, key="k1")
    assert b.java_options() == "-XX:SharedArchiveFile=%s %s" % (tmp_path / "spark-k1.jsa", QUIET)
    assert b.pending is None and b.finish() is False  # nothing to save


def test_switch_off_and_unknown_jvm_give_no_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(jvm_archive.ENV_SWITCH, "0")
    assert ClassArchive(tmp_path, key="k1").java_options() == ""
    monkeypatch.delenv(jvm_archive.ENV_SWITCH)
    assert ClassArchive(tmp_path, key="").java_options() == ""  # no java or no Spark jars found
    assert not any(tmp_path.iterdir())


def test_the_key_names_the_jars_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two installs with the same jars (names, sizes) get two archives: the JVM refuses an
    archive whose classpath entries are not where they were when it was written."""
    import pyspark

    keys = []
    for name in ("a", "b"):
        (tmp_path / name / "jars").mkdir(parents=True)
        (tmp_path / name / "jars" / "spark-core.jar").write_bytes(b"jar")
        monkeypatch.setattr(pyspark, "__file__", str(tmp_path / name / "__init__.py"))
        keys.append(jvm_archive.digest())
    if keys[0] is None:
        pytest.skip("no java binary found: digest() gives no key")
    assert keys[0] != keys[1] and len(keys[0]) == len(keys[1]) == 16


def test_a_killed_runs_leftover_goes_a_live_ones_stays(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    left = tmp_path / ("spark-k1.jsa.%d.tmp" % dead.pid)
    live = tmp_path / ("spark-k0.jsa.%d.tmp" % os.getppid())  # another run still writing
    left.write_bytes(b"half")
    live.write_bytes(b"half")
    ClassArchive(tmp_path, key="k1").java_options()
    assert not left.exists() and live.exists()


def test_launch_conf_joins_c1_and_the_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(jvm_archive.ENV_SWITCH, raising=False)
    monkeypatch.delenv(jvm_compiler.ENV_SWITCH, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    planning = jvm_compiler.java_options()  # C2 on: the planning code kept to C1
    (directives,) = (tmp_path / "xdg" / "leadwire" / "jvm").iterdir()  # in the user's cache
    assert planning == "-XX:+UnlockDiagnosticVMOptions -XX:CompilerDirectivesFile=%s" % directives
    (tmp_path / "spark-k1.jsa").write_bytes(b"x")
    shared = "-XX:SharedArchiveFile=%s %s" % (tmp_path / "spark-k1.jsa", QUIET)
    a = ClassArchive(tmp_path, key="k1")
    c1 = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
    assert launch_conf("local[2]", 1000, a) == {JAVA_OPTS: c1 + " " + shared}
    assert launch_conf("local[2]", None, a) == {JAVA_OPTS: planning + " " + shared}  # C2 kept
    assert launch_conf("local[2]", 1000, None) == {JAVA_OPTS: c1}
    assert launch_conf("local[2]", 1 << 30, None) == {JAVA_OPTS: planning}
    assert launch_conf("spark://127.0.0.1:7077", 1000, a) == {}  # a cluster: its own launch


# The round trip with real JVMs (one writes the archive at its exit, the next maps it, as its cds
# log says): test_local_session.py, through leadwire's two launchers of a local session.
