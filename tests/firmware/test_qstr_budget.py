"""The board's interned names (qstrs) stay inside the interpreter's first four dynamic pools.

MicroPython interns every name a loaded module uses (globals, attributes, arguments, short string
literals, module and source names) and never frees them. Its pools hold 20, 40, 80 and 160 names;
the 301st name allocates a fifth pool of 320 (about 3.9 KB at 64K). On the agent that step came at
the first SUBSCRIBE (the push modules load then): free heap with two push sessions fell from
15.1 KB to 12.1 KB and reports failed to allocate (MemoryError, frames dropped) in
tests/hil/test_hil.py::test_heap_within_budget_under_load. This test fails first, with the count.

It loads what a pushing board loads (auth off) and counts; the running agent interns a few more
at run time (RUNTIME).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from leadwire.tools.firmware_build import build

from ..mpy.conftest import run_in_board_dir

pytestmark = [pytest.mark.micropython, pytest.mark.timeout(120)]

POOLS_4 = 300  # names the first four dynamic pools hold (20 + 40 + 80 + 160)
# names the agent interns while it runs, above what its modules load: main.py's were most of the
# 6 once measured (287 in the HIL run against 281 here); main.py is now `lwapp.run()`, and lwapp is
# loaded here (its names and the old main.py's: 287 both, counted on the unix port)
RUNTIME = 2
MARGIN = 8  # room for the next change, so the step is not hit by one more name

LOADS = """
import micropython
from boards import unix
import lwapp
import lwboot
from leadwire import ring, device, wire, framing, bufcopy, crc16
import lwagent
from leadwire import frames, reports
micropython.qstr_info()
"""


def test_pushing_board_fits_four_qstr_pools(tmp_path: Path) -> None:
    build("unix", tmp_path)
    (tmp_path / "qstr_count.py").write_text(LOADS)
    r = run_in_board_dir(tmp_path, "qstr_count.py")
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"n_pool=(\d+), n_qstr=(\d+)", r.stdout)
    assert m, r.stdout
    pools, names = int(m.group(1)), int(m.group(2))
    assert pools == 4, r.stdout
    assert names + RUNTIME + MARGIN <= POOLS_4, (
        "a pushing board interns %d names at load (+%d at run time): the 301st costs a 3.9 KB pool; "
        "cut names from the device modules" % (names, RUNTIME)
    )
