"""Every relative link in the repository's markdown resolves: the file (or directory) exists, and a
`#anchor` names a heading of the target page, with GitHub's heading ids (lower case, punctuation
dropped, each space a hyphen, repeats numbered -1, -2, ...). Links inside code are not links.

Sections cited by name in prose, comments and docstrings (`docs/bridge.md, "Store"`,
`benchmarks.md ("Bridge ingest", "Goodput")`) name the start of a heading of that page, its section
number aside, or the bold words that open one of its paragraphs or list items (`**Durability:
...**`), so a renamed or removed section fails here rather than leaving a dead pointer."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
CITED = re.compile(r'([\w./-]+\.md)\)?(?:,\s*|\s+)(?:#\s*)?\(?((?:"[^"\n]+"(?:,\s*(?:#\s*)?)?)+)')
BOLD_LEAD = re.compile(r"^\s*(?:[-*+]\s+|\d+\.\s+)?\*\*(.+?)\*\*")
CITED_FILES = ("*.md", "*.py", "*.mjs", "*.toml")


def tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "--", *patterns], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return [ROOT / p for p in out.split("\0") if p and (ROOT / p).is_file()]


def markdown_files() -> list[Path]:
    return tracked("*.md")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced and indented code blocks."""
    out: list[tuple[int, str]] = []
    fence: str | None = None
    previous_blank = True
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if fence is not None:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = None
            continue
        if match:
            fence = match.group(1)
            continue
        indented = line.startswith(("    ", "\t")) and line.strip()
        if indented and previous_blank:
            continue  # an indented code block goes on while its lines stay indented
        if not indented:
            previous_blank = not line.strip()
        out.append((number, line))
    return out


def slug(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def headings(path: Path) -> list[str]:
    return [m.group(2) for _, line in prose_lines(path.read_text()) if (m := HEADING.match(line))]


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for heading in headings(path):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for number, line in prose_lines(path.read_text()):
        for match in LINK.finditer(CODE_SPAN.sub("", line)):
            target = match.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue  # http:, https:, mailto: ...
            out.append((number, target))
    return out


def broken(path: Path) -> list[str]:
    out: list[str] = []
    for number, target in links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(ROOT)}:{number}: {target}"
        if not dest.exists():
            out.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"{where}: no heading #{anchor}")
        elif anchor and dest.suffix != ".md":
            out.append(f"{where}: an anchor into a file that is not markdown")
    return out


def section_name(text: str) -> str:
    text = text.replace("`", "").strip().lower()
    return re.sub(r"^(\d+(\.\d+)*\.?\s+)", "", text)  # "6.3 Gaps" and "9. Auth" by their names


def bold_leads(path: Path) -> list[str]:
    return [
        section_name(m.group(1)) for _, line in prose_lines(path.read_text()) if (m := BOLD_LEAD.match(line))
    ]


def cited_sections(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, page as written, section names) for each page cited with section names in quotes."""
    text = path.read_text()
    out: list[tuple[int, str, list[str]]] = []
    for match in CITED.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        out.append((line, match.group(1), re.findall(r'"([^"]+)"', match.group(2))))
    return out


def page(cited_in: Path, name: str) -> Path | None:
    """The page a citation names: relative to the citing file, the repository, or docs/."""
    for base in (cited_in.parent, ROOT, ROOT / "docs"):
        if (base / name).is_file():
            return (base / name).resolve()
    return None


def stale_citations(path: Path) -> list[str]:
    out: list[str] = []
    for line, name, sections in cited_sections(path):
        where = f"{path.relative_to(ROOT)}:{line}: {name}"
        target = page(path, name)
        if target is None:
            out.append(f"{where}: no such page")
            continue
        names = [section_name(h) for h in headings(target)] + bold_leads(target)
        for section in sections:
            wanted = section_name(section)
            if not any(n.startswith(wanted) for n in names):
                out.append(f'{where}: no section "{section}"')
    return out


def test_the_checker_sees_what_it_should(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Top\n\n## Durable ACKs: `synchronous = FULL` vs `NORMAL`\n\n## Top\n\n"
        "[a](other.md#x) [b](#durable-acks-synchronous--full-vs-normal) [c](#top-1) "
        "[d](https://example.com/x.md) `[e](nowhere.md)`\n\n    [f](nowhere.md)\n\n"
        "```\n[g](nowhere.md)\n```\n[h](#missing) ![i](img.png)\n"
    )
    assert anchors(page) == {"top", "top-1", "durable-acks-synchronous--full-vs-normal"}
    assert [t for _, t in links(page)] == [
        "other.md#x",
        "#durable-acks-synchronous--full-vs-normal",
        "#top-1",
        "#missing",
        "img.png",
    ]


def test_every_relative_link_resolves() -> None:
    files = markdown_files()
    assert any(p.name == "README.md" for p in files)
    assert sum(len(links(p)) for p in files) > 20  # the links were found, not skipped
    problems = [line for p in files for line in broken(p)]
    assert problems == []


def test_cited_sections_are_found(tmp_path: Path) -> None:
    (tmp_path / "target.md").write_text(
        "# T\n\n## 6.3 Gaps and `held` frames\n\n## Bridge ingest\n\n**Durability: fsync.** Text\n"
        "- **A `class` archive**: more\n"
    )
    src = tmp_path / "src.py"
    src.write_text(
        '# see target.md, "Gaps and held frames"; [t](target.md) ("Bridge ingest", "Gone")\n'
        '# and target.md,\n# "Bridge"\nx = open("results.md").read() + "text"\n'
    )
    assert cited_sections(src) == [
        (1, "target.md", ["Gaps and held frames"]),
        (1, "target.md", ["Bridge ingest", "Gone"]),
        (2, "target.md", ["Bridge"]),
    ]
    names = [section_name(h) for h in headings(tmp_path / "target.md")]
    assert names == ["t", "gaps and held frames", "bridge ingest"]
    assert bold_leads(tmp_path / "target.md") == ["durability: fsync.", "a class archive"]


def test_every_cited_section_exists() -> None:
    files = [p for p in tracked(*CITED_FILES) if p != Path(__file__).resolve()]  # not its own examples
    assert sum(len(cited_sections(p)) for p in files) > 20
    problems = [line for p in files for line in stale_citations(p)]
    assert problems == []
