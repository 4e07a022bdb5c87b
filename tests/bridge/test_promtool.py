"""The shipped alert rules (docs/alerts/leadwire.rules.yml): valid, their unit tests pass under
`promtool test rules`, and every metric they read is one the bridge exposes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from .metric_names import exposed, used

pytestmark = pytest.mark.timeout(60)

ALERTS = Path(__file__).resolve().parents[2] / "docs" / "alerts"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian package prometheus; .ci/run installs it)"
)


def promtool(*args: str, cwd: Path = ALERTS) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=30)


@needs_promtool
def test_rules_are_valid() -> None:
    p = promtool("check", "rules", "leadwire.rules.yml")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SUCCESS: 5 rules found" in p.stdout


@needs_promtool
def test_rules_fire_as_their_unit_tests_say() -> None:
    """Unreachable for 2 m fires, up does not; >1% loss for 15 m fires, a 5-minute burst does not;
    5 restarts in an hour fire, 1 does not; p99 commit > 250 ms for 10 m fires, < 100 ms does not."""
    p = promtool("test", "rules", "leadwire.rules.test.yml")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.split() == ["Unit", "Testing:", "leadwire.rules.test.yml", "SUCCESS"]


@needs_promtool
def test_a_broken_expectation_fails(tmp_path: Path) -> None:
    """The unit tests can fail: expecting the unreachable alert for the device that stays up."""
    shutil.copy(ALERTS / "leadwire.rules.yml", tmp_path)
    text = (ALERTS / "leadwire.rules.test.yml").read_text()
    label = "exp_labels: {severity: warning, instance: b1, device: %s}"
    bad = text.replace(label % "a", label % "b", 1)
    assert bad != text
    (tmp_path / "t.yml").write_text(bad)
    p = subprocess.run(
        [PROMTOOL, "test", "rules", "t.yml"], cwd=tmp_path, capture_output=True, text=True, timeout=30
    )
    assert p.returncode == 1 and "FAILED" in p.stdout + p.stderr


def test_every_metric_in_the_rules_is_exposed(tmp_path: Path) -> None:
    names = exposed(tmp_path)
    rules = used((ALERTS / "leadwire.rules.yml").read_text())
    series = used((ALERTS / "leadwire.rules.test.yml").read_text())
    assert rules == {
        "leadwire_device_up",
        "leadwire_overrun_lost_total",
        "leadwire_events_stored_total",
        "leadwire_restarts_total",
        "leadwire_commit_seconds_bucket",
    }
    assert rules - names == set() and series - names == set()
