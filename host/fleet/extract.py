"""Extract: the export's three tables read with the contract's schema, only the date partitions a
range needs (DateRange), NOT NULL columns guarded row by row; and the one-line BadInput an
executor's failure on bad input stands for."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

from leadwire.fleet.fs import has_files, join, list_files
from leadwire.fleet.options import DEFAULT_LOOKAHEAD_DAYS, BadInput, check_date
from leadwire.fleet.progress import Progress
from leadwire.fleet.schema import COLUMN_DEFAULTS, PARTITION_COLUMN, TABLES, spark_schema

DAY_US = 86_400_000_000
# Marks the message of a raise_error() of the null-key guard, so run_job can turn the executor's
# exception into BadInput.
_GUARD = "leadwire-bad-input: "


@dataclass
class Inputs:
    arrivals: DataFrame
    losses: DataFrame
    boots: DataFrame


@dataclass(frozen=True)
class DateRange:
    """Which arrivals the tables count, and which partitions are read to count them right.

    Output: rows whose date (UTC, of host_rx_ts / started_ts / first_seen_ts) is in
    [first, last] (None = open). Read: every partition from `lookback_days` before `first` (None:
    all history, exact) to `lookahead_days` after `last`. Lead, duplicate flag, reorder depth,
    report head and restarts of a row depend on everything earlier in its lead domain; the gap
    after it on the next higher seq received later. Reading the margins makes every in-range
    row's values equal a full run's (exact with lookback None and a lookahead that covers the
    latest fill of a gap).
    """

    first: str | None = None
    last: str | None = None
    lookback_days: int | None = None
    lookahead_days: int = DEFAULT_LOOKAHEAD_DAYS

    @property
    def bounded(self) -> bool:
        return self.first is not None or self.last is not None

    def since_us(self) -> int | None:
        return _day_us(self.first) if self.first else None

    def until_us(self) -> int | None:
        return _day_us(self.last) + DAY_US if self.last else None

    def read_from(self) -> str | None:
        if self.first is None or self.lookback_days is None:
            return None
        return _shift(self.first, -self.lookback_days)

    def read_to(self) -> str | None:
        return _shift(self.last, self.lookahead_days) if self.last else None

    def describe(self) -> str:
        return " between %s and %s" % (self.first or "-", self.last or "-") if self.bounded else ""


def _day_us(day: str) -> int:
    d = dt.date.fromisoformat(day)
    return (d - dt.date(1970, 1, 1)).days * DAY_US


def _shift(day: str, days: int) -> str:
    return (dt.date.fromisoformat(day) + dt.timedelta(days=days)).isoformat()


def guard(name: str, df: DataFrame) -> DataFrame:
    """Every NOT NULL column of the contract, checked row by row as it is read (no extra job): a
    null where the contract has a default (schema.COLUMN_DEFAULTS: a file from a bridge that did
    not write the column) reads as that default; any other null (a key column missing, a broken
    writer) stops the job with a one-line error naming the file. Columns the plan never reads are
    pruned, and their checks with them."""
    required = {f.name for f in TABLES[name] if not f.nullable}
    defaults = COLUMN_DEFAULTS.get(name, {})
    cols = []
    for c in df.columns:
        if c in defaults:
            cols.append("coalesce(`%s`, %s) AS `%s`" % (c, defaults[c], c))
        elif c in required:
            msg = "concat('%s%s: null %s (NOT NULL in the contract) in ', input_file_name())" % (
                _GUARD,
                name,
                c,
            )
            cols.append("CASE WHEN `%s` IS NULL THEN raise_error(%s) ELSE `%s` END AS `%s`" % (c, msg, c, c))
        else:
            cols.append("`%s`" % c)
    return df.selectExpr(*cols)  # SQL text: one Py4J round trip per column, not ~50


def extract(
    spark: SparkSession,
    input_dir: str,
    dates: DateRange | None = None,
    progress: Progress | None = None,
) -> Inputs:
    """Read the three tables with the contract's schema (no inference), only the date partitions
    the range needs. Types are checked by the Parquet reader in every file it opens (a mismatch
    fails the first action; run_job turns it into BadInput), NOT NULL columns by guard."""
    progress = progress or Progress(enabled=False)
    dates = dates or DateRange()
    check_date("--from", dates.first)
    check_date("--to", dates.last)
    lo, hi = dates.read_from(), dates.read_to()
    frames: dict[str, DataFrame] = {}
    for name in TABLES:
        path = join(input_dir, name)
        schema = spark_schema(name)
        df: DataFrame | None = None
        files = list_files(spark, path)
        if not files and name == "arrivals":
            raise _not_an_export(spark, input_dir)
        if not files:
            progress.log("%s: no data at %s, taken as empty" % (name, path))
        wanted = [u for u, d in files if (lo is None or d >= lo) and (hi is None or d <= hi)]
        if wanted:
            try:
                df = spark.read.schema(schema).option("basePath", path).parquet(*wanted)
            except AnalysisException as e:
                raise BadInput("%s: cannot read (%s)" % (path, str(e).splitlines()[0][:160])) from None
            df = dedup(name, guard(name, df))
        if df is None:
            df = spark.createDataFrame([], schema)
        frames[name] = df.select(*(f.name for f in schema.fields))
    return Inputs(frames["arrivals"], frames["losses"], frames["boots"])


def _not_an_export(spark: SparkSession, input_dir: str) -> BadInput:
    """Why input_dir has no arrivals partitions, in one line."""
    path = join(input_dir, "arrivals")
    if has_files(spark, input_dir) is None:
        return BadInput("input not found: %s" % input_dir)
    if has_files(spark, path):
        return BadInput(
            "%s: not partitioned by %s=YYYY-MM-DD (the `leadwire export` layout)" % (path, PARTITION_COLUMN)
        )
    return BadInput("%s: not found (expected DIR/arrivals/date=YYYY-MM-DD/*.parquet)" % path)


_MISMATCH = re.compile(
    r"(?:Error while reading file|Encountered error while reading file) (\S+?)\.?\s.*?"
    r"(?:Parquet column|column) \[?([A-Za-z_0-9]+)\]?.*?"
    r"(?:Expected Spark type|Expected:) \"?([A-Za-z0-9_()]+)\"?"
    r".*?(?:actual Parquet type|Found:) \"?([A-Za-z0-9_()]+)\"?",
    re.S,
)


_GONE = re.compile(r"FILE_NOT_EXIST\] Encountered error while reading file (\S+?)\. File does not exist")


def bad_input_from(e: Exception) -> BadInput | None:
    """The one-line BadInput an executor failure stands for (a null guard, a Parquet file whose
    column has another type, an export file gone since it was listed), or None for any other
    failure."""
    text = str(e)
    i = text.find(_GUARD)
    if i >= 0:
        return BadInput(text[i + len(_GUARD) :].splitlines()[0].strip())
    m = _GONE.search(text)
    if m:
        return BadInput(
            "%s: gone since the job listed it (an export run merged its day into a new file, or "
            "its retention passed): run the job again" % m.group(1)
        )
    m = _MISMATCH.search(text)
    if m:
        return BadInput(
            "%s: wrong schema: column %r is %s, expected %s (contract in docs/fleet.md)"
            % (m.group(1), m.group(2), m.group(4).lower(), m.group(3).lower())
        )
    if "PARQUET_COLUMN_DATA_TYPE_MISMATCH" in text or "SchemaColumnConvertNotSupported" in text:
        return BadInput("wrong schema: %s" % text.splitlines()[0][:200])
    return None


def read_files(spark: SparkSession, input_dir: str, name: str, uris: list[str]) -> DataFrame:
    """The export table `name` from exactly these files (the contract's columns, guarded as
    extract reads them; no partition column; losses and boots without duplicate rows), empty
    without files. A file may lie outside the table's folder (one an export run merged away,
    kept in _retired: host/fleet/manifests.py)."""
    schema = spark_schema(name, with_partition=False)
    if not uris:
        return spark.createDataFrame([], schema)
    try:
        df = spark.read.schema(schema).parquet(*uris)
    except AnalysisException as e:
        path = join(input_dir, name)
        raise BadInput("%s: cannot read (%s)" % (path, str(e).splitlines()[0][:160])) from None
    return dedup(name, guard(name, df))


def dedup(name: str, df: DataFrame) -> DataFrame:
    """Losses and boots without repeated rows (an export run retried after a crash may have
    published some twice; both tables are small). Arrivals are left as they are: an export never
    writes an arrival twice, and a row repeated there is a duplicate the job counts."""
    return df.dropDuplicates() if name in ("losses", "boots") else df
