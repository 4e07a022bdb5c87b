"""The fleet job reading what `leadwire export` runs wrote: an incremental run after an export run
finds the new files from the run manifests (it opens the new manifest and the new files, and
lists only the losses day a late recovery end republished: none of the 30 older days), counts a
late gap fill and a late arrival into an old day, and then equals one full run over the export."""

from __future__ import annotations

import ctypes
import os
import struct
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from leadwire.bridge.export import export
from leadwire.fleet.extract import bad_input_from
from leadwire.fleet.fs import list_files
from leadwire.fleet.job import DATED_TABLES, TABLE_ORDER, run_job
from leadwire.fleet.manifests import new_files
from leadwire.fleet.options import BadInput
from leadwire.fleet.oracle import compare_tables, read_job_tables
from leadwire.fleet.schema import TABLES
from tests.bridge.export_store import BRIDGE, ExportStore, day, files, part

pytestmark = pytest.mark.spark

IN_OPEN = 0x20
IN_ISDIR = 0x40000000


class Opens:
    """Every open(2) of a file or directory under a tree by any process (the JVM's included),
    by Linux inotify: the directories of the tree at start are watched."""

    def __init__(self, root: Path) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK)
        assert self.fd >= 0
        self.dirs: dict[int, Path] = {}
        for d in [d for d, _, _ in os.walk(root)]:  # walked first: the walk opens them too
            wd = self.libc.inotify_add_watch(self.fd, os.fsencode(d), IN_OPEN)
            assert wd >= 0
            self.dirs[wd] = Path(d)
        self.root = root

    def read(self) -> set[str]:
        """The paths opened since the start (relative; a directory as DIR/)."""
        out: set[str] = set()
        while True:
            try:
                buf = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            i = 0
            while i < len(buf):
                wd, mask, _, n = struct.unpack_from("iIII", buf, i)
                name = buf[i + 16 : i + 16 + n].rstrip(b"\0").decode()
                i += 16 + n
                p = self.dirs[wd] / name if name else self.dirs[wd]
                rel = str(p.relative_to(self.root))
                out.add(rel + "/" if (mask & IN_ISDIR) else rel)
        os.close(self.fd)
        return out


@pytest.mark.timeout(600)
def test_incremental_run_reads_the_manifests_and_the_new_files_only(
    spark: SparkSession, tmp_path: Path
) -> None:
    s = ExportStore(tmp_path / "store.db")
    s.boot(0, epoch=0x1234ABCD, boots=1)
    for k in range(29):
        s.events(k, 20)
        s.events(k, 10, device_id="dev-b")
    gap = s.events(29, 20, skip=(585,))  # dev-a's seq 585 is lost for now: a gap counted on day 29
    assert 585 not in gap and gap[-1] == 600
    s.loss(29, seq=1, ended_k=None, recovered=0)  # its recovery still running at the export
    export_dir, inc, full = tmp_path / "export", tmp_path / "inc", tmp_path / "full"
    assert export(str(s.path), export_dir)["run"] == 1
    first = run_job(str(export_dir), str(inc), spark, progress=False, report=False, incremental=True)
    assert first["rows_read"] == 29 * 30 + 19

    s.seqs(30, [585])  # the gap filled late (received on day 30)
    s.events(30, 20)  # seqs 601..620
    s.events(29, 1, device_id="dev-b")  # a row received on day 29, stored after that day's export
    s.loss(29, seq=1, ended_k=30, recovered=1)  # the recovery ends: its day 29 row is replaced
    assert export(str(export_dir.parent / "store.db"), export_dir) == {
        "arrivals": 22,
        "losses": 1,
        "boots": 0,
        "run": 2,
    }
    assert files(export_dir, "arrivals")[day(29)] == [part(889), part(911)]
    assert files(export_dir, "losses") == {day(29): [part(2)]}

    opens = Opens(export_dir)
    second = run_job(str(export_dir), str(inc), spark, progress=False, report=False, incremental=True)
    opened = opens.read()
    assert second["rows_read"] == 22
    data = {p for p in opened if p.startswith(("arrivals", "losses", "boots")) and not p.endswith("/")}
    assert data == {
        "arrivals/date=%s/%s" % (day(29), part(911)),
        "arrivals/date=%s/%s" % (day(30), part(911)),
        "losses/date=%s/%s" % (day(29), part(2)),
    }
    listed = {p for p in opened if p.endswith("/")}
    assert "_runs/%s/" % BRIDGE in listed  # seen listing: and no other day, no _retired
    assert listed <= {"_runs/", "_runs/%s/" % BRIDGE, "losses/", "losses/date=%s/" % day(29)}, listed
    assert {p for p in opened if p.startswith("_runs/") and not p.endswith("/")} == {
        "_runs/%s/00000002.json" % BRIDGE
    }

    run_job(str(export_dir), str(full), spark, progress=False, report=False)
    got, want = read_job_tables(str(inc), DATED_TABLES), read_job_tables(str(full), DATED_TABLES)
    assert compare_tables(got, want, TABLE_ORDER) == []
    rec = want["recoveries"]
    assert rec["phases"].sum() == 1 and rec["recovered"].sum() == 1 and rec["unfinished"].sum() == 0
    cw = want["channel_windows"]
    assert cw["messages"].sum() == 29 * 30 + 19 + 22 and cw["lost"].sum() == 0  # the gap filled
    s.close()


@pytest.mark.timeout(300)
def test_new_files_first_run_leaves_an_unfinished_run_and_damaged_or_removed_manifests_stop_in_one_line(
    spark: SparkSession, tmp_path: Path
) -> None:
    s = ExportStore(tmp_path / "store.db")
    s.events(0, 5)
    s.loss(0, seq=1, ended_k=0, recovered=1)
    out = tmp_path / "export"
    export(str(s.path), out)
    s.events(1, 5)
    export(str(s.path), out)
    s.close()
    # a run publishing now: its file is there, its manifest not yet
    early = out / "arrivals" / ("date=" + day(1)) / part(99)
    early.write_bytes((out / "arrivals" / ("date=" + day(1)) / part(10)).read_bytes())

    def listing() -> dict[str, list[tuple[str, str]]]:
        return {t: list_files(spark, str(out / t)) for t in TABLES}

    first = new_files(spark, str(out), {}, listing)
    assert first.runs == {BRIDGE: 2}
    names = sorted(u.rsplit("/", 1)[1] for u, _ in first.new["arrivals"])
    assert names == [part(5), part(10)] and len(first.listed["arrivals"]) == 3
    assert [u.rsplit("/", 1)[1] for u, _ in first.new["losses"]] == [part(1)]
    assert new_files(spark, str(out), {"runs": {BRIDGE: 2}}, listing).new["arrivals"] == []
    got = new_files(spark, str(out), {"runs": {BRIDGE: 1}}, listing)
    assert [(u.rsplit("/", 1)[1], d) for u, d in got.new["arrivals"]] == [(part(10), day(1))]

    (out / "_runs" / BRIDGE / "00000002.json").write_text("{")
    with pytest.raises(
        BadInput, match=r"00000002\.json: corrupt export manifest: run `leadwire export --repair"
    ):
        new_files(spark, str(out), {"runs": {BRIDGE: 1}}, listing)
    (out / "_runs" / BRIDGE / "00000001.json").unlink()
    with pytest.raises(BadInput, match="manifests of bridge %s after run 0 were removed" % BRIDGE):
        new_files(spark, str(out), {"runs": {"other": 1}}, listing)


def test_a_file_an_export_merged_away_after_the_listing_is_one_line() -> None:
    spark_text = (
        "An error occurred while calling o31.collectToPython.\n: org.apache.spark.SparkException: "
        "[FAILED_READ_FILE.FILE_NOT_EXIST] Encountered error while reading file file:///x/arrivals/"
        "date=2026-01-30/part-b-000000000300.parquet. File does not exist. It is possible the "
        "underlying files have been updated.\nYou can explicitly invalidate the cache"
    )
    got = bad_input_from(Exception(spark_text))
    assert got is not None and str(got) == (
        "file:///x/arrivals/date=2026-01-30/part-b-000000000300.parquet: gone since the job listed it "
        "(an export run merged its day into a new file, or its retention passed): run the job again"
    )
