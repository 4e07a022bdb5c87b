"""Virtual boards: the firmware on the MicroPython unix port with a board-sized heap.

A virtual board is a directory (its flash: compiled firmware, config.json, the boot counter) and a
`micropython -X heapsize=64K main.py` process (its power). Killing the process is a power cut;
starting it again on the same directory is a reboot (boot count + 1, new boot epoch, new random
start offset of the ring).

Links:
  udp     the agent binds 127.0.0.1:PORT (the launcher picks PORT: the unix port has no getsockname)
  serial  two ptys joined by a relay thread, like a USB-UART adapter: the board opens one (set raw,
          so bytes pass unchanged), the host opens the other (`port`). The port survives
          restart() of the board, as an external adapter does.
  both    the two at once (the memory target: both transports, all channels)
  repl    no firmware: the interpreter's REPL on the pty, for mpremote (flashing, mip install)

From Python (the bridge, the HIL suite):

    with start_board("udp", config={"sensors": [...]}) as b:
        b.address            # ("127.0.0.1", 40123)
        b.restart()          # power cut + power on

Authentication (issue 6): start_board(key=...) decides what the board's config.json says:
  key=None     the config's own "key" / "auth" if it has either (as given: the board checks them),
               else `"auth": false` written explicitly (an unsigned board, as before issue 6)
  key="auto"   a random 32-byte key (os.urandom), written as "key": "<64 hex digits>"
  key="<hex>"  that key (32..128 hex digits), written as "key"
  key=False    neither key nor auth (an unprovisioned board: it says so and answers nothing)
`VirtualBoard.key` is the key as hex (None: auth off). It is a secret: never printed by the
launcher (`leadwire board` prints it only when asked, --key auto, for the operator).
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import termios
import threading
import time
import tty
from pathlib import Path
from typing import Any

import click

from leadwire.tools.firmware_build import build, tool

TRANSPORTS = ("udp", "serial", "both", "repl")
READY = "leadwire: ready"
NOT_READY = "leadwire: not ready"  # the agent has no link (or could not boot): nothing can reach it


class BoardError(RuntimeError):
    """The virtual board did not come up (its console tells why)."""


class _Relay:
    """Two ptys joined back to back: the board's end (raw) and the host's end (`port`).

    The board's end also has VMIN = 0: MicroPython's readinto() on a blocking stream loops until the
    buffer is full; with VMIN = 0 a read returns what is there, as a UART with timeout=0 does.
    (Not for the REPL, which reads its stdin byte by byte and takes a 0-byte read as end of input.)
    """

    def __init__(self, nonblocking_board: bool = True) -> None:
        self.m_board, self.s_board = pty.openpty()
        self.m_host, self.s_host = pty.openpty()
        for fd in (self.s_board, self.s_host):
            tty.setraw(fd)
        if nonblocking_board:
            attrs = termios.tcgetattr(self.s_board)
            attrs[6][termios.VMIN] = 0
            attrs[6][termios.VTIME] = 0
            termios.tcsetattr(self.s_board, termios.TCSANOW, attrs)
        for fd in (self.m_board, self.m_host):
            os.set_blocking(fd, False)
        self.board_path = os.ttyname(self.s_board)
        self.port = os.ttyname(self.s_host)
        self.dropped = 0  # bytes the host side had no room for (nobody reading)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def read_board_until(self, marker: bytes, timeout: float) -> bytes:
        """Before the relay runs: read the board's output until `marker` (the REPL prompt)."""
        got = b""
        end = time.monotonic() + timeout
        while marker not in got and time.monotonic() < end:
            with contextlib.suppress(BlockingIOError, OSError):
                got += os.read(self.m_board, 4096)
            time.sleep(0.01)
        return got

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pty-relay", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self.m_board, selectors.EVENT_READ, self.m_host)
        sel.register(self.m_host, selectors.EVENT_READ, self.m_board)
        while not self._stop.is_set():
            for key, _ in sel.select(0.1):
                try:
                    data = os.read(key.fd, 65536)
                except (BlockingIOError, OSError):
                    continue
                dst = key.data
                while data:
                    try:
                        n = os.write(dst, data)
                    except BlockingIOError:
                        if dst == self.m_host:  # the host is not reading: drop, like a UART
                            self.dropped += len(data)
                            break
                        time.sleep(0.001)  # the board reads slowly: wait for it
                        if self._stop.is_set():
                            break
                        continue
                    except OSError:
                        break
                    data = data[n:]
        sel.close()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
        for fd in (self.m_board, self.s_board, self.m_host, self.s_host):
            with contextlib.suppress(OSError):
                os.close(fd)


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _load_config(config: dict[str, Any] | str | Path | None) -> dict[str, Any]:
    if config is None:
        return {}
    if isinstance(config, dict):
        return json.loads(json.dumps(config))
    try:
        cfg = json.loads(Path(config).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError("config %s: not valid JSON: %s" % (config, e)) from None
    if not isinstance(cfg, dict):
        raise ValueError("config %s: a JSON object is needed" % config)
    return cfg


class VirtualBoard:
    """A running virtual board. `info()` is the JSON line `leadwire board` prints."""

    def __init__(
        self,
        transport: str,
        board_dir: Path,
        heap: str,
        config: dict[str, Any],
        udp_port: int | None,
        relay: _Relay | None,
        key: str | None = None,
    ) -> None:
        self.transport = transport
        self.key = key  # the board's auth key as hex (a secret), None when auth is off
        self.dir = board_dir
        self.heap = heap
        self.config = config
        self.udp_port = udp_port
        self.relay = relay
        self.proc: subprocess.Popen[bytes] | None = None
        self._console_at = 0

    # -- what the host uses ------------------------------------------------------------------

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def address(self) -> tuple[str, int] | None:
        return ("127.0.0.1", self.udp_port) if self.udp_port else None

    @property
    def port(self) -> str | None:
        return self.relay.port if self.relay else None

    def info(self) -> dict[str, Any]:
        d: dict[str, Any] = {"transport": self.transport}
        if self.address:
            d["address"] = "%s:%d" % self.address
        if self.port:
            d["port"] = self.port
        d["pid"] = self.pid
        d["dir"] = str(self.dir)
        return d

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def console(self) -> str:
        """Everything the board printed in this boot (its serial console)."""
        path = self.dir / "console.log"
        if not path.exists():
            return ""
        with path.open("rb") as f:
            f.seek(self._console_at)
            return f.read().decode(errors="replace")

    # -- power -------------------------------------------------------------------------------

    def power_on(self, timeout: float = 20.0) -> None:
        """Start the interpreter on the board directory and wait until the agent is ready."""
        # modules are found relative to the board directory (short names: each costs heap)
        env = {"MICROPYPATH": ".frozen:", "PATH": "/usr/bin:/bin", "HOME": str(self.dir)}
        cmd = [tool("micropython"), "-X", "heapsize=" + self.heap]
        if self.transport == "repl":
            assert self.relay is not None
            self.proc = subprocess.Popen(
                cmd,
                cwd=self.dir,
                env=env,
                stdin=self.relay.s_board,
                stdout=self.relay.s_board,
                stderr=self.relay.s_board,
                start_new_session=True,
            )
            got = self.relay.read_board_until(b">>> ", timeout)
            if b">>> " not in got:
                self.power_off()
                raise BoardError("no REPL prompt from the virtual board: %r" % got[-200:])
            self.relay.start()
            return
        log = self.dir / "console.log"
        self._console_at = log.stat().st_size if log.exists() else 0
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*cmd, "main.py"],
                cwd=self.dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            text = self.console()
            if READY in text:
                # where the board really listens (a config it could not read leaves it on the
                # default port, not on the one the launcher wrote): the banner says "udp:PORT"
                m = re.search(r" links .*\budp:(\d+)", text)
                self.udp_port = int(m.group(1)) if m else None
                return
            if NOT_READY in text or self.proc.poll() is not None:
                break
            time.sleep(0.02)
        text = self.console()
        self.power_off()
        if NOT_READY in text:
            raise BoardError("virtual board is not ready:\n" + text)
        raise BoardError("virtual board did not start:\n" + text)

    def power_off(self) -> None:
        """Power cut: SIGKILL, no shutdown of any kind."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait(5)

    def restart(self, timeout: float = 20.0) -> None:
        """Power cut then power on: a reboot (same directory, same UDP port, same serial port)."""
        self.power_off()
        self.power_on(timeout)

    def close(self) -> None:
        self.power_off()
        if self.relay is not None:
            self.relay.close()

    def __enter__(self) -> VirtualBoard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "VirtualBoard(%s, %s, auth %s)" % (self.transport, self.dir, "on" if self.key else "off")


def apply_key(cfg: dict[str, Any], key: str | bool | None) -> str | None:
    """Set the auth choice in the device config `cfg` (in place) for start_board(key=...); returns
    the key as hex, or None when auth is off (or the config's own choice is not a valid key: the
    board says so on its console). ValueError (never naming the key) for a bad `key` argument."""
    from leadwire import auth

    if key is False:  # an unprovisioned board: neither key nor auth (it says so and answers nothing)
        cfg.pop("key", None)
        cfg.pop("auth", None)
        return None
    if key is None or key is True:
        if "key" not in cfg and "auth" not in cfg:
            cfg["auth"] = False  # explicitly off
            return None
        k = cfg.get("key")  # the config's own choice, as given (the board checks it)
        if cfg.get("auth") is False or not isinstance(k, str):
            return None
        try:
            auth.parse_key(k)
        except ValueError:
            return None
        return k.strip().lower()
    if key == "auto":
        key = os.urandom(32).hex()
    auth.parse_key(key)
    cfg.pop("auth", None)
    cfg["key"] = key.strip().lower()
    return str(cfg["key"])


def start_board(
    transport: str = "udp",
    *,
    heap: str = "64K",
    config: dict[str, Any] | str | Path | None = None,
    board_dir: str | Path | None = None,
    build_firmware: bool = True,
    udp_port: int | None = None,
    timeout: float = 20.0,
    key: str | bool | None = None,
) -> VirtualBoard:
    """Build (unless `build_firmware` is False) and power on a virtual board; returns when ready.

    `config` is the device config (dict or JSON file); the launcher adds the link settings
    (loopback UDP port, pty path). `board_dir` is the board's flash (a new temporary directory if
    None; reuse it to reboot the same board). `key`: None, "auto" or hex (module docstring); the
    board's `.key`. The caller owns the board: close() it.
    """
    if transport not in TRANSPORTS:
        raise ValueError("transport must be one of %s" % ", ".join(TRANSPORTS))
    d = Path(board_dir) if board_dir else Path(tempfile.mkdtemp(prefix="leadwire-board-"))
    d.mkdir(parents=True, exist_ok=True)
    if config is None and (d / "config.json").exists() and transport != "repl":
        config = d / "config.json"  # the board's own (flashed) config; the link settings are added
    cfg = _load_config(config)
    hexkey = apply_key(cfg, key) if transport != "repl" else None
    if build_firmware and transport != "repl":
        build("unix", d)
    relay = _Relay(transport != "repl") if transport in ("serial", "both", "repl") else None
    tries = 5 if transport in ("udp", "both") and udp_port is None else 1
    for attempt in range(tries):
        port = None
        if transport in ("udp", "both"):
            port = udp_port or free_udp_port()
            u = cfg.get("udp") if isinstance(cfg.get("udp"), dict) else {}
            cfg["udp"] = {**u, "port": port, "bind": "127.0.0.1"}
        elif transport == "serial":
            cfg["udp"] = False
        if relay is not None and transport != "repl":
            s = cfg.get("serial") if isinstance(cfg.get("serial"), dict) else {}
            cfg["serial"] = {**s, "path": relay.board_path}
        else:
            cfg["serial"] = False
        if transport != "repl":
            (d / "config.json").write_text(json.dumps(cfg, indent=1))
        board = VirtualBoard(transport, d, heap, cfg, port, relay, hexkey)
        try:
            board.power_on(timeout)
        except BoardError as e:
            if port is not None and "udp: cannot open (port %d)" % port in str(e) and attempt + 1 < tries:
                continue  # the free port was taken in between: another one
            if relay is not None:
                relay.close()
            raise
        if relay is not None and transport != "repl":
            relay.start()
        return board
    raise BoardError("no free UDP port")  # pragma: no cover


def _heap_size(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if not re.fullmatch(r"[1-9][0-9]*[KkMm]?", value or ""):
        raise click.BadParameter("a size such as 64K, 256K or 1M, got %r" % value)
    return value


@click.command()
@click.option("--transport", type=click.Choice(TRANSPORTS), default="udp", show_default=True)
@click.option("--heap", default="64K", show_default=True, callback=_heap_size,
              help="MicroPython heap size (a board's RAM), e.g. 64K.")
@click.option("--config", type=click.Path(exists=True, dir_okay=False), help="Device config (JSON).")
@click.option("--dir", "board_dir", type=click.Path(file_okay=False), help="Board directory (its flash).")
@click.option("--port", "udp_port", type=click.IntRange(1, 65535), help="UDP port (default: a free one).")
@click.option("--no-build", is_flag=True, help="Run the firmware already in --dir (after `leadwire flash`).")
@click.option(
    "--key",
    metavar="HEX|auto",
    help='Auth key (32..128 hex digits), or auto: a random one, printed in the JSON line as "key". '
    "Default: the config's key / auth, else auth off.",
)
def board(
    transport: str,
    heap: str,
    config: str | None,
    board_dir: str | None,
    udp_port: int | None,
    no_build: bool,
    key: str | None,
) -> None:
    """Run a virtual board; print one JSON line when it is ready; run until it is killed."""
    try:
        b = start_board(
            transport,
            heap=heap,
            config=config,
            board_dir=board_dir,
            build_firmware=not no_build,
            udp_port=udp_port,
            key=key,
        )
    except (BoardError, FileNotFoundError, ValueError, json.JSONDecodeError) as e:
        raise click.ClickException(str(e)) from e
    info = b.info()
    if key == "auto":
        info["key"] = b.key  # the operator asked for a new key: shown once, here only
    print(json.dumps(info), flush=True)
    if transport != "repl":
        print("console: %s" % (b.dir / "console.log"), file=sys.stderr, flush=True)

    def stop(*_: object) -> None:
        b.close()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    assert b.proc is not None
    code = b.proc.wait()
    b.close()
    if board_dir is None and transport != "repl":
        shutil.rmtree(b.dir, ignore_errors=True)
    sys.exit(0 if code in (0, -signal.SIGKILL) else code)
