"""The shipped Grafana dashboard (docs/grafana/leadwire-bridge.json): valid against Grafana's
published dashboard model (@grafana/schema's Dashboard type, checked by the TypeScript compiler:
tools/grafana/check.mjs), laid out without overlaps, and reading only metrics the bridge exposes."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .metric_names import exposed, used

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "grafana" / "leadwire-bridge.json"
CHECKER = ROOT / "tools" / "grafana"
needs_schema = pytest.mark.skipif(
    shutil.which("node") is None or not (CHECKER / "node_modules" / "@grafana" / "schema").is_dir(),
    reason="Grafana's schema not installed (npm ci --prefix tools/grafana)",
)


def check(*files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["node", str(CHECKER / "check.mjs"), *map(str, files)], capture_output=True, text=True, timeout=60
    )


@needs_schema
def test_valid_against_grafanas_dashboard_schema() -> None:
    version = json.loads((CHECKER / "package.json").read_text())["dependencies"]["@grafana/schema"]
    p = check(DASHBOARD)
    assert (p.returncode, p.stdout) == (
        0,
        "%s: valid (@grafana/schema %s Dashboard)\n" % (DASHBOARD, version),
    )


@needs_schema
def test_the_schema_check_finds_an_unknown_key_and_a_wrong_type(tmp_path: Path) -> None:
    d = json.loads(DASHBOARD.read_text())
    d["panels"][0]["titel"] = "typo"
    d["graphTooltip"] = 7  # not a DashboardCursorSync (0, 1, 2)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d, indent=2))
    p = check(bad)
    assert p.returncode == 1
    assert sorted(ln.split(": ", 1)[1] for ln in p.stdout.splitlines()) == [
        "Object literal may only specify known properties, and '\"titel\"' does not exist in type 'Panel'.",
        "Type '7' is not assignable to type 'DashboardCursorSync | undefined'.",
    ]


def test_layout_and_queries() -> None:
    """What the schema does not say: unique panel ids, panels within the 24-column grid and not
    overlapping, every query with a refId and an expression on the dashboard's data source."""
    d: dict[str, Any] = json.loads(DASHBOARD.read_text())
    assert (d["uid"], d["title"]) == ("leadwire-bridge", "leadwire bridge")
    panels = d["panels"]
    assert len({p["id"] for p in panels}) == len(panels) == 11
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {(g["x"] + i, g["y"] + j) for i in range(g["w"]) for j in range(g["h"])}
        assert not mine & cells, p["title"]
        cells |= mine
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert [t["refId"] for t in p["targets"]] == [chr(65 + i) for i in range(len(p["targets"]))]
        assert all(t["expr"] for t in p["targets"])
    assert [v["name"] for v in d["templating"]["list"]] == ["datasource", "instance", "device"]


def test_every_metric_on_the_dashboard_is_exposed(tmp_path: Path) -> None:
    names = used(DASHBOARD.read_text())
    assert len(names) >= 12
    assert names - exposed(tmp_path) == set()
