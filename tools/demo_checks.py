"""The demo's checks: what the store says about each device (:class:`Facts`, read through
host/bridge/store_reader.py) against ground truth, and the cross-checks of netem, authentication
and the Spark job against the store.

Ground truth: a simulated device generated exactly ``limit`` events, event i carrying its device
index and i (the simulator's payload); a board numbers its sensor samples from 0 in every boot and
counts its boots. Each check returns (ok, message) for the demo's summary.
"""

from __future__ import annotations

import itertools
import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leadwire import messages
from leadwire.bridge.accounting import check_store
from leadwire.bridge.store_reader import StoreReader
from leadwire.tools.testbed import HEALTH_CH, M32, SENSOR_CH, SimGroup

EVENT = struct.Struct(">QII")  # simdevice payload: generation time us, device index, event number


@dataclass
class Device:
    """One device of the demo's plan."""

    id: str
    kind: str  # "board" | "sim"
    transport: str  # "udp" | "serial"
    target: str  # the device's own address or port
    address: str = ""  # what the bridge polls (netem's side)
    group: SimGroup | None = None
    index: int = 0  # simulator device index
    start: int = 0  # simulator: offset of event 0 (ground truth)
    key: str | None = field(default=None, repr=False)  # auth key (hex, a secret): bridge.toml only


@dataclass
class Facts:
    """What the store says about one device."""

    id: str
    transport: str
    dev: int = 0  # the store's device number
    events: int = 0
    arrivals: int = 0
    lead: list[int] = field(default_factory=lambda: [0, 0, 0, 0])  # =1, =0, >1, <0
    lost_exact: int = 0
    lost_unknown: int = 0  # recoveries of unknown size (first contact, restart)
    overruns: int = 0
    restart_rows: int = 0
    boots: list[tuple[int, int, str]] = field(default_factory=list)  # (epoch, boots, detected_by)
    losses: list[tuple[int, int, int, int | None, str]] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    truth: str = ""
    truth_ok: bool = True
    before_contact: int | None = None
    health: dict[str, int] | None = None
    health_auth: dict[str, int] | None = None  # the board's own auth rejects (record after health)
    gaps: int = 0  # offsets missing between the first and the last event stored, per boot


def read_facts(r: StoreReader) -> dict[str, Facts]:
    """Per device: events, arrivals and lead buckets, losses, boots, gaps between stored offsets."""
    facts: dict[int, Facts] = {}
    for d in r.devices():
        facts[d.dev] = Facts(d.device_id, d.transport, d.dev, counters=d.device_counters)
    for dev, s in r.arrival_stats().items():
        f = facts[dev]
        f.arrivals, f.events, f.lead = s.arrivals, s.events, [s.lead_eq1, s.lead_eq0, s.lead_gt1, s.lead_lt0]
    for x in r.losses():
        f = facts[x.dev]
        f.losses.append((x.boot_epoch, x.seq, x.n0, x.lost, x.cause))
        if x.lost is None:
            f.lost_unknown += 1
        else:
            f.lost_exact += x.lost
        f.overruns += x.cause == "overrun"
        f.restart_rows += x.cause == "restart"
    spans: dict[tuple[int, int], list[int]] = {}
    for e in r.events():
        spans.setdefault((e.dev, e.boot_epoch), []).append(e.offset)
    for (dev, _), offs in spans.items():
        base = offs[0]
        rel = [(o - base + 0x80000000) & M32 for o in offs]  # wrap-safe around the first
        facts[dev].gaps += max(rel) - min(rel) + 1 - len(rel)
    for b in r.boots():
        facts[b.dev].boots.append((b.boot_epoch, b.boots, b.detected_by))
    return {f.id: f for f in facts.values()}


def check_sims(r: StoreReader, sims: list[Device], facts: dict[str, Facts]) -> tuple[bool, str]:
    """Every simulated device: stored + exact lost + left the ring before first contact == generated,
    and every stored payload is the event its offset names (device index, event number)."""
    bad_payload: dict[str, int] = {}
    for d in sims:
        f = facts.get(d.id)
        for e in r.events(f.dev) if f else ():
            _, idx, i = EVENT.unpack_from(e.data)
            if idx != d.index or i != (e.offset - d.start) & M32:
                bad_payload[d.id] = bad_payload.get(d.id, 0) + 1
    failed = []
    for d in sims:
        f = facts.get(d.id)
        assert d.group is not None
        gen = d.group.limit
        if f is None:
            failed.append("%s: not in the store" % d.id)
            continue
        # the one accounting check (leadwire.bridge.accounting): the simulator's own start and count
        # against the store's events and loss rows; drained, so nothing may be pending
        truth = {ep: (d.start, (d.start + gen - 1) & M32 if gen else None) for ep, _, _ in f.boots[:1]}
        led = check_store(r, f.dev, truth)
        f.before_contact = led.before_contact
        ok = (led.ok and not led.pending and led.generated == gen and not bad_payload.get(d.id)
              and len(f.boots) == 1 and not f.restart_rows)  # fmt: skip
        f.truth_ok = ok
        f.truth = "%d = %d stored + %d lost + %d before contact" % (
            gen,
            led.stored,
            led.lost,
            led.before_contact,
        )
        if not ok:
            f.truth = "MISMATCH %s%s" % (
                led.line(),
                "; %d payloads wrong" % bad_payload[d.id] if bad_payload.get(d.id) else "",
            )
            failed.append("%s: %s" % (d.id, f.truth))
    gen_total = sum(d.group.limit for d in sims if d.group)
    msg = "simulated devices: %d/%d account for every generated event (%d generated)" % (
        len(sims) - len(failed),
        len(sims),
        gen_total,
    )
    if failed:
        msg += "; " + "; ".join(failed[:5])
    return not failed, msg


def check_boards(
    r: StoreReader, boards: list[Device], facts: dict[str, Facts], restarted: str | None
) -> tuple[bool, list[str]]:
    """Per board boot, from the boards' own numbering: sensor samples (u16, from 0 per boot) stored
    at most once and none missing where the bridge counted no loss; offsets stored + exact lost ==
    the boot's offset span from its first recovery to the last event stored. The restart the demo
    caused is the one restart detected."""
    msgs: list[str] = []
    ok_all = True
    for d in boards:
        f = facts.get(d.id)
        if f is None:
            msgs.append("%s: not in the store" % d.id)
            ok_all = False
            continue
        problems = []
        parts = []
        epochs = [e for e, _, _ in f.boots]
        for bi, epoch in enumerate(epochs):
            rows = [(e.offset, e.channel, e.data) for e in r.events(f.dev, epoch)]
            part = _check_boot(bi, rows, [x for x in f.losses if x[0] == epoch], f, problems)
            parts.append(part)
        want = 2 if d.id == restarted else 1
        if len(epochs) != want:
            problems.append("%d boots seen, expected %d" % (len(epochs), want))
        if d.id == restarted:
            if f.restart_rows != 1:
                problems.append("%d restart recoveries, expected 1" % f.restart_rows)
            if len(f.boots) == 2 and f.boots[1][1] != f.boots[0][1] + 1:
                problems.append("boot counter %d -> %d" % (f.boots[0][1], f.boots[1][1]))
        elif f.restart_rows:
            problems.append("a restart was detected that did not happen")
        f.truth_ok = not problems
        f.truth = "; ".join(problems) if problems else "ok: " + ", ".join(parts)
        ok_all &= not problems
        msgs.append("%s: %s" % (d.id, f.truth))
    return ok_all, msgs


def _unwrap16(samples: list[int]) -> list[int]:
    """u16 sample numbers in offset order, unwrapped."""
    un: list[int] = []
    base = 0
    for s in samples:
        if un and s + base < un[-1] - 0x8000:
            base += 0x10000
        un.append(s + base)
    return un


def _check_boot(
    bi: int, rows: list[tuple[int, int, bytes]], boot_losses: list[Any], f: Facts, problems: list[str]
) -> str:
    """One boot of a board (its stored (offset, channel, data) and loss rows): its problems
    appended to `problems`; returns its part of the board's line."""
    if not rows or not boot_losses:
        return "boot %d: no events" % (bi + 1)
    n0 = boot_losses[0][2]
    lost = sum(x[3] or 0 for x in boot_losses)
    rel = sorted(((off - n0) & M32, ch, data) for off, ch, data in rows)
    span = rel[-1][0] + 1
    if span != len(rel) + lost:
        problems.append("boot %d: offsets span %d != %d stored + %d lost" % (bi + 1, span, len(rel), lost))
    un = _unwrap16([messages.decode_sample(data)[0] for _, ch, data in rel if ch == SENSOR_CH])
    repeated = len(un) - len(set(un))
    backwards = sum(1 for a, b in itertools.pairwise(un) if b <= a)
    missing = (un[-1] - un[0] + 1 - len(set(un))) if un else 0
    if repeated or backwards:
        problems.append("boot %d: %d samples repeated, %d out of order" % (bi + 1, repeated, backwards))
    if missing and not lost:
        problems.append("boot %d: %d samples missing, no loss counted" % (bi + 1, missing))
    if missing > lost:
        problems.append("boot %d: %d samples missing > %d counted lost" % (bi + 1, missing, lost))
    first = un[0] if un else 0
    if bi == 0:
        f.before_contact = first
    elif first:
        problems.append("boot %d: starts at sample %d, not 0" % (bi + 1, first))
    health = [data for _, ch, data in rel if ch == HEALTH_CH and len(data) == messages.HEALTH_SIZE]
    if health:
        f.health = messages.decode_health(health[-1])
    ha = [data for _, ch, data in rel if ch == HEALTH_CH and len(data) == messages.HEALTH_AUTH_SIZE]
    if ha:
        f.health_auth = messages.decode_health_auth(ha[-1])
    return "boot %d: samples %d..%d, %d missing (%d events lost, counted)" % (
        bi + 1, first, un[-1] if un else -1, missing, lost)  # fmt: skip


def check_netem(facts: dict[str, Facts], snaps: list[tuple[str, str, dict[str, Any]]]) -> tuple[bool, str]:
    """Corrupted UDP answers netem sent == bad frames the bridge counted on UDP devices."""
    udp = {d for d, k, _ in snaps if k == "udp"}
    sent = sum(int(s["down"]["corrupted_out"]) for _, k, s in snaps if k == "udp")
    seen = sum(
        f.counters.get("crc_errors", 0) + f.counters.get("bad_frames", 0)
        for f in facts.values()
        if f.id in udp
    )
    return (
        sent == seen,
        "netem sent %d corrupted UDP answers; the bridge counted %d bad frames on UDP links" % (sent, seen),
    )


def check_auth(devices: list[Device], facts: dict[str, Facts]) -> tuple[bool, str]:
    """Every device signed; the bridge refused no frame as forged or unsigned (the line only loses,
    duplicates, delays and corrupts: duplicates and late copies are replays, corruption CRC errors)."""
    signed = sum(1 for d in devices if d.key)
    fs = [facts[d.id] for d in devices if d.id in facts]
    forged = sum(f.counters.get("auth_forged", 0) for f in fs)
    replayed = sum(f.counters.get("auth_replayed", 0) for f in fs)
    unsigned = sum(f.counters.get("auth_unsigned", 0) for f in fs)
    boards = [f.health_auth for f in fs if f.health_auth is not None]
    bf = sum(h["auth_forged"] for h in boards)
    br = sum(h["auth_replayed"] for h in boards)
    bu = sum(h["auth_unsigned"] for h in boards)
    ok = signed == len(devices) and forged == 0 and unsigned == 0 and bu == 0
    return ok, (
        "%d/%d devices signed; bridge refused %d replays (netem's duplicate and late copies), %d forged, %d "
        "unsigned; boards (last health) refused %d forged (polls of a session before a power cut), %d "
        "replays, %d unsigned" % (signed, len(devices), replayed, forged, unsigned, bf, br, bu)
    )


def check_spark(report: Path, facts: dict[str, Facts]) -> tuple[bool, list[str]]:
    """The Spark job's devices table and summary equal the store, device by device."""
    import pyarrow.parquet as pq

    rows = {r["device_id"]: r for r in pq.read_table(report / "parquet" / "devices.parquet").to_pylist()}
    summary = json.loads((report / "summary.json").read_text())
    bad: list[str] = []
    for f in facts.values():
        r = rows.get(f.id)
        if r is None:
            bad.append("%s: missing in Spark's devices table" % f.id)
            continue
        want = {
            "unique": f.events,
            "messages": f.arrivals,
            "lead_eq1": f.lead[0],
            "lead_eq0": f.lead[1],
            "lead_gt1": f.lead[2],
            "lead_lt0": f.lead[3],
            # Spark's gaps never filled: seqs missing between received ones. The bridge also counts
            # exactly the events lost at the head of a boot, before its first stored event.
            "lost": f.gaps,
            "restarts": max(0, len(f.boots) - 1),
            "overruns": f.overruns,
            "events_lost_exact": f.lost_exact,
            "unknown_loss_recoveries": f.lost_unknown,
            "lead_mismatches": 0,
            "dup_flag_mismatches": 0,
        }
        diff = ["%s %s != %s" % (k, r.get(k), v) for k, v in want.items() if r.get(k) != v]
        if diff:
            bad.append("%s: %s" % (f.id, ", ".join(diff)))
    extra = set(rows) - set(facts)
    if extra:
        bad.append("Spark has devices the store has not: %s" % sorted(extra)[:5])
    tot = {
        "devices": len(facts),
        "unique": sum(f.events for f in facts.values()),
        "messages": sum(f.arrivals for f in facts.values()),
        "restarts": sum(max(0, len(f.boots) - 1) for f in facts.values()),
        "events_lost_exact": sum(f.lost_exact for f in facts.values()),
        "overruns": sum(f.overruns for f in facts.values()),
    }
    tdiff = ["%s %s != %s" % (k, summary.get(k), v) for k, v in tot.items() if summary.get(k) != v]
    if tdiff:
        bad.append("fleet summary: " + ", ".join(tdiff))
    msg = [
        "Spark's devices table equals the store for %d/%d devices (events, arrivals, lead buckets, gaps, "
        "restarts, overruns, exact and unknown losses); fleet totals %s"
        % (
            len(facts) - sum(1 for b in bad if not b.startswith("fleet")),
            len(facts),
            "equal" if not tdiff else "DIFFER",
        ),
        "Spark's gaps never filled %d + events lost before a boot's first stored event %d = the bridge's "
        "exact losses %d"
        % (
            sum(int(r.get("lost") or 0) for r in rows.values()),
            sum(f.lost_exact - f.gaps for f in facts.values()),
            sum(f.lost_exact for f in facts.values()),
        ),
    ]
    return not bad, msg + bad[:8]
