"""`leadwire demo` end to end (boards, simulators, netem, bridge, export, Spark, checks) and its
cleanup: after a normal run and after Ctrl-C, no process of the run is left.

A run's processes are found by the marker the demo puts into its children's environment
(`LEADWIRE_DEMO_RUN`, inherited by Spark's JVM), by their working directory (the virtual boards
run in OUT/boards/*), and by the pids it lists in OUT/pids.json.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from leadwire.tools.demo_scenario import MARKER_ENV, Demo, Options, Progress

pytestmark = [pytest.mark.micropython, pytest.mark.slow]

CHECKS = (
    "simulator ground truth",
    "simulators' own count",
    "board ground truth",
    "restart detected",
    "netem vs bridge",
    "authentication",
    "export",
    "spark vs store",
)


def leftovers(out: Path) -> list[str]:
    """Live processes of the demo run that wrote `out` (zombies excluded: nothing left to stop)."""
    info = json.loads((out / "pids.json").read_text())
    marker = ("%s=%s" % (MARKER_ENV, info["run"])).encode()
    pids = {p["pid"] for p in info["procs"]}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            env = (entry / "environ").read_bytes().split(b"\0")
            cwd = os.readlink(entry / "cwd")
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if state == "Z":
            continue
        if marker in env or cwd.startswith(str(out)) or int(entry.name) in pids:
            found.append("%s %s" % (entry.name, cmd[:120]))
    return found


@pytest.mark.spark
@pytest.mark.timeout(480)  # ~300 s at load 7-8, mostly Spark and start-up: room for a loaded machine
def test_demo_end_to_end_every_check_passes(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if shutil.which("java") is None:
        pytest.skip("Java is missing: the Spark stage needs Java 17")
    spark = request.getfixturevalue("spark")
    out = tmp_path / "demo"
    stdout = io.StringIO()
    opts = Options(boards=2, simulated=10, seconds=8, out=out, seed=3, spark_session=spark)
    code = Demo(opts, Progress(), stdout).run()
    text = stdout.getvalue()
    print(text)
    assert code == 0, text
    for name in CHECKS:
        assert "  PASS %s:" % name in text, name
    assert "restart of board-2-serial was detected" in text
    assert "result: OK" in text
    assert (out / "report" / "index.html").stat().st_size > 1000
    assert list((out / "report").glob("*.png"))
    # the full per-device table: 2 boards + 10 simulated devices
    assert len((out / "summary.txt").read_text().splitlines()) == 1 + 12
    assert leftovers(out) == []


class Run:
    """`leadwire demo` as a subprocess, its stderr collected line by line."""

    def __init__(self, args: list[str]) -> None:
        self.p = subprocess.Popen(
            [sys.executable, "-m", "leadwire.cli", "demo", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self) -> None:
        assert self.p.stderr is not None
        for line in self.p.stderr:
            self.lines.append(line)

    def wait_for(self, text: str, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if any(text in line for line in self.lines):
                return
            if self.p.poll() is not None:
                break
            time.sleep(0.1)
        self.p.kill()
        raise AssertionError("no %r in the demo's output:\n%s" % (text, "".join(self.lines)))

    def interrupt(self) -> int:
        self.p.send_signal(signal.SIGINT)
        try:
            rc = self.p.wait(60)
        finally:
            if self.p.poll() is None:
                self.p.kill()
        self.t.join(5)
        return rc


@pytest.mark.timeout(120)
def test_ctrl_c_while_the_bridge_runs_leaves_no_process(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    run = Run(["--boards", "2", "--simulated", "10", "--seconds", "30", "--no-spark", "--out", str(out)])
    run.wait_for("bridge: pid", 90)
    end = time.monotonic() + 30
    while time.monotonic() < end and len(leftovers(out)) < 5:
        time.sleep(0.1)
    info = json.loads((out / "pids.json").read_text())
    assert len(info["procs"]) == 5  # 2 boards, 2 simulator processes, the bridge
    assert len(leftovers(out)) >= 5  # they are alive and found
    assert run.interrupt() == 128 + signal.SIGINT
    text = "".join(run.lines)
    assert "interrupted (SIGINT)" in text and "cleanup:" in text
    assert leftovers(out) == []


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_ctrl_c_during_the_spark_job_stops_the_jvm(tmp_path: Path) -> None:
    if shutil.which("java") is None:
        pytest.skip("Java is missing: the Spark stage needs Java 17")
    out = tmp_path / "demo"
    run = Run(["--boards", "0", "--simulated", "3", "--seconds", "4", "--out", str(out)])
    run.wait_for("start spark (local[2]", 90)  # the Spark child has started launching its JVM
    end = time.monotonic() + 60
    while time.monotonic() < end and not any("java" in p for p in leftovers(out)):
        time.sleep(0.2)
    assert any("java" in p for p in leftovers(out)), "no JVM seen:\n" + "".join(run.lines)
    assert run.interrupt() == 128 + signal.SIGINT
    assert leftovers(out) == []


@pytest.mark.timeout(60)
def test_a_second_demo_on_the_same_out_dir_is_refused_and_deletes_nothing(tmp_path: Path) -> None:
    import fcntl

    out = tmp_path / "demo"
    out.mkdir()
    (out / "store.db").write_text("another run's store")
    with (out / ".demo.lock").open("a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.write("4242")
        lock.flush()
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "leadwire.cli",
                "demo",
                "--simulated",
                "2",
                "--boards",
                "0",
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=50,
        )
    assert r.returncode == 2
    assert "another demo is running in %s (pid 4242)" % out in r.stderr
    assert (out / "store.db").read_text() == "another run's store"
