"""The manifest of an export run (``_runs/<tag>/<run:08d>.json``) and the repair of an export
directory a crash or a damaged file left behind.

A manifest is written after the run's days are published (export_publish.py) and is the run's
commit: the next run starts from the windows of the newest manifest. It holds::

    {"format": 1, "bridge": ID, "run": N, "time": UNIX_S,
     "windows": {"arrivals": [lo, hi], "losses": [lo, hi], "boots": [lo, hi]},
     "added":   [[table, date, file, rows], ...],   rows new to the export in this run
     "removed": [[table, date, file], ...]}         files this run merged away, kept in
                                                    _retired/<tag>/<run>/<table>/date=<date>/

Files merged by a run (``-c<run>``) hold rows earlier runs added and are never "added": a reader
that reads every run's added files reads every row once (one that had not read a file yet when a
later run merged it away reads it in _retired, which is kept as long as the manifest).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from leadwire.fleet.schema import PARTITION_COLUMN, TABLES

from .export_publish import (
    RETIRED,
    RUNS,
    ExportError,
    day_dir,
    leftovers,
    locked,
    merged,
    own_hi,
    retired_dir,
)

FORMAT = 1
RETAIN_DAYS = 7  # manifests and retired files older than this are removed (the newest is kept)
_NAME = re.compile(r"(\d{8})\.json")


def manifest_path(root: Path, tag: str, run: int) -> Path:
    return root / RUNS / tag / ("%08d.json" % run)


def runs(root: Path, tag: str) -> list[int]:
    d = root / RUNS / tag
    if not d.is_dir():
        return []
    return sorted(int(m.group(1)) for n in os.listdir(d) if (m := _NAME.fullmatch(n)))


def corrupt(path: Path, why: str, root: Path) -> ExportError:
    return ExportError(
        "%s: corrupt export manifest (%s): run `leadwire export --repair --out %s`" % (path, why, root)
    )


def load(root: Path, tag: str, run: int) -> dict[str, Any]:
    path = manifest_path(root, tag, run)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise corrupt(path, str(e).splitlines()[0][:80] or type(e).__name__, root) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("run") != run:
        raise corrupt(path, "not a format-%d manifest of run %d" % (FORMAT, run), root)
    w = doc.get("windows")
    if not isinstance(w, dict) or sorted(w) != sorted(TABLES) or not all(len(v) == 2 for v in w.values()):
        raise corrupt(path, "no windows for %s" % ", ".join(TABLES), root)
    if not isinstance(doc.get("added"), list) or not isinstance(doc.get("removed"), list):
        raise corrupt(path, "no added/removed lists", root)
    return doc


def latest(root: Path, tag: str) -> dict[str, Any] | None:
    have = runs(root, tag)
    return load(root, tag, have[-1]) if have else None


def collect(
    root: Path, tag: str, run: int, lo: dict[str, int], days: dict[str, set[str]]
) -> tuple[list[list[Any]], list[list[Any]]]:
    """The run's added and removed files, found in the days it touched: this bridge's unmerged
    files beyond the window start (those of a crashed attempt of the same run included), live or
    retired by this run; and the files the run retired that the day no longer has."""
    added: list[list[Any]] = []
    removed: list[list[Any]] = []
    for table in TABLES:
        for day in sorted(days.get(table, ())):
            live_dir, ret_dir = day_dir(root, table, day), retired_dir(root, tag, run, table, day)
            live = set(os.listdir(live_dir)) if live_dir.is_dir() else set()
            gone = sorted(set(os.listdir(ret_dir)) - live) if ret_dir.is_dir() else []
            removed += [[table, day, n] for n in gone]
            for where, names in ((live_dir, sorted(live)), (ret_dir, gone)):
                for n in names:
                    h = own_hi(n, tag)
                    if h is not None and h > lo[table] and not merged(n):
                        added.append([table, day, n, pq.read_metadata(where / n).num_rows])
    return added, removed


def write(root: Path, tag: str, doc: dict[str, Any]) -> None:
    path = manifest_path(root, tag, doc["run"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(json.dumps(doc, sort_keys=True))
    os.replace(tmp, path)


def prune(root: Path, tag: str, retain_days: float, now: float | None = None) -> list[int]:
    """Remove the manifests (and what their runs retired) older than retain_days, the newest
    kept; oldest first, up to the first one still kept (runs are numbered in time order), so a
    run opens one or a few of them. Returns the runs removed."""
    now = time.time() if now is None else now
    have = runs(root, tag)
    gone = []
    for run in have[:-1]:
        try:
            t = float(json.loads(manifest_path(root, tag, run).read_text()).get("time", now))
        except (OSError, ValueError, AttributeError):
            break  # a damaged manifest is repair's to handle
        if now - t <= retain_days * 86400:
            break
        shutil.rmtree(root / RETIRED / tag / ("%08d" % run), ignore_errors=True)
        manifest_path(root, tag, run).unlink()
        gone.append(run)
    return gone


def repair(root: Path) -> list[str]:
    """Make an export directory that a crash or a damaged manifest left behind usable again;
    returns one line per action. Day versions left half built are removed (one half swapped is
    put back); the newest manifest of a bridge, if damaged, is removed (the next export redoes its
    run: the rows it published are skipped, its files listed again); an older damaged one is
    rebuilt from its neighbours' windows and the files in that window."""
    done: list[str] = []
    with locked(root):
        for p in leftovers(root, list(TABLES)):
            if p.name.endswith(".swap"):
                orig = p.with_name(p.name[1 : -len(".swap")])
                if not orig.exists():
                    os.rename(p, orig)
                    done.append("restored %s" % orig.relative_to(root))
                    continue
            shutil.rmtree(p)
            done.append("removed %s (a day version a crashed run left half built)" % p.relative_to(root))
        base = root / RUNS
        for tag in sorted(os.listdir(base)) if base.is_dir() else []:
            for stray in (base / tag).glob(".*.tmp"):
                stray.unlink()
            have = runs(root, tag)
            for i, run in enumerate(have):
                try:
                    load(root, tag, run)
                    continue
                except ExportError:
                    pass
                path = manifest_path(root, tag, run)
                if i == len(have) - 1:
                    path.unlink()
                    done.append("removed %s (the next export redoes run %d)" % (path.relative_to(root), run))
                    continue
                done.append("rebuilt %s" % path.relative_to(root))
                _rebuild(root, tag, run, have[i - 1] if i else None, have[i + 1])
    return done


def _rebuild(root: Path, tag: str, run: int, prev: int | None, nxt: int) -> None:
    """Run `run`'s manifest from the windows around it and this bridge's files in the window."""
    before = load(root, tag, prev)["windows"] if prev is not None else {t: [0, 0] for t in TABLES}
    after = load(root, tag, nxt)["windows"]
    lo = {t: int(before[t][1]) for t in TABLES}
    hi = {t: int(after[t][0]) for t in TABLES}
    days: dict[str, set[str]] = {}
    for table in TABLES:
        tdir = root / table
        for d in sorted(tdir.iterdir()) if tdir.is_dir() else []:
            if not d.name.startswith(PARTITION_COLUMN + "="):
                continue
            if any(lo[table] < (own_hi(n, tag) or 0) <= hi[table] for n in os.listdir(d)):
                days.setdefault(table, set()).add(d.name.split("=", 1)[1])
        rdir = root / RETIRED / tag / ("%08d" % run) / table
        for d in sorted(rdir.iterdir()) if rdir.is_dir() else []:
            if d.name.startswith(PARTITION_COLUMN + "="):
                days.setdefault(table, set()).add(d.name.split("=", 1)[1])
    added, removed = collect(root, tag, run, lo, days)
    added = [a for a in added if (own_hi(a[2], tag) or 0) <= hi[a[0]]]
    write(
        root,
        tag,
        {
            "format": FORMAT,
            "bridge": tag,
            "run": run,
            "time": time.time(),
            "windows": {t: [lo[t], hi[t]] for t in TABLES},
            "added": added,
            "removed": removed,
            "rebuilt": True,
        },
    )
