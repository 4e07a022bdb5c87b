"""Export runs over months: each run touches only the days its rows belong to, publishes each
atomically, merges a day's small files, adds losses and boots as new files (a loss whose recovery
ends late republishes its day), records what it added in a manifest, survives a retry after a
crash without writing a row twice, and stops in one line on what `--repair` fixes."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from leadwire.bridge import export_manifest, export_publish
from leadwire.bridge.export import export
from leadwire.bridge.export_publish import ExportError
from leadwire.cli import main

from .export_store import BRIDGE, ExportStore, day, files, part, read, rows

pytestmark = pytest.mark.timeout(60)


def manifest(out: Path, run: int) -> dict:
    return json.loads((out / "_runs" / BRIDGE / ("%08d.json" % run)).read_text())


def test_runs_touch_only_their_days_and_merge_a_days_small_files(tmp_path: Path) -> None:
    s = ExportStore(tmp_path / "store.db")
    for k in range(30):
        s.events(k, 10)
    out = tmp_path / "export"
    assert export(str(s.path), out, compact_files=3) == {"arrivals": 300, "losses": 0, "boots": 0, "run": 1}
    assert files(out, "arrivals") == {day(k): [part(300)] for k in range(30)}
    old = {k: os.stat(out / "arrivals" / ("date=" + day(k)) / part(300)).st_ino for k in range(29)}
    old_dirs = {k: os.stat(out / "arrivals" / ("date=" + day(k))).st_ino for k in range(29)}

    # a reader listing and reading the last day while runs publish it sees whole versions only
    last = out / "arrivals" / ("date=" + day(29))
    seen: set[int] = set()
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                seen.add(sum(rows(last / n) for n in os.listdir(last) if not n.startswith(".")))
            except (FileNotFoundError, OSError):
                pass  # a file a merge removed after the listing: never a wrong count

    t = threading.Thread(target=reader)
    t.start()
    try:
        for run in range(2, 7):
            s.events(29, 10)
            assert export(str(s.path), out, compact_files=3) == {
                "arrivals": 10,
                "losses": 0,
                "boots": 0,
                "run": run,
            }
            if run == 5:
                assert files(out, "arrivals")[day(29)] == [part(320, 4), part(330), part(340)]
    finally:
        stop.set()
        t.join()
    # run 4 merged the day's three files (the 3 small ones + its own would be 4 > 3); run 6 again
    assert files(out, "arrivals")[day(29)] == [part(340, 6), part(350)]
    assert [rows(last / n) for n in (part(340, 6), part(350))] == [50, 10]
    assert seen <= {10, 20, 30, 40, 50, 60} and seen
    # the 29 other days were not touched: same directory, same file
    assert {k: os.stat(out / "arrivals" / ("date=" + day(k)) / part(300)).st_ino for k in range(29)} == old
    assert {k: os.stat(out / "arrivals" / ("date=" + day(k))).st_ino for k in range(29)} == old_dirs
    t_all = read(out, "arrivals")
    assert t_all.num_rows == 350
    assert len(set(zip(t_all["device_id"].to_pylist(), t_all["arrival"].to_pylist(), strict=True))) == 350
    # run 4's manifest: its new file added, the merged ones removed and kept in _retired
    m4 = manifest(out, 4)
    assert m4["added"] == [["arrivals", day(29), part(330), 10]]
    assert m4["removed"] == [["arrivals", day(29), n] for n in (part(300), part(310), part(320))]
    assert m4["windows"]["arrivals"] == [320, 330]
    kept = out / "_retired" / BRIDGE / "00000004" / "arrivals" / ("date=" + day(29))
    assert sorted(os.listdir(kept)) == [part(300), part(310), part(320)]
    assert export_manifest.runs(out, BRIDGE) == [1, 2, 3, 4, 5, 6]
    s.close()


def test_losses_and_boots_are_added_per_run_and_a_late_end_republishes_its_day(tmp_path: Path) -> None:
    s = ExportStore(tmp_path / "store.db")
    s.events(0, 5)
    s.boot(0, epoch=7, boots=1)
    s.loss(0, seq=1, ended_k=None, recovered=0)  # rowid 1: the recovery still running
    out = tmp_path / "export"
    assert export(str(s.path), out) == {"arrivals": 5, "losses": 1, "boots": 1, "run": 1}
    assert files(out, "losses") == {day(0): [part(1)]} and files(out, "boots") == {day(0): [part(1)]}

    s.events(1, 5)
    s.boot(1, epoch=8, boots=2)
    s.loss(0, seq=1, ended_k=1, recovered=3)  # it ends the next day: the row is replaced (rowid 2)
    s.loss(1, seq=2, ended_k=1, recovered=0)  # rowid 3
    assert export(str(s.path), out) == {"arrivals": 5, "losses": 2, "boots": 1, "run": 2}
    assert files(out, "losses") == {day(0): [part(3)], day(1): [part(3)]}
    assert files(out, "boots") == {day(0): [part(1)], day(1): [part(2)]}  # appended, day 0 untouched
    losses = sorted(read(out, "losses").to_pylist(), key=lambda r: r["started_ts"])
    assert [(r["date"], r["recovered"], r["ended_ts"] is not None) for r in losses] == [
        (day(0), 3, True),
        (day(1), 0, True),
    ]
    assert read(out, "boots").num_rows == 2
    m2 = manifest(out, 2)
    assert sorted(m2["added"]) == [
        ["arrivals", day(1), part(10), 5],
        ["boots", day(1), part(2), 1],
        ["losses", day(0), part(3), 1],
        ["losses", day(1), part(3), 1],
    ]
    assert m2["removed"] == [["losses", day(0), part(1)]]
    first = pq.read_table(out / "_retired" / BRIDGE / "00000002" / "losses" / ("date=" + day(0)) / part(1))
    assert first["ended_ts"].to_pylist() == [None]  # the version the first run published

    # nothing new: no run, no manifest, no file written
    before = sorted(p.relative_to(out) for p in out.rglob("*") if "_leadwire_export" not in p.parts)
    assert export(str(s.path), out) == {"arrivals": 0, "losses": 0, "boots": 0, "run": 0}
    assert sorted(p.relative_to(out) for p in out.rglob("*") if "_leadwire_export" not in p.parts) == before
    s.close()


def test_a_run_retried_after_a_crash_writes_no_row_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = ExportStore(tmp_path / "store.db")
    s.events(0, 10)
    s.loss(0, seq=1, ended_k=0, recovered=1)
    out = tmp_path / "export"
    export(str(s.path), out)
    s.events(0, 10)
    s.events(1, 10)
    s.loss(1, seq=2, ended_k=1, recovered=1)

    def crash(*_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(export_manifest, "write", crash)  # dies after publishing, before the manifest
    with pytest.raises(KeyboardInterrupt):
        export(str(s.path), out)
    monkeypatch.undo()
    assert export_manifest.runs(out, BRIDGE) == [1]
    s.events(1, 5)  # more arrives before the retry
    assert export(str(s.path), out) == {"arrivals": 5, "losses": 0, "boots": 0, "run": 2}
    assert read(out, "arrivals").num_rows == 35 and read(out, "losses").num_rows == 2
    # the retry's manifest lists what the crashed attempt published too
    assert sorted(manifest(out, 2)["added"]) == [
        ["arrivals", day(0), part(30), 10],
        ["arrivals", day(1), part(30), 10],
        ["arrivals", day(1), part(35), 5],
        ["losses", day(1), part(2), 1],
    ]
    s.close()


def test_a_half_published_day_and_a_damaged_manifest_stop_in_one_line_until_repaired(tmp_path: Path) -> None:
    s = ExportStore(tmp_path / "store.db")
    out = tmp_path / "export"
    for k in range(3):
        s.events(k, 4)
        export(str(s.path), out)
    args = ["export", "--store", str(s.path), "--out", str(out)]
    good = {r: manifest(out, r) for r in (1, 2, 3)}

    # a run that died while building a day's next version
    (out / "arrivals" / (".date=%s.%s.tmp" % (day(2), BRIDGE))).mkdir()
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1
    assert "stopped while publishing arrivals/.date=%s" % day(2) in r.output and "--repair" in r.output
    r = CliRunner().invoke(main, ["export", "--repair", "--out", str(out)])
    assert r.exit_code == 0 and r.output.startswith("removed arrivals/.date=%s" % day(2))

    # the newest manifest damaged: refused; repaired by removing it; the next run redoes run 3
    (out / "_runs" / BRIDGE / "00000003.json").write_text('{"format": 1, "run": 3, "wind')
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1
    assert "00000003.json: corrupt export manifest" in r.output and "--repair" in r.output
    r = CliRunner().invoke(main, ["export", "--repair", "--out", str(out)])
    assert r.exit_code == 0 and "removed _runs/%s/00000003.json" % BRIDGE in r.output
    assert export(str(s.path), out)["run"] == 3
    assert manifest(out, 3)["added"] == good[3]["added"] and manifest(out, 3)["windows"] == good[3]["windows"]

    # an older one damaged: rebuilt from its neighbours and the files in its window
    (out / "_runs" / BRIDGE / "00000002.json").write_text("not json")
    with pytest.raises(ExportError, match=r"00000002\.json: corrupt export manifest"):
        export_manifest.load(out, BRIDGE, 2)
    assert export_manifest.repair(out) == ["rebuilt _runs/%s/00000002.json" % BRIDGE]
    m2 = manifest(out, 2)
    assert (m2["added"], m2["removed"], m2["windows"]) == (good[2]["added"], [], good[2]["windows"])
    assert read(out, "arrivals").num_rows == 12
    s.events(3, 1)
    r = CliRunner().invoke(main, [*args, "--retain-days", "0"])
    assert r.exit_code == 0 and json.loads(r.output)["run"] == 4
    assert export_manifest.runs(out, BRIDGE) == [4] and read(out, "arrivals").num_rows == 13
    s.close()


def test_a_merge_keeps_a_newer_bridges_column_and_an_older_exports_missing_one_stays_null(
    tmp_path: Path,
) -> None:
    s = ExportStore(tmp_path / "store.db")
    s.events(0, 3)
    out = tmp_path / "export"
    export(str(s.path), out, compact_files=2)
    d = out / "arrivals" / ("date=" + day(0))
    t = pq.read_table(d / part(3))
    # the same day holds a newer bridge's file (one more column) and an older one's (one less)
    pq.write_table(
        t.append_column("rssi", pa.array([-60, -61, -62], pa.int32())),
        d / ("part-%s-000000000001.parquet" % BRIDGE),
    )
    pq.write_table(t.drop_columns(["priority"]), d / ("part-%s-000000000002.parquet" % BRIDGE))
    s.events(0, 1)
    export(str(s.path), out, compact_files=2)  # 3 small files + 1 > 2: merged
    assert files(out, "arrivals")[day(0)] == [part(3, 2), part(4)]
    merged = pq.read_table(d / part(3, 2))
    assert merged.num_rows == 9 and merged.column("rssi").null_count == 6
    assert sorted(merged.column("rssi").drop_null().to_pylist()) == [-62, -61, -60]
    assert merged.column("priority").null_count == 3  # the job reads it as its default (0)
    assert not merged.schema.field("seq").nullable and merged.schema.field("priority").nullable
    s.close()


def test_without_rename_exchange_a_day_is_swapped_by_two_renames_and_repair_puts_a_set_aside_day_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = ExportStore(tmp_path / "store.db")
    s.events(0, 3)
    out = tmp_path / "export"
    export(str(s.path), out)
    monkeypatch.setattr(export_publish, "RENAMEAT2", None)
    s.events(0, 2)
    export(str(s.path), out)
    assert files(out, "arrivals") == {day(0): [part(3), part(5)]}
    assert read(out, "arrivals").num_rows == 5
    # a crash between the two renames: the day set aside, its next version not yet in place
    live = out / "arrivals" / ("date=" + day(0))
    os.rename(live, out / "arrivals" / (".date=%s.swap" % day(0)))
    r = CliRunner().invoke(main, ["export", "--store", str(s.path), "--out", str(out)])
    assert r.exit_code == 1 and ".date=%s.swap" % day(0) in r.output
    assert export_manifest.repair(out) == ["restored arrivals/date=%s" % day(0)]
    assert files(out, "arrivals") == {day(0): [part(3), part(5)]}
    s.close()


def test_manifests_and_retired_versions_older_than_the_retention_are_removed_the_newest_kept(
    tmp_path: Path,
) -> None:
    s = ExportStore(tmp_path / "store.db")
    out = tmp_path / "export"
    for _ in range(4):
        s.events(0, 2)
        export(str(s.path), out, compact_files=2)
    assert export_manifest.runs(out, BRIDGE) == [1, 2, 3, 4]
    assert sorted(os.listdir(out / "_retired" / BRIDGE)) == ["00000002", "00000003", "00000004"]
    now = manifest(out, 4)["time"]
    assert export_manifest.prune(out, BRIDGE, 1, now=now + 86400 / 2) == []
    assert export_manifest.prune(out, BRIDGE, 1, now=now + 86400 * 2) == [1, 2, 3]
    assert export_manifest.runs(out, BRIDGE) == [4]
    assert sorted(os.listdir(out / "_retired" / BRIDGE)) == ["00000004"]
    assert read(out, "arrivals").num_rows == 8
    s.close()
