"""Retransmission timing of one device's link: RFC 6298's SRTT/RTTVAR/RTO, sans-I/O (time passed in).

The bridge sends a request and waits for its answer; how long it waits before it sends the
request again is the RTO this module computes from the round trips it measured on that link: a
constant long enough for the slowest link idles a fast one for a thousand of its round trips per
lost datagram.

Samples are exact (Karn's rule without its blind spot): every request carries a fresh tag (the
header's message id) and the device echoes it, so an answer names the send it answers. A request
sent again after a timeout is a new send with a new tag; an answer to the first send that comes
after all is still a sample of *that* send (its true, long round trip) and marks the
retransmission as spurious. Each send gives at most one sample: the first frame carrying its tag;
copies and later frames of the same answer give none. Tags are 8 bits: only the last
``KEEP`` sends are remembered (a tag is forgotten long before it comes round again).

RTO (RFC 6298 section 2, with the bridge's bounds):

    first sample R:  SRTT = R, RTTVAR = R / 2
    next sample R:   RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R|,  SRTT = 7/8 SRTT + 1/8 R
    RTO = clamp(SRTT + max(G, 4 RTTVAR), floor, ceiling) * 2^backoff, at most ceiling

``ceiling`` is ``polling.timeout`` (also the RTO before the first sample); ``floor`` is
``polling.rto_min`` or, on a serial link, the time the line needs to carry a request and the
largest answer frame (:func:`serial_floor`) when that is longer; ``G`` is the event loop's timer
granularity. ``backoff`` counts timeouts since the last sample (RFC 6298 5.5: the RTO doubles on
each) and is cleared by the next sample. A floor above the ceiling wins: a timeout shorter than
the line needs to carry the answer would retransmit every request.
"""

from __future__ import annotations

from collections import OrderedDict

G = 0.001  # timer granularity (asyncio's selector waits in whole milliseconds)
KEEP = 32  # sends remembered for samples (tags are 8 bits: 256 sends before one comes round)
RTO_HIST = 4096  # RTOs kept for the percentiles (a ring: the most recent ones)

COBS_BITS = 10  # start + 8 data + stop bits per byte on an asynchronous serial line


def serial_floor(baud: int, request_bytes: int, answer_bytes: int) -> float:
    """Seconds a serial line at `baud` needs to carry one request and one answer frame of these sizes
    (COBS adds one byte per 254 and a delimiter), plus the timer granularity."""
    nbytes = sum(b + b // 254 + 2 for b in (request_bytes, answer_bytes))
    return nbytes * COBS_BITS / baud + G


class RttEstimator:
    """One link's round-trip statistics and retransmission timeout (see the module comment)."""

    def __init__(self, floor: float, ceiling: float) -> None:
        self.floor = floor
        self.ceiling = max(ceiling, floor)
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.base = self.ceiling  # RTO before back-off (the ceiling until the first sample)
        self.backoff = 0  # timeouts since the last sample
        self._sent: OrderedDict[int, float] = OrderedDict()  # tag -> send time, oldest first
        self._timed_out: set[int] = set()  # tags of remembered sends that timed out
        # statistics
        self.samples = 0
        self.sends = 0
        self.timeouts = 0
        self.spurious = 0  # timed-out sends answered after all (the retransmission was not needed)
        self.rtos: list[float] = []  # the RTOs timeouts were armed with (a ring of RTO_HIST)
        self._rto_i = 0
        self.min_rtt: float | None = None
        self.max_rtt = 0.0

    @property
    def rto(self) -> float:
        """The timeout to arm for the next send."""
        return min(self.ceiling, self.base * (1 << min(self.backoff, 16)))

    def on_send(self, tag: int, now: float) -> float:
        """A request with this tag goes out now; returns the RTO to arm for it."""
        sent = self._sent
        sent.pop(tag, None)  # a tag come round again: the old send is long forgotten
        self._timed_out.discard(tag)
        sent[tag] = now
        if len(sent) > KEEP:
            old, _ = sent.popitem(last=False)
            self._timed_out.discard(old)
        self.sends += 1
        rto = self.rto
        if len(self.rtos) < RTO_HIST:
            self.rtos.append(rto)
        else:
            self.rtos[self._rto_i] = rto
            self._rto_i = (self._rto_i + 1) % RTO_HIST
        return rto

    def on_timeout(self, tag: int, backoff: bool = True) -> None:
        """The send with this tag got no answer within its RTO: back off (the next send waits twice
        as long, up to the ceiling). backoff=False: a probe armed before the RTO fired (the bridge's
        tail-loss probe): counted, and an answer after all is a spurious retransmission, no back-off."""
        self.timeouts += 1
        if backoff:
            self.backoff += 1
        if tag in self._sent:
            self._timed_out.add(tag)

    def on_answer(self, tag: int, now: float, quiet_since: float = float("-inf")) -> float | None:
        """A frame answering the send with this tag arrived now: the round trip of that send, the first
        time only (None for copies, later frames of the same answer, and unknown tags).

        `quiet_since`: when the frame before this one arrived. A request sent while the answer to
        the one before was still coming (a pipelined POLL) is read by the device after that answer,
        and the bridge times its silence from the last frame (the scheduler re-arms the deadline on
        every frame): the sample is measured the same way, from the later of the send and that
        frame."""
        t0 = self._sent.pop(tag, None)
        if t0 is None:
            return None
        if tag in self._timed_out:
            self._timed_out.discard(tag)
            self.spurious += 1
        r = max(0.0, now - max(t0, quiet_since))
        self.sample(r)
        return r

    def sample(self, r: float) -> None:
        """Fold one round-trip sample r (seconds) into SRTT/RTTVAR (RFC 6298 2.2-2.3)."""
        self.samples += 1
        if self.srtt is None:
            self.srtt = r
            self.rttvar = r / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - r)
            self.srtt = 0.875 * self.srtt + 0.125 * r
        self.base = min(self.ceiling, max(self.floor, self.srtt + max(G, 4 * self.rttvar)))
        self.backoff = 0
        if self.min_rtt is None or r < self.min_rtt:
            self.min_rtt = r
        if r > self.max_rtt:
            self.max_rtt = r

    def stats(self) -> dict[str, float | int | None]:
        """Counters and RTO percentiles (seconds) for benches and metrics."""
        v = sorted(self.rtos)

        def pct(p: float) -> float | None:
            return v[min(len(v) - 1, int(p * len(v)))] if v else None

        return {
            "sends": self.sends,
            "samples": self.samples,
            "timeouts": self.timeouts,
            "spurious": self.spurious,
            "srtt": self.srtt,
            "rttvar": self.rttvar,
            "rto": self.rto,
            "rto_p50": pct(0.5),
            "rto_p99": pct(0.99),
            "min_rtt": self.min_rtt,
            "max_rtt": self.max_rtt,
        }
