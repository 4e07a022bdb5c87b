"""Device config on the board: bad or missing values give a clear console message and safe
defaults; the agent starts every time (no crash loop)."""

from __future__ import annotations

from pathlib import Path

import pytest

from leadwire.tools.board import BoardError, start_board
from leadwire.tools.wireclient import Client, UdpLink

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
def test_broken_or_missing_file_is_not_ready_without_a_key(tmp_path: Path, content: str) -> None:
    # safe defaults include authentication: with no file to say "auth": false or give a
    # key, the board names the problem and is not ready (nothing unauthenticated may reach it)
    with start_board("udp", board_dir=tmp_path) as b:
        if content:
            (tmp_path / "config.json").write_text(content)
        else:
            (tmp_path / "config.json").unlink()
        with pytest.raises(BoardError) as e:
            b.restart()  # reboot with the broken file
        out = str(e.value)
        assert "using safe defaults" in out and "leadwire: ready" not in out, out
        assert 'config: no key: authentication needs "key" (32..128 hex digits) or "auth": false' in out
        assert "leadwire: not ready: no key; fix config.json and reset" in out
        assert not b.alive()
