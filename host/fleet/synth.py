"""Synthetic fleet telemetry with KNOWN loss, duplication, reordering, restarts and overruns.

Used by the tests, the benchmark and the demo. It writes the three export tables exactly as
``leadwire export`` lays them out (see :mod:`leadwire.fleet.schema`) and returns the ground truth.

How the faults are injected so that the truth is exact (not estimated):

* Every stream (one lead domain: the event ring of one boot, or one report channel of one push
  session) is cut into cells of ``G = max_delay + 3`` messages. At most one fault acts per cell, on
  the cell's second message ``i``; message 0 and the last message of a stream are never touched.
  Faults therefore never interact:
  - *lose* (reports only): ``i`` never arrives -> one gap never filled (lead 2 on ``i+1``);
  - *dup now*: ``i`` arrives twice in a row -> one duplicate (lead 0);
  - *dup late*: a copy of ``i`` arrives after ``i+k`` -> one duplicate (lead ``-k``);
  - *delay*: ``i`` arrives after ``i+k`` -> one late arrival, lateness ``k``, reorder depth ``k``.
* Event rings lose events only by overrun: the stream is split in segments; between two segments
  ``L`` offsets are skipped and a ``losses`` row (cause ``overrun``, ``lost = L``) is written.
* A restart starts a new boot (new ``boot_epoch``, ``boots + 1``, random offset) and writes a
  ``boots`` row and a ``losses`` row (cause ``restart``, ``lost`` null). Every device's first boot
  writes a ``first_contact`` recovery row.
* Some boots start their event offsets just below 2^32, so their offsets wrap to 0 mid-stream.
* ``hot_device_share`` > 0: the first device holds that share of the rows in one boot and one
  lead domain (its event ring; no restart, no report sessions), a skewed fleet for the scale test.
* ``lead_errors`` / ``dup_flag_errors`` rows get a wrong stored ``lead`` / ``duplicate`` (a broken
  bridge): the job must report exactly that many mismatches.

Everything is numpy-vectorised per stream (a few thousand streams for 10M rows).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

from .schema import BOOTS, LOSSES, MASK_U32, PARTITION_COLUMN, PARTITION_SOURCE, TABLES, U32

DAY_US = 86_400_000_000
FIRMWARES = ("1.0.0", "1.1.0", "1.2.0")
TRANSPORT_WEIGHTS = {"udp": 0.6, "serial": 0.25, "sim": 0.15}
BOARDS = ("esp32", "rp2040", "stm32")

# fault actions in a cell
_NONE, _LOSE, _DUP_NOW, _DUP_LATE, _DELAY = range(5)


@dataclass
class SynthConfig:
    rows: int = 100_000  # approximate number of arrival rows
    devices: int | None = None  # default: rows // 20_000 clamped to [4, 500]
    channels: int = 3
    report_share: float = 0.3  # share of messages that are pushed reports
    sessions_per_boot: int = 2
    loss: float = 0.005  # report messages that never arrive (per message)
    dup: float = 0.005  # per message, half immediate, half delayed
    delay: float = 0.005  # per message
    max_delay: int = 5
    restart_share: float = 0.4  # devices that restart once or twice
    overruns_per_boot: float = 0.7  # mean number of overruns per event stream
    overrun_max: int = 200  # max events lost in one overrun
    wrap_share: float = 0.3  # boots whose offsets wrap past 2^32 mid-stream
    gen_ts_null: float = 0.05
    unfinished_recovery: float = 0.05
    lead_errors: int = 0
    dup_flag_errors: int = 0
    # > 0: device dev-0000 gets this share of the rows, all events of ONE boot (one lead domain:
    # no restart, no report sessions); the other devices share the rest as usual.
    hot_device_share: float = 0.0
    start: dt.datetime = field(default_factory=lambda: dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    days: float = 2.0
    seed: int = 0


@dataclass
class SynthTruth:
    totals: dict[str, Any]
    per_device: dict[str, dict[str, Any]]


# The job's summary column -> the ground-truth total it must equal (bench and tests check these).
SUMMARY_TRUTH = {
    "messages": "rows",
    "unique": "unique",
    "lost": "lost",
    "duplicates": "duplicates",
    "late": "late",
    "lateness_seq_sum": "lateness_sum",
    "restarts": "restarts",
    "overruns": "overruns",
    "events_lost_exact": "events_lost_exact",
    "recovery_phases": "recovery_phases",
    "retransmissions": "retransmissions",
    "lead_mismatches": "lead_mismatches",
    "dup_flag_mismatches": "dup_flag_mismatches",
}


@dataclass
class _Acc:
    cols: dict[str, list[np.ndarray]] = field(default_factory=dict)

    def add(self, **arrays: np.ndarray) -> None:
        for k, v in arrays.items():
            self.cols.setdefault(k, []).append(v)

    def cat(self, k: str) -> np.ndarray:
        return np.concatenate(self.cols[k])


def wrap_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Wrap-safe signed a - b in [-2^31, 2^31)."""
    d = (a - b) & MASK_U32
    return np.where(d >= (U32 >> 1), d - U32, d)


def bridge_lead(seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lead, duplicate) for one lead domain given its seqs in arrival order (spec 000, wrap-safe)."""
    n = len(seq)
    d = np.empty(n, dtype=np.int64)
    if n == 0:
        return d, np.zeros(0, dtype=bool)
    d[0] = seq[0]
    d[1:] = wrap_diff(seq[1:], seq[:-1])
    u = np.cumsum(d)
    lead = np.ones(n, dtype=np.int64)
    lead[1:] = u[1:] - np.maximum.accumulate(u)[:-1]
    dup = np.ones(n, dtype=bool)
    dup[np.unique(u, return_index=True)[1]] = False
    return lead, dup


def _stream(rng: np.random.Generator, n: int, cfg: SynthConfig, lossy: bool) -> dict[str, Any]:
    """One lead domain of n sent messages: relative indices in arrival order plus injected truth."""
    g = cfg.max_delay + 3
    ncell = max(0, (n - 1) // g)
    p_lose = cfg.loss * g if lossy else 0.0
    p = np.array([0.0, p_lose, cfg.dup * g / 2, cfg.dup * g / 2, cfg.delay * g])
    total = p[1:].sum()
    if total > 0.9:
        p[1:] *= 0.9 / total
    p[0] = 1.0 - p[1:].sum()
    act = rng.choice(5, size=ncell, p=p)
    k = rng.integers(1, cfg.max_delay + 1, size=ncell)
    idx = np.arange(ncell, dtype=np.int64) * g + 1
    keep = np.ones(n, dtype=bool)
    keep[idx[act == _LOSE]] = False
    key = np.arange(n, dtype=np.float64)
    dl = act == _DELAY
    key[idx[dl]] = idx[dl] + k[dl] + 0.5
    now = idx[act == _DUP_NOW]
    late = act == _DUP_LATE
    msgs = np.concatenate([np.flatnonzero(keep), now, idx[late]])
    keys = np.concatenate([key[keep], now + 0.25, idx[late] + k[late] + 0.5])
    is_dup = np.concatenate([np.zeros(int(keep.sum()), bool), np.ones(len(now) + int(late.sum()), bool)])
    order = np.argsort(keys, kind="stable")
    return {
        "rel": msgs[order],
        "dup": is_dup[order],
        "lost": int((act == _LOSE).sum()),
        "dups": len(now) + int(late.sum()),
        "late": int(dl.sum()),
        "lateness_sum": int(k[dl].sum()),
        "lateness_max": int(k[dl].max()) if dl.any() else 0,
    }


def _rx_times(rng: np.random.Generator, t0: int, t1: int, n: int) -> np.ndarray:
    """n strictly increasing microsecond timestamps spread over [t0, t1)."""
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    gap = max(1.0, (t1 - t0) / n - 1)
    return t0 + np.cumsum(rng.exponential(gap, n).astype(np.int64) + 1)


# per-stream constants (repeated over the stream's rows at the end), totals, per-device truth
_STREAM_META: tuple[str, ...] = ("dev", "boot_epoch", "boots", "kind", "session", "lead_channel", "fw")
_STREAM_META += ("transport", "bridge", "len")
_TOTALS = (
    "lost",
    "duplicates",
    "late",
    "lateness_sum",
    "restarts",
    "overruns",
    "events_lost_exact",
    "recovery_phases",
    "unfinished_recoveries",
    "retransmissions",
    "wrapped_streams",
    "lateness_max",
)
_DEVICE_TRUTH = (
    "lost",
    "duplicates",
    "late",
    "restarts",
    "overruns",
    "events_lost_exact",
    "messages",
    "recovery_phases",
)


@dataclass
class _Boot:
    """One boot of one device: what its event ring, report sessions and side-table rows share."""

    index: int  # 0: the device's first boot
    dev: str
    epoch: int
    boots: int
    fw: str
    transport: str
    bridge: str
    board: str
    t0: int  # the boot's receive times lie in [t0, t1)
    t1: int


@dataclass
class _Ring:
    """The event ring of one boot: segments of sent events separated by overruns, in arrival order."""

    first: int  # offset of the first event (may lie just below 2^32: the offsets wrap)
    rel: np.ndarray  # offsets relative to `first`, unwrapped
    dup: np.ndarray
    seg: np.ndarray  # segment of each arrival
    bounds: list[int]  # segment s holds sent events bounds[s]..bounds[s+1]-1
    starts: list[int]  # relative offset of each segment's first event
    gaps: list[int]  # events lost to the overrun after each segment


def _plan(cfg: SynthConfig) -> tuple[int, int, int, int, int]:
    """(devices, start us, end us, rows of the hot device or 0, rows of every other device)."""
    ndev = cfg.devices or int(min(500, max(4, cfg.rows // 20_000)))
    t_start = int(cfg.start.timestamp() * 1_000_000)
    t_end = t_start + int(cfg.days * DAY_US)
    if not 0.0 <= cfg.hot_device_share < 1.0:
        raise ValueError("hot_device_share must be in [0, 1)")
    hot_rows = int(cfg.rows * cfg.hot_device_share)
    if hot_rows and ndev < 2:
        raise ValueError("hot_device_share needs at least 2 devices")
    per_dev_rows = max(8, (cfg.rows - hot_rows) // (ndev - 1 if hot_rows else ndev))
    return ndev, t_start, t_end, hot_rows, per_dev_rows


class _Fleet:
    """The state of one generate() call: arrival columns (per-stream constants once per stream,
    repeated at the end), the losses and boots rows, and the truth counters.

    The output is a function of the seed only through the ORDER of the random draws: the methods
    draw in the order devices -> boots -> (event ring, its recovery rows, its boots row, report
    sessions) -> the per-row columns of the finished table. Keep that order when editing."""

    def __init__(self, cfg: SynthConfig, rng: np.random.Generator) -> None:
        self.cfg, self.rng = cfg, rng
        self.acc = _Acc()
        self.meta: dict[str, list[Any]] = {k: [] for k in _STREAM_META}
        self.losses: list[dict[str, Any]] = []
        self.boots_rows: list[dict[str, Any]] = []
        self.per_device: dict[str, dict[str, Any]] = {}
        self.tot: dict[str, int] = dict.fromkeys(_TOTALS, 0)
        self.chunks: list[tuple[int, int]] = []  # (row start, row end) per device, in acc order
        self.row = 0  # rows accumulated since the last flush
        self.flushed = 0  # chunks flushed
        self.rowtot: dict[str, int] = {}  # row counts of the flushed chunks
        # latency value -> rows, over the flushed chunks: exact fleet percentiles in bounded memory
        self.commit = np.zeros(0, np.int64)
        self.e2e_known = np.zeros(0, np.int64)

    # -------------------------------------------------------------------------------- devices
    def device(self, di: int, hot_rows: int, per_dev_rows: int, t_start: int, t_end: int) -> None:
        """One device: its transport, firmware, restarts, and every boot's streams and rows."""
        rng, cfg = self.rng, self.cfg
        dev, dev_start = "dev-%04d" % di, self.row
        tw = np.array(list(TRANSPORT_WEIGHTS.values()))
        transport = list(TRANSPORT_WEIGHTS)[int(rng.choice(len(TRANSPORT_WEIGHTS), p=tw / tw.sum()))]
        fw_i = int(rng.integers(0, len(FIRMWARES)))
        nrestart = int(rng.integers(1, 3)) if rng.random() < cfg.restart_share else 0
        hot = bool(hot_rows) and di == 0
        if hot:
            nrestart = 0
        nboot = nrestart + 1
        cuts = np.sort(rng.uniform(t_start, t_end, nrestart)).astype(np.int64)
        bounds = [t_start, *cuts.tolist(), t_end]
        boots = int(rng.integers(1, 100))
        truth = dict.fromkeys(_DEVICE_TRUTH, 0)
        last_event_offset = session = 0
        for b in range(nboot):
            epoch = int(rng.integers(0, U32))
            if b > 0 and rng.random() < 0.5 and fw_i + 1 < len(FIRMWARES):
                fw_i += 1
            boot = _Boot(
                b, dev, epoch, boots + b, FIRMWARES[fw_i], transport, "bridge-%s" % "ab"[di % 2],
                BOARDS[di % len(BOARDS)], bounds[b], bounds[b + 1],
            )  # fmt: skip
            nmsg = hot_rows if hot else max(8, per_dev_rows // nboot)
            n_rep = 0 if hot else int(nmsg * cfg.report_share)
            last_event_offset = self.event_ring(boot, max(4, nmsg - n_rep), last_event_offset, truth)
            session = self.report_sessions(boot, n_rep, session, truth)
        truth["messages"] = self.row - dev_start
        truth["boots"] = nboot
        self.per_device[dev] = truth
        self.chunks.append((dev_start, self.row))

    def _add_stream(self, boot: _Boot, kind: str, session: int, lead_channel: int, nrow: int) -> None:
        for k, v in (
            ("dev", boot.dev), ("boot_epoch", boot.epoch), ("boots", boot.boots), ("fw", boot.fw),
            ("transport", boot.transport), ("bridge", boot.bridge), ("kind", kind), ("session", session),
            ("lead_channel", lead_channel), ("len", nrow),
        ):  # fmt: skip
            self.meta[k].append(v)
        self.row += nrow

    def _count(self, st: dict[str, Any], truth: dict[str, int], report: bool) -> None:
        """Add one _stream()'s injected faults to the totals and the device's truth."""
        tot = self.tot
        tot["duplicates"] += st["dups"]
        tot["late"] += st["late"]
        tot["lateness_sum"] += st["lateness_sum"]
        tot["lateness_max"] = max(tot["lateness_max"], st["lateness_max"])
        truth["duplicates"] += st["dups"]
        truth["late"] += st["late"]
        if report:
            tot["lost"] += st["lost"]
            tot["retransmissions"] += st["dups"]
            truth["lost"] += st["lost"]

    # ------------------------------------------------------------------------------ event ring
    def event_ring(self, boot: _Boot, n_ev: int, last_event_offset: int, truth: dict[str, int]) -> int:
        """The boot's event stream, its recovery rows and its boots row; returns its last offset."""
        ring = self._ring(n_ev, truth)
        rng, nrow = self.rng, len(ring.rel)
        seq = (ring.first + ring.rel) & MASK_U32
        rx = _rx_times(rng, boot.t0, boot.t1, nrow)
        self.acc.add(
            seq=seq,
            rx=rx,
            channel=rng.integers(0, self.cfg.channels, nrow).astype(np.int32),
            dup=ring.dup,
            retx=np.zeros(nrow, bool),
            priority=np.zeros(nrow, np.int32),
        )
        self._add_stream(boot, "event", 0, -1, nrow)
        self._recoveries(boot, ring, rx, last_event_offset, truth)
        self.boots_rows.append(
            {
                "device_id": boot.dev,
                "boot_epoch": boot.epoch,
                "boots": boot.boots,
                "firmware_version": boot.fw,
                "board": boot.board,
                "transport": boot.transport,
                "first_seen_ts": int(rx[0]) - 2000,
                "detected_by": "hello" if boot.index == 0 or rng.random() < 0.5 else "recovery",
                "bridge_id": boot.bridge,
            }
        )
        if boot.index > 0:
            self.tot["restarts"] += 1
            truth["restarts"] += 1
        return int(seq[np.argmax(ring.rel)])

    def _ring(self, n_ev: int, truth: dict[str, int]) -> _Ring:
        """Cut n_ev sent events into segments at overruns, inject faults per segment."""
        rng, cfg = self.rng, self.cfg
        nover = int(min(rng.poisson(cfg.overruns_per_boot), max(0, n_ev // 16 - 1)))
        cuts_arr = rng.choice(np.arange(8, n_ev - 7), size=nover, replace=False) if nover else np.zeros(0)
        bounds = [0, *sorted(int(c) for c in cuts_arr), n_ev]
        if rng.random() < cfg.wrap_share:
            first = U32 - int(rng.integers(1, max(2, n_ev)))
            self.tot["wrapped_streams"] += 1
        else:
            first = int(rng.integers(0, U32))
        rels, dups, seg_of = [], [], []
        offset = 0  # unwrapped offset of segment start relative to `first`
        starts: list[int] = []
        gaps: list[int] = []
        for s in range(len(bounds) - 1):
            m = int(bounds[s + 1] - bounds[s])
            st = _stream(rng, m, cfg, lossy=False)
            rels.append(st["rel"] + offset)
            dups.append(st["dup"])
            seg_of.append(np.full(len(st["rel"]), s, dtype=np.int32))
            starts.append(offset)
            self._count(st, truth, report=False)
            L = int(rng.integers(1, cfg.overrun_max + 1))
            gaps.append(L)
            offset += m + L
        rel, dup, seg = np.concatenate(rels), np.concatenate(dups), np.concatenate(seg_of)
        return _Ring(first, rel, dup, seg, bounds, starts, gaps)

    def _recoveries(
        self, boot: _Boot, ring: _Ring, rx: np.ndarray, last_event_offset: int, truth: dict[str, int]
    ) -> None:
        """The boot's losses rows: first contact or restart, then one per overrun."""
        rng, cfg, tot, rel = self.rng, self.cfg, self.tot, ring.rel
        for s in range(len(ring.bounds) - 1):
            in_seg = np.flatnonzero(ring.seg == s)
            seg_len = int(ring.bounds[s + 1] - ring.bounds[s])
            recovered = int(rng.integers(1, min(seg_len, 20) + 1))
            n0 = (ring.first + ring.starts[s]) & MASK_U32
            # end of phase: first arrival of offset n1 in this segment
            target = ring.starts[s] + recovered - 1
            hit = in_seg[rel[in_seg] == target]
            started = int(rx[in_seg[0]]) - 1000
            ended = int(rx[hit[0]]) if len(hit) else None
            if rng.random() < cfg.unfinished_recovery:
                ended = None
            if s == 0:
                cause = "first_contact" if boot.index == 0 else "restart"
                client_n, lost = (0 if boot.index == 0 else last_event_offset), None
            else:
                cause = "overrun"
                client_n = (ring.first + ring.starts[s] - ring.gaps[s - 1] - 1) & MASK_U32
                lost = ring.gaps[s - 1]
                for c in (tot, truth):
                    c["lost"] += lost
                    c["events_lost_exact"] += lost
                    c["overruns"] += 1
            self.losses.append(
                {
                    "device_id": boot.dev,
                    "boot_epoch": boot.epoch,
                    "client_n": client_n,
                    "n0": n0,
                    "n1": (n0 + recovered - 1) & MASK_U32,
                    "lost": lost,
                    "cause": cause,
                    "started_ts": started,
                    "ended_ts": ended,
                    "recovered": recovered,
                    "firmware_version": boot.fw,
                    "transport": boot.transport,
                    "bridge_id": boot.bridge,
                }
            )
            tot["recovery_phases"] += 1
            truth["recovery_phases"] += 1
            tot["unfinished_recoveries"] += ended is None

    # ------------------------------------------------------------------------- report sessions
    def report_sessions(self, boot: _Boot, n_rep: int, session: int, truth: dict[str, int]) -> int:
        """The boot's push sessions, one lead domain per (session, channel); returns the last session."""
        rng, cfg = self.rng, self.cfg
        nstream = cfg.sessions_per_boot * cfg.channels
        per_stream = n_rep // nstream if nstream else 0
        for si in range(cfg.sessions_per_boot if per_stream >= 2 else 0):
            session += 1
            s0 = boot.t0 + (boot.t1 - boot.t0) * si // cfg.sessions_per_boot
            s1 = boot.t0 + (boot.t1 - boot.t0) * (si + 1) // cfg.sessions_per_boot
            for ch in range(cfg.channels):
                st = _stream(rng, per_stream, cfg, lossy=True)
                nrow = len(st["rel"])
                self.acc.add(
                    seq=st["rel"] + 1,
                    rx=_rx_times(rng, s0, s1, nrow),
                    channel=np.full(nrow, ch, np.int32),
                    dup=st["dup"],
                    retx=st["dup"],
                    priority=rng.integers(1, 8, nrow).astype(np.int32),
                )
                self._add_stream(boot, "report", session, ch, nrow)
                self._count(st, truth, report=True)
        return session

    # ----------------------------------------------------------------------------- the tables
    def finish(self, ndev: int) -> tuple[dict[str, pa.Table], SynthTruth]:
        """All devices in one chunk: the three tables in memory and the truth."""
        arrivals = self.flush()
        return {"arrivals": arrivals, **self.side_tables()}, self.truth(ndev)

    def side_tables(self) -> dict[str, pa.Table]:
        """The losses and boots tables (a few rows per boot: kept in memory for every chunk)."""
        losses = pa.Table.from_pylist(self.losses, schema=LOSSES) if self.losses else LOSSES.empty_table()
        return {"losses": losses, "boots": pa.Table.from_pylist(self.boots_rows, schema=BOOTS)}

    def flush(self) -> pa.Table:
        """The arrivals of the devices generated since the last flush (the bridge's columns: lead,
        duplicate, arrival; the per-row extras); adds their counts to the totals and forgets them.
        The injected lead / duplicate-flag errors all go into the first chunk."""
        rng, cfg = self.rng, self.cfg
        seq, rx, dup = self.acc.cat("seq"), self.acc.cat("rx"), self.acc.cat("dup")
        lens = np.array(self.meta["len"], dtype=np.int64)
        n = int(lens.sum())
        lead = _bridge_leads(seq, lens, dup)
        arrival = _arrival_counters(rx, self.chunks)
        stored_lead, stored_dup = lead.copy(), dup.copy()
        first = self.flushed == 0
        if cfg.lead_errors and first:
            bad = rng.choice(n, size=cfg.lead_errors, replace=False)
            stored_lead[bad] += 7
        if cfg.dup_flag_errors and first:
            bad = rng.choice(n, size=cfg.dup_flag_errors, replace=False)
            stored_dup[bad] = ~stored_dup[bad]
        x = {
            "e2e": np.exp(rng.normal(np.log(20_000), 0.6, n)).astype(np.int64),  # ~20 ms
            "commit": np.exp(rng.normal(np.log(1_500), 0.5, n)).astype(np.int64),  # ~1.5 ms
            "gen_null": rng.random(n) < cfg.gen_ts_null,
            "payload": rng.integers(8, 200, n).astype(np.int32),
        }
        table = self._arrivals(lens, seq, rx, arrival, stored_lead, stored_dup, x)
        self._count_rows(n, self._repeat("kind", lens), dup, lead, x)
        self.acc = _Acc()
        self.meta = {k: [] for k in _STREAM_META}
        self.chunks, self.row = [], 0
        self.flushed += 1
        return table

    def _count_rows(
        self, n: int, kind: np.ndarray, dup: np.ndarray, lead: np.ndarray, x: dict[str, np.ndarray]
    ) -> None:
        """One chunk's row counts into the totals; its latencies counted for the fleet percentiles."""
        r = self.rowtot
        for k, v in (
            ("rows", n), ("events", int((kind == "event").sum())), ("reports", int((kind == "report").sum())),
            ("unique", n - int(dup.sum())), ("lead_eq1", int((lead == 1).sum())),
            ("lead_eq0", int((lead == 0).sum())), ("lead_gt1", int((lead > 1).sum())),
            ("lead_lt0", int((lead < 0).sum())),
        ):  # fmt: skip
            r[k] = r.get(k, 0) + v
        self.commit = _add_counts(self.commit, x["commit"])
        self.e2e_known = _add_counts(self.e2e_known, x["e2e"][~x["gen_null"]])

    def _repeat(self, name: str, lens: np.ndarray, dtype: Any = None) -> np.ndarray:
        return np.repeat(np.array(self.meta[name], dtype=dtype), lens)

    def _arrivals(
        self,
        lens: np.ndarray,
        seq: np.ndarray,
        rx: np.ndarray,
        arrival: np.ndarray,
        lead: np.ndarray,
        dup: np.ndarray,
        x: dict[str, np.ndarray],
    ) -> pa.Table:
        ts_type = TABLES["arrivals"].field("host_rx_ts").type
        rep = self._repeat
        return pa.table(
            {
                "device_id": _dict_strings(rep("dev", lens)),
                "boot_epoch": rep("boot_epoch", lens, np.int64),
                "boots": rep("boots", lens, np.int64),
                "channel": self.acc.cat("channel"),
                "kind": _dict_strings(rep("kind", lens)),
                "session": rep("session", lens, np.int64),
                "lead_channel": rep("lead_channel", lens, np.int32),
                "seq": seq,
                "arrival": arrival,
                "lead": lead,
                "duplicate": dup,
                "retransmission": self.acc.cat("retx"),
                "priority": self.acc.cat("priority"),
                "payload_bytes": x["payload"],
                "frame_bytes": x["payload"] + np.int32(12),
                "gen_ts": pa.array(rx - x["e2e"], type=ts_type, mask=x["gen_null"]),
                "host_rx_ts": pa.array(rx, type=ts_type),
                "host_commit_ts": pa.array(rx + x["commit"], type=ts_type),
                "firmware_version": _dict_strings(rep("fw", lens)),
                "transport": _dict_strings(rep("transport", lens)),
                "bridge_id": _dict_strings(rep("bridge", lens)),
            },
            schema=TABLES["arrivals"],
        )

    def truth(self, ndev: int) -> SynthTruth:
        """The ground truth of everything flushed so far."""
        commit, e2e_known = self.commit, self.e2e_known
        r = self.rowtot
        totals = {
            "rows": r["rows"],
            "devices": ndev,
            "boots": len(self.boots_rows),
            **{k: r[k] for k in ("events", "reports", "unique")},
            **self.tot,
            **{k: r[k] for k in ("lead_eq1", "lead_eq0", "lead_gt1", "lead_lt0")},
            "lead_mismatches": self.cfg.lead_errors,
            "dup_flag_mismatches": self.cfg.dup_flag_errors,
            "latency_rx_to_commit_p50_us": percentile_of_counts(commit, 50),
            "latency_rx_to_commit_p99_us": percentile_of_counts(commit, 99),
            "latency_gen_to_rx_p50_us": percentile_of_counts(e2e_known, 50) if e2e_known.any() else None,
            "latency_gen_to_rx_p99_us": percentile_of_counts(e2e_known, 99) if e2e_known.any() else None,
        }
        return SynthTruth(totals=totals, per_device=self.per_device)


def _add_counts(counts: np.ndarray, values: np.ndarray) -> np.ndarray:
    """counts[v] += how often v occurs in values (non-negative integers); may return a longer array."""
    c = np.bincount(values)
    if len(c) > len(counts):
        c[: len(counts)] += counts
        return c
    counts[: len(c)] += c
    return counts


def percentile_of_counts(counts: np.ndarray, p: float) -> float:
    """np.percentile(values, p) (linear, the same float) from counts[v] = how often v occurs: the
    values' order statistics from the cumulative counts, numpy's index and interpolation."""
    n = int(counts.sum())
    v = (n - 1) * np.true_divide(p, 100)
    lo = int(np.floor(v))
    gamma = v - lo
    a, b = (np.int64(i) for i in np.searchsorted(np.cumsum(counts), [lo, min(lo + 1, n - 1)], side="right"))
    if gamma >= 0.5:
        return float(b - (b - a) * (1 - gamma))
    return float(a + (b - a) * gamma)


def _bridge_leads(seq: np.ndarray, lens: np.ndarray, dup: np.ndarray) -> np.ndarray:
    """The bridge-computed lead per stream (streams are contiguous and in arrival order); checks
    that the duplicates it finds are the injected ones."""
    n = len(seq)
    lead = np.empty(n, dtype=np.int64)
    bdup = np.empty(n, dtype=bool)
    starts = np.concatenate([[0], np.cumsum(lens)])
    for i in range(len(lens)):
        a, b = starts[i], starts[i + 1]
        lead[a:b], bdup[a:b] = bridge_lead(seq[a:b])
    assert np.array_equal(bdup, dup), "generator: injected duplicates disagree with recomputation"
    return lead


def _arrival_counters(rx: np.ndarray, chunks: list[tuple[int, int]]) -> np.ndarray:
    """The per-device arrival counter: each device's streams merged by receive time."""
    arrival = np.empty(len(rx), dtype=np.int64)
    for a, b in chunks:
        order = np.argsort(rx[a:b], kind="stable")
        arr = np.empty(b - a, dtype=np.int64)
        arr[order] = np.arange(1, b - a + 1)
        arrival[a:b] = arr
    return arrival


def generate(cfg: SynthConfig) -> tuple[dict[str, pa.Table], SynthTruth]:
    """Build the three export tables in memory; return them and the ground truth."""
    rng = np.random.default_rng(cfg.seed)
    ndev, t_start, t_end, hot_rows, per_dev_rows = _plan(cfg)
    fleet = _Fleet(cfg, rng)
    for di in range(ndev):
        fleet.device(di, hot_rows, per_dev_rows, t_start, t_end)
    return fleet.finish(ndev)


def _dict_strings(values: np.ndarray) -> pa.Array:
    uniq, inv = np.unique(values, return_inverse=True)
    return pa.DictionaryArray.from_arrays(pa.array(inv.astype(np.int32)), pa.array(uniq.tolist())).cast(
        pa.string()
    )


def _date_strings(ts: pa.Array) -> pa.Array:
    us = ts.cast(pa.int64()).to_numpy(zero_copy_only=False)
    days = us // DAY_US
    uniq, inv = np.unique(days, return_inverse=True)
    names = [(dt.date(1970, 1, 1) + dt.timedelta(days=int(d))).isoformat() for d in uniq]
    return pa.DictionaryArray.from_arrays(pa.array(inv.astype(np.int32)), pa.array(names)).cast(pa.string())


def write_export(
    tables: dict[str, pa.Table],
    out_dir: str,
    max_rows_per_file: int = 2_000_000,
    basename: str = "part-{i}.parquet",
    existing: str = "delete_matching",
) -> None:
    """Write tables as DIR/<table>/date=YYYY-MM-DD/part-*.parquet (the `leadwire export` layout)."""
    part = ds.partitioning(pa.schema([(PARTITION_COLUMN, pa.string())]), flavor="hive")
    for name, table in tables.items():
        t = table.append_column(PARTITION_COLUMN, _date_strings(table.column(PARTITION_SOURCE[name])))
        ds.write_dataset(
            t,
            os.path.join(out_dir, name),
            format="parquet",
            partitioning=part,
            basename_template=basename,
            existing_data_behavior=existing,
            max_rows_per_file=max_rows_per_file,
            max_rows_per_group=min(max_rows_per_file, 1_000_000),
            preserve_order=True,  # the table's row order: the same bytes for the same seed
        )


def _publish(tables: dict[str, pa.Table], out_dir: str, chunk: int, max_rows_per_file: int) -> None:
    """Write one chunk's tables into a hidden staging directory, then rename each file into the
    export (as the bridge publishes its export: a reader never sees a half-written file).
    Chunk 0 is named part-{i}.parquet (as write_export), chunk k part-k-{i}.parquet."""
    stage = os.path.join(out_dir, ".staging-%d" % chunk)
    shutil.rmtree(stage, ignore_errors=True)
    basename = "part-{i}.parquet" if chunk == 0 else "part-%d-{i}.parquet" % chunk
    write_export(tables, stage, max_rows_per_file, basename, "overwrite_or_ignore")
    for root, _, files in os.walk(stage):
        dest = os.path.join(out_dir, os.path.relpath(root, stage))
        os.makedirs(dest, exist_ok=True)
        for f in sorted(files):
            os.replace(os.path.join(root, f), os.path.join(dest, f))
    shutil.rmtree(stage)


def write_synth(
    cfg: SynthConfig, out_dir: str, chunk_rows: int = 1_000_000, max_rows_per_file: int = 2_000_000
) -> SynthTruth:
    """generate() + write_export() in bounded memory: the arrivals are written every time the
    devices generated since the last write hold >= chunk_rows rows (whole devices: a hot device is
    one chunk), so peak memory grows with chunk_rows, not with cfg.rows. Byte-identical to
    generate() + write_export() when everything fits in one chunk (rows < chunk_rows); above, the
    per-row draws of each chunk follow its devices (same distributions, other values). Replaces
    the tables under out_dir."""
    rng = np.random.default_rng(cfg.seed)
    ndev, t_start, t_end, hot_rows, per_dev_rows = _plan(cfg)
    for name in TABLES:
        shutil.rmtree(os.path.join(out_dir, name), ignore_errors=True)
    fleet = _Fleet(cfg, rng)
    for di in range(ndev):
        fleet.device(di, hot_rows, per_dev_rows, t_start, t_end)
        if fleet.row >= chunk_rows and di + 1 < ndev:
            k = fleet.flushed
            _publish({"arrivals": fleet.flush()}, out_dir, k, max_rows_per_file)
    k = fleet.flushed
    _publish({"arrivals": fleet.flush()}, out_dir, k, max_rows_per_file)
    _publish(fleet.side_tables(), out_dir, 0, max_rows_per_file)
    return fleet.truth(ndev)
