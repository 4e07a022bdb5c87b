"""Config errors: one line naming the key and the problem, exit 2, nothing written."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from leadwire.bridge.config import (
    BridgeConfig,
    ConfigError,
    DeviceConfig,
    PollConfig,
    load,
    parse,
    settings,
    shard_of,
)
from leadwire.cli import main

pytestmark = pytest.mark.timeout(60)

GOOD_DEVICE = '[[device]]\nid = "a"\nudp = "127.0.0.1:4000"\nauth = false\n'
UDP = '[[device]]\nudp = "127.0.0.1:1"\n'
KEY = "5ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7"  # 64 hex digits: 32 bytes

CASES = [
    ("[bridge]\nbogus = 1\n", "bridge.bogus", "unknown key"),
    ("[polling]\ninterval = -1\n", "polling.interval", "between"),
    (
        "[polling]\ninterval_min = 0.5\ninterval_max = 0.1\n",
        "polling.interval_max",
        ">= polling.interval_min",
    ),
    ("[polling]\nbatch = 0\n", "polling.batch", "between 1 and 255"),
    ('[polling]\nadaptive = "yes"\n', "polling.adaptive", "true or false"),
    ('[store]\ncommit_interval = "fast"\n', "store.commit_interval", "must be a number"),
    ('[bridge]\nmetrics = "nowhere"\n', "bridge.metrics", "host:port"),
    ('[bridge]\nshard = "3/2"\n', "bridge.shard", "INDEX/COUNT"),
    ('[[device]]\nid = "x"\n', "device[0].udp", "exactly one of"),
    ('[[device]]\nudp = "127.0.0.1:99999"\n', "device[0].udp", "host:port"),
    ('[[device]]\nserial = "/dev/ttyX"\nbaud = "fast"\n', "device[0].baud", "integer"),
    ('[[device]]\nudp = "127.0.0.1:1"\nsubscribe = [1, 300]\n', "device[0].subscribe", "0..255"),
    ('[[device]]\nudp = "127.0.0.1:1"\ntimestamp = "ms"\n', "device[0].timestamp", "prefix_us"),
    (GOOD_DEVICE + GOOD_DEVICE.replace("4000", "4001"), "device[1].id", "duplicate device id"),
    (GOOD_DEVICE + GOOD_DEVICE.replace('"a"', '"b"'), "device[1].udp", "already used"),
    ("[bridge\n", "--config", "not valid TOML"),
    ("device = 3\n", "device", "array of tables"),
    # authentication: a key, a key file, or auth = false, said explicitly
    (UDP, "device[0].key", 'give key = "HEX", key_file = "PATH" or auth = false'),
    ('[[device]]\nserial = "/dev/ttyX"\n', "device[0].key", "missing"),
    (UDP + 'key = "%s"\n' % KEY[:-1], "device[0].key", "32..128 hex digits"),
    (UDP + 'key = "%s"\n' % KEY[:30], "device[0].key", "32..128 hex digits"),
    (UDP + 'key = "%s"\n' % (KEY[:-2] + "zz"), "device[0].key", "hex digits only"),
    (UDP + "key = 1234\n", "device[0].key", "must be a string"),
    (UDP + 'key = "%s"\nauth = false\n' % KEY, "device[0].key", "auth = false"),
    (UDP + 'key = "%s"\nkey_file = "k"\n' % KEY, "device[0].key", "not both"),
    (UDP + 'key_file = "missing.key"\n', "device[0].key_file", "not found"),
    (UDP + 'auth = "no"\n', "device[0].auth", "must be false"),
    (UDP + "auth = true\n", "device[0].key", "missing"),
]


@pytest.mark.parametrize("text,key,problem", CASES)
def test_config_error_names_key_exits_2_writes_nothing(
    tmp_path: Path, text: str, key: str, problem: str
) -> None:
    store = tmp_path / "never.db"
    cfg = tmp_path / "bridge.toml"
    path = 'path = "%s"\n' % store
    cfg.write_text(
        text.replace("[store]\n", "[store]\n" + path) if "[store]" in text else text + "\n[store]\n" + path
    )
    with pytest.raises(ConfigError) as e:
        load(cfg)
    assert e.value.key == key and problem in e.value.problem
    r = CliRunner().invoke(main, ["bridge", "--config", str(cfg)])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert (
        len(lines) == 1 and lines[0].startswith("leadwire: config error: %s: " % key) and problem in lines[0]
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bridge.toml"]  # nothing written


def test_missing_file_and_real_process(tmp_path: Path) -> None:
    cfg = tmp_path / "bridge.toml"
    cfg.write_text("[polling]\ntimeout = 0\n")
    p = subprocess.run(
        [sys.executable, "-m", "leadwire.cli", "bridge", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
    )
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip() == "leadwire: config error: polling.timeout: must be between 0.001 and 60, got 0"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["bridge.toml"]
    r = CliRunner().invoke(main, ["bridge", "--config", str(tmp_path / "nope.toml")])
    assert r.exit_code == 2 and "--config: file" in r.output


def test_example_config_is_valid_and_sharding_is_stable() -> None:
    example = Path(__file__).resolve().parents[2] / "docs" / "examples" / "bridge.toml"
    cfg = load(example)
    assert cfg.devices and cfg.metrics.startswith("127.0.0.1:")
    ids = ["dev-%d" % i for i in range(1000)]
    shards = [shard_of(i, 4) for i in ids]
    assert shards == [shard_of(i, 4) for i in ids] and set(shards) == {0, 1, 2, 3}
    assert 200 < shards.count(0) < 300


@pytest.mark.parametrize(
    "device",
    [
        'key = "%s"' % (KEY[:-2] + "zz"),  # not hex
        'key = "%s"' % (KEY + "a"),  # odd length
        'key = "%s"' % (KEY * 3),  # too long
        'key = "%s"\nauth = false' % KEY,
        'key = "%s"\nkey_file = "k.hex"' % KEY,
        'key_file = "bad.hex"',  # holds a bad key
    ],
)
def test_config_errors_never_show_the_key(tmp_path: Path, device: str) -> None:
    (tmp_path / "bad.hex").write_text(KEY[:-2] + "zz\n")
    cfg = tmp_path / "bridge.toml"
    cfg.write_text('[store]\npath = "%s"\n%s%s\n' % (tmp_path / "s.db", UDP, device))
    r = CliRunner().invoke(main, ["bridge", "--config", str(cfg), "--check"])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1
    assert "config error: device[0].key" in r.output
    for secret in (KEY, KEY[:-2], KEY[:16], KEY[16:48]):
        assert secret not in r.output


def test_key_key_file_and_auth_false(tmp_path: Path) -> None:
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "b.hex").write_text("  %s\n" % KEY.upper())  # whitespace and case are fine
    cfg = tmp_path / "bridge.toml"
    port = tmp_path / "ttyX"  # --check looks for the port (a file is enough)
    port.touch()
    cfg.write_text(
        '[bridge]\nmetrics = ""\n'
        + '[[device]]\nid = "a"\nudp = "127.0.0.1:1"\nkey = "%s"\n' % KEY
        + '[[device]]\nid = "b"\nudp = "127.0.0.1:2"\nkey_file = "keys/b.hex"\n'  # relative to the config
        + '[[device]]\nid = "c"\nserial = "%s"\nauth = false\n' % port
    )
    c = load(cfg)
    a, b, off = c.devices
    assert a.key == b.key == bytes.fromhex(KEY) and a.auth and b.auth
    assert off.key is None and not off.auth
    assert KEY not in repr(c) and KEY not in str(c.devices) and KEY.upper() not in repr(c)
    r = CliRunner().invoke(main, ["bridge", "--config", str(cfg), "--check"])
    assert r.exit_code == 0, r.output
    assert r.output == "config ok: 3 devices (3 in shard 0/1)\n"
    with pytest.raises(ConfigError) as e:
        parse({"device": [{"udp": "127.0.0.1:1", "key_file": "k"}]}, base=tmp_path)
    assert e.value.key == "device[0].key_file" and "not found" in e.value.problem


# ---------------------------------------------------------------- the documentation agrees with the code
ROOT = Path(__file__).resolve().parents[2]


def _toml(value: object) -> str:
    """A default as the docs write it (TOML)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"%s"' % value
    if value == ():
        return "[]"
    if isinstance(value, tuple):  # bridge.shard
        return '"%d/%d"' % value
    return repr(value)


def _documented() -> dict[str, tuple[str, str]]:
    """docs/bridge.md's key table: "section.key" -> (default as written, meaning)."""
    text = (ROOT / "docs" / "bridge.md").read_text()
    table = text.split("## Configuration reference")[1].split("\n## ")[0]
    rows: dict[str, tuple[str, str]] = {}
    for line in table.splitlines():
        if not line.startswith("| `"):
            continue
        keys, default, meaning = (c.strip() for c in line.strip("|").split(" | ", 2))
        names = re.findall(r"`([^`]+)`", keys)
        defaults = default.split(", ") if len(names) > 1 else [default]
        assert len(defaults) == len(names), line
        section = ""
        for name, d in zip(names, defaults, strict=True):
            if name.startswith("[[device]]"):
                section, name = "device", name[len("[[device]]") :].strip()
            elif "." in name:
                section, name = name.split(".", 1)
            if name:
                rows["%s.%s" % (section, name)] = (d.strip("`"), meaning)
    return rows


def test_every_key_documented_once_with_its_default_and_range() -> None:
    doc = _documented()
    code = {
        "%s.%s" % (s, k): f for cls in (BridgeConfig, PollConfig, DeviceConfig) for s, k, f in settings(cls)
    }
    device_only = {"device." + k for k in ("id", "udp", "serial", "key", "key_file", "auth")}  # not fields
    assert set(doc) == set(code) | device_only
    for key, f in code.items():
        default, meaning = doc[key]
        assert default == _toml(f.default), key
        m = re.search(r"\((-?[\d.]+)\.\.(-?[\d.]+)\)", meaning)  # a range given as (lo..hi)
        if m:
            assert (float(m[1]), float(m[2])) == f.metadata["range"], key


def test_example_lists_every_setting_at_its_default() -> None:
    """docs/examples/bridge.toml shows every [bridge]/[store]/[polling] key; all at their defaults
    but the two a deployment sets (bridge.id, store.path)."""
    doc = tomllib.loads((ROOT / "docs" / "examples" / "bridge.toml").read_text())
    for cls, sections in ((BridgeConfig, ("bridge", "store")), (PollConfig, ("polling",))):
        for s, k, f in settings(cls):
            assert s in sections and k in doc[s], "%s.%s missing from the example" % (s, k)
            if "%s.%s" % (s, k) not in ("bridge.id", "store.path"):
                assert _toml(doc[s][k]) == _toml(f.default), "%s.%s" % (s, k)
