"""The generator's ground truth (numpy only, no Spark) and the schema module's import contract."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow.dataset as ds

from leadwire.fleet.schema import ARRIVALS, TABLES
from leadwire.fleet.synth import SynthConfig, bridge_lead, generate, write_export


def test_bridge_lead_wraps_and_flags_duplicates() -> None:
    seq = np.array([2**32 - 2, 2**32 - 1, 0, 2, 1, 1], dtype=np.int64)
    lead, dup = bridge_lead(seq)
    assert lead.tolist() == [1, 1, 1, 2, -1, -1]
    assert dup.tolist() == [False, False, False, False, False, True]


def test_generator_truth_is_consistent(tmp_path) -> None:
    tables, truth = generate(SynthConfig(rows=30_000, devices=6, seed=2))
    t = truth.totals
    arr = tables["arrivals"]
    assert arr.schema.equals(ARRIVALS)
    assert arr.num_rows == t["rows"] == t["events"] + t["reports"]
    assert t["unique"] + t["duplicates"] == t["rows"]
    assert int(np.sum(arr.column("duplicate").to_numpy())) == t["duplicates"]
    lead = arr.column("lead").to_numpy()
    assert int((lead < 0).sum()) == t["lead_lt0"]
    assert t["restarts"] == t["boots"] - t["devices"]
    assert sum(d["lost"] for d in truth.per_device.values()) == t["lost"]
    write_export(tables, str(tmp_path))
    for name, schema in TABLES.items():
        d = ds.dataset(tmp_path / name, format="parquet", partitioning="hive")
        assert d.count_rows() == tables[name].num_rows
        assert all(f in d.schema.names for f in schema.names)
        assert "date" in d.schema.names


def test_schema_module_imports_without_pyspark() -> None:
    code = (
        "import sys; sys.modules['pyspark'] = None; import leadwire.fleet.schema as s; print(len(s.ARRIVALS))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "21"
