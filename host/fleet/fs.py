"""Paths of the fleet job: Hadoop URIs (``hdfs://``, ``s3a://``, ``file://``; a path without a scheme
is on the session's default filesystem, as everywhere in Spark), and the few filesystem calls the
job makes itself (existence, listing of date partitions, small text files, copying the driver's
local staging folder)."""

from __future__ import annotations

import os
import re
from typing import Any

from pyspark.sql import SparkSession

from leadwire.fleet.schema import PARTITION_COLUMN

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*):")


def scheme(path: str) -> str | None:
    m = _SCHEME.match(path)
    return m.group(1).lower() if m else None


def _jvm(spark: SparkSession) -> Any:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    return jvm


def _hconf(spark: SparkSession) -> Any:
    return spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]


def _hadoop_path(spark: SparkSession, path: str) -> Any:
    """(qualified org.apache.hadoop.fs.Path, its FileSystem): scheme-less = the default FS."""
    p = _jvm(spark).org.apache.hadoop.fs.Path(path)
    fs = p.getFileSystem(_hconf(spark))
    return fs.makeQualified(p), fs


def qualify(spark: SparkSession, path: str) -> str:
    """The path as a full URI on the filesystem it lives on (scheme-less -> default FS)."""
    return str(_hadoop_path(spark, path)[0].toString())


def path_exists(spark: SparkSession, path: str) -> bool:
    p, fs = _hadoop_path(spark, path)
    return bool(fs.exists(p))


def is_local(spark: SparkSession, path: str) -> bool:
    """True when `path` is on the driver's local disk: file: scheme, or no scheme and the default
    filesystem is file: (false where fs.defaultFS is hdfs://, as on most clusters)."""
    return scheme(qualify(spark, path)) == "file"


def local_path(path: str) -> str:
    """A file: URI (or plain path) as an OS path."""
    if path.startswith("file://"):
        return path[len("file://") :]
    if path.startswith("file:"):
        return path[len("file:") :]
    return path


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


def list_dates(spark: SparkSession, table_path: str) -> list[str]:
    """The YYYY-MM-DD of every `date=` directory directly under table_path (one listing, no files)."""
    p, fs = _hadoop_path(spark, table_path)
    out = []
    for st in fs.listStatus(p):
        name = st.getPath().getName()
        if st.isDirectory() and name.startswith(PARTITION_COLUMN + "="):
            out.append(name[len(PARTITION_COLUMN) + 1 :])
    return sorted(out)


def copy_tree(spark: SparkSession, local_dir: str, out_dir: str) -> None:
    """Copy every file under local_dir to the same relative path under the Hadoop URI out_dir,
    creating directories first (copyFromLocalFile into a missing directory would copy the first
    entry *as* that directory), replacing files that exist."""
    dst_root, fs = _hadoop_path(spark, out_dir)
    jvm = _jvm(spark)
    for dirpath, _, files in os.walk(local_dir):
        rel = os.path.relpath(dirpath, local_dir)
        dst_dir = dst_root if rel == "." else jvm.org.apache.hadoop.fs.Path(dst_root, rel)
        fs.mkdirs(dst_dir)
        for name in files:
            src = jvm.org.apache.hadoop.fs.Path("file://" + os.path.abspath(os.path.join(dirpath, name)))
            fs.copyFromLocalFile(False, True, src, jvm.org.apache.hadoop.fs.Path(dst_dir, name))


def delete(spark: SparkSession, path: str) -> None:
    p, fs = _hadoop_path(spark, path)
    if fs.exists(p):
        fs.delete(p, True)


def read_text(spark: SparkSession, path: str) -> str | None:
    p, fs = _hadoop_path(spark, path)
    if not fs.exists(p):
        return None
    jvm = _jvm(spark)
    stream = fs.open(p)
    try:
        return str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
    finally:
        stream.close()


def write_text(spark: SparkSession, path: str, text: str) -> None:
    p, fs = _hadoop_path(spark, path)
    out = fs.create(p, True)
    try:
        out.write(bytearray(text.encode()))
    finally:
        out.close()
