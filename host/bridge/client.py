"""The per-device bridge client: sans-I/O (no sockets, no clocks; h11 style).

The asyncio layer (daemon.py) asks :meth:`DeviceClient.request` for the next frame to send, feeds
every frame received from the device to :meth:`DeviceClient.on_frame`, and reports a missing or
broken answer with :meth:`DeviceClient.on_transport_error`. Time comes in as arguments. What the
client decides to store, it appends to its ``out_*`` lists, which the store drains in one
transaction together with :meth:`DeviceClient.snapshot` (the client offset n and the counters).

Spec 004 itself (the offset n, matching answers to requests by tag, the recovery phase, overrun
vs restart vs first contact and the exact loss count) is the core's ``leadwire.client.PollClient``;
this class wraps it with what the bridge adds: lead (spec 000) and duplicate flags for every
arrival, push sessions (spec 003), adaptive polling, periodic HELLO, counters and the rows to store.
The client table it follows (docs/protocol.md, "Polling with offsets"):

======================  ===========================================================================
answer to POLL(n)       what the client does
======================  ===========================================================================
EVENTS from s(n)        case 1: store the batch, n = its last offset, poll again (now if backlog)
NO_EVENT(n)             case 2: nothing new, poll n again later
RECOVERY(n0, n1, E)     case 3: classify by the boot epoch E it carries (new epoch: restart; no
                        event of this boot yet: first contact; else overrun with exactly
                        (n0 - s(n)) mod 2^32 lost), record the loss, set n = n0 - 1 and consume
                        n0..n1 (the recovery phase). The bridge's additions (leadwire.hold,
                        docs/protocol.md 6.3): frames held past a gap are taken first and only the
                        overwritten gaps counted; the start skips what the ring turns over in a
                        round trip, past n1 if need be (counted once shown generated)
RECOVERY behind n       after a skip past n1, the device not there yet (AHEAD): poll n again at
                        its generation pace
no answer / bad frame   transport error: poll n again at once (the wait was the RTO, below); after
                        3 silent rounds also HELLO, with a bounded exponential backoff
======================  ===========================================================================

How long "no answer" is: the request's retransmission timeout (RTO), from this link's measured
round trips (:mod:`~leadwire.bridge.rtt`, RFC 6298): every POLL and HELLO is recorded by its tag
when it goes out, and the first frame carrying that tag is its round-trip sample, even when it
comes after the request was sent again (then the retransmission was spurious, and the long sample
raises the RTO). ``polling.timeout`` is the ceiling; ``polling.rto_min`` (or a serial line's time
for one request and one answer frame) the floor; consecutive timeouts double it (back-off).

Answers that do not answer the outstanding poll (a late or duplicated datagram) are still
arrivals: their events are logged with their lead (spec 000) and ``duplicate`` set, never stored
twice. Every protocol detail (layouts, CRC, u32 arithmetic, lead) comes from the leadwire core.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from leadwire import auth as core_auth
from leadwire import auth_host, codec, frames, messages, u32, wire
from leadwire import client as core
from leadwire.hold import AHEAD, HoldingPollClient
from leadwire.lead import LeadTracker
from leadwire.reassembly import Reassembler

from .config import DeviceConfig, PollConfig
from .copies import PollCopies
from .rtt import RttEstimator, serial_floor

# request kinds
REQ_HELLO = 1
REQ_SUBSCRIBE = 2
REQ_POLL = 3

KIND_EVENT = "event"
KIND_REPORT = "report"
EVENT_LEAD_CHANNEL = -1  # all channels of a device share its one ring of offsets

# per-channel counters (index into the list kept per channel)
C_RECEIVED = 0
C_DUPLICATES = 1
C_LATE = 2
C_GAPS = 3
C_RETRANSMISSIONS = 4
CHANNEL_COUNTERS = ("received", "duplicates", "late", "gaps", "retransmissions")

DEVICE_COUNTERS = (
    "polls",
    "round_trips",
    "timeouts",
    "crc_errors",
    "bad_frames",
    "auth_forged",
    "auth_replayed",
    "auth_unsigned",
    "overruns",
    "overrun_lost",
    "restarts",
    "recoveries",
    "stale_answers",
    "events_stored",
    "reports_stored",
    "acks_sent",
    "error_frames",
    "unsolicited",
)

# kinds of row segments in out_segments (store.Batch): first arrivals of polled events (the short
# row of store._INSERT_EVENTS), and every other arrival (all columns, store._INSERT_ARRIVALS)
SEG_EVENT = 0
SEG_ARRIVAL = 1

PIPELINE_MIN_EVENTS = 4.0  # events generated per round trip from which pipelined POLLs pay
GEN_RATE_SPAN = 0.002  # s: the generation rate is measured over answers at least this far apart
# the dead-link backoff (on_transport_error) waits for silent rounds in a row whose RTOs add up to
# at least this fraction of polling.timeout (its first wait is timeout / 2: at most doubles the silence)
DEAD_SILENCE = 0.5
# tail-loss probe (DeviceClient.request): armed at SRTT + 2 RTTVAR + PROBE_MARGIN (s) instead of the RTO
# while a frame arrived past a gap (a datagram lost) within the last PROBE_RECENT sends
PROBE_MARGIN = 0.0002
PROBE_RECENT = 2000
TURNOVER_SLACK = 0.25  # added to the turnover estimate where it stays within the ring (request)

_COUNTERS_JSON = '{"device":{%s},"channels":{%%s}}' % ",".join('"%s":%%d' % k for k in DEVICE_COUNTERS)
_CHANNEL_JSON = '"%%d":{%s}' % ",".join('"%s":%%d' % k for k in CHANNEL_COUNTERS)

# what admit() makes of a frame's authentication (besides wire.OK)
AUTH_REJECTS = {wire.E_AUTH: "auth_forged", wire.E_REPLAY: "auth_replayed", wire.E_UNSIGNED: "auth_unsigned"}
_SPARE = bytes(core_auth.AUTH_SIZE)


def random_nonce() -> int:
    """A fresh HELLO nonce (auth.py: random, new for every request)."""
    return int.from_bytes(os.urandom(4), "big")


TS_MIN_US = 946_684_800_000_000  # 2000-01-01: a prefix timestamp outside [2000, 2100) is ignored
TS_MAX_US = 4_102_444_800_000_000


@dataclass
class Loss:
    """One recovery phase (spec 004 case 3) the client acted on; a row of the losses table."""

    seq: int  # per-device number of this recovery
    boot_epoch: int
    client_n: int
    n0: int
    n1: int
    lost: int | None
    cause: str  # "overrun" | "restart" | "first_contact"
    started_us: int
    ended_us: int | None = None
    recovered: int = 0
    core: Any = field(default=None, repr=False, compare=False)  # the PollClient's Loss it mirrors


@dataclass
class Boot:
    boot_epoch: int
    boots: int
    firmware: str
    board: str
    first_seen_us: int
    detected_by: str  # "hello" | "recovery"


@dataclass
class Delivery:
    """A message handed to subscribe()/subscribe_ordered() callbacks."""

    kind: str  # "event" | "report"
    channel: int
    seq: int  # offset (events) or MessageNumber (reports)
    data: bytes
    priority: int
    duplicate: bool
    retransmission: bool
    session: int
    rx_us: int


@dataclass
class ClientState:
    """What the store keeps per device between runs (loaded into a new DeviceClient)."""

    n: int = 0
    has_n: bool = False  # an event or range of the current boot is known (PollClient.fresh is False)
    boot_epoch: int | None = None
    boots: int = 0
    lead_last: int | None = None  # highest event offset seen in this boot (lead state, spec 000)
    arrival: int = 0  # per-device arrival counter (strictly increasing across runs)
    loss_seq: int = 0
    session: int = 0
    firmware: str = ""
    board: str = ""
    board_id: str = ""
    counters: dict[str, Any] = field(default_factory=dict)
    recovery: Loss | None = None  # a recovery phase still open when the state was saved


class DeviceClient:
    def __init__(
        self,
        dev_key: int,
        cfg: DeviceConfig,
        poll: PollConfig,
        state: ClientState | None = None,
        deliver: bool = False,
        nonce: Callable[[], int] = random_nonce,
    ) -> None:
        st = state or ClientState()
        # authentication (issue 6): the host's end of the device's link, None with `auth = false`
        self.auth = auth_host.HostEndpoint(cfg.key) if cfg.key is not None else None
        self._nonce = nonce
        self.dev_key = dev_key
        self.device_id = cfg.id
        self.cfg = cfg
        self.poll_cfg = poll
        self.deliver = deliver  # build Delivery objects for subscription callbacks
        self.ts_prefix = cfg.timestamp == "prefix_us"
        self._resume(st)
        # requests
        self.need_subscribe = bool(cfg.subscribe)
        self.sub_channels: dict[int, int] = {}  # channel -> session, for reports
        self.sub_tag = 0
        self.outstanding = 0
        self.send_again = False  # request() made a POLL the caller sends another one right after
        self._last_hello_s = -1e18
        self._init_timing(cfg, poll)
        # adaptive polling
        self.interval = poll.interval
        self.next_delay = 0.0
        self._rate = 0.0  # events per second, EWMA
        # the device's generation rate (EWMA), from its newest offset as answers show it (n + backlog,
        # a RECOVERY's n1): unlike _rate it counts the events an overrun lost
        self._gen_rate = 0.0
        self._newest: tuple[int, int | None, float] | None = None  # (newest offset, epoch, when)
        self._burst_events = 0  # events received in the outstanding burst so far
        self._last_answer_s: float | None = None
        # push sessions
        self.reasm = Reassembler(max_messages=16, max_bytes=65536)
        self._msg_meta: dict[int, list[int]] = {}  # message id -> [MessageNumber, channel, frame bytes]
        self._init_outputs(st)

    def _resume(self, st: ClientState) -> None:
        """The core's client and the device's records, from the stored state (a fresh one: none)."""
        poll = self.poll_cfg
        # spec 004: the core's client, resumed from the stored offset
        # (HoldingPollClient: frames after a lost one are kept; the repoll asks for the gap only)
        self.pc = HoldingPollClient(st.n, st.boot_epoch, fresh=not st.has_n)
        # tags from a random start: a restarted bridge polling from the same committed n with the
        # tags of its previous life would send the POLL the device answered last again, which the
        # device takes for a copy and does not answer (docs/protocol.md 5, "Copies"); found by the
        # power cuts (a bridge cut over and over stalled on its first POLL)
        self.pc.tag = random.randrange(256)
        self.pc.pipeline = poll.pipeline
        self.pc.follow = poll.follow
        self.recovery: Loss | None = None  # the open recovery phase (a losses row)
        if st.recovery is not None and st.boot_epoch is not None:
            r = st.recovery
            cl = core.Loss(r.cause, r.client_n, r.n0, r.n1, r.boot_epoch, r.lost)
            cl.recovered = r.recovered
            self.pc.loss = cl
            r.core = cl
            self.recovery = r
        # Every run starts with a HELLO: it names the boot (a device restarted while the bridge was
        # down shows a new epoch) and refreshes firmware/board. PollClient asks for one only
        # before the first epoch is known.
        self.pc.ask_hello()
        self.boots = st.boots
        self.arrival = st.arrival
        self.loss_seq = st.loss_seq
        self.session = st.session
        self.firmware = st.firmware
        self.board = st.board
        self.board_id = st.board_id
        self.capacity = 0
        # the last boot a boots row was written for: none yet in this run, so the run's first HELLO
        # writes its boot's row (INSERT OR IGNORE keeps an existing one). A restart found by a
        # RECOVERY and committed just before a SIGKILL (its HELLO not answered yet) gets its row.
        self._booted: int | None = None
        restart = st.recovery is not None and st.recovery.cause == core.RESTART
        self._boot_by_recovery: int | None = st.boot_epoch if restart else None
        self.lead = LeadTracker()
        if st.boot_epoch is not None and st.lead_last is not None:
            self.lead.lead(self.device_id, EVENT_LEAD_CHANNEL, st.lead_last)  # seeds last_seq
        self.lead_last = st.lead_last

    def _init_timing(self, cfg: DeviceConfig, poll: PollConfig) -> None:
        """Retransmission timing, the loss probes and the POLL copies (none measured yet)."""
        # retransmission timing (rtt.py): the RTO the outstanding request was sent with
        floor = poll.rto_min
        if cfg.transport == "serial":
            sig = core_auth.AUTH_SIZE if cfg.key is not None else 0
            req = wire.OVERHEAD + 16 + sig  # a POLL (n, max_events, max_bytes, frames) or HELLO
            floor = max(floor, serial_floor(cfg.baud, req, wire.OVERHEAD + poll.max_bytes + sig))
        self.rtt = RttEstimator(floor, poll.timeout)
        self.rto = self.rtt.rto
        # the silent rounds in a row so far: the RTOs they waited (at least), and those that also
        # waited the dead-link backoff (on_transport_error)
        self._silent_s = 0.0
        self._slow_rounds = 0
        self._last_rx_s = float("-inf")  # when the last polling frame arrived (rtt.on_answer)
        self._early_gap: int | None = None  # n when a gap in a pipelined POLL's burst was asked for
        self.early_gaps = 0  # such gaps asked for before the pipelined POLL's answer showed them
        self.third_polls = 0  # POLLs from a held burst's end sent while its early gap was out
        self._early_gap_next = -1  # tag of the pipelined POLL that was out when the early gap went
        # tail-loss probe (request): the outstanding POLL was armed with the probe, not the RTO
        self._probing = False
        self._probed = False  # a probe fired since the last round-trip sample: the next send waits the RTO
        self._loss_send = -(10**9)  # rtt.sends when a frame last showed a gap (datagrams lost lately)
        self.probes = 0  # probes that fired
        # POLL copies (copies.py): send_copy, the request just made goes twice (daemon._send)
        self.copies = PollCopies(
            poll.copies and cfg.transport == "udp" and cfg.key is None
        )  # signed: a replay
        self.send_copy = False

    def _init_outputs(self, st: ClientState) -> None:
        """Counters (resumed from the stored state) and the outputs the store drains."""
        # counters
        c = st.counters or {}
        self.dc: dict[str, int] = {k: int(c.get("device", {}).get(k, 0)) for k in DEVICE_COUNTERS}
        self.cc: dict[int, list[int]] = {
            int(ch): [int(v.get(name, 0)) for name in CHANNEL_COUNTERS]
            for ch, v in c.get("channels", {}).items()
        }
        # outputs, drained by the store in one transaction with snapshot(): arrival rows as
        # segments [(SEG_EVENT | SEG_ARRIVAL, rows)] in arrival order
        self.out_segments: list[tuple[int, list[tuple[Any, ...]]]] = []
        self.out_rows = 0  # rows in out_segments
        self.out_event_rows = 0  # of which first arrivals of events
        self.out_losses: list[Loss] = []
        self.out_boots: list[Boot] = []
        self.out_acks: list[bytes] = []  # sent only after the transaction holding the report commits
        self.out_deliveries: list[tuple[Delivery, int]] = []
        self.log: list[tuple[str, dict[str, Any]]] = []  # structured log records for the I/O layer
        self.dirty = False

    # -- views of the pending rows (tests and tools; the store takes out_segments as they are) --

    @property
    def out_arrivals(self) -> list[tuple[Any, ...]]:
        """Pending arrival rows, every kind, as full rows in store.ARRIVAL_COLUMNS order."""
        out: list[tuple[Any, ...]] = []
        for kind, rows in self.out_segments:
            if kind == SEG_ARRIVAL:
                out.extend(rows)
                continue
            for dev, arrival, epoch, boots, ch, seq, lead, prio, extra, gen, rx, data in rows:
                out.append((dev, arrival, 0, epoch, boots, ch, 0, EVENT_LEAD_CHANNEL, seq, lead, False, False,
                            prio, len(data), len(data) + extra, gen, rx, data))  # fmt: skip
        return out

    @property
    def out_events(self) -> list[tuple[Any, ...]]:
        """Pending first arrivals of events: (dev, boot_epoch, offset, channel, priority, data, arrival)."""
        rows = self.out_arrivals
        return [(a[0], a[3], a[8], a[5], a[12], a[17], a[1]) for a in rows if a[2] == 0 and not a[10]]

    @property
    def out_reports(self) -> list[tuple[Any, ...]]:
        """Pending first arrivals of reports: (dev, boot_epoch, channel, session, number, priority, data,
        arrival)."""
        rows = self.out_arrivals
        return [(a[0], a[3], a[5], a[6], a[8], a[12], a[17], a[1]) for a in rows if a[2] == 1 and not a[10]]

    def clear_outputs(self) -> None:
        """Forget the pending rows, losses and boots (benchmarks and simulations without a store)."""
        self.out_segments = []
        self.out_rows = self.out_event_rows = 0
        self.out_losses = []
        self.out_boots = []

    @property
    def n(self) -> int:
        """The client offset n of spec 004."""
        return self.pc.n

    @property
    def epoch(self) -> int | None:
        return self.pc.epoch

    # -- requests ------------------------------------------------------------------------

    def request_bytes(self, now_s: float) -> bytes:
        """The next request as bytes on the wire: request(), signed when the device has a key (a
        HELLO carries a fresh random nonce in its seq and starts a new session)."""
        f = self.request(now_s)
        ep = self.auth
        if ep is None:
            return codec.encode(f)
        if f.type == wire.HELLO:
            f.seq = self._nonce() & 0xFFFFFFFF
            buf = bytearray(codec.encode(f))
            buf += _SPARE
            return bytes(buf[: ep.host_sign_hello(buf, len(buf) - core_auth.AUTH_SIZE)])
        return self.sign(codec.encode(f))

    def sign(self, data: bytes) -> bytes:
        """Sign one frame for the device in the current session (ACKs, SUBSCRIBE, POLL); as is when
        the device has no key."""
        ep = self.auth
        if ep is None:
            return data
        buf = bytearray(data)
        buf += _SPARE
        return bytes(buf[: ep.sign_into(buf, len(data))])

    def admit(self, data: bytes) -> int:
        """Check the authentication of a frame that passed wire.check (codec.decode): wire.OK, or a
        reject, counted (auth_forged / auth_replayed / auth_unsigned); HINT asks for a handshake.
        Without a key a signed frame is a bad frame (E_FLAGS): the bridge was told the device has
        no key. Nothing of a rejected frame is acted on."""
        ep = self.auth
        signed = data[1] & (wire.F_AUTH << 4)
        if ep is None:
            if signed:
                self.on_bad_frame(wire.E_FLAGS)
                return wire.E_FLAGS
            return wire.OK
        n = len(data)  # checked in place (read only): no copy
        if wire.frame_type(data) == wire.HELLO and n > wire.OVERHEAD + (core_auth.AUTH_SIZE if signed else 0):
            code = ep.host_hello(data, n)
            if code == core_auth.HINT:
                self.pc.ask_hello()  # a boot HELLO: proof of the key, not of freshness
                return code
            if code == wire.E_REPLAY and ep.newer_session(data, n):
                # a HELLO answer with a newer session K than ours: a late copy of one of our older
                # HELLO requests reached the device, which moved on to a session under that old
                # nonce, whose frames we cannot take. Hand-shake again now rather than after three
                # silent rounds. (A copy of the current request keeps the session: auth.py; late
                # copies of older answers carry older K: ignored.)
                self.pc.ask_hello()
        else:
            code = ep.verify(data, n)
        if code:
            self.dc[AUTH_REJECTS[code]] += 1
            self.dirty = True
        return code

    def request(self, now_s: float) -> codec.Frame:
        """The next frame to send (HELLO, SUBSCRIBE or POLL(n)); it becomes the outstanding request."""
        pc = self.pc
        if self.auth is not None and not self.auth.live:
            pc.ask_hello()  # no session: every request before the handshake would be refused
        if self.need_subscribe and pc.state == core.POLLING and not pc.hello_due:
            self.outstanding = REQ_SUBSCRIBE
            self.sub_tag = (self.sub_tag + 1) & 0xFF
            self.session += 1  # the device starts a session (numbers from 1) on every SUBSCRIBE
            # Reports count for this session only once the device has ACKed the SUBSCRIBE (_on_ack):
            # until then one may be from its previous session, and our ACK for it (an ACK names no
            # session) would confirm the new session's report of the same number, which the device
            # then forgets. The previous session's ACKs not yet committed go for the same reason (its
            # reports are still stored; the device drops them unconfirmed). Found by the power cuts.
            self.sub_channels = {}
            self.out_acks = []
            self.dirty = True
            self.rto = self.poll_cfg.ack_timeout
            return messages.subscribe_frame(self.cfg.subscribe, self.sub_tag)
        if now_s - self._last_hello_s >= self.poll_cfg.hello_interval:
            pc.ask_hello()  # periodic: catches a restart of a device whose ring is empty
        self._burst_events = 0
        # pipelined POLLs only where they pay: when the device generates a few events per round trip
        # (EWMA rate x SRTT >= PIPELINE_MIN_EVENTS). At low rates a POLL sent before the burst is in
        # finds nothing new, a round trip of CPU for no event (bench/netem_bench.py, pipelining A/B:
        # 1.5x the bridge's CPU per event at 2,000 events/s of 64 B when always on)
        p = self.poll_cfg
        # (the generation rate when higher: an overrunning ring delivers fewer events than it makes)
        per_rtt = max(self._rate, self._gen_rate) * (self.rtt.srtt or 0.0)
        pc.pipeline = p.pipeline and (not p.adaptive or per_rtt >= PIPELINE_MIN_EVENTS)
        # an overrun's RECOVERY starts past what the ring turns over before our next POLL gets there
        # (PollClient.turnover): the generation rate x (SRTT + min(2 RTTVAR, SRTT)); 0 at low rates
        # (the spec's n0 - 1). Too short a skip costs a RECOVERY more, a round trip's events (SRTT
        # alone: 415 such against 107 in test_lossy_overrun); too long a one loses events the ring
        # still held: with 2 RTTVAR uncapped (often several SRTTs on a loaded host) a 256-slot ring
        # at 60,000/s lost 3/4 of it per overrun. The margin is at most one round trip's events.
        srtt = self.rtt.srtt or 0.0
        margin = self._gen_rate * min(2 * self.rtt.rttvar, srtt)
        if self.capacity:
            margin = min(margin, self.capacity / 2)  # a ring turning over per round trip: its middle
        turnover = int(self._gen_rate * srtt + margin)
        if 0 < turnover < self.capacity:
            # and a quarter more, plus one, while the skip stays within the ring: an undershoot
            # costs a RECOVERY and a round trip's events, an overshoot only the events skipped.
            # Traced in virtual time the estimate fell 2-4 events short of the ring's oldest again
            # and again in a chase (256 B at 40,000/s, 60 slots: 85 of 204 overruns chased); with the
            # slack 60, and 29,797 -> 31,545 events/s stored at 5% loss. Not past the ring (100,000/s
            # into 60 slots: the skip past n1, where it cost 43% in a first try without this bound),
            # and the slack itself stays within it (capacity - 1: it used to reach the ring's size
            # and beyond; virtual time 256 B 40,000/s 5% 31,239 -> 31,643, 1% 36,224 -> 36,448)
            turnover = min(int(turnover * (1 + TURNOVER_SLACK)) + 1, self.capacity - 1)
        pc.turnover = turnover
        f = pc.next_request(self.poll_cfg.batch, self.poll_cfg.max_bytes, self.poll_cfg.frames)
        if f.type == wire.POLL:
            self.outstanding = REQ_POLL
            self.dc["polls"] += 1
            # a gap repoll that predicts where the held frames' burst ends (leadwire.hold): the next
            # POLL, from there, goes out now too (two in flight), as after a pipelined burst's frame 0
            self.send_again = pc.ahead is not None
        else:
            self.outstanding = REQ_HELLO
        self.rto = self.rtt.on_send(f.message_id, now_s)
        self._probing = False
        rtt = self.rtt
        # the link lost a datagram lately (a POLL; pipelining on, or any rate over UDP: below)
        lossy = (
            f.type == wire.POLL
            and (pc.pipeline or self.cfg.transport == "udp")
            and rtt.sends - self._loss_send < PROBE_RECENT
        )
        # (Below the pipelining rate too, over UDP: at 256 B and 5,000/s into 60 slots, 5% loss each
        # way, an answer comes every ~2.7 ms and the ring turns over in 12 ms: a lost answer and two
        # silent retries (2 + 4 + 8 ms of RTO) were an overrun, 31-100 events counted lost per 5 s
        # run; with the probe and the copies at every rate 0 in 6 of 6 runs, and at 10,000/s 493-596
        # -> 0-132. Serial links unmeasured: as they were.)
        if lossy and not self._probed and not rtt.backoff and rtt.srtt is not None:
            # tail-loss probe: on a link that lost a datagram lately (a frame arrived past a gap within
            # the last PROBE_RECENT sends), a POLL (or its one-frame answer) lost is found at SRTT + 2 RTTVAR
            # + PROBE_MARGIN instead of the RTO (whose floor is there for a loaded host's late
            # answers); once per sample: a second silence waits the RTO. A probe that was not needed
            # costs a duplicate answer (logged as duplicate arrivals, never stored twice)
            probe = rtt.srtt + 2 * rtt.rttvar + PROBE_MARGIN
            if probe < self.rto:
                self.rto = probe
                self._probing = True
        # the same POLL twice on a lossy link (lossy: a POLL): a lost POLL costs the device a silence
        # of SRTT + 2 RTTVAR and a round trip with its ring filling (an overrun, at the rates
        # pipelining is on for; at lower ones when silent retries follow); both copies are lost at
        # 5% loss 1 time in 400, and the device answers one (messages.poll_key). Virtual time, 5%
        # each way: 256 B at 40,000/s 27,800 -> 30,196 events/s stored
        self.send_copy = self.copies.on_send(f.message_id, lossy)
        return f

    def on_transport_error(self) -> float:
        """No answer in time (or a broken one): the same request again after the returned delay.

        The wait was the RTO, doubled by each timeout in a row (rtt.py): the retries go out at once.
        From the third silent round in a row on, the next request is a HELLO (the device may have
        restarted), and once the rounds in a row have waited at least ``timeout / 2`` (the sum of
        their RTOs) a bounded exponential backoff from ``timeout / 2`` to ``backoff_max`` spares a
        dead link: the first wait at most doubles the silence seen. (It started at the third round
        whatever the RTO: with a 2 ms RTO, three timeouts in a row -- 0-2 times per 5 s bench run
        at 5% loss each way -- were 14 ms of silence and then 125 ms idle, far past a ring.)"""
        self.dc["timeouts"] += 1
        self.dirty = True
        p = self.poll_cfg
        if self.outstanding == REQ_SUBSCRIBE:
            self.outstanding = 0
            self.next_delay = 0.0
            return 0.0
        self.outstanding = 0
        pc = self.pc
        if self._probing:
            # the tail-loss probe (request) fired: the same request again at once, no back-off (the RTO
            # was not reached) and not a silent round (the HELLO and the dead-link wait count RTOs)
            self._probing = False
            self._probed = True
            self.probes += 1
            self.rtt.on_timeout(pc.tag, backoff=False)
            pc.transport_errors += 1
            self.next_delay = 0.0
            return 0.0
        self.rtt.on_timeout(pc.tag)
        pc.on_timeout()
        if pc.consecutive_errors == 1:  # the first silent round since an answer
            self._silent_s = 0.0
            self._slow_rounds = 0
        self._silent_s += self.rto  # the RTO this request was armed with: waited at least that
        k = pc.consecutive_errors - 2
        if k > 0 and pc.state == core.POLLING:
            pc.ask_hello()  # silent for a while: the device may have restarted
        if k > 0 and self._silent_s >= p.timeout * DEAD_SILENCE:
            self._slow_rounds += 1
            self.next_delay = min(p.backoff_max, p.timeout * 0.5 * (1 << min(self._slow_rounds - 1, 16)))
        else:
            self.next_delay = 0.0
        return self.next_delay

    def on_bad_frame(self, code: int) -> None:
        self.dc["crc_errors" if code == wire.E_CRC else "bad_frames"] += 1
        self.dirty = True

    # -- frames in -----------------------------------------------------------------------

    def receive(self, data: bytes, now_s: float, rx_us: int) -> bool:
        """Feed one received frame as bytes: decoded, authenticated, then on_frame(). Returns True
        when it answers the outstanding request. A bad frame raises its WireError (the I/O layer
        counts it with on_bad_frame and treats it as a transport error); an authentication reject
        is counted and ignored (False): the real answer may still come, or the timeout."""
        f = codec.decode(data)  # WireError: the caller counts it
        if self.auth is not None or f.flags != data[1] >> 4:
            code = self.admit(data)
            if code == core_auth.HINT and self.outstanding:
                # a boot HELLO: the device restarted and refuses our session; stop waiting for the
                # answer to the outstanding request (none will come): the handshake goes out now
                self.outstanding = 0
                self.next_delay = 0.0
                return True
            if code:
                return False
        return self.on_frame(f, len(data), now_s, rx_us)

    def on_frame(self, f: codec.Frame, nbytes: int, now_s: float, rx_us: int) -> bool:
        """Feed one received frame (decoded, authenticated). Returns True when it answers the
        outstanding request."""
        t = f.type
        try:
            if t == wire.NOTIFY:
                self._on_notify(f, nbytes, rx_us)
                return False
            if t == wire.ACK:
                return self._on_ack(f)
            if t == wire.CLOSE:
                self.reasm.feed(frames.Frame(f.message_id, 0, True, f.priority, b"", True))
                self._msg_meta.clear()
                self.sub_channels.pop(f.channel, None)
                self.log.append(("session_closed", {"channel": f.channel}))
                return False
            if t == wire.ERROR:
                code, text = messages.decode_error(f)
                self.dc["error_frames"] += 1
                self.dirty = True
                self.log.append(("device_error", {"code": code, "text": text}))
                return False
            if t not in (wire.EVENTS, wire.NO_EVENT, wire.RECOVERY, wire.HELLO) or (
                t == wire.HELLO and not f.payload
            ):
                self.on_bad_frame(wire.E_TYPE)  # a host->device type sent to us
                return False
            pc = self.pc
            copies = self.copies
            copies.on_frame(f.message_id, f.index)
            if copies.off_reason is not None:  # the device answers copies too: no more of them
                self.log.append(("poll_copies_off", copies.off_reason))
                copies.off_reason = None
            if t != wire.HELLO or f.message_id == pc.tag:  # (a boot HELLO answers no request)
                # the first frame of an answer: its round trip, from the send or the frame before
                if self.rtt.on_answer(f.message_id, now_s, self._last_rx_s) is not None:
                    self._probed = False
            self._last_rx_s = now_s
            old_epoch = pc.epoch
            kind, data = pc.on_frame(f)
            if kind == core.STALE:
                return self._on_stale(f, rx_us)
            if kind == core.EVENTS:
                return self._on_events(f, data, old_epoch, now_s, rx_us)
            return self._on_answer(kind, data, old_epoch, now_s, rx_us)
        except wire.WireError as e:
            self.on_bad_frame(e.code)
            return False

    def _on_stale(self, f: codec.Frame, rx_us: int) -> bool:
        """A late or duplicated answer (its tag or range does not fit): still an arrival. True when
        it shows that the outstanding POLL's answer cannot come whole (poll again at once)."""
        pc = self.pc
        t = f.type
        self.dc["stale_answers"] += 1
        self.dirty = True
        if t == wire.EVENTS:
            self._stale_events(f, rx_us)
            if u32.lt(u32.succ(pc.n), f.seq) and f.message_id in (pc.tag, pc.prev_tag):
                # a frame past s(n) in the burst asked for last (or the pipelined one before it):
                # one before it was lost (in order on the links served) or a pipelined burst
                # mispredicted. It arms the tail-loss probe (request); a timeout does not, nor a
                # late answer to a request sent again since (a loaded host's late answers would
                # arm it on a clean link: a RECOVERY's burst going on from n0, late, was 1,240
                # frames past s(n) per 5 s at 256 B and 100,000/s with no datagram lost)
                self._loss_send = self.rtt.sends
                self.copies.on_gap(pc.n)
            if (
                f.message_id == pc.prev_tag
                and self.outstanding == REQ_POLL
                and pc.held
                and self._early_gap != pc.n
                and u32.lt(u32.succ(pc.n), f.seq)
            ):
                # a frame of the burst before the outstanding pipelined POLL went missing
                # (this one was held: leadwire.hold): the gap's events will be gone before
                # that POLL's answer shows it. Ask for the gap now (two in flight: the
                # pipelined POLL's answer is still taken or held when it comes)
                self._early_gap = pc.n
                self._early_gap_next = pc.tag  # the pipelined POLL whose burst goes on after the gap
                self.early_gaps += 1
                pc.repoll = True  # just the gap: the pipelined POLL asks for what follows
                self.outstanding = 0
                self.next_delay = 0.0
                return True
            if self._third_poll(f):
                return True
        if (
            f.message_id == pc.tag
            and pc.burst_done
            and self.outstanding == REQ_POLL
            and (t == wire.EVENTS or pc.repoll or pc.n != pc.poll_n)
        ):
            # a frame of the current burst went missing, or the burst before a pipelined
            # POLL did not end where predicted, or n moved on while the POLL was out (held
            # frames of an earlier burst were taken): poll again from n at once
            self.outstanding = 0
            self.next_delay = 0.0
            return True
        return False

    def _third_poll(self, f: codec.Frame) -> bool:
        """After an early gap repoll, the pipelined POLL's burst arrives held behind the gap: the
        POLL from that burst's end goes out as soon as the held frames tell it (leadwire.hold's
        ahead_past_gap: three in flight). Without it the device answered the gap, then sat a round
        trip with its ring filling: at 256 B and 40,000/s, in virtual time, most of the overruns of
        a lossy link came after such a gap (tests/bridge/lossy_sim.py). True: send now."""
        if (
            self._early_gap != self.pc.n
            or self.outstanding != REQ_POLL
            or f.message_id != self._early_gap_next  # a frame of the burst after the gap's
            or not self.pc.ahead_past_gap(self.poll_cfg.frames)
        ):
            return False
        self.third_polls += 1
        self.outstanding = 0
        self.next_delay = 0.0
        return True

    def _on_events(self, f: codec.Frame, data: Any, old_epoch: int | None, now_s: float, rx_us: int) -> bool:
        """Events taken in order (this frame's, or held frames a gap fill or a RECOVERY released).
        True when the burst answering the outstanding POLL is complete."""
        pc = self.pc
        t = f.type
        overrun = pc.gap_losses
        if overrun:
            # an overrun RECOVERY that took held frames (leadwire.hold): the gaps between them
            # were lost, and what was overwritten after them; the loss rows first
            pc.gap_losses = []
            for cl in overrun:
                self._on_loss(cl, old_epoch, rx_us)
        self._saw_newest(u32.add(pc.n, pc.backlog), now_s)
        if len(pc.taken) > 1 or t != wire.EVENTS:  # held frames taken after this one filled
            # their gap, or by a RECOVERY that showed the gaps before them overwritten
            for hf, evs in pc.taken:
                self._events(hf, evs, rx_us)
        else:
            self._events(f, data, rx_us)
        self._sync_loss(rx_us)
        self.dirty = True
        self._burst_events += len(data)
        if f.message_id != pc.tag or self.outstanding != REQ_POLL:
            # a burst already answered: a pipelined POLL (or, when one was due, a SUBSCRIBE,
            # which takes no tag from PollClient) went out after its first frame
            return False
        if not pc.burst_done:
            return False  # more frames of this burst are on their way
        self.outstanding = 0
        self.dc["round_trips"] += 1
        # the whole burst counts: full when every frame asked for came back full
        got = self._burst_events
        self._adapt(now_s, got, pc.backlog, full=got >= self.poll_cfg.batch * pc.max_frames)
        if overrun:
            self.next_delay = 0.0  # the ring overran: poll again now
        return True

    def _on_answer(self, kind: int, data: Any, old_epoch: int | None, now_s: float, rx_us: int) -> bool:
        """A one-frame answer to the outstanding request: AHEAD, NO_EVENT, RECOVERY or HELLO; or
        the RECOVERY starting a burst that goes on with the events from n0 (PollClient.follow):
        False then, the burst's EVENTS frames end it."""
        pc = self.pc
        self.dirty = True
        if kind == core.RECOVER:
            self._saw_newest(data.n1, now_s)
            self._on_loss(data, old_epoch, rx_us)
            self.next_delay = 0.0
            if not pc.burst_done:
                return False  # the events from n0 follow in this burst
        self.outstanding = 0
        self.dc["round_trips"] += 1
        if kind == AHEAD:
            # an overrun's recovery started past the device's newest event (leadwire.hold): our
            # POLL got there before the device did; poll again now
            self._saw_newest(data, now_s)
            r = self.recovery
            if r is not None and r.core is not None and r.core.lost != r.lost:
                self._sync_loss(rx_us)  # what it generated since is counted lost now
            # when the device should get there at its rate (the rate falls with every answer that
            # shows no progress: a device that stopped is polled at polling.interval_max)
            gen = self._gen_rate
            imax = self.poll_cfg.interval_max
            self.next_delay = min(imax, pc.unproven / gen) if gen > 0 else imax
        elif kind == core.NOTHING:
            r = self.recovery
            if r is not None and r.core is not None and r.core.lost != r.lost:
                self._sync_loss(rx_us)  # the skip past the newest shown generated (leadwire.hold)
            # a pipelined POLL found nothing new: the burst before it drained the ring, and its
            # events (counted since that POLL went out) are what this answer tells, not "idle"
            got = self._burst_events if pc.poll_pipelined else 0
            self._adapt(now_s, got, 0, full=False)
        elif kind == core.HELLO:
            self._on_hello(data, old_epoch, now_s, rx_us)
            self.next_delay = 0.0
        return True

    def _saw_newest(self, newest: int, now_s: float) -> None:
        """The device held events up to `newest` when it answered: the generation-rate EWMA, from
        answers at least GEN_RATE_SPAN apart (per answer, not per event)."""
        last = self._newest
        epoch = self.pc.epoch
        if last is None or last[1] != epoch:
            self._newest = (newest, epoch, now_s)
            self._gen_rate = 0.0
            return
        dt = now_s - last[2]
        if dt < GEN_RATE_SPAN:
            return
        k = u32.diff(newest, last[0])
        self._newest = (newest, epoch, now_s)
        if k < 0:
            return
        inst = k / dt
        self._gen_rate = 0.7 * self._gen_rate + 0.3 * inst if self._gen_rate > 0 else inst

    # -- spec 004 results ----------------------------------------------------------------

    def _events(self, f: codec.Frame, evs: list[tuple[int, int, bytes]], rx_us: int) -> None:
        """First arrivals of a batch of events: rows built column-wise (zip in C, no per-event loop
        body); lead from the core's LeadTracker for every event."""
        n = len(evs)
        offs, chs, datas = zip(*evs, strict=True)
        lead_of = self.lead.lead
        sender = self.device_id
        # the offsets of a batch are consecutive (the core numbers them from the frame's seq): when the
        # first one leads (>= 1), every next one has lead 1 and the tracker ends at the last one, so
        # two calls instead of one per event; a late first one (lead <= 0) left the tracker as it was
        first = lead_of(sender, EVENT_LEAD_CHANNEL, offs[0])
        if first >= 1:
            leads = [1] * n
            leads[0] = first
            if n > 1:
                lead_of(sender, EVENT_LEAD_CHANNEL, offs[-1])
        else:
            leads = [first] + [lead_of(sender, EVENT_LEAD_CHANNEL, off) for off in offs[1:]]
        a0 = self.arrival
        self.arrival = a0 + n
        # frame_bytes = record (3 + data) + the frame's overhead on the first record of the batch
        extra = [wire.RECORD_HEAD] * n
        extra[0] += wire.OVERHEAD + wire.BATCH_HEAD
        if self.ts_prefix:
            gens: Any = [
                g if TS_MIN_US <= g < TS_MAX_US else None
                for g in [int.from_bytes(d[:8], "big") for d in datas]
            ]
        else:
            gens = repeat(None)
        self._rows(SEG_EVENT).extend(
            zip(repeat(self.dev_key), range(a0 + 1, a0 + n + 1), repeat(self.pc.epoch), repeat(self.boots),
                chs, offs, leads, repeat(f.priority), extra, gens, repeat(rx_us), datas)
        )  # fmt: skip
        self.out_rows += n
        self.out_event_rows += n
        cc = self.cc
        for ch, k in Counter(chs).items() if n > 16 else zip(chs, repeat(1)):
            c = cc.get(ch)
            if c is None:
                c = cc[ch] = [0, 0, 0, 0, 0]
            c[C_RECEIVED] += k
        if max(leads) > 1:
            for ch, lead in zip(chs, leads, strict=True):
                if lead > 1:
                    cc[ch][C_GAPS] += 1
        if self.deliver:
            prio = f.priority
            self.out_deliveries.extend(
                (Delivery(KIND_EVENT, ch, off, data, prio, False, False, 0, rx_us), lead)
                for off, ch, data, lead in zip(offs, chs, datas, leads, strict=True)
            )
        self.lead_last = self.lead.last(sender, EVENT_LEAD_CHANNEL)
        self.dc["events_stored"] += n

    def _rows(self, kind: int) -> list[tuple[Any, ...]]:
        """The row list to append arrivals of this kind to (arrival order is kept across kinds)."""
        segs = self.out_segments
        if segs and segs[-1][0] == kind:
            rows = segs[-1][1]
        else:
            rows = []
            segs.append((kind, rows))
        return rows

    def _arrival(self, row: tuple[Any, ...]) -> None:
        self._rows(SEG_ARRIVAL).append(row)
        self.out_rows += 1

    def _stale_events(self, f: codec.Frame, rx_us: int) -> None:
        """Log the records of a late/duplicated EVENTS answer that we already have (duplicates).

        Records after n are not logged: they are polled (and logged) again in order.
        """
        pc = self.pc
        if pc.fresh or pc.epoch is None:
            return
        _, records = messages.decode_records(f.payload)
        j = u32.diff(pc.n, f.seq) + 1  # records at or before n
        if j <= 0:
            return
        lost = self.recovery if self.recovery is not None and self.recovery.cause == core.OVERRUN else None
        sender = self.device_id
        off = f.seq
        for i in range(min(j, len(records))):
            ch, data = records[i]
            if lost is not None and u32.lt(lost.client_n, off) and u32.lt(off, lost.n0):
                off = u32.succ(off)  # counted lost in the open recovery: not a duplicate of anything
                continue
            lead = self.lead.lead(sender, EVENT_LEAD_CHANNEL, off)
            self.arrival += 1
            c = self.cc.get(ch)
            if c is None:
                c = self.cc[ch] = [0, 0, 0, 0, 0]
            c[C_RECEIVED] += 1
            c[C_DUPLICATES] += 1
            plen = len(data)
            self._arrival(
                (self.dev_key, self.arrival, 0, pc.epoch, self.boots, ch, 0, EVENT_LEAD_CHANNEL, off, lead,
                 True, False, f.priority, plen, wire.RECORD_HEAD + plen, None, rx_us, None)
            )  # fmt: skip
            if self.deliver:
                self.out_deliveries.append(
                    (Delivery(KIND_EVENT, ch, off, data, f.priority, True, False, 0, rx_us), lead)
                )
            off = u32.succ(off)

    def _sync_loss(self, rx_us: int) -> None:
        r = self.recovery
        if r is None or r.core is None:
            return
        lost = r.core.lost
        if lost is not None and r.lost is not None and lost != r.lost:
            # events skipped past the device's newest, now shown generated (leadwire.hold)
            self.dc["overrun_lost"] += lost - r.lost
            r.lost = lost
        r.recovered = r.core.recovered
        if r.core.ended:
            r.ended_us = rx_us
            self.recovery = None
            self.log.append(("recovery_done", {"n1": r.n1, "recovered": r.recovered}))
        self.out_losses.append(r)

    def _on_loss(self, cl: Any, old_epoch: int | None, rx_us: int) -> None:
        self._sync_loss(rx_us)  # a new case 3 ends the phase before it (PollClient marked it)
        if self.recovery is not None:  # ended without PollClient saying so: close it here
            self.recovery.ended_us = rx_us
            self.out_losses.append(self.recovery)
            self.recovery = None
        if old_epoch is not None and cl.epoch != old_epoch:
            self._new_boot(old_epoch, "recovery")
        self.loss_seq += 1
        rec = Loss(self.loss_seq, cl.epoch, cl.client_n, cl.n0, cl.n1, cl.lost, cl.cause, rx_us)
        rec.core = cl
        self.recovery = rec
        self.out_losses.append(rec)
        self.dc["recoveries"] += 1
        if cl.cause == core.OVERRUN:
            self.dc["overruns"] += 1
            self.dc["overrun_lost"] += cl.lost
        self.log.append(
            ("recovery", {"cause": cl.cause, "client_n": cl.client_n, "n0": cl.n0, "n1": cl.n1,
                          "lost": cl.lost, "skipped": cl.skipped})
        )  # fmt: skip

    def _new_boot(self, old_epoch: int, by: str) -> None:
        """The device restarted: a new sender for lead, no push session, a boots row to write."""
        self.dc["restarts"] += 1
        self.lead.reset(self.device_id)
        self.lead_last = None
        self.reasm = Reassembler(max_messages=16, max_bytes=65536)
        self._msg_meta.clear()
        self.sub_channels = {}
        self.need_subscribe = bool(self.cfg.subscribe)
        if by == "recovery":
            self._boot_by_recovery = self.pc.epoch
            self.pc.ask_hello()  # the new boot's HELLO fills its boots row
        self.log.append(("restart", {"previous": old_epoch, "boot_epoch": self.pc.epoch, "detected_by": by}))

    def _on_hello(self, h: messages.Hello, old_epoch: int | None, now_s: float, rx_us: int) -> None:
        self._last_hello_s = now_s
        self.capacity = h.capacity
        if old_epoch is not None and h.boot_epoch != old_epoch:
            self._new_boot(old_epoch, "hello")
        self._sync_loss(rx_us)
        self.boots = h.boots
        self.firmware = h.firmware
        self.board = h.board
        self.board_id = h.board_id
        if h.boot_epoch != self._booted:
            by = "recovery" if self._boot_by_recovery == h.boot_epoch else "hello"
            self.out_boots.append(Boot(h.boot_epoch, h.boots, h.firmware, h.board, rx_us, by))
            self._booted = h.boot_epoch
            self.log.append(("boot", {"boot_epoch": h.boot_epoch, "boots": h.boots, "detected_by": by}))
        self._boot_by_recovery = None

    # -- spec 003: push sessions ---------------------------------------------------------

    def _on_ack(self, f: codec.Frame) -> bool:
        number, status = messages.decode_ack(f)
        if self.outstanding == REQ_SUBSCRIBE and number == 0 and f.message_id == self.sub_tag:
            self.outstanding = 0
            self.dc["round_trips"] += 1
            self.dirty = True
            if messages.is_success(status):
                self.need_subscribe = False
                self.sub_channels = {ch: self.session for ch in self.cfg.subscribe}
                self.next_delay = 0.0
                self.log.append(
                    ("subscribed", {"channels": list(self.cfg.subscribe), "session": self.session})
                )
            else:
                self.log.append(("subscribe_refused", {"status": status}))
                self.next_delay = self.poll_cfg.ack_timeout
            return True
        return False

    def _on_notify(self, f: codec.Frame, nbytes: int, rx_us: int) -> None:
        if f.index == 0:
            self._msg_meta[f.message_id] = [f.seq, f.channel, 0]
        meta = self._msg_meta.get(f.message_id)
        if meta is not None:
            meta[2] += nbytes
        m = self.reasm.feed(frames.Frame(f.message_id, f.index, f.last, f.priority, f.payload))
        if m is None or m.is_close:
            return
        meta = self._msg_meta.pop(m.message_id, None)
        if meta is None:
            return
        number, ch, fbytes = meta
        self._on_report(ch, number, m.priority, m.data, fbytes, rx_us)

    def _on_report(self, ch: int, number: int, prio: int, body: bytes, fbytes: int, rx_us: int) -> None:
        session = self.sub_channels.get(ch)
        epoch = self.pc.epoch
        if session is None or epoch is None:
            self.dc["unsolicited"] += 1  # not subscribed (any more): not ours to confirm
            self.dirty = True
            return
        messages.decode_records(body)  # a report body must be a record batch (WireError if not)
        key = (ch, session)
        last = self.lead.last(self.device_id, key)
        dup = last is not None and u32.diff(number, last) <= 0
        lead = self.lead.lead(self.device_id, key, number)
        self.arrival += 1
        c = self.cc.get(ch)
        if c is None:
            c = self.cc[ch] = [0, 0, 0, 0, 0]
        c[C_RECEIVED] += 1
        if dup:
            c[C_DUPLICATES] += 1
            c[C_RETRANSMISSIONS] += 1
        elif lead > 1:
            c[C_GAPS] += 1
        self._arrival(
            (self.dev_key, self.arrival, 1, epoch, self.boots, ch, session, ch, number, lead, dup, dup,
             prio, len(body), fbytes, None, rx_us, None if dup else body)
        )  # fmt: skip
        if not dup:
            self.dc["reports_stored"] += 1
        # confirm only once stored (the store sends it after commit): a crash before that makes
        # the device retransmit the identical report instead of losing it (spec 003 R0801/R0802)
        self.out_acks.append(codec.encode(messages.ack_frame(number, messages.STATUS_OK, ch)))
        self.dc["acks_sent"] += 1
        if self.deliver:
            self.out_deliveries.append(
                (Delivery(KIND_REPORT, ch, number, body, prio, dup, dup, session, rx_us), lead)
            )
        self.dirty = True

    # -- adaptive polling ----------------------------------------------------------------

    def _adapt(self, now_s: float, got: int, backlog: int, full: bool) -> None:
        p = self.poll_cfg
        last = self._last_answer_s
        self._last_answer_s = now_s
        if not p.adaptive:
            self.next_delay = 0.0 if backlog > 0 else p.interval
            return
        if last is not None and now_s > last:
            inst = got / (now_s - last)
            self._rate = 0.7 * self._rate + 0.3 * inst if self._rate > 0 else inst
        if backlog > 0 or full:
            # the ring is filling faster than we drain it: drain now, and poll sooner from now on
            self.interval = max(p.interval_min, self.interval * 0.5)
            self.next_delay = 0.0
            return
        if got == 0:
            self.interval = min(p.interval_max, self.interval * 1.5)
        else:
            # aim for answers about half full: rate * interval ~ target events per poll
            per_poll = p.batch * p.frames  # events one poll (a burst of p.frames) can bring
            target = max(1.0, min(per_poll / 2, self.capacity / 4 if self.capacity else per_poll / 2))
            want = target / self._rate if self._rate > 0 else self.interval
            self.interval = min(p.interval_max, max(p.interval_min, want))
        self.next_delay = self.interval

    # -- state for the store -------------------------------------------------------------

    def counters_json(self) -> str:
        """The counters as compact JSON: the same text json.dumps gives (tested), made with two
        format strings because every commit writes it for every device that changed."""
        dc = self.dc
        if len(dc) != len(DEVICE_COUNTERS):  # not the fixed layout: the general way
            return json.dumps(
                {"device": dc, "channels": {str(ch): dict(zip(CHANNEL_COUNTERS, v, strict=True))
                                            for ch, v in self.cc.items()}},
                separators=(",", ":"),
            )  # fmt: skip
        chans = ",".join([_CHANNEL_JSON % (ch, *v) for ch, v in self.cc.items()])
        return _COUNTERS_JSON % (*[dc[k] for k in DEVICE_COUNTERS], chans)

    def snapshot(self) -> tuple[Any, ...]:
        """The devices row written in the same transaction as the drained outputs."""
        pc = self.pc
        return (
            pc.n,
            int(not pc.fresh),
            pc.epoch,
            self.boots,
            self.lead_last,
            self.arrival,
            self.loss_seq,
            self.session,
            self.firmware,
            self.board,
            self.board_id,
            self.counters_json(),
            self.dev_key,
        )
