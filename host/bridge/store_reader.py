"""Read-only views of the bridge's store (host/bridge/store.py's schema) for everything outside it.

The store module writes; this module is the one place the rest of the tree (`leadwire status`, the
demo, the chaos checker, the benches) reads it from, so the schema is known to two files only:

    with StoreReader(path) as r:           # read-only connection (never creates the file)
        r.devices()                        # DeviceRow per device, ordered by dev
        r.losses(dev)  r.boots(dev)        # LossRow / BootRow, in the order the bridge wrote them
        r.events(dev, boot_epoch)          # EventRow (first arrivals only: the `events` view)
        r.events_by_arrival(channel)       # (offset, data) in arrival order
        r.arrival_stats()                  # per dev: arrivals, events and the lead buckets
        r.totals()                         # counts for progress lines while the bridge writes
        r.event_arrivals(after_id, ...)    # EventArrival: every event arrival after an id (`events`,
                                           # the MQTT forwarder), duplicates flagged
        r.losses_after(rowid) r.boots_after(rowid)  # loss and boot rows written after a rowid

`StoreReader.open(path)` returns None when the file is missing or not (yet) a store: callers that
poll a store the bridge is creating use it. Nothing here writes, and every query is bounded by one
connection's snapshot (WAL readers see the last commit).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from .store import connect_ro


class DeviceRow(NamedTuple):
    dev: int
    device_id: str
    transport: str
    n: int
    has_n: bool
    boot_epoch: int | None
    boots: int
    counters: dict[str, Any]  # the committed counters: {"device": {...}, "channels": {...}}

    @property
    def device_counters(self) -> dict[str, int]:
        return {k: int(v) for k, v in self.counters.get("device", {}).items()}


class LossRow(NamedTuple):
    dev: int
    seq: int
    boot_epoch: int
    client_n: int
    n0: int
    n1: int
    lost: int | None  # None: a recovery of unknown size (first contact, restart)
    cause: str


class BootRow(NamedTuple):
    dev: int
    boot_epoch: int
    boots: int
    detected_by: str


class EventRow(NamedTuple):
    dev: int
    boot_epoch: int
    offset: int
    channel: int
    data: bytes


class ArrivalStats(NamedTuple):
    arrivals: int  # every arrival of an event (duplicates and late copies included)
    events: int  # first arrivals
    lead_eq1: int
    lead_eq0: int
    lead_gt1: int
    lead_lt0: int


class EventArrival(NamedTuple):
    """One arrival of an event as stored: the first (duplicate False, data set) or a later copy."""

    id: int  # the arrival's id in the store: increasing in commit order
    device_id: str
    boot_epoch: int
    channel: int
    offset: int
    lead: int
    duplicate: bool
    rx_us: int  # when the bridge received it (us since the epoch)
    data: bytes | None  # the payload (None for a duplicate arrival, which keeps no copy)

    def as_json(self) -> dict[str, Any]:
        """Its JSON form, as `leadwire events --json` prints it and the MQTT forwarder publishes it."""
        return {
            "id": self.id,
            "device": self.device_id,
            "boot_epoch": self.boot_epoch,
            "channel": self.channel,
            "offset": self.offset,
            "lead": self.lead,
            "duplicate": self.duplicate,
            "rx_us": self.rx_us,
            "payload": self.data.hex() if self.data is not None else None,
        }


class LossEntry(NamedTuple):
    rowid: int  # a loss row is rewritten when its recovery ends: a new rowid, so it is seen again
    device_id: str
    boot_epoch: int
    n0: int
    n1: int
    lost: int | None
    cause: str
    recovered: int
    started_us: int
    ended_us: int | None


class BootEntry(NamedTuple):
    rowid: int
    device_id: str
    boot_epoch: int
    boots: int
    firmware: str
    board: str
    detected_by: str
    first_seen_us: int


_EVENT_ARRIVAL = (
    "SELECT a.id, d.device_id, a.boot_epoch, a.channel, a.seq, a.lead, a.duplicate, a.rx_us, a.data "
    "FROM arrivals a JOIN devices d ON d.dev = a.dev WHERE a.kind = 0 AND a.id > ?"
)
_LOSS_ENTRY = (
    "SELECT l.rowid, d.device_id, l.boot_epoch, l.n0, l.n1, l.lost, l.cause, l.recovered, l.started_us, "
    "l.ended_us FROM losses l JOIN devices d ON d.dev = l.dev WHERE l.rowid > ? ORDER BY l.rowid LIMIT ?"
)
_BOOT_ENTRY = (
    "SELECT b.rowid, d.device_id, b.boot_epoch, b.boots, b.firmware, b.board, b.detected_by, "
    "b.first_seen_us FROM boots b JOIN devices d ON d.dev = b.dev WHERE b.rowid > ? ORDER BY b.rowid LIMIT ?"
)
_RELATIVE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_time(value: str, now: float | None = None) -> int:
    """A point in time for --since: YYYY-MM-DD, an ISO 8601 time (UTC when naive), or an age
    ("90s", "10m", "2h", "1d": that long before now) -> microseconds since the epoch."""
    m = _RELATIVE.fullmatch(value.strip())
    if m is not None:
        t = dt.datetime.now(dt.UTC).timestamp() if now is None else now
        return int((t - float(m.group(1)) * _UNIT_S[m.group(2)]) * 1_000_000)
    try:
        t = dt.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            "--since must be YYYY-MM-DD, an ISO 8601 time or an age like 10m, 2h, 1d; got %r" % value
        ) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1_000_000)


_DEVICE = "SELECT dev, device_id, transport, n, has_n, boot_epoch, boots, counters FROM devices"
_LOSS = "SELECT dev, seq, boot_epoch, client_n, n0, n1, lost, cause FROM losses"


def _device(row: tuple[Any, ...]) -> DeviceRow:
    return DeviceRow(*row[:4], bool(row[4]), row[5], row[6], json.loads(row[7] or "{}"))


class StoreReader:
    """A read-only connection to one store; a context manager (closes the connection)."""

    def __init__(self, path: str | Path) -> None:
        self.conn = connect_ro(str(path))

    @classmethod
    def open(cls, path: str | Path) -> StoreReader | None:
        """A reader, or None when there is no readable store at `path` (yet)."""
        if not Path(path).exists():
            return None
        try:
            r = cls(path)
            r.conn.execute("SELECT 1 FROM devices LIMIT 1")
        except sqlite3.Error:
            return None
        return r

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> StoreReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- devices
    def devices(self) -> list[DeviceRow]:
        return [_device(r) for r in self.conn.execute(_DEVICE + " ORDER BY dev")]

    def device(self, device_id: str) -> DeviceRow | None:
        row = self.conn.execute(_DEVICE + " WHERE device_id = ?", (device_id,)).fetchone()
        return _device(row) if row else None

    # -- losses and boots
    def losses(self, dev: int | None = None) -> list[LossRow]:
        if dev is None:
            return [LossRow(*r) for r in self.conn.execute(_LOSS + " ORDER BY dev, seq")]
        return [LossRow(*r) for r in self.conn.execute(_LOSS + " WHERE dev = ? ORDER BY seq", (dev,))]

    def boots(self, dev: int | None = None) -> list[BootRow]:
        q = "SELECT dev, boot_epoch, boots, detected_by FROM boots"
        if dev is None:
            return [BootRow(*r) for r in self.conn.execute(q + " ORDER BY dev, first_seen_us")]
        return [BootRow(*r) for r in self.conn.execute(q + " WHERE dev = ? ORDER BY first_seen_us", (dev,))]

    # -- events (first arrivals)
    def events(self, dev: int | None = None, boot_epoch: int | None = None) -> Iterator[EventRow]:
        """First arrivals, in storage order; all, one device's, or one boot's of one device."""
        q = "SELECT dev, boot_epoch, offset, channel, data FROM events"
        if dev is None:
            return (EventRow(*r) for r in self.conn.execute(q))
        if boot_epoch is None:
            return (EventRow(*r) for r in self.conn.execute(q + " WHERE dev = ?", (dev,)))
        return (
            EventRow(*r)
            for r in self.conn.execute(q + " WHERE dev = ? AND boot_epoch = ?", (dev, boot_epoch))
        )

    def boot_epochs(self) -> list[int]:
        """The distinct boot epochs that have stored events (any device)."""
        return [r[0] for r in self.conn.execute("SELECT DISTINCT boot_epoch FROM events")]

    def events_by_arrival(self, channel: int | None = None) -> list[tuple[int, bytes]]:
        """(offset, data) of first arrivals in arrival order; all channels or one."""
        q = "SELECT offset, data FROM events"
        if channel is None:
            return [tuple(r) for r in self.conn.execute(q + " ORDER BY arrival")]  # type: ignore[misc]
        rows = self.conn.execute(q + " WHERE channel = ? ORDER BY arrival", (channel,))
        return [tuple(r) for r in rows]  # type: ignore[misc]

    def late_arrivals(self) -> int:
        """Event arrivals with lead < 1 (spec 000: late or duplicate), store-wide."""
        return int(
            self.conn.execute("SELECT COUNT(*) FROM arrivals WHERE kind = 0 AND lead < 1").fetchone()[0]
        )

    def has_event(self, dev: int, boot_epoch: int, offset: int) -> bool:
        q = "SELECT 1 FROM events WHERE dev = ? AND boot_epoch = ? AND offset = ?"
        return self.conn.execute(q, (dev, boot_epoch, offset)).fetchone() is not None

    def event_count(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM events").fetchone()[0])

    def events_per_boot(self, dev: int) -> dict[int, int]:
        q = "SELECT boot_epoch, COUNT(*) FROM events WHERE dev = ? GROUP BY boot_epoch"
        return dict(self.conn.execute(q, (dev,)).fetchall())

    def events_per_device(self) -> dict[int, int]:
        return dict(self.conn.execute("SELECT dev, COUNT(*) FROM events GROUP BY dev").fetchall())

    def reports_per_device(self) -> dict[int, int]:
        return dict(self.conn.execute("SELECT dev, COUNT(*) FROM reports GROUP BY dev").fetchall())

    # -- arrivals
    def arrival_stats(self) -> dict[int, ArrivalStats]:
        """Per dev, over the event arrivals (kind 0): the lead buckets of spec 000 (=1, =0, >1, <0)."""
        q = (
            "SELECT dev, COUNT(*), SUM(duplicate = 0), SUM(lead = 1), SUM(lead = 0), SUM(lead > 1), "
            "SUM(lead < 0) FROM arrivals WHERE kind = 0 GROUP BY dev"
        )
        return {r[0]: ArrivalStats(*r[1:]) for r in self.conn.execute(q)}

    def duplicate_arrivals(self, dev: int) -> int:
        """Event arrivals the bridge recognised as duplicate or late (stored flagged, not as events)."""
        q = "SELECT COUNT(*) FROM arrivals WHERE dev = ? AND kind = 0 AND duplicate = 1"
        return int(self.conn.execute(q, (dev,)).fetchone()[0])

    def stored_twice(self, dev: int) -> int:
        """First arrivals beyond one per (boot, offset): 0 unless the store's unique index is gone."""
        q = (
            "SELECT COALESCE(SUM(c - 1), 0) FROM (SELECT COUNT(*) c FROM arrivals WHERE dev = ? AND kind = 0 "
            "AND duplicate = 0 GROUP BY boot_epoch, seq HAVING c > 1)"
        )
        return int(self.conn.execute(q, (dev,)).fetchone()[0])

    def commits(self, t0_us: int, t1_us: int) -> list[tuple[int, int, int]]:
        """(commit_us, events, payload bytes) per commit of first event arrivals in [t0_us, t1_us]."""
        q = (
            "SELECT commit_us, COUNT(*), SUM(payload_bytes) FROM arrivals "
            "WHERE kind = 0 AND duplicate = 0 AND commit_us BETWEEN ? AND ? "
            "GROUP BY commit_us ORDER BY commit_us"
        )
        return [tuple(r) for r in self.conn.execute(q, (t0_us, t1_us))]  # type: ignore[misc]

    def event_arrivals(
        self,
        after_id: int = 0,
        devices: tuple[str, ...] = (),
        channels: tuple[int, ...] = (),
        since_us: int | None = None,
        duplicates: bool = True,
        limit: int = 10_000,
        newest: bool = False,
    ) -> list[EventArrival]:
        """Event arrivals with id > after_id in id order (at most `limit`: the first ones, or with
        `newest` the last ones), of the given devices and channels (empty: all), received at or after
        since_us; duplicates False: first arrivals only."""
        q = _EVENT_ARRIVAL
        args: list[Any] = [after_id]
        if devices:
            q += " AND d.device_id IN (%s)" % ",".join("?" * len(devices))
            args += devices
        if channels:
            q += " AND a.channel IN (%s)" % ",".join("?" * len(channels))
            args += channels
        if since_us is not None:
            q += " AND a.rx_us >= ?"
            args.append(since_us)
        if not duplicates:
            q += " AND a.duplicate = 0"
        rows = self.conn.execute(q + " ORDER BY a.id %s LIMIT ?" % ("DESC" if newest else ""), (*args, limit))
        out = [EventArrival(*r[:6], bool(r[6]), r[7], r[8]) for r in rows]
        return out[::-1] if newest else out

    def last_arrival_id(self) -> int:
        return int(self.conn.execute("SELECT COALESCE(MAX(id), 0) FROM arrivals").fetchone()[0])

    def losses_after(self, rowid: int, limit: int = 1000) -> list[LossEntry]:
        """Loss rows written (or rewritten: a recovery that ended) after `rowid`, in rowid order."""
        return [LossEntry(*r) for r in self.conn.execute(_LOSS_ENTRY, (rowid, limit))]

    def boots_after(self, rowid: int, limit: int = 1000) -> list[BootEntry]:
        """Boot rows written after `rowid`, in rowid order."""
        return [BootEntry(*r) for r in self.conn.execute(_BOOT_ENTRY, (rowid, limit))]

    def totals(self) -> dict[str, int]:
        """Store-wide counts: events, duplicate arrivals, recoveries (exact lost, unknown), boots,
        devices reached."""
        c = self.conn
        ev = c.execute("SELECT COUNT(*) FROM arrivals WHERE kind = 0 AND duplicate = 0").fetchone()[0]
        dup = c.execute("SELECT COUNT(*) FROM arrivals WHERE duplicate = 1").fetchone()[0]
        rec, lost, unk = c.execute(
            "SELECT COUNT(*), COALESCE(SUM(lost), 0), SUM(lost IS NULL) FROM losses"
        ).fetchone()
        boots = c.execute("SELECT COUNT(*) FROM boots").fetchone()[0]
        devs = c.execute("SELECT COUNT(*) FROM devices WHERE has_n = 1").fetchone()[0]
        return {
            "events": ev,
            "dups": dup,
            "recoveries": rec,
            "lost": lost,
            "unknown": unk or 0,
            "boots": boots,
            "devices": devs,
        }
