"""Every command and config file against enumerated bad input: one line on stderr naming the problem,
exit 2, nothing written, nothing corrupted. Runs the real console entry point in a subprocess."""
# ruff: noqa: E501  (a table of cases: one case a line reads best)

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

GOOD_DEVICE = '[[device]]\nid = "a"\nudp = "127.0.0.1:4000"\nauth = false\n'
KEY = "5e" * 32

# name: (files to write {name: text}, arguments, a fragment the error line must contain)
# fmt: off
CASES: dict[str, tuple[dict[str, str], list[str], str]] = {
    # -- bridge and its config file
    "bridge missing config": ({}, ["bridge", "--config", "nope.toml"], "nope.toml"),
    "bridge config is a directory": ({"d/x": ""}, ["bridge", "--config", "d"], "is a directory"),
    "bridge bad toml": ({"b.toml": "[bridge\nx = 1\n"}, ["bridge", "--config", "b.toml"], "not valid TOML"),
    "bridge binary file": ({"b.toml": "\x00\xff\xfe"}, ["bridge", "--config", "b.toml"], "--config"),
    "bridge unknown key": (
        {"b.toml": "[bridge]\nfoo = 1\n" + GOOD_DEVICE}, ["bridge", "--config", "b.toml"], "bridge.foo"),
    "bridge unknown section": (
        {"b.toml": "[bridges]\nid = 1\n" + GOOD_DEVICE}, ["bridge", "--config", "b.toml"], "bridges"),
    "bridge no device": ({"b.toml": "[bridge]\n"}, ["bridge", "--config", "b.toml"], "device"),
    "bridge device without link": (
        {"b.toml": '[[device]]\nid = "x"\nauth = false\n'}, ["bridge", "--config", "b.toml"], "device[0].udp"),
    "bridge bad udp port": (
        {"b.toml": '[[device]]\nudp = "127.0.0.1:99999"\nauth = false\n'},
        ["bridge", "--config", "b.toml"], "device[0].udp"),
    "bridge udp not host:port": (
        {"b.toml": '[[device]]\nudp = "localhost"\nauth = false\n'},
        ["bridge", "--config", "b.toml"], "device[0].udp"),
    "bridge bad baud": (
        {"b.toml": '[[device]]\nserial = "/dev/ttyX"\nbaud = "fast"\nauth = false\n'},
        ["bridge", "--config", "b.toml"], "device[0].baud"),
    "bridge duplicate ids": (
        {"b.toml": GOOD_DEVICE + GOOD_DEVICE.replace("4000", "4001")},
        ["bridge", "--config", "b.toml"], "duplicate"),
    "bridge unknown device key": (
        {"b.toml": GOOD_DEVICE + "colour = 1\n"}, ["bridge", "--config", "b.toml"], "device[0].colour"),
    "bridge bad metrics address": (
        {"b.toml": '[bridge]\nmetrics = "127.0.0.1:70000"\n' + GOOD_DEVICE},
        ["bridge", "--config", "b.toml"], "bridge.metrics"),
    "bridge negative interval": (
        {"b.toml": "[polling]\ninterval = -1\n" + GOOD_DEVICE}, ["bridge", "--config", "b.toml"], "polling"),
    "bridge no key and no auth = false": (
        {"b.toml": '[[device]]\nid = "a"\nudp = "127.0.0.1:4000"\n'},
        ["bridge", "--config", "b.toml"], "device[0].key"),
    "bridge short key": (
        {"b.toml": GOOD_DEVICE.replace("auth = false", 'key = "abcd"')},
        ["bridge", "--config", "b.toml"], "device[0].key"),
    "bridge key and auth = false": (
        {"b.toml": GOOD_DEVICE + 'key = "%s"\n' % KEY}, ["bridge", "--config", "b.toml"], "device[0]"),
    "bridge store in a missing directory": (
        {"b.toml": '[store]\npath = "no/such/dir/s.db"\n' + GOOD_DEVICE},
        ["bridge", "--config", "b.toml", "--duration", "1"], "store"),
    "bridge store not sqlite": (
        {"b.toml": '[store]\npath = "junk.db"\n' + GOOD_DEVICE, "junk.db": "not a database at all" * 10},
        ["bridge", "--config", "b.toml", "--duration", "1"], "store"),
    "bridge bad duration": ({"b.toml": GOOD_DEVICE}, ["bridge", "--config", "b.toml", "--duration", "x"],
                            "--duration"),
    # -- status and export
    "status no source": ({}, ["status"], "--config or --store"),
    "status missing store": ({}, ["status", "--store", "s.db"], "s.db"),
    "status store not sqlite": ({"s.db": "junk" * 100}, ["status", "--store", "s.db"], "store"),
    "status bad config": ({"b.toml": "[["}, ["status", "--config", "b.toml"], "TOML"),
    "export missing store": ({}, ["export", "--store", "s.db", "--out", "out"], "s.db"),
    "export store not sqlite": ({"s.db": "junk" * 100}, ["export", "--store", "s.db", "--out", "out"], "store"),
    "export bad since": ({"s.db": None}, ["export", "--store", "s.db", "--out", "out", "--since", "yesterday"],
                         "--since"),
    "export out is a file": ({"s.db": None, "out": "x"}, ["export", "--store", "s.db", "--out", "out"], "out"),
    "export no out": ({"s.db": None}, ["export", "--store", "s.db"], "--out"),
    # -- fleet
    "fleet missing input": ({}, ["fleet", "--input", "nowhere", "--out", "o"], "nowhere"),
    "fleet bad window": ({"in/x": ""}, ["fleet", "--input", "in", "--out", "o", "--window", "7q"], "window"),
    "fleet bad date": ({"in/x": ""}, ["fleet", "--input", "in", "--out", "o", "--from", "2026-13-01"], "from"),
    "fleet no out": ({}, ["fleet", "--input", "in"], "--out"),
    "fleet remote not sc://": ({}, ["fleet", "--input", "in", "--out", "o", "--remote", "http://h:1"], "--remote"),
    "fleet no connect server": ({}, ["fleet", "--input", "in", "--out", "o", "--remote", "sc://127.0.0.1:9"],
                                "no Spark Connect server at sc://127.0.0.1:9"),
    # -- board
    "board missing config": ({}, ["board", "--config", "c.json"], "c.json"),
    "board bad json": ({"c.json": '{"x":'}, ["board", "--config", "c.json"], "c.json"),
    "board config not an object": ({"c.json": "[1, 2]"}, ["board", "--config", "c.json"], "c.json"),
    "board bad key": ({}, ["board", "--key", "xyz"], "key"),
    "board bad transport": ({}, ["board", "--transport", "bogus"], "--transport"),
    "board bad heap": ({}, ["board", "--heap", "lots", "--no-build", "--dir", "b"], "heap"),
    "board bad port": ({}, ["board", "--port", "99999"], "--port"),
    # -- flash
    "flash dry run without board": ({}, ["flash", "--port", "p", "--dry-run", "--no-auth"], "--board"),
    "flash config typo": ({"c.json": '{"rign": 1}'}, ["flash", "--port", "p", "--board", "rp2", "--config", "c.json",
                                                      "--no-auth"], "rign: unknown key"),
    "flash bad board": ({}, ["flash", "--port", "p", "--board", "pic"], "--board"),
    "flash bad json": ({"c.json": "{"}, ["flash", "--port", "p", "--board", "rp2", "--config", "c.json"], "c.json"),
    "flash unreachable board": ({}, ["flash", "--port", "/dev/leadwire-none", "--board", "unix", "--no-auth"],
                                "/dev/leadwire-none"),
    # -- netem
    "netem no target": ({}, ["netem", "udp"], "--target"),
    "netem target not host:port": ({}, ["netem", "udp", "--target", "nowhere"], "HOST:PORT"),
    "netem bad port": ({}, ["netem", "udp", "--target", "127.0.0.1:99999"], "HOST:PORT"),
    "netem loss above 1": ({}, ["netem", "udp", "--target", "127.0.0.1:4000", "--loss", "2"], "loss"),
    "netem bad blackout": ({}, ["netem", "udp", "--target", "127.0.0.1:4000", "--blackout", "5"], "blackout"),
    "netem cannot listen": ({}, ["netem", "udp", "--target", "127.0.0.1:4000", "--listen", "192.0.2.1:5"],
                            "192.0.2.1:5"),
    "netem serial missing tty": ({}, ["netem", "serial", "--target", "/dev/leadwire-none"], "/dev/leadwire-none"),
    # -- chaos
    "chaos no boards": ({}, ["chaos", "--boards", "0"], "--boards"),
    "chaos loss above 1": ({}, ["chaos", "--loss", "2"], "--loss"),
    "chaos negative seconds": ({}, ["chaos", "--seconds", "-1"], "--seconds"),
    # -- demo and the group itself
    "demo too short": ({}, ["demo", "--seconds", "1"], "--seconds"),
    "demo nothing to run": ({}, ["demo", "--boards", "0", "--simulated", "0"], "nothing to run"),
    "demo out not creatable": ({"f": "x"}, ["demo", "--out", "f/sub", "--no-spark", "--boards", "1"], "f/sub"),
    "unknown command": ({}, ["launch"], "launch"),
    "unknown option": ({}, ["status", "--colour"], "--colour"),
}
# fmt: on


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


def _store(path: Path) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (x)")
    con.execute("INSERT INTO t VALUES (1)")
    con.commit()
    con.close()


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path: Path, name: str) -> None:
    files, args, fragment = CASES[name]
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            _store(p)
        else:
            p.write_text(text)
    before = _snapshot(tmp_path)
    env = dict(os.environ, LEADWIRE_DEBUG="")
    env.pop("SPARK_REMOTE", None)  # `leadwire fleet` reads it
    r = subprocess.run(
        [sys.executable, "-m", "leadwire.cli", *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=90, env=env,
    )  # fmt: skip
    lines = r.stderr.splitlines()
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(lines) == 1, r.stderr
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in r.stderr and KEY not in r.stderr + r.stdout
    assert _snapshot(tmp_path) == before, "the command wrote or changed files"
