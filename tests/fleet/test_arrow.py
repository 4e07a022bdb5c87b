"""arrow.to_arrow on every PySpark the job runs on: toArrow where it exists (4.0+), a classic
3.5 session's Arrow batches, a 3.5 Spark Connect session's toPandas; each gives exactly what
toArrow gives (schema with UTC timestamps, nulls, an empty result)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from leadwire.fleet.arrow import from_batches, from_pandas, to_arrow

pytestmark = pytest.mark.spark


class _Without:
    """A DataFrame as an older PySpark has it: the named attributes missing."""

    def __init__(self, df: Any, *missing: str) -> None:
        self._df, self._missing = df, missing

    def __getattr__(self, name: str) -> Any:
        if name in self._missing:
            raise AttributeError(name)
        return getattr(self._df, name)


def test_to_arrow_without_toarrow_gives_what_toarrow_gives(spark: SparkSession) -> None:
    t0 = dt.datetime(2026, 1, 1, 12, 30, 0, 123456, tzinfo=dt.UTC)
    df = spark.createDataFrame(
        [("a", 1, 2.5, t0, True), ("b", None, None, None, None), ("c", 3, -1.0, t0, False)],
        "s string, n bigint, x double, ts timestamp, flag boolean",
    )
    want = df.toArrow()
    assert want.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert to_arrow(df).equals(want)
    assert to_arrow(_Without(df, "toArrow")).equals(want)  # classic 3.5: Arrow batches
    assert to_arrow(_Without(df, "toArrow", "_collect_as_arrow")).equals(want)  # 3.5 Connect: pandas
    assert from_batches(df).equals(want) and from_pandas(df).equals(want)
    empty = df.where("n > 100")
    assert from_batches(empty).equals(empty.toArrow()) and from_pandas(empty).equals(empty.toArrow())
    assert from_pandas(df).column("ts").to_pylist() == [t0, None, t0]
