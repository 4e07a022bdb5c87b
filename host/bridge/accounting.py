"""Exact accounting of one device's events: every event it generated is stored once or counted lost.

The one check every bench, chaos, netem run, the demo and the property tests end with (and the
property tests run after every step). Ground truth comes from the device (its boot's first offset
and its newest event); the bridge's side is what it stored: the offsets of the first arrivals of
events and the loss rows (``losses`` table, or the client's pending ``Loss`` records).

What a loss row accounts for (the same rule for every row, whichever client rule wrote it):

=============================  ==================================================================
row                            offsets it covers
=============================  ==================================================================
lost = k (an exact count)      client_n + 1 .. client_n + k: one run of offsets, none of them
                               stored (the gaps behind held frames an overrun RECOVERY took are
                               a row each, leadwire.hold)
lost = None (first contact,    the boot's offsets before n0: they left the ring before the
restart)                       bridge reached the boot; the row says so, the device knows how many
=============================  ==================================================================

Every offset of a boot from its start up to the device's newest falls in exactly one class:

stored          a first arrival in the store (once)
lost            covered by an exact loss row
before_contact  before n0 of the boot's first first-contact/restart row
pending         after the bridge's n: generated, not polled yet (a run stopped mid-way, or the
                tail of a boot a restart ended, which the next boot's restart row names)
silent          anything else: missing with no row covering it

and it is wrong too when an offset is stored twice (``twice``), stored and counted lost or counted
by two rows (``double``), or stored or counted but never generated (``phantom``). ``ok`` is all
of silent, twice, double and phantom being zero. Offsets are u32 and wrap; a boot holds < 2^31.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

M32 = 0xFFFFFFFF
STORED, LOST, BEFORE = 1, 2, 3
MAX_LISTED = 20  # offsets listed per problem class (the counts are exact)


class LossLike(Protocol):
    """A loss row: store_reader.LossRow, the bridge client's Loss or the core's Loss."""

    client_n: int
    n0: int
    lost: int | None
    cause: str


@dataclass
class Ledger:
    """The classes of one boot's offsets (see the module docstring) and the offsets in error."""

    generated: int = 0
    stored: int = 0
    lost: int = 0
    before_contact: int = 0
    pending: int = 0
    silent: int = 0
    twice: int = 0
    double: int = 0
    phantom: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.silent or self.twice or self.double or self.phantom)

    def add(self, o: Ledger) -> None:
        for k in ("generated", "stored", "lost", "before_contact", "pending", "silent", "twice", "double",
                  "phantom"):  # fmt: skip
            setattr(self, k, getattr(self, k) + getattr(o, k))
        self.problems += o.problems

    def line(self) -> str:
        """One line: the classes, and what is wrong when anything is."""
        s = "generated %d = stored %d + lost %d + before contact %d + pending %d + silent %d" % (
            self.generated, self.stored, self.lost, self.before_contact, self.pending, self.silent,
        )  # fmt: skip
        if not self.ok:
            s += "; twice %d, double %d, phantom %d: %s" % (
                self.twice, self.double, self.phantom, "; ".join(self.problems[:3]))  # fmt: skip
        return s


class AccountingError(AssertionError):
    """An event silent, stored twice, counted twice or made up: str(e) is the ledger's line."""


def check_boot(
    start: int,
    newest: int | None,
    stored: Iterable[int],
    losses: Iterable[LossLike],
    polled_to: int | None = None,
) -> Ledger:
    """One boot: the device generated offsets start .. newest (None: nothing yet); the bridge stored
    the offsets `stored` (first arrivals, any order) and wrote `losses` (this boot's rows, in the
    order written); its n was `polled_to` (None: the bridge drained the boot, nothing is pending)."""
    g = 0 if newest is None else ((newest - start) & M32) + 1
    led = Ledger(generated=g)
    marks = bytearray(g)
    for off in stored:
        i = (off - start) & M32
        if i >= g:
            led.phantom += 1
            _note(led, "stored offset %d never generated" % off)
        elif marks[i]:
            led.twice += 1
            _note(led, "offset %d stored twice" % off)
        else:
            marks[i] = STORED
    head_done = False
    for x in losses:
        if x.lost is None:
            if head_done:
                continue  # a later restart row of the same boot: nothing more before n0
            head_done = True
            i0 = min((x.n0 - start) & M32, g)
            for i in range(i0):
                if marks[i] == STORED:
                    led.double += 1
                    _note(led, "offset %d stored before the boot's first contact" % ((start + i) & M32))
                else:
                    marks[i] = BEFORE
            continue
        lo = ((x.client_n + 1) - start) & M32
        hi = lo + x.lost
        if hi > g:
            k = hi - max(lo, g)
            led.phantom += k
            _note(led, "%s row (n=%d) counts %d offsets never generated" % (x.cause, x.client_n, k))
        for i in range(lo, min(hi, g)):
            if marks[i]:
                led.double += 1
                what = "stored" if marks[i] == STORED else "counted before"
                _note(led, "offset %d counted lost and %s" % ((start + i) & M32, what))
            else:
                marks[i] = LOST
    end = g if polled_to is None else min(g, ((polled_to - start) & M32) + 1)
    if polled_to is not None and ((polled_to - start) & M32) >= 0x80000000:
        end = 0  # n before the boot's start (not polled yet)
    led.stored = marks.count(STORED)
    led.lost = marks.count(LOST)
    led.before_contact = marks.count(BEFORE)
    silent = marks[:end].count(0)
    led.pending = marks[end:].count(0)
    led.silent = silent
    if silent:
        offs = [(start + i) & M32 for i in range(end) if not marks[i]]
        _note(led, "silent offsets %s%s" % (offs[:MAX_LISTED], " ..." if len(offs) > MAX_LISTED else ""))
    return led


def _note(led: Ledger, msg: str) -> None:
    if len(led.problems) < MAX_LISTED:
        led.problems.append(msg)


def require(led: Ledger, what: str = "") -> Ledger:
    """led, or AccountingError naming what failed (for tests and runs that must fail loudly)."""
    if not led.ok:
        raise AccountingError((what + ": " if what else "") + led.line())
    return led


def check_client(cl: Any, start: int, newest: int | None, drained: bool = False) -> Ledger:
    """A bridge DeviceClient (host/bridge/client.py) against its device's current boot, from the rows
    it produced and has not handed to a store (out_events, out_losses: a harness without a store
    keeps them). n - unproven is where it has polled to: an overrun's skip past the device's newest
    event counts those offsets only once shown generated (leadwire.hold). drained: nothing may be
    pending either (the harness ran the link until the client caught up)."""
    pc = cl.pc
    epoch = pc.epoch
    stored = [e[2] for e in cl.out_events if e[1] == epoch]
    rows = {id(r): r for r in cl.out_losses if r.boot_epoch == epoch}.values()
    polled = (pc.n - getattr(pc, "unproven", 0)) & M32 if not pc.fresh else None
    led = check_boot(start, newest, stored, rows, None if drained else polled)
    if pc.fresh and not drained:
        led.pending += led.silent  # nothing of this boot known yet: all of it is still to come
        led.silent = 0
        led.problems = [p for p in led.problems if not p.startswith("silent")]
    return led


def check_store(reader: Any, dev: int, truth: dict[int, tuple[int, int | None]] | None = None) -> Ledger:
    """One device in a store (store_reader.StoreReader): every boot it stored rows for, against
    `truth` (boot epoch -> (start offset, newest offset)) when the device's record is known. Without
    it the store is its own witness: each boot from its first-contact row's n0 (or first stored
    event) up to the devices row's n (the current boot) or the next restart row's client_n; the
    check then finds offsets missing inside that span, not a tail the bridge never reached."""
    row = next((d for d in reader.devices() if d.dev == dev), None)
    losses = reader.losses(dev)
    by_epoch: dict[int, list[Any]] = {}
    for x in losses:
        by_epoch.setdefault(x.boot_epoch, []).append(x)
    events: dict[int, list[int]] = {}
    for e in reader.events(dev):
        events.setdefault(e.boot_epoch, []).append(e.offset)
    total = Ledger()
    epochs = list(dict.fromkeys([*by_epoch, *events]))
    current = row.boot_epoch if row is not None else None
    for ep in epochs:
        rows = by_epoch.get(ep, [])
        offs = events.get(ep, [])
        if truth is not None and ep in truth:
            start, newest = truth[ep]
            polled = row.n if row is not None and ep == current else None
            total.add(check_boot(start, newest, offs, rows, polled))
            continue
        head = [x for x in rows if x.lost is None]
        cands = [x.n0 for x in head[:1]] + ([min(offs, key=lambda o: (o - offs[0]) & M32)] if offs else [])
        if not cands:
            continue
        start = cands[0] if head else cands[-1]
        ends = [o for o in offs] + [(x.client_n + (x.lost or 0)) & M32 for x in rows if x.lost]
        newest = max(ends, key=lambda o: (o - start) & M32) if ends else None
        if newest is not None and ((newest - start) & M32) >= 0x80000000:
            newest = None
        total.add(check_boot(start, newest, offs, rows))
    return total
