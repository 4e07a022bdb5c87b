"""A store written row by row through the bridge's own Store, with the days, losses and boots an
export test needs (no bridge, no devices): the fixtures of the export-run tests."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from leadwire.bridge.client import SEG_EVENT
from leadwire.bridge.store import Batch, Store
from tests.cli.stores import EPOCH, T0_US

DAY_US = 86_400_000_000
BRIDGE = "bridge-a"


def day(k: int) -> str:
    return (dt.date(2026, 1, 1) + dt.timedelta(days=k)).isoformat()


class ExportStore:
    """One bridge's store; devices registered on first use; arrivals counted per device."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.store = Store(str(path), BRIDGE)
        self.devs: dict[str, int] = {}
        self.next_seq: dict[str, int] = {}
        self.arrivals: dict[str, int] = {}

    def dev(self, device_id: str) -> int:
        if device_id not in self.devs:
            self.devs[device_id], _ = self.store.register(
                device_id, "udp", "127.0.0.1:%d" % (4000 + len(self.devs))
            )
            self.next_seq[device_id] = 1
            self.arrivals[device_id] = 0
        return self.devs[device_id]

    def events(self, k: int, n: int, device_id: str = "dev-a", skip: tuple[int, ...] = ()) -> list[int]:
        """n events received on day k (one ms apart from 01:00), seqs going on from the device's
        last; `skip`: seqs not sent now (a gap: sent later with `seqs`). Returns the seqs sent."""
        d = self.dev(device_id)
        first = self.next_seq[device_id]
        seqs = [s for s in range(first, first + n) if s not in skip]
        self.next_seq[device_id] = first + n
        self.seqs(k, seqs, device_id, d)
        return seqs

    def seqs(self, k: int, seqs: list[int], device_id: str = "dev-a", d: int | None = None) -> None:
        d = self.dev(device_id) if d is None else d
        base = T0_US + k * DAY_US + 3_600_000_000
        a = self.arrivals[device_id]
        self.arrivals[device_id] = a + len(seqs)
        rows = [
            (d, a + i + 1, EPOCH, 1, 0, s, 1, 0, 12, None, base + s * 1000, b"x") for i, s in enumerate(seqs)
        ]
        self.store.write(
            Batch(segments=[(SEG_EVENT, rows)], commit_us=base, arrivals=len(rows), events=len(rows))
        )

    def loss(self, k: int, seq: int, ended_k: int | None, recovered: int, device_id: str = "dev-a") -> None:
        """The loss row `seq` of the device (started on day k; a second call with the same seq
        replaces it, as the bridge does when the recovery ends)."""
        start = T0_US + k * DAY_US + 7_200_000_000
        ended = None if ended_k is None else T0_US + ended_k * DAY_US + 7_200_000_000
        row = (self.dev(device_id), seq, EPOCH, 5, 5, 9, 4, "overrun", start + seq, ended, recovered, "fw")
        self.store.write(Batch(losses=[row], commit_us=start))

    def boot(self, k: int, epoch: int, boots: int, device_id: str = "dev-a") -> None:
        t = T0_US + k * DAY_US + 60_000_000
        self.store.write(
            Batch(boots=[(self.dev(device_id), epoch, boots, "fw", "pico", t, "hello")], commit_us=t)
        )

    def close(self) -> None:
        self.store.close()


def files(out: Path, table: str) -> dict[str, list[str]]:
    """date -> the Parquet file names of that partition (readers' view: no hidden names)."""
    base = out / table
    res = {}
    for d in sorted(base.iterdir()) if base.is_dir() else []:
        if d.name.startswith("date="):
            res[d.name[5:]] = sorted(n for n in d.iterdir() if not n.name.startswith((".", "_")))
    return {k: [p.name for p in v] for k, v in res.items()}


def rows(path: Path) -> int:
    return pq.read_metadata(path).num_rows


def read(out: Path, table: str) -> pa.Table:
    return ds.dataset(out / table, format="parquet", partitioning="hive").to_table()


def part(hi: int, merged_by: int | None = None) -> str:
    return "part-%s-%012d%s.parquet" % (BRIDGE, hi, "" if merged_by is None else "-c%d" % merged_by)
