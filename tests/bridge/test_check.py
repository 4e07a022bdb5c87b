"""`leadwire bridge --check` checks what a run needs; a run meets the same problems the same way:
one line naming the resource, exit 2, nothing created (no store, no lock file)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from leadwire.bridge.config import parse

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]


def write_config(d: Path, devices: str, bridge: str = 'metrics = ""', store: str | None = None) -> Path:
    cfg = d / "bridge.toml"
    cfg.write_text(
        "[bridge]\n%s\n[store]\npath = %s\n%s" % (bridge, '"%s"' % (store or d / "store.db"), devices)
    )
    return cfg


def leadwire(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "leadwire.cli", *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )


def check_and_run(cfg: Path, line: str, created: Path) -> None:
    """--check prints exactly `line` and exits 2; so does the run, and it creates nothing."""
    for args in (("--check",), ("--duration", "5")):
        p = leadwire("bridge", "--config", str(cfg), *args)
        assert (p.returncode, p.stdout, p.stderr) == (2, "", line + "\n"), args
        assert not created.exists() and not Path(str(created) + ".lock").exists(), args


UDP_OK = '[[device]]\nid = "a"\nudp = "127.0.0.1:9"\nauth = false\n'


def test_store_path_a_directory_or_a_missing_directory(tmp_path: Path) -> None:
    (tmp_path / "db").mkdir()
    cfg = write_config(tmp_path, UDP_OK, store=str(tmp_path / "db"))
    check_and_run(cfg, "leadwire: store.path %s: is a directory" % (tmp_path / "db"), tmp_path / "x")
    store = tmp_path / "nowhere" / "store.db"
    cfg = write_config(tmp_path, UDP_OK, store=str(store))
    check_and_run(cfg, "leadwire: store.path %s: directory %s does not exist" % (store, store.parent), store)


def problems_as(uid: int, cfg: Path) -> list[str]:
    """preflight.check in a forked child running as `uid` (the interpreter lives under /root:
    another user could not exec it, so no subprocess)."""
    import encodings.idna  # noqa: F401  (getaddrinfo's, loaded lazily from a tree nobody cannot read)

    from leadwire.bridge.config import load
    from leadwire.bridge.preflight import check

    c = load(cfg)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(r)
            if uid != os.getuid():
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            os.write(w, "\n".join(check(c)[0]).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read()
    os.waitpid(pid, 0)
    return out.splitlines()


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory another user can reach (pytest's tmp_path is under a 0700 one as root)."""
    d = Path(tempfile.mkdtemp(prefix="leadwire-check-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d)


def test_store_directory_not_writable_named(shared_dir: Path) -> None:
    # as root every directory is writable: the check then runs as nobody (uid 65534)
    uid = 65534 if os.getuid() == 0 else os.getuid()
    ro = shared_dir / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    cfg = write_config(shared_dir, UDP_OK, store=str(ro / "store.db"))
    want = "store.path %s: directory %s is not writable (permission denied for uid %d)"
    assert problems_as(uid, cfg) == [want % (ro / "store.db", ro, uid)]
    ro.chmod(0o755)
    os.chown(ro, uid, -1)  # the user's own directory: fine
    assert problems_as(uid, cfg) == []


def test_metrics_port_busy_exits_2_before_the_store_exists(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        addr = "127.0.0.1:%d" % s.getsockname()[1]
        cfg = write_config(tmp_path, UDP_OK, bridge='metrics = "%s"' % addr)
        check_and_run(
            cfg,
            "leadwire: bridge.metrics %s: cannot listen: Address already in use" % addr,
            tmp_path / "store.db",
        )


def test_missing_serial_port_exits_2_instead_of_warning_forever(tmp_path: Path) -> None:
    port = tmp_path / "ttyUSB9"
    cfg = write_config(tmp_path, '[[device]]\nid = "s"\nserial = "%s"\nauth = false\n' % port)
    check_and_run(cfg, 'leadwire: device "s" serial %s: no such port' % port, tmp_path / "store.db")


def test_udp_device_not_reachable_from_bind(tmp_path: Path) -> None:
    # a socket bound to loopback cannot send to a LAN address (EINVAL); connect() sends nothing
    dev = '[[device]]\nid = "lan"\nudp = "192.0.2.40:5005"\nauth = false\n'
    cfg = write_config(tmp_path, dev, bridge='metrics = ""\nbind = "127.0.0.1:0"')
    check_and_run(
        cfg,
        'leadwire: device "lan" udp 192.0.2.40:5005: not reachable from bridge.bind 127.0.0.1:0 (Invalid '
        "argument): bind to 0.0.0.0:0 or to an address of the interface that reaches it",
        tmp_path / "store.db",
    )


def test_bind_address_in_use(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        bind = "127.0.0.1:%d" % s.getsockname()[1]
        cfg = write_config(tmp_path, UDP_OK, bridge='metrics = ""\nbind = "%s"' % bind)
        check_and_run(
            cfg,
            "leadwire: bridge.bind %s: cannot bind the UDP socket: Address already in use" % bind,
            tmp_path / "store.db",
        )


def test_every_problem_one_line_and_a_good_config_passes(tmp_path: Path) -> None:
    port = tmp_path / "ttyS"
    (tmp_path / "db").mkdir()
    cfg = write_config(
        tmp_path,
        UDP_OK + '[[device]]\nid = "s"\nserial = "%s"\nauth = false\n' % port,
        store=str(tmp_path / "db"),
    )
    p = leadwire("bridge", "--config", str(cfg), "--check")
    assert p.returncode == 2
    assert p.stderr.splitlines() == [
        "leadwire: store.path %s: is a directory" % (tmp_path / "db"),
        'leadwire: device "s" serial %s: no such port' % port,
    ]
    port.touch()
    cfg = write_config(tmp_path, UDP_OK + '[[device]]\nid = "s"\nserial = "%s"\nauth = false\n' % port)
    p = leadwire("bridge", "--config", str(cfg), "--check")
    assert (p.returncode, p.stderr) == (0, "")
    assert p.stdout == "config ok: 2 devices (2 in shard 0/1)\n"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["bridge.toml", "db", "ttyS"]  # nothing created


def test_default_store_goes_to_the_systemd_state_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """ProtectSystem=strict makes /etc read-only: a relative store.path (the default) lands in
    $STATE_DIRECTORY (StateDirectory=), not next to the config in /etc/leadwire."""
    doc = {"device": [{"udp": "127.0.0.1:9", "auth": False}]}
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/leadwire")
    assert parse(doc, base=Path("/etc/leadwire")).store == "/var/lib/leadwire/leadwire.db"
    monkeypatch.delenv("STATE_DIRECTORY")
    assert parse(doc, base=Path("/etc/leadwire")).store == "/etc/leadwire/leadwire.db"
    unit = (ROOT / "docs" / "examples" / "leadwire-bridge.service").read_text().splitlines()
    assert "StateDirectory=leadwire" in unit and "ProtectSystem=strict" in unit
    example = tomllib.loads((ROOT / "docs" / "examples" / "bridge.toml").read_text())
    assert example["store"]["path"].startswith("/var/lib/leadwire/")  # the state directory
