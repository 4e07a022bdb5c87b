# Client side of spec 004 for one server (device): the offset n, the recovery phase, restart and
# overrun accounting. Sans-I/O: the caller sends what next_request() returns, feeds every answer to
# on_frame() and reports a missing answer with on_timeout(). Host side (allocates freely).
#
# States
#   HANDSHAKE  no HELLO yet: the next request is a HELLO request
#   POLLING    the next request is POLL(n)
#   CONFIRM    a RECOVERY came after the client knew the device's range: ask HELLO to tell an
#              overrun (same boot epoch, n0 ahead of s(n): lost = (n0 - s(n)) mod 2^32 exactly)
#              from a restart (new epoch: the old boot's undelivered tail is unknowable, lost =
#              None) and from a delayed answer to an old poll (same epoch, range not ahead: stale)
# The first RECOVERY of a boot (first contact, or the restart already seen in a HELLO) starts the
# count: nothing before its n0 was known to the client.
from leadwire import messages, wire
from leadwire.u32 import add, distance, le, lt, pred, succ

HANDSHAKE = "handshake"
POLLING = "polling"
CONFIRM = "confirm"

# on_frame() result kinds
EVENTS = "events"  # data: list of (offset, channel, payload)
NOTHING = "nothing"  # spec 004 case 2
RECOVER = "recover"  # data: the Loss record (None while waiting for the HELLO that classifies it)
HELLO = "hello"  # data: the Hello
STALE = "stale"  # an answer to an earlier poll (duplicated or delayed datagram): ignored
OTHER = "other"  # not a polling frame (NOTIFY, ACK...): data is the frame

OVERRUN = "overrun"
RESTART = "restart"
FIRST_CONTACT = "first_contact"


class Loss:
    """One recovery answer acted on, and the phase that followed."""

    __slots__ = ("cause", "client_n", "ended", "lost", "n0", "n1", "recovered")

    def __init__(self, cause, client_n, n0, n1, lost):
        self.cause = cause
        self.client_n = client_n
        self.n0 = n0
        self.n1 = n1
        self.lost = lost  # exact count, or None when unknowable
        self.recovered = 0  # events consumed during the recovery phase
        self.ended = False

    def __repr__(self):
        return "Loss(%s n=%d n0=%d n1=%d lost=%s recovered=%d%s)" % (
            self.cause,
            self.client_n,
            self.n0,
            self.n1,
            self.lost,
            self.recovered,
            " ended" if self.ended else "",
        )


class PollClient:
    def __init__(self, n=0, epoch=None, fresh=True):
        self.n = n  # offset of the last event received (0 before any, spec 004)
        self.epoch = epoch  # boot epoch of the device as last seen in a HELLO
        self.fresh = fresh  # no event of the current boot received yet
        self.state = HANDSHAKE if epoch is None else POLLING
        self.hello = None
        self.loss = None  # the current (or last) Loss record
        self._pending = None  # (n0, n1) of a RECOVERY awaiting its HELLO
        self._restart_seen = False
        self.backlog = 0  # events the device still held after the last batch
        self.consecutive_errors = 0
        self.received = 0
        self.lost = 0  # exact lost events, summed
        self.unknown_losses = 0  # losses whose size cannot be known (restarts)
        self.recoveries = 0
        self.restarts = 0
        self.stale = 0
        self.no_events = 0
        self.transport_errors = 0

    @property
    def recovering(self):
        return self.loss is not None and not self.loss.ended

    def next_request(self, max_events=wire.MAX_BATCH, max_bytes=wire.MAX_PAYLOAD):
        if self.state == POLLING:
            return messages.poll_frame(self.n, max_events, max_bytes)
        return messages.hello_request()

    def on_timeout(self):
        """Transport error: the same request goes again (spec 004: poll with offset n)."""
        self.transport_errors += 1
        self.consecutive_errors += 1

    def backoff(self, base, cap):
        """Delay before the next try after consecutive transport errors (bounded exponential)."""
        if not self.consecutive_errors:
            return 0
        return min(cap, base * (1 << min(self.consecutive_errors - 1, 16)))

    def on_frame(self, frame):
        """Apply one received frame; returns (kind, data)."""
        t = frame.type
        if t == wire.EVENTS:
            return self._events(frame)
        if t == wire.NO_EVENT:
            if self.state != POLLING or frame.seq != self.n:
                return self._stale()
            self.consecutive_errors = 0
            self.no_events += 1
            self.backlog = 0
            return (NOTHING, None)
        if t == wire.RECOVERY:
            return self._recovery(frame)
        if t == wire.HELLO and frame.payload:
            return self._hello(messages.decode_hello(frame))
        return (OTHER, frame)

    def _stale(self):
        self.stale += 1
        return (STALE, None)

    def _events(self, frame):
        if self.state != POLLING or frame.seq != succ(self.n):
            return self._stale()
        backlog, recs = messages.decode_records(frame.payload)
        if not recs:
            raise wire.WireError(wire.E_PAYLOAD, "empty batch")
        first = frame.seq
        out = [(add(first, i), ch, data) for i, (ch, data) in enumerate(recs)]
        self.n = add(first, len(recs) - 1)
        self.fresh = False
        self.consecutive_errors = 0
        self.received += len(recs)
        self.backlog = backlog
        loss = self.loss
        if loss is not None and not loss.ended:
            loss.recovered += len(recs)
            if le(loss.n1, self.n):
                loss.ended = True
        return (EVENTS, out)

    def _recovery(self, frame):
        if self.state != POLLING:
            return self._stale()
        n0, n1 = messages.decode_recovery(frame)
        start = pred(n0)
        if distance(self.n, start) <= distance(n1, start):
            # the device holds n or s(n), so it cannot have answered our poll of n this way: a
            # delayed or duplicated answer to an earlier poll
            return self._stale()
        self.consecutive_errors = 0
        if self.fresh:
            cause = RESTART if self._restart_seen else FIRST_CONTACT
            self._restart_seen = False
            return (RECOVER, self._begin(cause, n0, n1, None))
        self._pending = (n0, n1)
        self.state = CONFIRM
        return (RECOVER, None)

    def _begin(self, cause, n0, n1, lost):
        self.loss = Loss(cause, self.n, n0, n1, lost)
        self.recoveries += 1
        if lost is None:
            if cause == RESTART:
                self.unknown_losses += 1
        else:
            self.lost += lost
        self.n = pred(n0)
        self.fresh = False  # the device's range is known now: later losses are countable
        self.state = POLLING
        return self.loss

    def _hello(self, hello):
        self.hello = hello
        self.consecutive_errors = 0
        restarted = self.epoch is not None and hello.boot_epoch != self.epoch
        self.epoch = hello.boot_epoch
        if restarted:
            self.restarts += 1
        if self.state == CONFIRM:
            n0, n1 = self._pending
            self._pending = None
            if restarted:
                self._begin(RESTART, n0, n1, None)
            elif lt(succ(self.n), n0):
                self._begin(OVERRUN, n0, n1, distance(n0, succ(self.n)))
            else:
                # same boot, yet the range is not ahead of s(n): a delayed answer to an old poll
                self.stale += 1
                self.state = POLLING
            return (HELLO, hello)
        if restarted:
            # a new boot announced itself: nothing of it received yet; its first RECOVERY is the
            # restart's (spec 004: n = 0 for a server we have no event from)
            self.n = 0
            self.fresh = True
            self._restart_seen = True
            if self.loss is not None:
                self.loss.ended = True
        self.state = POLLING
        return (HELLO, hello)
