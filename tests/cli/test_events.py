"""`leadwire events`: every stored event arrival (offset, lead, duplicate flag, payload) as a table or
JSON lines, filtered by device, channel and time, the last N, and followed while a writer commits."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from leadwire.cli import main

from .stores import T0_US, fill, write_events

pytestmark = pytest.mark.timeout(60)

HEAD = "        id  received (UTC)           device      boot   ch      offset    lead  dup  payload"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "s.db"
    fill(
        path,
        {"pico-1": [(o, 1 + o % 2, bytes([o]) * 3) for o in range(4)], "esp-2": [(0, 2, b"x" * 20)]},
        duplicates=1,
    ).close()
    return path


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["events", *args])
    return r.exit_code, r.output


def test_table_shows_every_arrival_with_offset_lead_and_duplicate_flag(store: Path) -> None:
    code, out = run("--store", str(store))
    assert code == 0
    assert out.splitlines() == [
        HEAD,
        "         1  2026-01-01 00:00:00.000  pico-1  1234abcd    1           0       1       000000",
        "         2  2026-01-01 00:00:00.001  pico-1  1234abcd    2           1       1       010101",
        "         3  2026-01-01 00:00:00.002  pico-1  1234abcd    1           2       1       020202",
        "         4  2026-01-01 00:00:00.003  pico-1  1234abcd    2           3       1       030303",
        "         5  2026-01-01 00:00:00.000  esp-2   1234abcd    2           0       1       "
        "78787878787878787878787878787878..(20 B)",
        "         6  2026-01-01 00:00:00.000  pico-1  1234abcd    1           0       0  dup  -",
        "6 arrivals",
    ]


def test_json_lines_filtered_by_device_channel_and_time(store: Path) -> None:
    code, out = run("--store", str(store), "--json", "--device", "pico-1", "--channel", "1", "--since",
                    "2026-01-01T00:00:00.0005")  # fmt: skip
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows == [
        {"id": 3, "device": "pico-1", "boot_epoch": 0x1234ABCD, "channel": 1, "offset": 2, "lead": 1,
         "duplicate": False, "rx_us": T0_US + 2000, "payload": "020202"},
    ]  # fmt: skip
    code, out = run("--store", str(store), "--json", "--channel", "1", "--since", "2026-01-01")
    assert [(r["id"], r["duplicate"], r["payload"]) for r in map(json.loads, out.splitlines())] == [
        (1, False, "000000"), (3, False, "020202"), (6, True, None)
    ]  # fmt: skip


def test_last_and_no_duplicates(store: Path) -> None:
    code, out = run("--store", str(store), "--json", "--last", "2", "--no-duplicates")
    assert code == 0
    assert [json.loads(line)["id"] for line in out.splitlines()] == [4, 5]


def test_bad_input_is_one_line_exit_2(store: Path, tmp_path: Path) -> None:
    for args, fragment in [
        (["--store", str(store), "--device", "no"], "no device no in %s (devices: esp-2, pico-1)" % store),
        (["--store", str(store), "--since", "yesterday"], "--since must be YYYY-MM-DD"),
        (["--store", str(tmp_path / "none.db")], "store %s not found" % (tmp_path / "none.db")),
        (["--store", str(store), "--channel", "300"], "--channel"),
    ]:
        r = subprocess.run([sys.executable, "-m", "leadwire.cli", "events", *args], capture_output=True,
                           text=True, timeout=30)  # fmt: skip
        assert r.returncode == 2, args
        assert r.stdout == ""
        assert len(r.stderr.splitlines()) == 1 and fragment in r.stderr, r.stderr


def test_follow_prints_what_a_writer_commits_later(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    st = fill(path, {"pico-1": [(0, 1, b"a")]})
    cmd = [sys.executable, "-m", "leadwire.cli", "events", "--store", str(path), "--json", "--follow",
           "--interval", "0.05"]  # fmt: skip
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        try:
            assert p.stdout is not None
            assert json.loads(p.stdout.readline())["offset"] == 0
            write_events(st, 1, [(1, 1, b"b"), (2, 1, b"c")])
            t0 = time.monotonic()
            got = [json.loads(p.stdout.readline()) for _ in range(2)]
            assert time.monotonic() - t0 < 10
            assert [(g["offset"], g["payload"]) for g in got] == [(1, "62"), (2, "63")]
        finally:
            p.terminate()
            p.wait(timeout=10)
            st.close()
