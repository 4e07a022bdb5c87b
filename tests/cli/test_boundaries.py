"""The layering the style guide states, checked on the source: host code never imports tools (the
command table names tool commands by string, loaded on use), and no bench imports the tests or
another bench: what benches share lives in tools/ (leadwire.tools.benchkit and its siblings), and no
bench puts a directory on sys.path to reach a neighbour."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

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


def bench_modules() -> set[str]:
    """The names a bench could be imported by: each script's stem and each package under bench/."""
    bench = ROOT / "bench"
    return {p.stem for p in bench.glob("*.py")} | {p.name for p in bench.iterdir() if p.is_dir()}


def edits_sys_path(path: Path) -> list[int]:
    """Lines that change sys.path: sys.path.insert/append/extend/remove, an assignment to it, or
    site.addsitedir."""
    out: list[int] = []
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            f = n.func
            target = ast.unparse(f.value)
            if (target == "sys.path" and f.attr in ("insert", "append", "extend", "remove")) or (
                target == "site" and f.attr == "addsitedir"
            ):
                out.append(n.lineno)
        elif isinstance(n, (ast.Assign, ast.AugAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if any(ast.unparse(t).startswith("sys.path") for t in targets):
                out.append(n.lineno)
    return out


def test_no_bench_imports_another_bench() -> None:
    names = bench_modules()
    assert {"goodput_bench", "pico_bench", "peer_mqtt"} <= names  # the scan sees the benches
    offenders = {
        str(p.relative_to(ROOT)): sorted(m for m in imported(p) if m.split(".")[0] in names - {p.stem})
        for p in sorted((ROOT / "bench").rglob("*.py"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_no_bench_edits_sys_path() -> None:
    offenders = {str(p.relative_to(ROOT)): edits_sys_path(p) for p in sorted((ROOT / "bench").rglob("*.py"))}
    assert {k: v for k, v in offenders.items() if v} == {}


@pytest.mark.parametrize(
    ("source", "lines"),
    [
        ("import sys\nsys.path.insert(0, 'x')\n", [2]),
        ("import sys\nsys.path[:0] = ['x']\n", [2]),
        ("import sys\nsys.path += ['x']\n", [2]),
        ("import site\nsite.addsitedir('x')\n", [2]),
        ("import sys\nprint(sys.path[0])\n", []),
    ],
)
def test_the_sys_path_check_sees_edits(tmp_path: Path, source: str, lines: list[int]) -> None:
    f = tmp_path / "b.py"
    f.write_text(source)
    assert edits_sys_path(f) == lines
