"""A short coverage-guided run (atheris) of the host decoders and the COBS stream decoders.

The harness and its oracles: tests/fuzz/atheris_fuzz.py (the long run: docs/reliability.md).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).with_name("atheris_fuzz.py")
RUNS = 10_000

pytest.importorskip("atheris", reason="atheris ships wheels for x86_64 CPython 3.11-3.13 only")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_coverage_guided_run_finds_nothing_and_grows_coverage(tmp_path: Path) -> None:
    seeds = tmp_path / "corpus"
    subprocess.run([sys.executable, str(HARNESS), "--seeds", str(seeds)], check=True, timeout=60,
                   capture_output=True)  # fmt: skip
    r = subprocess.run(
        [sys.executable, str(HARNESS), "-runs=%d" % RUNS, "-timeout=10", "-max_total_time=150",
         "-seed=1", str(seeds)],
        cwd=tmp_path, capture_output=True, text=True, timeout=170,
    )  # fmt: skip
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "Done %d runs" % RUNS in out, out[-3000:]
    assert not list(tmp_path.glob("crash-*")) and not list(tmp_path.glob("timeout-*"))
    # guidance works: edges covered after the seed corpus, then more by the end of the run
    inited = int(re.search(r"INITED cov: (\d+)", out).group(1))  # type: ignore[union-attr]
    done = int(re.search(r"DONE +cov: (\d+)", out).group(1))  # type: ignore[union-attr]
    assert done > inited, out[-2000:]
