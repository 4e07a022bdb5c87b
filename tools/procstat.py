"""CPU time of another process, read from Linux /proc (benchmarks and simulators)."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds the process has used so far; None for no pid, a process that is
    gone, or a system without /proc."""
    if pid is None:
        return None
    try:
        f = Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None
