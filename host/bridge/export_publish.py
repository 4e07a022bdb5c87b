"""How an export run publishes its files: one day partition at a time, atomically; small files
merged; a manifest per run; repair after a crash.

Layout under the export directory (``tag``: the bridge id made safe for a file name)::

    <table>/date=D/part-<tag>-<hi>.parquet         rows a run added to day D; hi: the end of the
                                                   run's window (arrival id / losses or boots rowid)
    <table>/date=D/part-<tag>-<hi>-c<run>.parquet  small files of the bridge merged by run <run>
    _runs/<tag>/<run:08d>.json                     the manifest of run <run> (export_manifest.py)
    _retired/<tag>/<run:08d>/<table>/date=D/       the version of day D that run <run> replaced
    _leadwire_export/lock                          one publisher at a time (shards share the dir)

A day is published by building its next version beside it (``<table>/.date=D.<tag>.tmp``: hard
links to the files that stay, the new and merged files written there) and exchanging the two
directories in one ``renameat2(RENAME_EXCHANGE)``: a reader that lists the day sees the old
version or the new one, never a mix, and a file it listed that stays keeps its name. The old
version is moved under ``_retired/<tag>/<run>`` unchanged (a reader listing it sees it whole; an
incremental reader that has not yet read a file a later run merged away reads it there) and
removed with the run's manifest.

Coverage: every row of day D with a window position up to the largest ``hi`` among the bridge's
file names in D is in the bridge's files of D (each run adds the rows of its window, and a merge
keeps the largest ``hi``). A run retried after a crash therefore skips the rows of a day that the
crashed attempt already published, and never writes a row twice.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from leadwire.fleet.schema import PARTITION_COLUMN

COMPACT_FILES = 8  # a day whose own small files would exceed this many gets them merged
SMALL_BYTES = 64 << 20  # a file at least this large is never merged again
RENAME_EXCHANGE = 2
AT_FDCWD = -100
RUNS = "_runs"
RETIRED = "_retired"
STATE_DIR = "_leadwire_export"
_PENDING = (".tmp", ".swap")  # a day version being built; the old one set aside (no RENAME_EXCHANGE)


RENAMEAT2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)  # glibc >= 2.28


class ExportError(Exception):
    """One line: what is wrong with the export directory and how to recover."""


def own_hi(name: str, tag: str) -> int | None:
    """The coverage `hi` of one of this bridge's file names (0 for a name of an older export,
    which carries none), None for another bridge's file or a name that is not a part file."""
    prefix = "part-%s" % tag
    if not name.startswith(prefix) or not name.endswith(".parquet"):
        return None
    rest = name[len(prefix) : -len(".parquet")]
    m = re.fullmatch(r"-(\d{12})(?:-c\d+)?", rest)
    if m:
        return int(m.group(1))
    if rest == "" or re.fullmatch(r"-\d{6}-\d{12}", rest):  # older export: part-<tag>[-chunk-first]
        return 0
    return None


def merged(name: str) -> bool:
    return bool(re.search(r"-c\d+\.parquet$", name))


def part_name(tag: str, hi: int) -> str:
    return "part-%s-%012d.parquet" % (tag, hi)


def day_dir(root: Path, table: str, day: str) -> Path:
    return root / table / ("%s=%s" % (PARTITION_COLUMN, day))


def tmp_dir(root: Path, table: str, day: str, tag: str) -> Path:
    return root / table / (".%s=%s.%s.tmp" % (PARTITION_COLUMN, day, tag))


def retired_dir(root: Path, tag: str, run: int, table: str, day: str) -> Path:
    return root / RETIRED / tag / ("%08d" % run) / table / ("%s=%s" % (PARTITION_COLUMN, day))


@contextlib.contextmanager
def locked(root: Path) -> Iterator[None]:
    """The export directory's publisher lock (flock: released when the process dies)."""
    (root / STATE_DIR).mkdir(parents=True, exist_ok=True)
    fd = os.open(root / STATE_DIR / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def exchange(a: Path, b: Path) -> None:
    """Swap two directories in one step (Linux renameat2). Where the kernel or filesystem has no
    RENAME_EXCHANGE, two renames: a reader may then find the day missing for that moment."""
    fn = RENAMEAT2
    if fn is not None and fn(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return
    err = ctypes.get_errno() if fn is not None else errno.ENOSYS
    if err not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        raise OSError(err, os.strerror(err), str(b))
    side = b.parent / ("." + b.name + ".swap")
    os.rename(b, side)
    os.rename(a, b)
    os.rename(side, a)


def leftovers(root: Path, tables: list[str]) -> list[Path]:
    """Day versions a crashed run left half built (``.date=D.<tag>.tmp``) or half swapped."""
    found = []
    for t in tables:
        d = root / t
        if d.is_dir():
            found += [p for p in sorted(d.iterdir()) if p.name.startswith(".") and p.name.endswith(_PENDING)]
    return found


@dataclass
class Day:
    """One day partition as this run finds it: its files, this bridge's among them (name ->
    coverage hi), and the highest coverage (rows up to it are published)."""

    names: list[str]
    own: dict[str, int] = field(default_factory=dict)

    @property
    def covered(self) -> int:
        return max(self.own.values(), default=0)


def read_day(root: Path, table: str, day: str, tag: str) -> Day:
    d = day_dir(root, table, day)
    names = sorted(n for n in os.listdir(d) if not n.startswith((".", "_"))) if d.is_dir() else []
    own = {n: h for n in names if (h := own_hi(n, tag)) is not None}
    return Day(names, own)


def merge_tables(parts: list[pa.Table]) -> pa.Table:
    """Files of one day as one table: every column any of them has (a newer bridge's column
    kept), null where a file lacks it; a column stays NOT NULL where no row is null."""
    loose = [t.cast(pa.schema([f.with_nullable(True) for f in t.schema])) for t in parts]
    out = pa.concat_tables(loose, promote_options="permissive")
    strict = {f.name for t in parts for f in t.schema if not f.nullable}
    return out.cast(
        pa.schema([f.with_nullable(f.name not in strict or out[f.name].null_count > 0) for f in out.schema])
    )


def publish_day(
    root: Path,
    table: str,
    day: str,
    tag: str,
    run: int,
    add: tuple[str, pa.Table] | None,
    drop: list[str],
    rewrite: pa.Table | None,
    compact_files: int = COMPACT_FILES,
) -> None:
    """Publish the next version of a day: the current one without `drop` (this bridge's files
    whose rows `rewrite` replaces, written as one merged file), plus `add`; and this bridge's small
    files merged into one when they would exceed `compact_files`."""
    cur = read_day(root, table, day, tag)
    d = day_dir(root, table, day)
    drop = list(drop)
    if rewrite is None:
        small = [n for n in cur.own if n not in drop and os.path.getsize(d / n) < SMALL_BYTES]
        if len(small) + (add is not None) > compact_files and len(small) > 1:
            rewrite = merge_tables([pq.read_table(d / n) for n in small])
            drop += small
    tmp = tmp_dir(root, table, day, tag)
    tmp.mkdir(parents=True)
    for n in cur.names:
        if n not in drop and (add is None or n != add[0]):
            os.link(d / n, tmp / n)
    if rewrite is not None and rewrite.num_rows:
        hi = max((cur.own[n] for n in drop if n in cur.own), default=0)
        pq.write_table(rewrite, tmp / ("part-%s-%012d-c%d.parquet" % (tag, hi, run)))
    if add is not None:
        pq.write_table(add[1], tmp / add[0])
    if not d.is_dir():
        os.rename(tmp, d)
        return
    exchange(tmp, d)  # tmp now holds the old version
    _retire(root, tag, run, table, day, tmp)


def _retire(root: Path, tag: str, run: int, table: str, day: str, old: Path) -> None:
    """Keep a replaced day version under _retired, unchanged (a reader may be listing it: it is
    removed with its run's manifest, retain_days later, never emptied now). The first version a
    run replaces is kept whole; a later one of the same run (its next chunk, a retry) adds its
    files there by hard links and is set aside beside it."""
    keep = retired_dir(root, tag, run, table, day)
    if not keep.exists():
        keep.parent.mkdir(parents=True, exist_ok=True)
        os.rename(old, keep)
        return
    for n in os.listdir(old):
        if not (keep / n).exists():
            os.link(old / n, keep / n)
    aside = keep.parent / ".replaced"
    aside.mkdir(exist_ok=True)
    os.rename(old, aside / ("%s.%d" % (keep.name, len(os.listdir(aside)))))
