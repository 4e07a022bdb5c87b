from __future__ import annotations

import pytest
from click.testing import CliRunner

from leadwire.cli import COMMANDS, main


def test_help_lists_every_command() -> None:
    r = CliRunner().invoke(main, ["--help"])
    assert r.exit_code == 0
    for name in COMMANDS:
        assert name in r.output


@pytest.mark.parametrize("seed", [1, 2, 3, 9, 29])
def test_core_demo_accounts_for_every_event(seed: int) -> None:
    r = CliRunner().invoke(main, ["demo", "--core", "--seed", str(seed), "--events", "3000"])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[-1] == "result: OK - nothing lost silently, nothing stored twice"
    assert "stored twice: 0" in r.output and "restarts detected 1" in r.output


def test_core_demo_bad_option_is_one_line_and_exit_2() -> None:
    r = CliRunner().invoke(main, ["demo", "--core", "--events", "-5"])
    assert r.exit_code == 2
    assert "Invalid value for '--events'" in r.output


def test_demo_needs_something_to_run() -> None:
    r = CliRunner().invoke(main, ["demo", "--boards", "0", "--simulated", "0"])
    assert r.exit_code == 2
    assert "nothing to run" in r.output
