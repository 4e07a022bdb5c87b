"""The fleet job under Spark Connect: the package's Spark Connect server (conftest.spark_connect:
its own JVM on 127.0.0.1), the job run through a remote session (no SparkContext, no JVM in the
client: `leadwire fleet` with SPARK_REMOTE set), its tables compared with a local-mode run of
the same export (the package's small_run, going on while the client runs); the same for
incremental runs of a growing export that ends with the export's rows (so that local run is also
their full run). The client is stopped, also when the test fails; the whole test is bounded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from leadwire.fleet.job import DATED_TABLES, TABLE_ORDER
from leadwire.fleet.oracle import compare_tables, read_job_tables

from .conftest import SMALL_EXPORT, ConnectServer, LocalRun

pytestmark = pytest.mark.spark

CONNECT_TIMEOUT = 600  # seconds, server start to stop, on a loaded 2-core machine

# An operator's processes with SPARK_REMOTE set, no JVM of their own: `leadwire fleet` (its
# --remote from SPARK_REMOTE), then the job incremental after each export run of a growing export.
CLIENT = """
import json
import subprocess
import sys
from pyspark.sql import SparkSession
from leadwire.fleet.job import run_job
from leadwire.fleet.session import is_connect
from leadwire.fleet.synth import SynthConfig, generate
from leadwire.fleet.synth_days import export_days, publish_run

export, base = sys.argv[1], sys.argv[2]
cli = [sys.executable, "-m", "leadwire.cli", "fleet", "--input", export, "--out", base + "/remote"]
subprocess.run([*cli, "--no-report"], check=True, timeout=300)
spark = SparkSession.builder.getOrCreate()
assert is_connect(spark), type(spark)
tables, _ = generate(SynthConfig(**json.loads(sys.argv[3])))
days = export_days(tables)
for k in range(len(days) + 1):
    publish_run(tables, base + "/grow", k, days)
    run_job(base + "/grow", base + "/inc", spark, progress=True, report=False, incremental=True)
spark.stop()
"""


@pytest.mark.timeout(CONNECT_TIMEOUT)
def test_the_job_under_spark_connect_equals_local_mode(
    spark_connect: ConnectServer,
    small_export: tuple[dict, Path],
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    tables, export = small_export
    env = {**os.environ, "SPARK_REMOTE": spark_connect.url()}
    with open(tmp_path / "client.out", "w") as out, open(tmp_path / "client.err", "w") as err:
        client = subprocess.Popen(
            [sys.executable, "-c", CLIENT, str(export), str(tmp_path), json.dumps(SMALL_EXPORT)],
            stdout=out,
            stderr=err,
            env=env,
        )
        try:
            # the local run (unless the cluster test made it), while the client's go on in the server
            small_run: LocalRun = request.getfixturevalue("small_run")
            rc = client.wait(CONNECT_TIMEOUT - 60)
        finally:
            if client.poll() is None:
                client.kill()
                client.wait(10)
    assert rc == 0, (tmp_path / "client.err").read_text()[-3000:]
    local = read_job_tables(str(small_run.out), TABLE_ORDER)
    # `leadwire fleet`'s summary (format_summary): the same rows and mismatches as the local run
    out = (tmp_path / "client.out").read_text()
    ls = small_run.summary
    assert "fleet: %(devices)d devices, %(rows)d arrivals (%(unique)d unique) in " % ls in out, out
    assert "consistency: %(lead_mismatches)d lead and %(dup_flag_mismatches)d duplicate-flag" % ls in out
    assert ls["lead_mismatches"] + ls["dup_flag_mismatches"] == 2
    got = read_job_tables(str(tmp_path / "remote"), TABLE_ORDER)
    assert compare_tables(got, local, TABLE_ORDER) == []
    # the incremental runs under Connect equal a local full run of the grown export: the grown
    # export holds the export's rows, table by table, so the local run is also its full run
    for name in tables:
        assert _rows(tmp_path / "grow" / name) == _rows(export / name), name
    got = read_job_tables(str(tmp_path / "inc"), DATED_TABLES)
    want = read_job_tables(str(small_run.out), DATED_TABLES)
    assert compare_tables(got, want, TABLE_ORDER) == []


def _rows(table_dir: Path) -> list[tuple[str, ...]]:
    """A table's rows in an export (its date partitions included), as sorted tuples of strings."""
    t = pq.read_table(table_dir).to_pandas()
    return sorted(tuple(str(v) for v in r) for r in t[sorted(t.columns)].itertuples(index=False))
