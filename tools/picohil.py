"""The emulated Raspberry Pi Pico as a HIL board kind: the official MicroPython v1.26.1
RPI_PICO firmware on rp2040js (`leadwire board --kind pico`), flashed once per test session with
`leadwire flash --board rp2` over its USB REPL as a real Pico would be, serving the agent on UART0.

Each test then writes its own config.json (and clears the boot counter: a fresh board) through the
raw REPL and resets the board with machine.reset(), which the emulator turns into a reboot in its
process (same ptys). Time on the board is the emulator's: ~0.4x the wall clock while the CPU is busy,
so tests compare counts with the board's clock (`PicoBoard.clock()`) where rates matter.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import termios
import time
import tty
from pathlib import Path
from typing import Any

from .board import PicoBoard, start_pico


class RawRepl:
    """MicroPython's raw REPL on a serial port (what mpremote speaks), just enough to run a few
    lines: Ctrl-C stops the running agent, Ctrl-A enters raw mode, code + Ctrl-D runs it."""

    def __init__(self, port: str) -> None:
        self.fd = os.open(port, os.O_RDWR | os.O_NOCTTY)
        tty.setraw(self.fd, termios.TCSANOW)

    def _read_until(self, marker: bytes, timeout: float) -> bytes:
        got = b""
        end = time.monotonic() + timeout
        while marker not in got:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError("raw REPL: no %r in %r" % (marker, got[-300:]))
            r, _, _ = select.select([self.fd], [], [], left)
            if r:
                got += os.read(self.fd, 4096)
        return got

    def enter(self, timeout: float = 20.0) -> None:
        os.write(self.fd, b"\r\x03\x03")  # stop the agent (KeyboardInterrupt)
        os.write(self.fd, b"\x02")  # (from the raw REPL: back to the friendly one)
        self._read_until(b">>> ", timeout)
        os.write(self.fd, b"\r\x01")
        self._read_until(b"raw REPL; CTRL-B to exit\r\n>", timeout)

    def run(self, code: str, timeout: float = 20.0, wait: bool = True) -> str:
        """Run `code`; its output (RuntimeError with the traceback if it raised). `wait` False:
        send it and return (machine.reset() never answers)."""
        os.write(self.fd, code.encode() + b"\x04")
        if not wait:
            return ""
        out = self._read_until(b"\x04>", timeout)
        ok = out.index(b"OK")
        body, err = out[ok + 2 :].split(b"\x04")[:2]
        if err.strip():
            raise RuntimeError("on the board: " + err.decode(errors="replace"))
        return body.decode(errors="replace")

    def close(self) -> None:
        os.close(self.fd)


def configure(board: PicoBoard, config: dict[str, Any], timeout: float = 60.0) -> None:
    """Write `config` as the board's config.json, clear its boot counter, reset it, and wait until
    the agent says ready."""
    repl = RawRepl(board.repl or "")
    try:
        repl.enter()
        repl.run(
            "import os\nf = open('config.json', 'w')\nf.write(%r)\nf.close()\n"
            "try:\n    os.remove('boots')\nexcept OSError:\n    pass\n" % json.dumps(config)
        )
        n = board.events()
        repl.run("import machine\nmachine.reset()", wait=False)
    finally:
        repl.close()
    board.reset_wait(n, timeout)


def flashed_pico(board_dir: Path, config: dict[str, Any], wifi: dict[str, Any] | None = None) -> PicoBoard:
    """An emulated Pico (`wifi`: a Pico W on that network, see PicoBoard) on `board_dir`, flashed
    with `leadwire flash --board rp2 --config ... --no-auth` (exactly as a user flashes a real one)
    and running the agent."""
    board = start_pico(board_dir, wifi=wifi)
    try:
        cfg = board_dir / "flash-config.json"
        cfg.write_text(json.dumps(config))
        n = board.events()
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "leadwire.cli",
                "flash",
                "--port",
                board.repl or "",
                "--board",
                "rp2",
                "--config",
                str(cfg),
                "--no-auth",
            ],
            capture_output=True,
            text=True,
            timeout=240,
        )
        if r.returncode != 0:
            raise RuntimeError("leadwire flash: exit %d: %s %s" % (r.returncode, r.stdout[-800:], r.stderr))
        board.reset_wait(n, 60)
    except BaseException:
        board.close()
        raise
    return board
