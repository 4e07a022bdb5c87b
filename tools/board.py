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

Authentication: start_board(key=...) decides what the board's config.json says:
  key=None     the config's own "key" / "auth" if it has either (as given: the board checks them),
               else `"auth": false` written explicitly (an unsigned board)
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

from leadwire.tools.board_config import check_file
from leadwire.tools.firmware_build import build, tool

TRANSPORTS = ("udp", "serial", "both", "repl")
READY = "leadwire: ready"
NOT_READY = "leadwire: not ready"  # the agent has no link (or could not boot): nothing can reach it


class BoardError(RuntimeError):
    """The virtual board did not come up (its console tells why)."""


class _Stop(Exception):
    """SIGTERM or SIGINT while the launcher starts a board."""


class _Spawning:
    """While a board process is spawned and recorded, `leadwire board`'s stop signal waits: a _Stop
    raised inside Popen would lose the child (left running). The signal is acted on right after."""

    active = False
    pending = False

    def __enter__(self) -> None:
        _Spawning.active = True

    def __exit__(self, *exc: object) -> None:
        _Spawning.active = False
        if _Spawning.pending and exc[0] is None:
            _Spawning.pending = False
            raise _Stop


class _Relay:
    """Two ptys joined back to back: the board's end (raw) and the host's end (`port`). (For the
    emulated Pico the board's end is a socket to the emulator instead of a pty.)

    The board's end also has VMIN = 0: MicroPython's readinto() on a blocking stream loops until the
    buffer is full; with VMIN = 0 a read returns what is there, as a UART with timeout=0 does.
    (Not for the REPL, which reads its stdin byte by byte and takes a 0-byte read as end of input.)
    """

    def __init__(
        self, nonblocking_board: bool = True, board_fd: int | None = None, tee: Path | None = None
    ) -> None:
        # board_fd: the board's end is that stream (the emulated Pico's socket), not a pty of ours;
        # tee: a file that gets a copy of everything the board sends (its console log)
        self.m_host, self.s_host = pty.openpty()
        if board_fd is None:
            self.m_board, self.s_board = pty.openpty()
        else:
            self.m_board, self.s_board = board_fd, -1
        self._tee = tee.open("ab") if tee is not None else None
        for fd in (self.s_board, self.s_host):
            if fd >= 0:
                tty.setraw(fd)
        if nonblocking_board and board_fd is None:
            attrs = termios.tcgetattr(self.s_board)
            attrs[6][termios.VMIN] = 0
            attrs[6][termios.VTIME] = 0
            termios.tcsetattr(self.s_board, termios.TCSANOW, attrs)
        for fd in (self.m_board, self.m_host):
            os.set_blocking(fd, False)
        self.board_path = os.ttyname(self.s_board) if self.s_board >= 0 else ""
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
                if not data:  # the board's stream ended (the emulator exited)
                    sel.unregister(key.fd)
                    continue
                dst = key.data
                if self._tee is not None and key.fd == self.m_board:
                    self._tee.write(data)
                    self._tee.flush()
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
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        if self._tee is not None:
            self._tee.close()


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


def _console_since(board_dir: Path, at: int) -> str:
    """The board directory's console.log from byte `at` on ("" before the board wrote one)."""
    path = board_dir / "console.log"
    if not path.exists():
        return ""
    with path.open("rb") as f:
        f.seek(at)
        return f.read().decode(errors="replace")


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
        self.temporary = False  # the launcher made `dir`: close() removes it

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
        return _console_since(self.dir, self._console_at)

    # -- power -------------------------------------------------------------------------------

    def power_on(self, timeout: float = 20.0) -> None:
        """Start the interpreter on the board directory and wait until the agent is ready."""
        # modules are found relative to the board directory (short names: each costs heap)
        env = {"MICROPYPATH": ".frozen:", "PATH": "/usr/bin:/bin", "HOME": str(self.dir)}
        cmd = [tool("micropython"), "-X", "heapsize=" + self.heap]
        if self.transport == "repl":
            assert self.relay is not None
            with _Spawning():
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
        with log.open("ab") as out, _Spawning():
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
        if self.temporary:
            shutil.rmtree(self.dir, ignore_errors=True)

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
    from leadwire import auth_host as auth

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
    None, removed by close(); reuse a directory of your own to reboot the same board). `key`: None,
    "auto" or hex (module docstring); the board's `.key`. The caller owns the board: close() it.
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
        board.temporary = board_dir is None
        try:
            board.power_on(timeout)
        except BoardError as e:
            if port is not None and "udp: cannot open (port %d)" % port in str(e) and attempt + 1 < tries:
                continue  # the free port was taken in between: another one
            if relay is not None:
                relay.close()
            raise
        except BaseException:  # stopped while starting (the launcher's SIGTERM): nothing left running
            board.close()
            raise
        if relay is not None and transport != "repl":
            relay.start()
        return board
    raise BoardError("no free UDP port")  # pragma: no cover


# -- the emulated Raspberry Pi Pico ---------------------------------------------------------------

PICO_DIR = Path(__file__).resolve().parent / "pico"  # the Node harness (tools/pico/pico.mjs)
PICO_CACHE = Path.home() / ".cache" / "leadwire" / "firmware"
PICO_UF2_ENV, PICO_BOOTROM_ENV = "LEADWIRE_PICO_UF2", "LEADWIRE_PICO_BOOTROM"
PICO_UF2_NAME, PICO_BOOTROM_NAME = "RPI_PICO-v1.26.1.uf2", "rp2040-b1-bootrom.bin"
PICO_W_UF2_ENV, PICO_W_UF2_NAME = "LEADWIRE_PICO_W_UF2", "RPI_PICO_W-v1.26.1.uf2"
# The emulated Pico W's network (tools/pico/wifi_ap.mjs): the access point the launcher starts when
# the board config has no "wlan" section, and the router's address: UDP the board sends to it
# leaves as a datagram to 127.0.0.1 on the same port (a NAT), and the board's forwarded port is
# reached at the host address in the launcher's JSON line.
PICO_W_SSID, PICO_W_KEY = "leadwire-emu", "leadwire-emu-key"
PICO_W_ROUTER = "192.168.4.1"


def pico_files(
    firmware: str | Path | None = None, bootrom: str | Path | None = None, wifi: bool = False
) -> tuple[Path, Path]:
    """The RPI_PICO UF2 (`wifi`: RPI_PICO_W) and the RP2040 boot ROM: as given, else
    $LEADWIRE_PICO_UF2 ($LEADWIRE_PICO_W_UF2) / $LEADWIRE_PICO_BOOTROM, else
    ~/.cache/leadwire/firmware/. FileNotFoundError (one line naming what to download) when one is
    missing."""
    env, name, board = (
        (PICO_W_UF2_ENV, PICO_W_UF2_NAME, "RPI_PICO_W") if wifi else (PICO_UF2_ENV, PICO_UF2_NAME, "RPI_PICO")
    )
    uf2 = Path(firmware or os.environ.get(env) or PICO_CACHE / name)
    rom = Path(bootrom or os.environ.get(PICO_BOOTROM_ENV) or PICO_CACHE / PICO_BOOTROM_NAME)
    if not uf2.is_file():
        raise FileNotFoundError(
            "no MicroPython firmware at %s: download the %s UF2 (v1.26.1) from "
            "micropython.org/download/%s and give --firmware or $%s" % (uf2, board, board, env)
        )
    if not rom.is_file():
        raise FileNotFoundError(
            "no RP2040 boot ROM at %s: take the B1 ROM from rp2040js's repository (demo/bootrom.ts, "
            "as a 16 KiB binary) and give --bootrom or $%s" % (rom, PICO_BOOTROM_ENV)
        )
    return uf2, rom


def pico_missing(
    firmware: str | Path | None = None, bootrom: str | Path | None = None, wifi: bool = False
) -> str | None:
    """Why an emulated Pico (`wifi`: Pico W) cannot run here (one line naming what to get), or None."""
    try:
        pico_files(firmware, bootrom, wifi)
    except FileNotFoundError as e:
        return str(e)
    if shutil.which("node") is None:
        return "the emulated Pico needs Node.js >= 18 (`node`): apt-get install nodejs npm"
    if not (PICO_DIR / "node_modules" / "rp2040js").is_dir():
        return "the emulated Pico needs its npm packages: npm ci --prefix tools/pico"
    return None


class PicoBoard:
    """An emulated Raspberry Pi Pico: the official MicroPython rp2 firmware on rp2040js (Node, in
    tools/pico), its USB REPL and UART0 (GP0/GP1) each on a pty, its flash's filesystem in
    `dir/flash-fs.bin` (kept across resets, power cycles and launches on the same directory).

    The emulator reboots in its process on machine.reset() or the watchdog; `restart()` is a power
    cycle (a fresh chip, same flash). Both keep the pty paths. Everything the REPL prints goes to
    `dir/console.log` as well (`console()`), so the agent's "leadwire: ready" is seen as on the unix
    boards. Time on the board is the emulator's: it never runs ahead of the wall clock and falls
    behind it when the CPU is busy (~0.4x); `clock()` gives the board's nanoseconds and CPU cycles.

    With `wifi` ({"ssid", "key", "port", "lease" (DHCP, s: 3600)}) it is a Pico W (RPI_PICO_W
    image): an emulated CYW43439 and an access point with that SSID and key; the board's UDP `port`
    is forwarded from a host port on 127.0.0.1 (`address`: what a bridge polls), and UDP the board
    sends to PICO_W_ROUTER:P reaches 127.0.0.1:P. `ap()` and `lease_end()` are the network's faults.
    """

    transport = "serial"  # what the host polls: UART0 (a Pico W: UDP too, at `address`)
    key: str | None = None  # auth is whatever `leadwire flash` wrote into the board's config.json
    udp_port = None

    def __init__(
        self,
        board_dir: Path,
        firmware: Path,
        bootrom: Path,
        speed: float = 1.0,
        wifi: dict[str, Any] | None = None,
    ) -> None:
        self.dir = board_dir
        self.firmware, self.bootrom, self.speed = firmware, bootrom, speed
        self.wifi = wifi
        self.kind = "pico-w" if wifi else "pico"
        self.address: tuple[str, int] | None = None
        uid = board_dir / "uid"  # the flash chip's unique id: machine.unique_id(), one per board
        if not uid.exists():
            uid.write_text(os.urandom(8).hex())
        self.uid = uid.read_text().strip()
        self.proc: subprocess.Popen[bytes] | None = None
        self._repl: _Relay | None = None
        self._uart: _Relay | None = None
        self._events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._console_at = 0
        self.temporary = False  # the launcher made `dir`: close() removes it

    @property
    def port(self) -> str | None:
        return self._uart.port if self._uart else None

    @property
    def repl(self) -> str | None:
        return self._repl.port if self._repl else None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def info(self) -> dict[str, Any]:
        out = {
            "kind": self.kind,
            "transport": "serial",
            "port": self.port,
            "repl": self.repl,
            "pid": self.pid,
            "dir": str(self.dir),
        }
        if self.wifi and self.address:
            out.update(
                transport="udp",
                address="%s:%d" % self.address,
                wlan={"ssid": self.wifi["ssid"], "key": self.wifi["key"]},
            )
        return out

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def console(self) -> str:
        """What the board printed on its REPL since the last (re)boot this object started."""
        return _console_since(self.dir, self._console_at)

    def _mark(self) -> None:
        log = self.dir / "console.log"
        self._console_at = log.stat().st_size if log.exists() else 0

    def _read_events(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                ev = json.loads(line)
                with self._cond:
                    self._events.append(ev)
                    self._cond.notify_all()
        with self._cond:
            self._events.append({"event": "exit"})
            self._cond.notify_all()

    def _wait_event(self, pred: Any, timeout: float, start: int = 0) -> dict[str, Any] | None:
        end = time.monotonic() + timeout
        with self._cond:
            while True:
                for ev in self._events[start:]:
                    if pred(ev):
                        return ev
                    if ev.get("event") == "exit":
                        return None
                left = end - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def power_on(self, timeout: float = 30.0, agent: bool = False) -> None:
        """Start the emulator; return when the USB REPL is up (`agent`: and the agent is ready)."""
        node = shutil.which("node")
        if node is None:
            raise BoardError("the emulated Pico needs Node.js (`node`)")
        repl_a, repl_b = socket.socketpair()
        uart_a, uart_b = socket.socketpair()
        self._mark()
        self._repl = _Relay(board_fd=os.dup(repl_a.fileno()), tee=self.dir / "console.log")
        self._uart = _Relay(board_fd=os.dup(uart_a.fileno()))
        repl_a.close()
        uart_a.close()
        cmd = [
            node,
            str(PICO_DIR / "pico.mjs"),
            "--firmware",
            str(self.firmware),
            "--bootrom",
            str(self.bootrom),
            "--repl-fd",
            str(repl_b.fileno()),
            "--uart0-fd",
            str(uart_b.fileno()),
            "--fs-image",
            str(self.dir / "flash-fs.bin"),
            "--uid",
            self.uid,
            "--speed",
            str(self.speed),
        ]
        if self.wifi:
            w = self.wifi
            cmd += [
                "--wifi-ssid",
                w["ssid"],
                "--wifi-key",
                w["key"],
                "--udp-forward",
                str(w.get("port", 4210)),
                "--lease",  # DHCP lease seconds
                str(w.get("lease", 3600)),
            ]
        with (self.dir / "emulator.log").open("ab") as err, _Spawning():
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                pass_fds=(repl_b.fileno(), uart_b.fileno()),
                start_new_session=True,
            )
        repl_b.close()
        uart_b.close()
        self._repl.start()
        self._uart.start()
        threading.Thread(target=self._read_events, name="pico-events", daemon=True).start()
        self._await_boot(0, timeout, agent)

    def _await_boot(self, start: int, timeout: float, agent: bool) -> None:
        end = time.monotonic() + timeout
        if self._wait_event(lambda ev: ev.get("event") == "usb", timeout, start) is None:
            self.close()
            raise BoardError("the emulated Pico did not start (see %s)" % (self.dir / "emulator.log"))
        if self.wifi and self.address is None:
            ev = self._wait_event(lambda e: e.get("event") == "wifi", end - time.monotonic())
            if ev is None:
                raise BoardError(
                    "the emulated Pico W's network did not start (see %s)" % (self.dir / "emulator.log")
                )
            host, port = next(iter(ev["forwards"].values())).rsplit(":", 1)
            self.address = (host, int(port))
        if agent:
            self.wait_ready(end - time.monotonic())

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait for the agent's "leadwire: ready" on the console of this boot (BoardError if it says
        it is not ready, or says nothing in time)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            text = self.console()
            if READY in text:
                return
            if NOT_READY in text or not self.alive():
                break
            time.sleep(0.05)
        raise BoardError("emulated Pico: the agent is not ready:\n" + self.console()[-2000:])

    def _command(self, cmd: str) -> int:
        assert self.proc is not None and self.proc.stdin is not None
        with self._cond:
            n = len(self._events)
        self.proc.stdin.write(cmd.encode() + b"\n")
        self.proc.stdin.flush()
        return n

    def restart(self, timeout: float = 30.0, agent: bool = True) -> None:
        """Power cycle: a fresh chip on the same flash (the ptys stay); waits for the agent."""
        self._mark()
        n = self._command("power")
        self._await_boot(n, timeout, agent)

    def reset_wait(self, start: int, timeout: float = 30.0, agent: bool = True) -> None:
        """After something on the board reset it (machine.reset(), `mpremote reset`): wait for the
        boot after event number `start` (`events()` before the reset)."""
        self._mark()
        self._await_boot(start, timeout, agent)

    def events(self) -> int:
        with self._cond:
            return len(self._events)

    def wlan_events(self, start: int = 0) -> list[dict[str, Any]]:
        """What the Pico W's access point saw since event number `start`: {"event": "wlan", "what":
        "join" | "badauth" | "dhcp-ack" | "dhcp-nak" | "ap-off" | "ap-on" | "leases-ended", ...}."""
        with self._cond:
            return [e for e in self._events[start:] if e.get("event") == "wlan"]

    def wait_wlan(self, what: str, timeout: float, start: int = 0) -> dict[str, Any] | None:
        """The first access point event `what` after event number `start` (None: not in time)."""
        return self._wait_event(lambda e: e.get("event") == "wlan" and e.get("what") == what, timeout, start)

    def ap(self, on: bool) -> int:
        """Pico W: the access point off (stations lose the link) or on again; the event number before."""
        return self._command("ap on" if on else "ap off")

    def lease_end(self) -> int:
        """Pico W: every DHCP lease ends (the next renewal is refused); the event number before."""
        return self._command("lease-end")

    def _ask(self, cmd: str, answer: str, timeout: float) -> dict[str, Any]:
        """Send the emulator `cmd`; its answer, the next event named `answer`."""
        n = self._command(cmd)
        ev = self._wait_event(lambda e: e.get("event") == answer, timeout, n)
        if ev is None:
            raise BoardError("the emulated Pico does not answer")
        return ev

    def wifi_stats(self, timeout: float = 10.0) -> dict[str, Any]:
        """Pico W: the access point's and the chip's counters."""
        return self._ask("wifi", "wifi-stats", timeout)

    def clock(self, timeout: float = 10.0) -> dict[str, Any]:
        """The board's clock: {"nanos": emulated ns since power-on, "cycles": CPU cycles, ...}."""
        return self._ask("clock", "clock", timeout)

    def set_speed(self, factor: float, timeout: float = 10.0) -> None:
        """From now on (also across power cycles) the board's clock runs at most `factor` x the wall
        clock (1: real time, the default): an idle board jumps to its next timer within that."""
        self._ask("speed %g" % factor, "speed", timeout)

    def adc(self, channel: int, values: list[int], timeout: float = 10.0) -> None:
        """The next reads of ADC `channel` (0..4; 4: the temperature sensor) give these 12-bit
        values in order, then the last one for good."""
        self._ask("adc %d %s" % (channel, " ".join(str(v) for v in values)), "adc", timeout)

    def power_off(self) -> None:
        """Stop the emulator (its filesystem image is saved first; SIGKILL after 1 s)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(1)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc is not None and self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()

    def close(self) -> None:
        self.power_off()
        for r in (self._repl, self._uart):
            if r is not None:
                r.close()
        if self.temporary:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PicoBoard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def pico_w_network(config: dict[str, Any]) -> dict[str, Any]:
    """The emulated Pico W's network for a board config: its "wlan" ssid and key (the launcher's
    own, PICO_W_SSID / PICO_W_KEY, where it has none) and its UDP port (forwarded from the host)."""
    w = config.get("wlan") if isinstance(config.get("wlan"), dict) else {}
    udp = config.get("udp") if isinstance(config.get("udp"), dict) else {}
    if w.get("ssid"):
        return {"ssid": str(w["ssid"]), "key": str(w.get("key") or ""), "port": int(udp.get("port", 4210))}
    return {"ssid": PICO_W_SSID, "key": PICO_W_KEY, "port": int(udp.get("port", 4210))}


def start_pico(
    board_dir: str | Path | None = None,
    firmware: str | Path | None = None,
    bootrom: str | Path | None = None,
    *,
    speed: float = 1.0,
    timeout: float = 30.0,
    agent: bool = False,
    wifi: dict[str, Any] | None = None,
) -> PicoBoard:
    """Start an emulated Pico on `board_dir` (its flash; if None a temporary directory that close()
    removes); returns when its USB REPL is up (`agent`: when the flashed agent says ready). `wifi`
    ({"ssid", "key", "port"}): a Pico W (see PicoBoard). The caller closes it."""
    uf2, rom = pico_files(firmware, bootrom, bool(wifi))
    missing = pico_missing(uf2, rom, bool(wifi))
    if missing:
        raise BoardError(missing)
    d = Path(board_dir) if board_dir else Path(tempfile.mkdtemp(prefix="leadwire-pico-"))
    d.mkdir(parents=True, exist_ok=True)
    b = PicoBoard(d, uf2, rom, speed, wifi)
    b.temporary = board_dir is None
    try:
        b.power_on(timeout, agent)
    except BaseException:
        b.close()
        raise
    return b


def _heap_size(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if not re.fullmatch(r"[1-9][0-9]*[KkMm]?", value or ""):
        raise click.BadParameter("a size such as 64K, 256K or 1M, got %r" % value)
    return value


@click.command()
@click.option(
    "--kind",
    type=click.Choice(["unix", "pico", "pico-w"]),
    default="unix",
    show_default=True,
    help="unix: the firmware on the MicroPython unix port; pico: an emulated Raspberry Pi Pico "
    "running the official MicroPython rp2 UF2 (flash it with `leadwire flash --board rp2`); pico-w: "
    "an emulated Pico W (RPI_PICO_W UF2) with an access point and a UDP NAT on 127.0.0.1 (--config: "
    "the board config whose wlan ssid/key and udp port the network uses; else its own, in the JSON line).",
)
@click.option(
    "--transport",
    type=click.Choice(TRANSPORTS),
    default="udp",
    show_default=True,
    help="unix boards: the link(s) (a pico has its REPL and UART0).",
)
@click.option(
    "--heap",
    default="64K",
    show_default=True,
    callback=_heap_size,
    help="MicroPython heap size (a board's RAM), e.g. 64K.",
)
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
@click.option(
    "--firmware",
    type=click.Path(dir_okay=False),
    help="pico: the RPI_PICO .uf2 (default $%s, else ~/.cache/leadwire/firmware/%s); pico-w: the "
    "RPI_PICO_W .uf2 (default $%s, else ~/.cache/leadwire/firmware/%s)."
    % (PICO_UF2_ENV, PICO_UF2_NAME, PICO_W_UF2_ENV, PICO_W_UF2_NAME),
)
@click.option(
    "--bootrom",
    type=click.Path(dir_okay=False),
    help="pico: the RP2040 B1 boot ROM, 16 KiB (default $%s, else ~/.cache/leadwire/firmware/%s)."
    % (PICO_BOOTROM_ENV, PICO_BOOTROM_NAME),
)
def board(
    kind: str,
    transport: str,
    heap: str,
    config: str | None,
    board_dir: str | None,
    udp_port: int | None,
    no_build: bool,
    key: str | None,
    firmware: str | None,
    bootrom: str | None,
) -> None:
    """Run a virtual board; print one JSON line when it is ready; run until it is killed (its pid: a
    power cut) or stopped (SIGTERM / Ctrl-C: the board stops, exit 0)."""
    stopping = threading.Event()

    def stop(*_: object) -> None:
        if not stopping.is_set():
            stopping.set()
            if _Spawning.active:  # acted on once the board process is recorded
                _Spawning.pending = True
                return
            raise _Stop  # while starting: abandon the start (its processes are stopped)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    b: VirtualBoard | PicoBoard
    try:
        if kind == "pico":
            if config or no_build or key or udp_port or heap != "64K" or transport != "udp":
                raise click.UsageError(
                    "--kind pico takes --dir, --firmware and --bootrom only (its config.json comes from "
                    "`leadwire flash --board rp2 --config FILE`)"
                )
            b = start_pico(board_dir, firmware, bootrom)
        elif kind == "pico-w":
            if no_build or key or udp_port or heap != "64K" or transport != "udp":
                raise click.UsageError(
                    "--kind pico-w takes --dir, --config, --firmware and --bootrom only (its config.json "
                    "comes from `leadwire flash --board rp2 --config FILE`)"
                )
            if config:
                check_file(config)
            b = start_pico(board_dir, firmware, bootrom, wifi=pico_w_network(_load_config(config)))
        else:
            if firmware or bootrom:
                raise click.UsageError("--firmware and --bootrom are for --kind pico and pico-w")
            if config:  # unknown keys and wrong types: refused before the board directory is made
                check_file(config)
            b = start_board(
                transport,
                heap=heap,
                config=config,
                board_dir=board_dir,
                build_firmware=not no_build,
                udp_port=udp_port,
                key=key,
            )
    except _Stop:
        sys.exit(0)
    except (BoardError, FileNotFoundError, ValueError, json.JSONDecodeError) as e:
        raise click.ClickException(str(e)) from e
    # from here a signal only asks the loop below to stop (never an exception inside Popen.wait)
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    info = b.info()
    if b.udp_port:
        info["udp_port"] = b.udp_port
    if key == "auto":
        info["key"] = b.key  # the operator asked for a new key: shown once, here only
    print(json.dumps(info), flush=True)
    if kind.startswith("pico") or transport != "repl":
        print("console: %s" % (b.dir / "console.log"), file=sys.stderr, flush=True)
    while b.alive() and not stopping.wait(0.1):
        pass
    assert b.proc is not None
    code = b.proc.poll()
    b.close()  # a directory the launcher made goes with it
    if stopping.is_set():
        sys.exit(0)
    sys.exit(0 if code in (0, -signal.SIGKILL) else code)
