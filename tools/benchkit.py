"""What the benches share: a JSON-speaking child process and the numbers' formatting.

Benches import these from here (never from each other, never from tests).
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import threading
import time
from typing import IO, Any

from leadwire.tools import testbed


class Proc:
    """A child process in its own process group, its stdout read line by line (JSON) in a thread."""

    def __init__(
        self,
        cmd: list[str],
        env: dict[str, str] | None = None,
        stdin: bool = False,
        stderr: IO[bytes] | None = None,
    ) -> None:
        self.p = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
            start_new_session=True,
            text=True,
        )
        self.lines: list[dict[str, Any]] = []
        self.raw: list[str] = []
        self.progress = 0
        self.progress_t = time.monotonic()
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self.raw.append(line)
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if "c" in d and len(d) == 1:
                if d["c"] != self.progress:
                    self.progress = d["c"]
                    self.progress_t = time.monotonic()
                continue
            self.lines.append(d)

    def wait_line(self, key: str, timeout: float) -> dict[str, Any]:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for d in self.lines:
                if key in d:
                    return d
            if self.p.poll() is not None and not self._t.is_alive():
                break
            time.sleep(0.01)
        raise RuntimeError("no %r from %s: %s" % (key, self.p.args, "".join(self.raw[-5:])))

    def close_stdin(self) -> None:
        if self.p.stdin is not None:
            self.p.stdin.close()

    def kill(self) -> None:
        testbed.stop_group(self.p, signal.SIGKILL, 5.0)  # the testbed's reaper: the group, then wait


def fmt(v: Any, digits: int = 0) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isnan(v):
            return "n/a"
        return "{:,.{d}f}".format(v, d=digits)
    return "{:,}".format(v) if isinstance(v, int) else str(v)


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or not b or math.isnan(a) or math.isnan(b):
        return "n/a"
    return "%.2fx" % (a / b)


def table(rows: list[list[str]]) -> str:
    """A Markdown table (first row: header); numbers right-aligned."""
    out = ["| " + " | ".join(rows[0]) + " |", "|---" + "|---:" * (len(rows[0]) - 1) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(out)
