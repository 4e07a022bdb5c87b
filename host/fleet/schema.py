"""The export contract between the bridge and the fleet job, defined once.

Three Hive-partitioned Parquet tables live under an export directory::

    DIR/arrivals/date=YYYY-MM-DD/*.parquet   one row per message a bridge received
    DIR/losses/date=YYYY-MM-DD/*.parquet     one row per recovery answer (spec 004 case 3) acted on
    DIR/boots/date=YYYY-MM-DD/*.parquet      one row per device boot seen

The pyarrow schemas below are the columns stored *inside* the files; the partition column ``date``
(string ``YYYY-MM-DD`` of the table's time column, UTC) lives in the directory names only.
This module imports pyarrow only; the Spark StructTypes are built on demand by
:func:`spark_schema`, which imports pyspark inside the function, so the bridge export can import
this module without Spark installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql.types import StructType

U32 = 1 << 32  # offsets (spec 004) and MessageNumbers (spec 003) live in Z/2^32
HALF = 1 << 31
MASK_U32 = U32 - 1

PARTITION_COLUMN = "date"
TS = pa.timestamp("us", tz="UTC")

ARRIVALS = pa.schema(
    [
        pa.field("device_id", pa.string(), nullable=False),
        pa.field("boot_epoch", pa.int64(), nullable=False),
        pa.field("boots", pa.int64(), nullable=False),
        pa.field("channel", pa.int32(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),  # "event" | "report"
        pa.field("session", pa.int64(), nullable=False),  # push session for reports, 0 for events
        pa.field("lead_channel", pa.int32(), nullable=False),  # -1 for events, = channel for reports
        pa.field("seq", pa.int64(), nullable=False),  # u32 offset or MessageNumber
        pa.field("arrival", pa.int64(), nullable=False),  # per-device arrival counter
        pa.field("lead", pa.int64(), nullable=False),  # spec 000 lead as the bridge computed it
        pa.field("duplicate", pa.bool_(), nullable=False),
        pa.field("retransmission", pa.bool_(), nullable=False),
        pa.field("priority", pa.int32(), nullable=False),
        pa.field("payload_bytes", pa.int32(), nullable=False),
        pa.field("frame_bytes", pa.int32(), nullable=False),
        pa.field("gen_ts", TS, nullable=True),
        pa.field("host_rx_ts", TS, nullable=False),
        pa.field("host_commit_ts", TS, nullable=False),
        pa.field("firmware_version", pa.string(), nullable=False),
        pa.field("transport", pa.string(), nullable=False),  # "udp" | "serial" | "sim"
        pa.field("bridge_id", pa.string(), nullable=False),
    ]
)

LOSSES = pa.schema(
    [
        pa.field("device_id", pa.string(), nullable=False),
        pa.field("boot_epoch", pa.int64(), nullable=False),
        pa.field("client_n", pa.int64(), nullable=False),
        pa.field("n0", pa.int64(), nullable=False),
        pa.field("n1", pa.int64(), nullable=False),
        pa.field("lost", pa.int64(), nullable=True),  # exact when same boot, else null
        pa.field("cause", pa.string(), nullable=False),  # "overrun" | "restart" | "first_contact"
        pa.field("started_ts", TS, nullable=False),
        pa.field("ended_ts", TS, nullable=True),
        pa.field("recovered", pa.int64(), nullable=False),
        pa.field("firmware_version", pa.string(), nullable=False),
        pa.field("transport", pa.string(), nullable=False),
        pa.field("bridge_id", pa.string(), nullable=False),
    ]
)

BOOTS = pa.schema(
    [
        pa.field("device_id", pa.string(), nullable=False),
        pa.field("boot_epoch", pa.int64(), nullable=False),
        pa.field("boots", pa.int64(), nullable=False),
        pa.field("firmware_version", pa.string(), nullable=False),
        pa.field("board", pa.string(), nullable=False),
        pa.field("transport", pa.string(), nullable=False),
        pa.field("first_seen_ts", TS, nullable=False),
        pa.field("detected_by", pa.string(), nullable=False),  # "hello" | "recovery"
        pa.field("bridge_id", pa.string(), nullable=False),
    ]
)

TABLES: dict[str, pa.Schema] = {"arrivals": ARRIVALS, "losses": LOSSES, "boots": BOOTS}

# The column whose UTC date names the partition a row is written to.
PARTITION_SOURCE: dict[str, str] = {
    "arrivals": "host_rx_ts",
    "losses": "started_ts",
    "boots": "first_seen_ts",
}

# What a NOT NULL column reads as where a file lacks it (an export from an older bridge), as SQL
# text over the row's other columns. The columns not listed here (a lead domain's key, the
# order and time of an arrival, the bridge's lead and duplicate flag, a recovery's range and
# cause) have no meaningful default: a file without one is refused in one line. A column a file
# has that the contract does not (a newer bridge's) is not read.
COLUMN_DEFAULTS: dict[str, dict[str, str]] = {
    "arrivals": {
        "boots": "CAST(0 AS BIGINT)",
        "retransmission": "false",
        "priority": "0",
        "payload_bytes": "0",
        "frame_bytes": "0",
        "host_commit_ts": "host_rx_ts",
        "firmware_version": "'unknown'",
        "transport": "'unknown'",
        "bridge_id": "'unknown'",
    },
    "losses": {
        "recovered": "CAST(0 AS BIGINT)",
        "firmware_version": "'unknown'",
        "transport": "'unknown'",
        "bridge_id": "'unknown'",
    },
    "boots": {
        "boots": "CAST(0 AS BIGINT)",
        "firmware_version": "'unknown'",
        "board": "'unknown'",
        "transport": "'unknown'",
        "detected_by": "'hello'",
        "bridge_id": "'unknown'",
    },
}

KINDS = ("event", "report")
TRANSPORTS = ("udp", "serial", "sim")
LOSS_CAUSES = ("overrun", "restart", "first_contact")
DETECTED_BY = ("hello", "recovery")


def _spark_type(t: pa.DataType) -> Any:
    from pyspark.sql import types as T

    if pa.types.is_string(t):
        return T.StringType()
    if pa.types.is_int64(t):
        return T.LongType()
    if pa.types.is_int32(t):
        return T.IntegerType()
    if pa.types.is_boolean(t):
        return T.BooleanType()
    if pa.types.is_timestamp(t):
        return T.TimestampType()
    raise TypeError("no Spark type for %s" % t)  # pragma: no cover


def spark_schema(table: str, with_partition: bool = True) -> StructType:
    """The Spark StructType matching TABLES[table] (plus the string partition column ``date``).

    Spark has no NOT NULL on files it reads, so every field is nullable on the Spark side; the job
    checks names and types, not nullability.
    """
    from pyspark.sql import types as T

    fields = [T.StructField(f.name, _spark_type(f.type), True) for f in TABLES[table]]
    if with_partition:
        fields.append(T.StructField(PARTITION_COLUMN, T.StringType(), True))
    return T.StructType(fields)
