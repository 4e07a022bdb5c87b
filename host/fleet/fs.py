"""Paths of the fleet job: Hadoop URIs (``hdfs://``, ``s3a://``, ``file://``; a path without a scheme
is on the session's default filesystem, as everywhere in Spark), and the few filesystem calls the
job makes itself: listing an export table's files, small text files, removing a stale output.

Everything here goes through Spark's own readers and writers or, for an output on this process's
disk, the local filesystem: no JVM handle, so the same code runs in a classic session and under
Spark Connect, where the driver's JVM is not in this process. Whether a path is on this process's
disk is not decided from its text (a scheme-less path is on `fs.defaultFS`, which may be HDFS; a
Spark Connect server may run elsewhere) but by a probe: a marker written with Spark and looked for
locally (driver_path).
"""

from __future__ import annotations

import os
import re
import shutil
import uuid

from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from leadwire.fleet.schema import PARTITION_COLUMN

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*):")
_PROBE = "_leadwire_probe"


def scheme(path: str) -> str | None:
    m = _SCHEME.match(path)
    return m.group(1).lower() if m else None


def local_path(path: str) -> str:
    """A file: URI (or plain path) as an OS path."""
    if path.startswith("file://"):
        return path[len("file://") :]
    if path.startswith("file:"):
        return path[len("file:") :]
    return path


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


def _missing(e: AnalysisException) -> bool:
    text = str(e)
    return "PATH_NOT_FOUND" in text or "Path does not exist" in text


def driver_path(spark: SparkSession, path: str) -> str | None:
    """The OS path of `path` when Spark writes there onto this process's disk (a marker written
    with Spark is found under the same local path, with this call's token in it), else None
    (HDFS, S3, a Spark Connect server on another machine). Creates `path` if missing."""
    if scheme(path) not in (None, "file"):
        return None
    local = os.path.abspath(local_path(path))
    token = uuid.uuid4().hex
    spark.createDataFrame([(token,)], "v STRING").coalesce(1).write.mode("overwrite").text(join(path, _PROBE))
    probe = os.path.join(local, _PROBE)
    found = False
    if os.path.isdir(probe):
        for name in os.listdir(probe):
            if name.startswith("part-"):
                with open(os.path.join(probe, name)) as f:
                    found = found or f.read().strip() == token
        shutil.rmtree(probe, ignore_errors=True)
    return local if found else None


def has_files(spark: SparkSession, path: str) -> bool | None:
    """True when a file is under path, False when none is, None when path does not exist (an
    error path's question: it lists everything under path)."""
    try:
        return bool(spark.read.format("binaryFile").option("recursiveFileLookup", "true").load(path).take(1))
    except AnalysisException as e:
        if _missing(e):
            return None
        raise


def list_files(spark: SparkSession, table_path: str, dates: list[str] | None = None) -> list[tuple[str, str]]:
    """(file URI, date) of every Parquet file under table_path's `date=` partitions, or only under
    those of `dates` (their names are matched in one listing of table_path; the other partitions
    are not listed). Listed by Spark's binaryFile reader without reading the files' content.
    [] when the path does not exist."""
    pattern = table_path
    if dates is not None:
        if not dates:
            return []
        pattern = join(table_path, "%s={%s}" % (PARTITION_COLUMN, ",".join(dates)))
    try:
        df = (
            spark.read.format("binaryFile")
            .option("pathGlobFilter", "*.parquet")
            .option("basePath", table_path)
            .load(pattern)
        )
        if PARTITION_COLUMN not in df.columns:
            return []
        rows = df.select("path", PARTITION_COLUMN).collect()
    except AnalysisException as e:
        if _missing(e):
            return []
        raise
    return sorted((str(r[0]), str(r[1])) for r in rows)


def list_dates(spark: SparkSession, table_path: str) -> list[str]:
    """The YYYY-MM-DD of every `date=` partition under table_path that holds a Parquet file."""
    return sorted({d for _, d in list_files(spark, table_path)})


def read_text(spark: SparkSession, path: str, local: str | None) -> str | None:
    """A small text file (or the directory write_text made), None when missing. `local`: the OS
    path of its folder when that is on this disk (driver_path), else None."""
    if local is not None:
        p = os.path.join(local, os.path.basename(path.rstrip("/")))
        if os.path.isfile(p):
            with open(p) as f:
                return f.read()
        if not os.path.isdir(p):
            return None
    try:
        lines = spark.read.option("wholetext", "true").text(path).collect()
    except AnalysisException as e:
        if _missing(e):
            return None
        raise
    return "".join(str(r[0]) for r in lines)


def write_text(spark: SparkSession, path: str, text: str, local: str | None) -> None:
    """A small text file, replacing what was there: written by this process when its folder is
    on this disk (`local`: that folder's OS path), else by Spark's text writer (a directory with
    one part file, which read_text reads back)."""
    if local is not None:
        os.makedirs(local, exist_ok=True)
        tmp = os.path.join(local, ".%s.tmp" % os.path.basename(path))
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(local, os.path.basename(path)))
        return
    spark.createDataFrame([(text,)], "value STRING").coalesce(1).write.mode("overwrite").text(path)
