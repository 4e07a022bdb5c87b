"""`leadwire export`: the fleet job's Parquet contract, and re-exporting never duplicates rows."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from leadwire.bridge import logs
from leadwire.bridge.daemon import Bridge
from leadwire.bridge.export import export
from leadwire.cli import main
from leadwire.fleet.schema import TABLES
from leadwire.tools.simdevice import SimFleet

from .helpers import bridge_config, query, wait_for

pytestmark = pytest.mark.timeout(60)


async def fill(tmp: Path, rounds: int, seed: int) -> None:
    """A store with events, a duplicate, an overrun, a restart and pushed reports."""
    fleet = await SimFleet(2, rate=0, capacity=16, seed=seed, ack_timeout=0.2).start()
    devs = fleet.describe()
    devs[0]["subscribe"] = [1]
    devs[1]["timestamp"] = "prefix_us"
    cfg = bridge_config(tmp, devs, polling={"adaptive": False, "interval": 0.03, "interval_max": 0.05})
    b = Bridge(cfg, logs.setup("warning"))
    await b.start()
    a, c = fleet.cores
    base = b.events_committed
    for r in range(rounds):
        a.write_events(3)
        c.write_events(5)
        want = base + 8 * (r + 1)
        await wait_for(lambda w=want: b.events_committed >= w)
    fleet.links[1].faults.dup_answers = 1
    c.write_events(2)
    await wait_for(lambda: b.clients["sim-1"].cc and sum(v[1] for v in b.clients["sim-1"].cc.values()) >= 1)
    c.write_events(40)  # overrun: 24 lost
    await wait_for(lambda: b.clients["sim-1"].dc["overruns"] >= 1 and b.clients["sim-1"].recovery is None)
    c.boot()
    c.write_events(3)  # restart
    await wait_for(lambda: b.clients["sim-1"].dc["restarts"] >= 1 and b.clients["sim-1"].recovery is None)
    await wait_for(lambda: b.clients["sim-0"].dc["reports_stored"] >= 2)
    await b.stop()
    await fleet.stop()


def read(out: Path, table: str):  # type: ignore[no-untyped-def]
    return ds.dataset(out / table, format="parquet", partitioning="hive").to_table()


def test_export_matches_schema_and_reexport_is_idempotent(tmp_path: Path) -> None:
    asyncio.run(fill(tmp_path, 3, seed=11))
    db = tmp_path / "store.db"
    out = tmp_path / "export"
    n_arr = query(db, "SELECT COUNT(*) FROM arrivals")[0][0]
    counts = export(str(db), out)
    assert counts["arrivals"] == n_arr and counts["boots"] == 3
    for name, schema in TABLES.items():
        for f in (out / name).rglob("*.parquet"):
            assert pq.read_schema(f).equals(schema, check_metadata=False), f
            assert f.parent.name.startswith("date=")
    t = read(out, "arrivals")
    assert t.num_rows == n_arr
    rows = t.to_pylist()
    keys = [(r["device_id"], r["arrival"]) for r in rows]
    assert len(set(keys)) == len(keys)
    assert {r["kind"] for r in rows} == {"event", "report"}
    assert {r["transport"] for r in rows} == {"udp"} and {r["bridge_id"] for r in rows} == {"test-bridge"}
    assert all(r["lead_channel"] == -1 and r["session"] == 0 for r in rows if r["kind"] == "event")
    assert all(r["lead_channel"] == r["channel"] and r["session"] >= 1 for r in rows if r["kind"] == "report")
    assert sum(r["duplicate"] for r in rows if r["kind"] == "event") == 2  # the duplicated batch of 2
    assert all(r["gen_ts"] is not None for r in rows if r["device_id"] == "sim-1" and not r["duplicate"])
    assert all(r["host_commit_ts"] >= r["host_rx_ts"] for r in rows)
    losses = read(out, "losses").to_pylist()
    by_cause = sorted((r["device_id"], r["cause"], r["lost"]) for r in losses)
    assert by_cause == [
        ("sim-0", "first_contact", None),
        ("sim-1", "first_contact", None),
        ("sim-1", "overrun", 24),
        ("sim-1", "restart", None),
    ]
    boots = sorted((r["device_id"], r["boots"], r["detected_by"]) for r in read(out, "boots").to_pylist())
    assert boots == [("sim-0", 1, "hello"), ("sim-1", 1, "hello"), ("sim-1", 2, "recovery")]

    # again: the same files, the same rows
    files = sorted(p.relative_to(out) for p in out.rglob("*.parquet"))
    r = CliRunner().invoke(main, ["export", "--store", str(db), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert sorted(p.relative_to(out) for p in out.rglob("*.parquet")) == files
    assert read(out, "arrivals").num_rows == n_arr and read(out, "losses").num_rows == 4

    # more data in the same store, exported on top: only new rows added, none twice
    asyncio.run(fill(tmp_path, 2, seed=12))  # new boots of the same devices
    n2 = query(db, "SELECT COUNT(*) FROM arrivals")[0][0]
    assert n2 > n_arr
    export(str(db), out)
    t = read(out, "arrivals")
    assert t.num_rows == n2
    keys = list(zip(t["device_id"].to_pylist(), t["arrival"].to_pylist(), strict=True))
    assert len(set(keys)) == n2
    export(str(db), out, since="2000-01-01")  # a full rewrite is idempotent too
    assert read(out, "arrivals").num_rows == n2


def test_export_errors(tmp_path: Path) -> None:
    r = CliRunner().invoke(
        main, ["export", "--store", str(tmp_path / "none.db"), "--out", str(tmp_path / "o")]
    )
    assert r.exit_code == 2 and "not found" in r.output
    r = CliRunner().invoke(
        main, ["export", "--store", "x.db", "--out", str(tmp_path / "o"), "--since", "yesterday"]
    )
    assert r.exit_code == 2 and "--since" in r.output
    assert not (tmp_path / "o").exists()
