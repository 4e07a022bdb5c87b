"""A bench that cannot run on this machine installs nothing: it says in one line what is missing and
exits 2 (tools/testbed.py cannot_run, need_command, need_tool); tests/bench skip on that line."""

from __future__ import annotations

import subprocess
import sys

CODE = "from leadwire.tools import testbed; testbed.%s"


def _run(call: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CODE % call], capture_output=True, text=True, timeout=60)


def test_need_command_missing_says_what_to_install_and_exits_2() -> None:
    r = _run('need_command("lw-no-such-command", "lw-no-such-package")')
    assert r.returncode == 2
    assert r.stderr == "-c: `lw-no-such-command` is missing: apt-get install lw-no-such-package\n"


def test_need_tool_missing_exits_2_with_one_line() -> None:
    r = _run('need_tool("lw-no-such-tool")')
    assert r.returncode == 2
    assert r.stderr == "-c: the `lw-no-such-tool` command is missing (pip install 'leadwire[dev]')\n"


def test_need_command_present_returns_its_path() -> None:
    r = _run('need_command("sh", "dash"); print("ok")')
    assert (r.returncode, r.stdout, r.stderr) == (0, "ok\n", "")
