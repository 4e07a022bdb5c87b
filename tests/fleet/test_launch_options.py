"""session.launch_conf for a local JVM leadwire starts on a larger input: C2's thresholds and the
whole heap from the start (large_input_options), beside C1 for a small input and the class-data
archive; and that this machine's JVM takes those options with the values meant."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from leadwire.fleet import jvm_archive, session
from leadwire.fleet.jvm_archive import QUIET, ClassArchive

JAVA_OPTS = "spark.driver.extraJavaOptions"
C2_LATE = (
    "-XX:Tier4InvocationThreshold=15000 -XX:Tier4CompileThreshold=45000 -XX:Tier4BackEdgeThreshold=120000"
)
C1 = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"


def test_a_larger_local_input_gets_c2s_thresholds_and_the_whole_heap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big, small = session.SMALL_INPUT_BYTES + 1, session.SMALL_INPUT_BYTES
    assert session.launch_conf("local[2]", big, None, "8g") == {JAVA_OPTS: C2_LATE + " -Xms8g"}
    assert session.launch_conf("local[*]", 10**10, None) == {JAVA_OPTS: C2_LATE}  # heap not given
    # a small input: C1 only, nothing of the larger input's; size unknown or a cluster: nothing
    assert session.launch_conf("local[2]", small, None, "8g") == {JAVA_OPTS: C1}
    assert session.launch_conf("local[2]", None, None, "8g") == {}
    assert session.launch_conf("spark://127.0.0.1:7077", big, None, "8g") == {}
    # with the class-data archive after them
    monkeypatch.delenv(jvm_archive.ENV_SWITCH, raising=False)
    (tmp_path / "spark-k1.jsa").write_bytes(b"x")
    shared = "-XX:SharedArchiveFile=%s %s" % (tmp_path / "spark-k1.jsa", QUIET)
    got = session.launch_conf("local[2]", big, ClassArchive(tmp_path, key="k1"), "4g")
    assert got == {JAVA_OPTS: "%s -Xms4g %s" % (C2_LATE, shared)}


def test_this_jvm_takes_the_larger_inputs_options_as_meant() -> None:
    """The options as the JVM reads them (-XX:+PrintFlagsFinal): a misspelt flag would stop the
    JVM from starting, a misread value would show here."""
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on PATH")
    opts = session.large_input_options("local[2]", 1 << 30, "1g").split()
    out = subprocess.run(
        [java, *opts, "-XX:+PrintFlagsFinal", "-version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    flags = dict(re.findall(r"^\s*\w+\s+(\w+)\s+=\s+(\S+)", out, re.M))
    assert (flags["Tier4InvocationThreshold"], flags["Tier4CompileThreshold"]) == ("15000", "45000")
    assert flags["Tier4BackEdgeThreshold"] == "120000"
    assert flags["InitialHeapSize"] == str(1 << 30) and flags["TieredCompilation"] == "true"
