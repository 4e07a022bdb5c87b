"""The whole job on synthetic data with known faults; the DuckDB oracle; bad input; the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from leadwire.fleet.job import EXECUTOR_TABLES, SMALL_TABLES, TABLE_ORDER, BadInput, run_job
from leadwire.fleet.synth import SynthConfig, SynthTruth, generate, write_export

pytestmark = pytest.mark.spark

JOB = Path(__file__).resolve().parents[2] / "host" / "fleet" / "job.py"


@pytest.fixture(scope="module")
def synth_run(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path, SynthTruth, dict]:
    base = tmp_path_factory.mktemp("fleet")
    tables, truth = generate(SynthConfig(rows=12_000, devices=5, lead_errors=2, dup_flag_errors=1, seed=5))
    write_export(tables, str(base / "export"))
    summary = run_job(str(base / "export"), str(base / "out"), spark, progress=False, worst_n=3)
    return base / "export", base / "out", truth, summary


def test_job_finds_exactly_the_injected_faults(synth_run: tuple[Path, Path, SynthTruth, dict]) -> None:
    _, _, truth, s = synth_run
    t = truth.totals
    assert t["wrapped_streams"] > 0 and t["restarts"] > 0 and t["overruns"] > 0
    for key in (
        "devices",
        "rows",
        "unique",
        "lost",
        "duplicates",
        "late",
        "lateness_seq_sum",
        "restarts",
        "overruns",
        "events_lost_exact",
        "recovery_phases",
        "retransmissions",
        "lead_eq1",
        "lead_eq0",
        "lead_gt1",
        "lead_lt0",
        "lead_mismatches",
        "dup_flag_mismatches",
    ):
        got = s[{"rows": "messages", "lateness_seq_sum": "lateness_seq_sum"}.get(key, key)]
        assert got == t[{"lateness_seq_sum": "lateness_sum"}.get(key, key)], key
    assert s["reorder_depth_sum"] == t["lateness_sum"]  # each delayed message is overtaken k times
    assert s["lateness_seq_max"] == t["lateness_max"]
    assert s["mismatch_rows"] == 3
    assert s["rx_to_commit_p50_us"] == pytest.approx(t["latency_rx_to_commit_p50_us"])
    assert s["gen_to_rx_p99_us"] == pytest.approx(t["latency_gen_to_rx_p99_us"])


def test_job_writes_tables_report_and_plots(synth_run: tuple[Path, Path, SynthTruth, dict]) -> None:
    export, out, _, _ = synth_run
    for name in SMALL_TABLES:  # collected to the driver: one Parquet and one CSV file each
        assert (out / "parquet" / (name + ".parquet")).is_file(), name
        assert (out / "csv" / (name + ".csv")).is_file(), name
    for name in EXECUTOR_TABLES:  # written by the executors: a directory of part files
        assert list((out / "parquet" / (name + ".parquet")).rglob("part-*.parquet")), name
        assert not (out / "csv" / (name + ".csv")).exists()
    days = sorted(p.name for p in (out / "parquet" / "channel_windows.parquet").glob("date=*"))
    assert days == sorted(p.name for p in (export / "arrivals").glob("date=*")) and len(days) == 3
    html = (out / "index.html").read_text()
    for png in ("lead_histogram", "loss_over_time", "worst_devices", "by_firmware", "by_transport"):
        assert (out / (png + ".png")).stat().st_size > 1000
        assert png + ".png" in html
    assert "disagree with the recomputation" in html  # mismatches are reported, not hidden
    assert len(pq.read_table(out / "mismatches")) == 3
    worst = pd.read_csv(out / "csv" / "worst_devices.csv")
    assert worst["rank"].tolist() == [1, 2, 3]
    assert (out / "summary.json").is_file()


def test_spark_equals_duckdb_oracle(synth_run: tuple[Path, Path, SynthTruth, dict]) -> None:
    pytest.importorskip("duckdb")
    from leadwire.fleet.oracle import compare_tables, read_job_tables, run_oracle

    export, out, _, _ = synth_run
    got = read_job_tables(str(out), TABLE_ORDER)
    want = run_oracle(str(export), worst_n=3)
    assert compare_tables(got, want, TABLE_ORDER) == []


def _write(path: Path, table: pa.Table) -> None:
    path.mkdir(parents=True)
    pq.write_table(table, path / "part-0.parquet")


def test_bad_input_missing_wrong_schema_empty(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="input not found"):
        run_job(str(tmp_path / "nope"), str(tmp_path / "out"), spark, progress=False)
    (tmp_path / "no_arrivals").mkdir()
    with pytest.raises(BadInput, match="arrivals: not found"):
        run_job(str(tmp_path / "no_arrivals"), str(tmp_path / "out"), spark, progress=False)
    tables, _ = generate(SynthConfig(rows=200, devices=1, seed=1))
    arr = tables["arrivals"]
    bad = arr.set_column(arr.schema.get_field_index("seq"), "seq", arr.column("seq").cast(pa.string()))
    _write(tmp_path / "wrong" / "arrivals" / "date=2026-01-01", bad)
    wrong = r"part-0.parquet: wrong schema: column 'seq' is binary, expected bigint"
    with pytest.raises(BadInput, match=wrong):
        run_job(str(tmp_path / "wrong"), str(tmp_path / "out"), spark, progress=False)
    # a null key (a writer that lost a column) is refused in one line naming the file
    nulls = arr.set_column(0, pa.field("device_id", pa.string()), pa.nulls(len(arr), pa.string()))
    _write(tmp_path / "nullkey" / "arrivals" / "date=2026-01-01", nulls)
    null_key = r"^arrivals: null device_id \(NOT NULL in the contract\) in file:.*part-0"
    with pytest.raises(BadInput, match=null_key):
        run_job(str(tmp_path / "nullkey"), str(tmp_path / "out"), spark, progress=False)
    _write(tmp_path / "empty" / "arrivals" / "date=2026-01-01", arr.slice(0, 0))
    with pytest.raises(BadInput, match="no arrival rows"):
        run_job(str(tmp_path / "empty"), str(tmp_path / "out"), spark, progress=False)
    write_export(tables, str(tmp_path / "ok"))
    with pytest.raises(BadInput, match="no arrival rows between 2030-01-01"):
        run_job(str(tmp_path / "ok"), str(tmp_path / "out"), spark, progress=False, date_from="2030-01-01")


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    from leadwire.fleet.cli import fleet

    res = CliRunner().invoke(fleet, ["--input", str(tmp_path / "missing"), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2
    assert res.output.strip().count("\n") == 0
    assert "input not found" in res.output


def test_cli_takes_uris_and_one_range_option(tmp_path: Path) -> None:
    from leadwire.fleet.cli import _check_input, fleet

    # a non-local URI is not checked on the local disk (Spark checks it); file: URIs are
    assert _check_input("hdfs://namenode/leadwire/export", str(tmp_path / "o")) is None
    assert _check_input("file://" + str(tmp_path / "none"), "s3a://b/o") == "input not found: file://%s" % (
        tmp_path / "none"
    )
    args = ["--input", "hdfs://nn/x", "--out", "hdfs://nn/o", "--since", "2026-01-01", "--day", "2026-01-02"]
    res = CliRunner().invoke(fleet, args)
    assert (
        res.exit_code == 2
        and res.output == "leadwire fleet: use one of --from/--to, --since, --day, --daily\n"
    )


def test_small_local_input_runs_the_jvm_with_c1_only(tmp_path: Path) -> None:
    from leadwire.fleet.job import SMALL_INPUT_BYTES, input_bytes, small_input_conf

    day = tmp_path / "export" / "arrivals" / "date=2026-01-01"
    day.mkdir(parents=True)
    (day / "a.parquet").write_bytes(b"x" * 1000)
    (day / "b.parquet").write_bytes(b"y" * 234)
    export = str(tmp_path / "export")
    assert input_bytes(export) == 1234 and input_bytes("file://" + export) == 1234
    assert input_bytes(str(tmp_path / "none")) is None and input_bytes("hdfs://nn/export") is None
    c1 = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"}
    assert small_input_conf("local[2]", 1234) == c1 and small_input_conf("local[*]", SMALL_INPUT_BYTES) == c1
    assert small_input_conf("local[2]", SMALL_INPUT_BYTES + 1) == {}  # long runs: C2's faster code
    assert small_input_conf("local[2]", None) == {}  # size unknown
    assert small_input_conf("spark://127.0.0.1:7077", 1234) == {}  # a cluster: its own launch


def test_spark_submit_entry_runs_as_a_script_without_leadwire_installed(tmp_path: Path) -> None:
    # -S: no site hooks, so the editable leadwire install is invisible; pyspark still imports
    env: dict[str, Any] = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    probe = subprocess.run([sys.executable, "-S", "-c", "import leadwire"], capture_output=True, env=env)
    assert probe.returncode != 0
    res = subprocess.run(
        [sys.executable, "-S", str(JOB), "--help"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert "--input" in res.stdout


def test_a_newer_bridges_column_is_not_read_an_older_exports_missing_one_gets_its_default(
    spark: SparkSession, tmp_path: Path
) -> None:
    tables, _ = generate(SynthConfig(rows=600, devices=2, days=1, seed=4))
    arr = tables["arrivals"]
    half = arr.num_rows // 2
    old = arr.slice(0, half).drop_columns(["priority", "frame_bytes", "host_commit_ts", "transport"])
    new = arr.slice(half).append_column("rssi", pa.array([-60] * (arr.num_rows - half), pa.int32()))
    day = tmp_path / "export" / "arrivals" / "date=2026-01-01"
    day.mkdir(parents=True)
    pq.write_table(old, day / "part-old.parquet")
    pq.write_table(new, day / "part-new.parquet")
    s = run_job(str(tmp_path / "export"), str(tmp_path / "out"), spark, progress=False, report=False)
    assert s["messages"] == arr.num_rows and s["lead_mismatches"] == 0 and s["dup_flag_mismatches"] == 0
    by_transport = pq.read_table(tmp_path / "out" / "parquet" / "by_transport.parquet").to_pydict()
    counts = dict(zip(by_transport["transport"], by_transport["messages"], strict=True))
    assert counts["unknown"] == half and sum(counts.values()) == arr.num_rows
    # a key column has no default: a file without it is refused in one line
    keyless = arr.drop_columns(["seq"])
    bad = tmp_path / "keyless" / "arrivals" / "date=2026-01-01"
    bad.mkdir(parents=True)
    pq.write_table(keyless, bad / "part-0.parquet")
    with pytest.raises(BadInput, match=r"^arrivals: null seq \(NOT NULL in the contract\) in file:"):
        run_job(str(tmp_path / "keyless"), str(tmp_path / "out2"), spark, progress=False, report=False)


def test_progress_logs_the_task_counts_of_running_stages_in_a_classic_session(spark) -> None:
    import io
    import re
    import time

    from leadwire.fleet.progress import Progress

    log = io.StringIO()
    prog = Progress(stream=log, tick=0.1)
    prog.watch(spark)
    try:  # 8 tasks of 0.3 s on 2 cores: a stage that runs for ~1.2 s
        spark.sparkContext.parallelize(range(8), 8).map(lambda x: time.sleep(0.3) or x).collect()
    finally:
        prog.close()
    assert re.search(r"spark stage \d+: \d/8 tasks", log.getvalue()), log.getvalue()
