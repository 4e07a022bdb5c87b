"""Fleet job test fixtures: ONE SparkSession (one JVM) for the whole test run, and row factories."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark")

from pyspark.sql import DataFrame, SparkSession  # noqa: E402

from leadwire.fleet.schema import spark_schema  # noqa: E402

T0 = dt.datetime(2026, 1, 1, 0, 0, tzinfo=dt.UTC)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from leadwire.fleet.job import build_session

    extra = {
        "spark.default.parallelism": "2",
        "spark.sql.warehouse.dir": "/tmp/leadwire-fleet-tests-warehouse",
    }
    session = build_session("local[2]", 2, "1g", "leadwire-fleet-tests", adaptive=False, extra=extra)
    yield session
    session.stop()


ARRIVAL_DEFAULTS: dict[str, Any] = {
    "device_id": "d1",
    "boot_epoch": 7,
    "boots": 1,
    "channel": 0,
    "kind": "event",
    "session": 0,
    "lead_channel": -1,
    "seq": 0,
    "arrival": 1,
    "lead": 1,
    "duplicate": False,
    "retransmission": False,
    "priority": 0,
    "payload_bytes": 10,
    "frame_bytes": 22,
    "gen_ts": None,
    "host_rx_ts": T0,
    "host_commit_ts": T0,
    "firmware_version": "1.0.0",
    "transport": "udp",
    "bridge_id": "b1",
}


def stream(
    seqs: list[int], first_arrival: int = 1, t0: dt.datetime = T0, step_s: float = 1.0, **common: Any
) -> list[dict[str, Any]]:
    """Arrival rows for seqs in arrival order: arrival counter and receive time step by one."""
    rows = []
    for i, s in enumerate(seqs):
        rx = t0 + dt.timedelta(seconds=i * step_s)
        rows.append(
            {
                **common,
                "seq": s,
                "arrival": first_arrival + i,
                "host_rx_ts": rx,
                "host_commit_ts": rx + dt.timedelta(milliseconds=1),
            }
        )
    return rows


def arrivals_df(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    schema = spark_schema("arrivals", with_partition=False)
    data = [tuple({**ARRIVAL_DEFAULTS, **r}[f.name] for f in schema.fields) for r in rows]
    return spark.createDataFrame(data, schema)


def table_df(spark: SparkSession, table: str, rows: list[dict[str, Any]]) -> DataFrame:
    schema = spark_schema(table, with_partition=False)
    return spark.createDataFrame([tuple(r.get(f.name) for f in schema.fields) for r in rows], schema)
