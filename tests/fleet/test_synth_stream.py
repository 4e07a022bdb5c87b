"""write_synth: the export streamed in chunks equals generate() + write_export() in one chunk, and
its truth still counts every row when the export is written in several chunks."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds

from leadwire.fleet.synth import (
    SynthConfig,
    _add_counts,
    generate,
    percentile_of_counts,
    write_export,
    write_synth,
)


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_one_chunk_is_byte_identical_to_generate(tmp_path: Path) -> None:
    cfg = SynthConfig(rows=20_000, devices=5, lead_errors=2, dup_flag_errors=1, seed=7)
    tables, truth = generate(cfg)
    write_export(tables, str(tmp_path / "mem"))
    streamed = write_synth(cfg, str(tmp_path / "stream"))
    assert streamed.totals == truth.totals
    assert streamed.per_device == truth.per_device
    assert _digests(tmp_path / "stream") == _digests(tmp_path / "mem")


def test_several_chunks_count_every_row(tmp_path: Path) -> None:
    cfg = SynthConfig(rows=30_000, devices=6, seed=2)
    truth = write_synth(cfg, str(tmp_path), chunk_rows=8_000)
    t = truth.totals
    names = sorted(p.name for p in (tmp_path / "arrivals").rglob("*.parquet"))
    assert "part-0.parquet" in names and any(n.startswith("part-2-") for n in names)
    assert not list(tmp_path.glob(".staging*"))
    arr = ds.dataset(tmp_path / "arrivals", format="parquet", partitioning="hive").to_table()
    assert arr.num_rows == t["rows"] == t["events"] + t["reports"]
    assert int(np.sum(arr.column("duplicate").to_numpy())) == t["duplicates"]
    assert int((arr.column("lead").to_numpy() < 0).sum()) == t["lead_lt0"]
    devs = arr.column("device_id").to_pylist()
    assert {d: devs.count(d) for d in set(devs)} == {d: v["messages"] for d, v in truth.per_device.items()}
    boots = ds.dataset(tmp_path / "boots", format="parquet", partitioning="hive").count_rows()
    assert boots == t["boots"]


def test_rewrite_replaces_the_export(tmp_path: Path) -> None:
    cfg = SynthConfig(rows=12_000, devices=4, seed=3)
    write_synth(cfg, str(tmp_path), chunk_rows=3_000)
    first = _digests(tmp_path)
    truth = write_synth(cfg, str(tmp_path), chunk_rows=3_000)
    assert _digests(tmp_path) == first
    assert ds.dataset(tmp_path / "arrivals", format="parquet").count_rows() == truth.totals["rows"]


def test_percentile_of_counts_is_numpys() -> None:
    rng = np.random.default_rng(4)
    for n in (1, 2, 3, 17, 1000, 123_457):
        values = np.exp(rng.normal(np.log(20_000), 0.6, n)).astype(np.int64)
        counts = np.zeros(0, np.int64)
        for part in np.array_split(values, 3):
            counts = _add_counts(counts, part)
        for p in (0, 37.5, 50, 99, 100):
            assert percentile_of_counts(counts, p) == float(np.percentile(values, p))
