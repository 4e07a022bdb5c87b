"""Which export files are new to an incremental run: from the export's run manifests
(``DIR/_runs/<bridge>/<run>.json``, written by `leadwire export`: host/bridge/export_manifest.py)
when it has them, else by listing the partitions (an export written another way).

With manifests a run lists ``_runs`` and opens the manifests of the runs it has not read; it
reads the files those runs added (a file a later run merged away, in ``_retired`` where that run
kept it), wherever their dates are (a late arrival for an old day included), and lists no data
partition but the losses days those runs touched. The first run, with no runs recorded, lists the
partitions as before and records the newest manifest of each bridge it saw before listing; a file
a bridge added after that manifest is left for the next run, which reads it by its manifest.

Losses are read by whole day: every file of a day some new losses file belongs to, duplicates
removed (a recovery that ended after its first export is published again with its day; a
retried export run may repeat rows), so that day's recoveries are counted anew, not added to.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from leadwire.fleet.fs import join, list_files
from leadwire.fleet.options import BadInput
from leadwire.fleet.schema import PARTITION_COLUMN, TABLES

RUNS = "_runs"
RETIRED = "_retired"
FORMAT = 1
_MANIFEST = re.compile(r"/%s/([^/]+)/(\d{8})\.json$" % RUNS)

Files = dict[str, list[tuple[str, str]]]  # table -> [(file URI, date)]


@dataclass
class NewFiles:
    """What an incremental run reads: `new` (losses: their whole days), `listed` (what it saw,
    for the state's file list), `runs` (per bridge the newest manifest accounted for)."""

    new: Files
    listed: Files
    runs: dict[str, int] = field(default_factory=dict)


def list_manifests(spark: SparkSession, input_dir: str) -> dict[str, dict[int, str]]:
    """bridge tag -> run -> manifest URI, listed without opening them ({} without manifests)."""
    try:
        df = (
            spark.read.format("binaryFile")
            .option("pathGlobFilter", "*.json")
            .option("recursiveFileLookup", "true")
            .load(join(input_dir, RUNS))
        )
        paths = [str(r[0]) for r in df.select("path").collect()]
    except AnalysisException as e:
        if "PATH_NOT_FOUND" in str(e) or "Path does not exist" in str(e):
            return {}
        raise
    out: dict[str, dict[int, str]] = {}
    for p in paths:
        m = _MANIFEST.search(p)
        if m:
            out.setdefault(m.group(1), {})[int(m.group(2))] = p
    return out


def read_manifests(spark: SparkSession, input_dir: str, uris: list[str]) -> dict[str, dict[str, Any]]:
    """URI -> manifest, each checked; a damaged one stops the run in one line."""
    if not uris:
        return {}
    rows = (
        spark.read.option("wholetext", "true")
        .text(*uris)
        .selectExpr("value", "_metadata.file_path")
        .collect()
    )
    docs = {}
    for text, path in rows:
        try:
            doc = json.loads(text)
            ok = isinstance(doc, dict) and doc.get("format") == FORMAT
            ok = ok and all(isinstance(doc.get(k), list) for k in ("added", "removed"))
            ok = ok and sorted(doc.get("windows") or {}) == sorted(TABLES)
        except ValueError:
            ok = False
        if not ok:
            raise BadInput(
                "%s: corrupt export manifest: run `leadwire export --repair --out %s` where it is written"
                % (path, input_dir)
            )
        docs[_key(path)] = doc
    return docs


def _key(uri: str) -> str:
    m = _MANIFEST.search(uri)
    return "%s/%s" % (m.group(1), m.group(2)) if m else uri


def new_files(
    spark: SparkSession, input_dir: str, state: dict[str, Any], listing: Callable[[], Files]
) -> NewFiles:
    """The files new to this run. `state`: the incremental state (its `runs`: the manifests read,
    `files`: the files listed and read); `listing()`: the partitions as listed, called only when
    the manifests cannot say (the first run, or an export without manifests)."""
    found = list_manifests(spark, input_dir)
    consumed: dict[str, int] = state.get("runs") or {}
    if not found or not consumed:
        listed = listing()
        seen = set().union(*(state.get("files") or {}).values())
        if found:
            return _first(spark, input_dir, found, listed, seen)
        new = {t: [(u, d) for u, d in listed[t] if u not in seen] for t in TABLES}
        return NewFiles(_whole_loss_days(new, listed), listed, {})
    new: Files = {t: [] for t in TABLES}
    runs = dict(consumed)
    wanted = {}
    for tag, have in found.items():
        last = int(consumed.get(tag, 0))
        todo = sorted(r for r in have if r > last)
        if todo and todo[0] != last + 1:
            raise BadInput(
                "%s: the export manifests of bridge %s after run %d were removed before this run read "
                "them (`leadwire export --retain-days`, 7): run once without the incremental state "
                "(delete OUT/_state and OUT/_leadwire_fleet.json)" % (input_dir, tag, last)
            )
        wanted[tag] = todo
    docs = read_manifests(spark, input_dir, [found[t][r] for t, rs in wanted.items() for r in rs])
    loss_days: set[str] = set()
    for tag, todo in wanted.items():
        uris: dict[tuple[str, str, str], str] = {}
        for r in todo:
            doc = docs["%s/%08d" % (tag, r)]
            for table, day, name, _rows in doc["added"]:
                uris[(table, day, name)] = join(input_dir, table, "%s=%s" % (PARTITION_COLUMN, day), name)
            for table, day, name in doc["removed"]:
                if table == "losses":
                    loss_days.add(day)
                if (table, day, name) in uris:
                    uris[(table, day, name)] = join(
                        input_dir, RETIRED, tag, "%08d" % r, table, "%s=%s" % (PARTITION_COLUMN, day), name
                    )
            runs[tag] = r
        for (table, day, _), uri in sorted(uris.items()):
            new[table].append((uri, day))
    loss_days |= {d for _, d in new["losses"]}
    new["losses"] = list_files(spark, join(input_dir, "losses"), sorted(loss_days))
    return NewFiles(new, {t: list(v) for t, v in new.items()}, runs)


def _first(
    spark: SparkSession, input_dir: str, found: dict[str, dict[int, str]], listing: Files, seen: set[str]
) -> NewFiles:
    """The first run with manifests: the listing (taken after `found`), less each bridge's files
    beyond the window of its newest manifest (a run still publishing: the next run reads them)."""
    newest = {tag: max(have) for tag, have in found.items()}
    docs = read_manifests(spark, input_dir, [found[t][r] for t, r in newest.items()])
    ends = {
        (tag, t): int(docs["%s/%08d" % (tag, r)]["windows"][t][1])
        for tag, r in newest.items()
        for t in TABLES
    }

    def later(table: str, uri: str) -> bool:
        name = uri.rsplit("/", 1)[-1]
        m = re.fullmatch(r"part-(.+)-(\d{12})\.parquet", name)
        return bool(m) and int(m.group(2)) > ends.get((m.group(1), table), 1 << 62)

    new = {t: [(u, d) for u, d in listing[t] if u not in seen and not later(t, u)] for t in TABLES}
    return NewFiles(_whole_loss_days(new, listing, later), listing, newest)


def _whole_loss_days(new: Files, listed: Files, later: Callable[[str, str], bool] | None = None) -> Files:
    """`new` with its losses files replaced by every listed losses file of their days."""
    days = {d for _, d in new["losses"]}
    keep = [(u, d) for u, d in listed["losses"] if d in days and not (later and later("losses", u))]
    return {**new, "losses": keep}
