"""The testbed (tools/testbed.py) on its own: the bridge config it writes is what the bridge reads,
a config the bridge would refuse is refused before it is written, and every process it started is
gone when its block ends (normally or by an exception)."""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

import pytest

from leadwire.bridge.config import ConfigError, load
from leadwire.tools import testbed
from leadwire.tools.testbed import Link, bridge_config, to_toml, write_config

pytestmark = pytest.mark.timeout(60)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_bridge_config_round_trips_through_toml_and_the_bridges_parser(tmp_path: Path) -> None:
    links = [
        Link("board-1", "udp", "127.0.0.1:4000", "ab" * 32),
        Link("sim-0", "udp", "127.0.0.1:4001", None, "prefix_us"),
        Link('odd "name"', "serial", "/dev/pts/9"),
    ]
    polling = {"timeout": 0.25, "frames": 4}
    doc = bridge_config(links, store="store.db", bridge={"id": "t", "metrics": ""}, polling=polling,
                        store_opts={"commit_interval": 0.05})  # fmt: skip
    assert tomllib.loads(to_toml(doc)) == doc
    cfg_path = tmp_path / "bridge.toml"
    write_config(cfg_path, doc, "a header")
    assert cfg_path.stat().st_mode & 0o777 == 0o600
    cfg = load(cfg_path)
    assert [d.id for d in cfg.devices] == ["board-1", "sim-0", 'odd "name"']
    assert cfg.devices[0].key == bytes.fromhex("ab" * 32) and cfg.devices[1].key is None
    assert cfg.store == str(tmp_path / "store.db") and cfg.poll.frames == 4


def test_a_config_the_bridge_refuses_is_not_written(tmp_path: Path) -> None:
    doc = bridge_config([], store="s.db", bridge={"id": "t"}, polling={"no_such_option": 1})
    with pytest.raises(ConfigError):
        write_config(tmp_path / "bridge.toml", doc)
    assert not (tmp_path / "bridge.toml").exists()


def test_every_process_is_stopped_when_the_block_ends(tmp_path: Path) -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    with testbed.Testbed(tmp_path) as bed:
        p = bed.popen("a", sleeper)
    assert gone(p.pid)
    with pytest.raises(RuntimeError), testbed.Testbed(tmp_path) as bed:
        q = bed.popen("b", sleeper)
        raise RuntimeError("a stage failed")
    assert gone(q.pid)
    assert '"name": "b"' in (tmp_path / "pids.json").read_text()
