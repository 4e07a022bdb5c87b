"""The layering the style guide states, checked on the source: host code never imports tools (the
command table names tool commands by string, loaded on use), and no bench imports the tests."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imported(path: Path) -> set[str]:
    """Every module a file imports, anywhere in it (top level or inside functions)."""
    out: set[str] = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Import):
            out.update(a.name for a in n.names)
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            out.add(n.module)
    return out


def test_host_code_never_imports_tools() -> None:
    offenders = {
        str(p.relative_to(ROOT)): sorted(m for m in imported(p) if m.startswith("leadwire.tools"))
        for p in sorted((ROOT / "host").rglob("*.py"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_no_bench_imports_the_tests() -> None:
    offenders = {
        str(p.relative_to(ROOT)): sorted(m for m in imported(p) if m == "tests" or m.startswith("tests."))
        for p in sorted((ROOT / "bench").rglob("*.py"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}
