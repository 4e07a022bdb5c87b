"""The core's modules are declared once (leadwire/manifest.py): a board gets exactly the device ones,
package.json (the mip package) is the manifest's, and every module of the package is in it once."""

from __future__ import annotations

from pathlib import Path

from leadwire import manifest
from leadwire.tools.firmware_build import plan

ROOT = Path(__file__).resolve().parents[2]


def test_every_core_module_is_declared_once() -> None:
    files = sorted(p.stem for p in (ROOT / "shared" / "leadwire").glob("*.py"))
    declared = manifest.DEVICE + manifest.HOST + manifest.CPYTHON
    assert sorted(declared) == files
    assert len(set(declared)) == len(declared)


def test_package_json_is_the_manifests() -> None:
    assert (ROOT / "package.json").read_text() == manifest.package_json(), (
        "package.json differs from the manifest: .venv/bin/python -m leadwire.manifest > package.json"
    )


def test_a_board_gets_the_device_modules_only() -> None:
    """Every device module, but _thumb (asm_thumb) on Thumb boards only, and neither native module
    on a board that cannot load native code."""
    for kind in ("unix", "rp2", "esp32"):
        core = sorted(it.dest for it in plan(kind) if it.dest.startswith("leadwire/"))
        thumb = kind == "rp2"
        assert core == sorted("leadwire/%s.mpy" % m for m in manifest.DEVICE if thumb or m != "_thumb")
    for march, thumb in (("armv7emsp", True), ("rv32imc", False)):  # an RP2350's Arm or RISC-V cores
        dests = [it.dest for it in plan("rp2", march=march)]
        assert ("leadwire/_thumb.mpy" in dests) == ("lwdma.mpy" in dests) == thumb  # both asm_thumb
    bare = [it.dest for it in plan("rp2", viper=False)]
    assert "leadwire/_viper.mpy" not in bare and "leadwire/_thumb.mpy" not in bare and "lwdma.mpy" not in bare
