"""Device config on the board: bad or missing values give a clear console message and safe
defaults; the agent starts every time (no crash loop)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from leadwire.tools.board import BoardError, start_board

from ..hil.client import Client, UdpLink

pytestmark = [pytest.mark.micropython, pytest.mark.timeout(60)]


def _hello_ok(b: object) -> None:
    addr = b.address  # type: ignore[attr-defined]
    c = Client(UdpLink(addr))
    try:
        h = c.hello()
        assert (h.capacity, h.slot_size) == (256, 16)
    finally:
        c.close()


def test_bad_values_fall_back_to_defaults(tmp_path: Path) -> None:
    bad = {"ring": 99999, "slot": "big", "sensors": [{"ch": 8, "hz": 5}, {"ch": 3, "hz": "fast"}]}
    with start_board("udp", config=bad, board_dir=tmp_path) as b:
        out = b.console()
        assert "config: ring must be an integer in 1..4096; using 256" in out
        assert "config: slot must be an integer in 8..512; using 16" in out
        assert "sensor on channel 8: channel taken" in out
        assert "config: sensors: hz must be an integer in 0..1000000; using 10" in out
        _hello_ok(b)


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", ""])
def test_broken_or_missing_file_gives_defaults(tmp_path: Path, content: str) -> None:
    with start_board("udp", board_dir=tmp_path) as b:
        cfg = json.loads((tmp_path / "config.json").read_text())
        if content:
            (tmp_path / "config.json").write_text(content)
        else:
            (tmp_path / "config.json").unlink()
        try:
            b.restart()  # reboot with the broken file: the board comes up on defaults
        except BoardError as e:
            # defaults: UDP on 127.0.0.1:4210; another board may hold that port: then no link, and
            # the board says it is not ready (the launcher raises), never that it is
            assert "udp: cannot open (port 4210)" in str(e) and "leadwire: not ready: no link" in str(e)
            return
        out = b.console()
        assert "using safe defaults" in out and "leadwire: ready" in out and "links udp:4210" in out
        assert b.address == ("127.0.0.1", 4210) != ("127.0.0.1", cfg["udp"]["port"])  # where it is
        _hello_ok(b)
