"""The local Spark JVM's compiler directives (host/fleet/jvm_compiler.py): the file written once
into the cache, the switch, and this machine's JVM reading it: every planning pattern excluded
from C2 and nothing else."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from leadwire.fleet import jvm_compiler


def test_written_once_named_by_its_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(jvm_compiler.ENV_SWITCH, raising=False)
    opts = jvm_compiler.java_options(tmp_path)
    (path,) = tmp_path.iterdir()
    assert opts == "-XX:+UnlockDiagnosticVMOptions -XX:CompilerDirectivesFile=%s" % path
    assert re.fullmatch(r"c2-planning-[0-9a-f]{12}\.json", path.name)
    assert path.read_text() == jvm_compiler.directives()
    path.write_text("kept")  # a second start reads the file there, never writes it again
    assert jvm_compiler.java_options(tmp_path) == opts and path.read_text() == "kept"


def test_switch_and_unwritable_cache_give_the_jvms_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(jvm_compiler.ENV_SWITCH, "1")
    assert jvm_compiler.java_options(tmp_path) == "" and not any(tmp_path.iterdir())
    monkeypatch.delenv(jvm_compiler.ENV_SWITCH)
    (tmp_path / "file").write_text("")
    assert jvm_compiler.java_options(tmp_path / "file" / "jvm") == ""  # a file where the dir goes


def test_the_jvm_excludes_exactly_the_planning_code_from_c2(tmp_path: Path) -> None:
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on PATH")
    opts = jvm_compiler.java_options(tmp_path).split()
    out = subprocess.run(
        [java, *opts, "-XX:+CompilerDirectivesPrint", "-version"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert out.startswith("1 compiler directives added")
    ours, default = out.split("Directive: (default)")
    matching = re.search(r"matching: (.*)", ours).group(1).split(", ")  # type: ignore[union-attr]
    assert sorted(matching) == sorted(jvm_compiler.PLANNING_CODE)
    c1, c2 = ours.split("c2 directives:")
    assert "Exclude:true" in c2 and "Exclude:true" not in c1
    assert "Exclude:true" not in default  # every other method keeps both compilers
