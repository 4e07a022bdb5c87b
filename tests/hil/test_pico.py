"""The emulated Pico only, on the official MicroPython v1.26.1 RPI_PICO firmware: the core's
checks on the rp2 port (golden vectors, and 0 bytes per event on the hot path under heap_lock:
viper native code on ARMv6-M, 31-bit small ints); frames longer than the UART driver's 256-byte
ring arrive whole over UART0; two boots never share an epoch or a
ring start (the ring oscillator's random bit is real entropy in the emulator); the agent's heap at
ready stays within its budget."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from leadwire import manifest, messages
from leadwire.tools.board import PicoBoard
from leadwire.tools.picohil import configure
from leadwire.u32 import add, distance

from ..mpy.conftest import ROOT, mpy_cross, venv_tool
from .conftest import BASE_CONFIG, Dut
from .test_hil import Open, catch_up, first_range

pytestmark = [pytest.mark.micropython, pytest.mark.timeout(300)]
RUNNER = ROOT / "tests" / "mpy" / "core_runner.py"
CHECKS = re.findall(r"^def (test_\w+)\(", RUNNER.read_text(), re.M)


# the checks `make test` runs on the emulated Pico (~10 s of its clock): the device hot path's
# allocation checks and vectors, and its native code against the bytecode twins (Thumb code: the
# unix port's native code is x64); LEADWIRE_PICO_FULL=1 runs all of them (~35 s of its clock, several
# minutes of wall time on a loaded machine)
QUICK = [
    "test_alloc_answer_recovery_and_no_event",
    "test_alloc_cobs_encode",
    "test_alloc_copy",
    "test_alloc_device_respond",
    "test_alloc_respond",
    "test_alloc_ring_write",
    "test_alloc_stream_decoder",
    "test_alloc_wire_check_and_crc",
    "test_cobs_vectors",
    "test_crc16_vectors",
    "test_offsets_stay_small_across_wrap",
    "test_responder_vectors",
    "test_ring_burst_vectors",
    "test_ring_vectors",
    "test_scan_vectors",
    "test_stream_decoder_resync",
    "test_write_equals_bytecode_twin",
    "test_answer_equals_bytecode_twin",
]


def test_core_checks_on_rp2(pico_board: PicoBoard, tmp_path: Path) -> None:
    """The checks of tests/mpy/core_runner.py (QUICK, or all with LEADWIRE_PICO_FULL=1), compiled for
    armv6m as `leadwire flash --board rp2` compiles the core, run on the board from its filesystem:
    each prints ok (0 bytes per call under heap_lock, vectors equal), none fails; the answer's byte
    loop, the COBS encoder and the scan are _thumb's (asm_thumb), then, with _thumb.mpy taken away,
    _viper's own against the same bytecode twins and vectors."""
    checks = sorted(CHECKS) if os.environ.get("LEADWIRE_PICO_FULL") else QUICK
    assert set(QUICK) <= set(CHECKS)
    lib = tmp_path / "lwtest"
    for m in manifest.DEVICE + manifest.HOST:  # (what MicroPython runs)
        mpy_cross(ROOT / "shared" / "leadwire" / (m + ".py"), lib / "leadwire" / (m + ".mpy"), "armv6m")
    # the rp2 port has no sys.argv: this copy of the runner names its vector directory itself
    src = RUNNER.read_text().replace("sys.argv", "_ARGV")
    (tmp_path / "core_runner.py").write_text("_ARGV = ['core_runner', '/lwtest/vectors']\n" + src)
    mpy_cross(tmp_path / "core_runner.py", lib / "core_runner.mpy", "armv6m")
    mpy_cross(RUNNER.parent / "twin_checks.py", lib / "twin_checks.mpy", "armv6m")
    vectors = sorted((ROOT / "tests" / "vectors").glob("*.json"))
    base = [venv_tool("mpremote"), "connect", pico_board.repl or ""]
    mk = (
        "import os\nfor d in ('lwtest', 'lwtest/leadwire', 'lwtest/vectors'):\n    try:\n"
        "        os.mkdir(d)\n    except OSError:\n        pass\n"
    )
    cp = [*base, "exec", mk]
    for f in sorted(lib.rglob("*.mpy")):
        cp += ["+", "fs", "cp", str(f), ":lwtest/" + str(f.relative_to(lib))]
    for f in vectors:
        cp += ["+", "fs", "cp", str(f), ":lwtest/vectors/" + f.name]
    r = subprocess.run(cp, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout[-1000:] + r.stderr
    # the board's own leadwire/ (the flashed subset) comes after lwtest/ on sys.path
    # then the answer's, the encoder's, the CRC's and the scan's checks again without _thumb.mpy:
    # _viper's own loops (what a Thumb board runs when _thumb is refused) on the same vectors, in
    # fresh modules
    twin = ["test_answer_equals_bytecode_twin", "test_cobs_vectors", "test_crc16_vectors"]
    twin.append("test_scan_vectors")
    again = "', '".join(("leadwire", "core_runner", "twin_checks"))
    run = (
        "import sys\nsys.path.insert(0, '/lwtest')\nimport core_runner\n"
        "core_runner._ARGV.extend(%r)\ncore_runner.main()\n"
        "print('thumb', 'leadwire._thumb' in sys.modules)\n"
        "import os\nos.rename('/lwtest/leadwire/_thumb.mpy', '/lwtest/leadwire/_thumb.off')\n"
        "for k in [k for k in sys.modules if k.split('.')[0] in ('%s')]:\n    del sys.modules[k]\n"
        "import core_runner\ncore_runner._ARGV.extend(%r)\ncore_runner.main()\n"
        "print('thumb', 'leadwire._thumb' in sys.modules)\n" % (checks, again, twin)
    )
    try:
        r = subprocess.run([*base, "exec", run], capture_output=True, text=True, timeout=600)
    finally:
        pico_board.restart()  # a clean board, the agent ready, for the next test, whatever happened
    out = [x.strip() for x in r.stdout.splitlines() if x.strip()]
    want = ["ok " + c for c in checks] + ["%d passed, 0 failed" % len(checks), "thumb True"]
    want += ["ok " + c for c in twin] + ["4 passed, 0 failed", "thumb False"]
    assert out == want, r.stdout + r.stderr


def test_frames_longer_than_the_uart_ring_arrive_whole(open_dut: Open) -> None:
    """Answers of up to 1,024 bytes, back to back over UART0 at 115,200 baud (the rp2
    UART driver's default transmit ring is 256 bytes): every frame decodes (no COBS or CRC error),
    the largest are past 256 bytes, and the offsets go on without a gap."""
    d: Dut = open_dut(
        "pico", sensors=[{"ch": 1, "hz": 50, "size": 16}], health={"ms": 0}, serial={"frame": 1024}
    )
    c = d.client
    d.sleep(2.0)  # ~100 events of 19 bytes each: the first answers fill 1 KB frames
    n0, _ = first_range(c, 3 * d.slow)
    # (what the pty held from before this boot, e.g. a frame cut short by the reset, is not ours)
    c.errors.clear()
    c.log.clear()
    _, got = catch_up(c, add(n0, -1), enough=90)
    sizes = [len(raw) for _, raw in c.log]
    assert c.errors == []
    assert max(sizes) > 256 and max(sizes) <= 1024, sizes
    offsets = [o for o, _, _ in got]
    assert offsets == [add(n0, i) for i in range(len(offsets))] and len(offsets) >= 60
    samples = [messages.decode_sample(data)[0] for _, _, data in got]
    assert samples == [(samples[0] + i) & 0xFFFF for i in range(len(samples))]


def test_two_boots_differ(open_dut: Open) -> None:
    """A power cycle of the same board gives a new boot epoch and a new ring start (the
    emulated ring oscillator's random bit is real entropy; the boot counter is mixed in as well)."""
    d: Dut = open_dut("pico", sensors=[{"ch": 1, "hz": 20, "size": 16}], health={"ms": 0})
    c = d.client
    seen = []
    for boot in range(2):
        if boot:
            d.restart()
            c.drain(0.2)
        h = c.hello()
        n0, _ = first_range(c, 3 * d.slow)
        seen.append((h.boots, h.boot_epoch, n0))
        time.sleep(0.1)
    (b1, e1, s1), (b2, e2, s2) = seen
    assert b2 == b1 + 1
    assert e1 != e2
    assert not distance(s2, s1) < 64  # a new random start, far from the old one


def test_agent_heap_at_ready_within_budget(pico_board: PicoBoard) -> None:
    """The agent's heap at ready on the RPI_PICO image (its "leadwire: ready, heap used" line, the
    default 256 x 16 ring's 4,864 B taken off; serial only, no sensors, as bench/pico_bench.py
    measures `agent_heap_auth_*`): at most 32 KB with auth off, 40 KB with a key."""
    quiet = {"id": "heap", "udp": False, "sensors": [], "health": {"ms": 0}}
    used = []
    try:
        for cfg in ({**quiet, "auth": False}, {**quiet, "key": os.urandom(32).hex()}):
            configure(pico_board, cfg)
            ready = [ln for ln in pico_board.console().splitlines() if "leadwire: ready" in ln][-1]
            used.append(int(ready.split("used", 1)[1].split()[0]) - 256 * (3 + 16))
    finally:
        configure(pico_board, BASE_CONFIG)  # the suite's board again
    assert used[0] <= 32 * 1024 and used[1] <= 40 * 1024, used
