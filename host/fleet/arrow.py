"""A DataFrame's rows on the driver as a pyarrow Table, on every PySpark the job runs on:
``DataFrame.toArrow`` where PySpark has it (4.0 and later, classic and Spark Connect), else the
Arrow batches a classic 3.5 session collects, else ``toPandas`` (a 3.5 Spark Connect session)
converted with the schema Spark's own ``toArrow`` gives (timestamps in UTC, the job's time zone)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa


def to_arrow(df: Any) -> pa.Table:
    """The rows of `df` as a pyarrow Table with Spark's Arrow schema for it."""
    native = getattr(df, "toArrow", None)
    if native is not None:
        return native()
    if getattr(df, "_collect_as_arrow", None) is not None:
        return from_batches(df)
    return from_pandas(df)


def arrow_schema(df: Any) -> pa.Schema:
    """Spark's Arrow schema of `df` (what ``toArrow`` gives: timestamps as UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        return to_arrow_schema(df.schema, timezone="UTC")
    except TypeError:  # PySpark 3.5: timestamps are UTC without being asked
        return to_arrow_schema(df.schema)


def from_batches(df: Any) -> pa.Table:
    """A classic session's Arrow batches (PySpark 3.5 has them, without ``toArrow``)."""
    schema = arrow_schema(df)
    batches = df._collect_as_arrow()
    if not batches:
        return schema.empty_table()
    return pa.Table.from_batches(batches).cast(schema)


def from_pandas(df: Any) -> pa.Table:
    """``toPandas`` converted to Spark's Arrow schema. Timestamps come from pandas without a zone,
    in the session's time zone, which the job sets to UTC (session.RUNTIME_CONF)."""
    schema = arrow_schema(df)
    pdf = df.toPandas()
    return pa.Table.from_pandas(pdf, schema=schema, preserve_index=False)
