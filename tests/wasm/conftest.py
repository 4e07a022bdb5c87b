"""Fixtures for the WebAssembly tier: tools/wasm/run_core.mjs on Node, with the pinned MicroPython
WebAssembly port installed by `npm ci --prefix tools/wasm` (`make test` does it; done here too when
node_modules is missing, so the module also runs alone)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from ..mpy.conftest import ROOT, mpy_lib  # noqa: F401  (the same .mpy files as the unix-port tier)

WASM = ROOT / "tools" / "wasm"
VECTORS = ROOT / "tests" / "vectors"
PORT = WASM / "node_modules" / "@micropython" / "micropython-webassembly-pyscript" / "micropython.mjs"

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def wasm() -> Run:
    node = shutil.which("node")
    npm = shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node/npm missing: the WebAssembly tier needs Node.js 18+ and npm (Debian: nodejs, npm)")
    if not PORT.exists():
        r = subprocess.run(
            [npm, "ci", "--prefix", str(WASM), "--no-audit", "--no-fund", "--loglevel=error"],
            capture_output=True,
            text=True,
            timeout=180,
        )
        if r.returncode != 0 or not PORT.exists():
            tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.fail("npm ci --prefix tools/wasm failed: %s" % tail)

    def run(lib: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [node, str(WASM / "run_core.mjs"), "--lib", str(lib), "--vectors", str(VECTORS), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run
