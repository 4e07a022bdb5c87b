# Lead (spec 000): for every received message, lead = seq - last_seq, where last_seq is the highest
# sequence number seen so far from that sender on that channel (wrap-safe, mod 2^32). The first
# message of a (sender, channel) has lead 1.
#   lead == 1  in order          lead == 0  duplicate of the newest
#   lead > 1   early: lead-1 messages skipped (lost or still to come)
#   lead < 0   late (older than the newest; a delayed duplicate also lands here)
from leadwire._compat import const
from leadwire.u32 import diff

IN_ORDER = const(1)
DUPLICATE = const(2)
GAP = const(3)
LATE = const(4)

KIND_NAMES = {IN_ORDER: "in_order", DUPLICATE: "duplicate", GAP: "gap", LATE: "late"}


def classify(lead):
    if lead == 1:
        return IN_ORDER
    if lead == 0:
        return DUPLICATE
    if lead > 1:
        return GAP
    return LATE


class LeadTracker:
    def __init__(self):
        self._last = {}  # (sender, channel) -> highest seq seen

    def lead(self, sender, channel, seq):
        key = (sender, channel)
        last = self._last.get(key)
        if last is None:
            self._last[key] = seq
            return 1
        d = diff(seq, last)
        if d > 0:
            self._last[key] = seq
        return d

    def last(self, sender, channel):
        return self._last.get((sender, channel))

    def reset(self, sender, channel=None):
        """Forget a sender (all channels, e.g. after a restart) or one of its channels."""
        if channel is not None:
            self._last.pop((sender, channel), None)
            return
        for key in [k for k in self._last if k[0] == sender]:
            del self._last[key]


def ordered(lead):
    """subscribe_ordered delivers exactly the messages for which this is true."""
    return lead >= 1
