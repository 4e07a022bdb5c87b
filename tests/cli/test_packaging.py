"""The package-dir mapping (shared/ + host/ + tools/ -> one `leadwire` namespace) survives a wheel."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_wheel_holds_core_host_and_tools_under_one_namespace(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=280,
    )
    (wheel,) = tmp_path.glob("leadwire-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in [
        "leadwire/ring.py",  # shared/leadwire
        "leadwire/client.py",
        "leadwire/cli/__init__.py",  # host/cli
        "leadwire/bridge/__init__.py",  # host/bridge
        "leadwire/fleet/__init__.py",  # host/fleet
        "leadwire/tools/__init__.py",  # tools/
    ]:
        assert module in names, module
    entry_points = zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith("entry_points.txt"))
    ).decode()
    assert "leadwire = leadwire.cli:main" in entry_points
