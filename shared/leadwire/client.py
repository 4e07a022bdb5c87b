# Client side of spec 004 for one server (device): the offset n, the recovery phase, restart and
# overrun accounting. Sans-I/O: the caller sends what next_request() returns, feeds every answer to
# on_frame() and reports a missing answer with on_timeout(). Host side (allocates freely).
#
# Answers are matched to requests: every request carries a fresh tag (the header's message id)
# and only the answer echoing it is acted on. Over UDP an answer can arrive twice or late, and a
# late answer from before a device restart is otherwise indistinguishable from a current one.
# Content checks (EVENTS must start at s(n), ...) remain as a second line.
#
# A RECOVERY carries the boot epoch of the ring that sent it, so it classifies itself at once:
#   new epoch                       restart: the old boot's unpolled tail is unknowable (lost None)
#   first RECOVERY of a boot        first contact: nothing before n0 was known to the client
#   same epoch, n0 ahead of s(n)    overrun: lost = (n0 - s(n)) mod 2^32, exactly
# Then the recovery phase: poll from n0 - 1 until n1 is consumed (spec 004).
#
# First contact probes: spec 004 has a client with no event poll with n = 0. If the device's ring
# happens to hold offset 0 (its random start is near 2^32), that poll is answered EVENT from s(0)
# or NO_EVENT, and every event up to 0 is never offered -- silently. So while fresh the client takes
# only a RECOVERY as first contact (it names the whole held range); an EVENTS or NO_EVENT answer
# flips its probe between 0 and 2^31, and no ring (at most 65,535 events) holds offsets near both.
#
# Burst answers: a POLL may ask for up to max_frames EVENTS frames, sent back to back, each going
# on from the one before (header fragment index 0, 1, ...): one round trip then carries many
# frames' worth of events. They are applied in order like single answers; a frame missing in the
# middle makes the following ones stale, and `burst_done` tells the caller to poll again at once.
#
# Pipelined polls (opt-in: pipeline = True): frame 0 of a burst says how many events the device
# still held after it (backlog). When the frames still due can carry them all, the burst will end
# at offset e = n + backlog; when they cannot, max_frames cuts it and it ends at
# e = n + (frames still due) x (records of frame 0), the records being the same size. Either way
# the next POLL can ask from e at once, before the rest of the burst is in: the device never waits
# a whole round trip with its ring filling. The client still only takes EVENTS that go on from its
# own n (tags: the current request's or the pipelined burst's), so a prediction that fails (a frame
# lost, reordered, a later frame carrying fewer or more records, a burst ended short) costs one more
# round trip, never an event: an answer to POLL(e) that does not fit n is stale, and `repoll` tells
# the caller to poll from n at once. Counting (received + counted lost = spanned) is unchanged.
#
# Chase guard: with a full ring and events still coming, the oldest event n0 is pushed out during
# the round trip that asks for it, and polling from n0 - 1 can fail forever. When an overrun
# RECOVERY follows another with no event received in between, the client starts past n0 instead:
# a quarter of the held range, then half, then three quarters while the chase goes on (a ring
# turning over faster than a round trip). The skipped events are counted in the loss, exactly
# (Loss.skipped).
# The caller may also say how many events it expects the ring to turn over before its next POLL
# reaches the device (`turnover`: the device's event rate x the link's round trip): an overrun
# RECOVERY then starts that far past n0 at once (at most three quarters of the held range), rather
# than polling from n0 - 1 and learning it is gone one round trip later (where a ring turns over in
# about a round trip, n0 - 1 is overwritten before the POLL gets there, again and again).
#
# Going on past a RECOVERY (opt-in: follow = True, burst POLLs only): the POLL asks the device to
# go on with the events from n0 in the same burst (messages.POLL_FOLLOW). A RECOVERY that says so
# (no F_LAST) is acted on as any (the same loss, exactly), but n goes to n0 - 1 with no skip and the
# burst goes on: its EVENTS frames from n0 are taken as the answer to a POLL from n0 - 1 sent then,
# a round trip before the client could have sent one (in which the ring may turn over again: the
# chase above). burst_from is the fragment index of the first EVENTS frame (pipelining counts the
# frames still due from it). If the RECOVERY is lost, its EVENTS are ahead of s(n): stale (held
# by leadwire.hold), and the next POLL gets the RECOVERY again.
#
# States (docs/protocol.md 6.1 is markdown of TRANSITIONS, tested against it): `state` is the one
# field that says which rules apply, and only _fire(event) moves it, as TRANSITIONS says (a caller
# restoring a stored client sets it: the constructor, HoldingPollClient.resume); an event
# the table does not allow in the current state raises PollStateError (a bug, never a wire fault:
# answers that do not fit are the STALE event, allowed everywhere). The open Loss (RECOVERY, CHASE)
# is the only one whose `ended` is False; unproven events past n1 (leadwire.hold) only exist in CHASE.
from leadwire import messages, wire
from leadwire.u32 import MASK, add, distance, le, lt, pred, succ

START = "start"  # no boot epoch known: HELLO requests
FIRST = "first contact"  # an epoch, nothing of its boot known yet: only a RECOVERY is taken (probes)
RESTARTED = "restarted"  # FIRST after a HELLO showed a new boot: its first RECOVERY is the restart's
NORMAL = "normal"  # polling from n, no loss open
RECOVERY = "recovery phase"  # a Loss open: its range n0..n1 not consumed yet
CHASE = "chase"  # an overrun RECOVERY acted on, nothing taken since: the next overrun skips further
STATES = (START, FIRST, RESTARTED, NORMAL, RECOVERY, CHASE)

ON_HELLO = "HELLO, same epoch"
ON_NEW_BOOT = "HELLO, new epoch"
ON_PROBE = "EVENTS or NO_EVENT while fresh"
ON_NOTHING = "NO_EVENT(n)"
ON_EVENTS = "events taken"
ON_N1 = "n reaches n1"
ON_FIRST = "RECOVERY, first contact"
ON_RESTART = "RECOVERY, new boot"
ON_OVERRUN = "RECOVERY, overrun"
ON_HELD = "RECOVERY, held frames taken"  # leadwire.hold: the gaps behind them counted, or a skip
ON_AHEAD = "RECOVERY behind n (AHEAD)"  # leadwire.hold: a skip past n1 landed before the device
ON_UNPROVEN = "NO_EVENT(n) past n1"  # leadwire.hold: proof of the skip waits for a HELLO answer
ON_STALE = "stale answer"
ON_TIMEOUT = "timeout"
EVENTS_ORDER = (ON_HELLO, ON_NEW_BOOT, ON_PROBE, ON_NOTHING, ON_EVENTS, ON_N1, ON_FIRST, ON_RESTART,
                ON_OVERRUN, ON_HELD, ON_AHEAD, ON_UNPROVEN, ON_STALE, ON_TIMEOUT)  # fmt: skip

TRANSITIONS = {
    START: {ON_HELLO: FIRST, ON_STALE: START, ON_TIMEOUT: START},
    FIRST: {ON_HELLO: FIRST, ON_NEW_BOOT: RESTARTED, ON_PROBE: FIRST, ON_FIRST: RECOVERY,
            ON_RESTART: RECOVERY, ON_STALE: FIRST, ON_TIMEOUT: FIRST},
    RESTARTED: {ON_HELLO: RESTARTED, ON_NEW_BOOT: RESTARTED, ON_PROBE: RESTARTED, ON_RESTART: RECOVERY,
                ON_STALE: RESTARTED, ON_TIMEOUT: RESTARTED},
    NORMAL: {ON_HELLO: NORMAL, ON_NEW_BOOT: RESTARTED, ON_NOTHING: NORMAL, ON_EVENTS: NORMAL,
             ON_RESTART: RECOVERY, ON_OVERRUN: CHASE, ON_HELD: RECOVERY, ON_STALE: NORMAL,
             ON_TIMEOUT: NORMAL},
    RECOVERY: {ON_HELLO: RECOVERY, ON_NEW_BOOT: RESTARTED, ON_NOTHING: RECOVERY, ON_EVENTS: RECOVERY,
               ON_N1: NORMAL, ON_RESTART: RECOVERY, ON_OVERRUN: CHASE, ON_HELD: RECOVERY,
               ON_STALE: RECOVERY, ON_TIMEOUT: RECOVERY},
    CHASE: {ON_HELLO: CHASE, ON_NEW_BOOT: RESTARTED, ON_NOTHING: RECOVERY, ON_EVENTS: RECOVERY,
            ON_RESTART: RECOVERY, ON_OVERRUN: CHASE, ON_AHEAD: CHASE, ON_UNPROVEN: CHASE,
            ON_STALE: CHASE, ON_TIMEOUT: CHASE},
}  # fmt: skip


class PollStateError(Exception):
    """An event the transition table does not allow in the client's state (a bug in the client)."""


# on_frame() result kinds
EVENTS = "events"  # data: list of (offset, channel, payload)
NOTHING = "nothing"  # spec 004 case 2
RECOVER = "recover"  # data: the Loss record
HELLO = "hello"  # data: the Hello
STALE = "stale"  # not an answer to the outstanding request: ignored
OTHER = "other"  # not a polling frame (NOTIFY, ACK...): data is the frame

PROBE_FLIP = 0x80000000  # the other first-contact probe: n ^ PROBE_FLIP

OVERRUN = "overrun"
RESTART = "restart"
FIRST_CONTACT = "first_contact"


class Loss:
    """One RECOVERY answer acted on, and the recovery phase that followed."""

    __slots__ = ("cause", "chase", "client_n", "ended", "epoch", "lost", "n0", "n1", "recovered", "skipped")

    def __init__(self, cause, client_n, n0, n1, epoch, lost, skipped=0):
        self.cause = cause
        self.client_n = client_n
        self.n0 = n0
        self.n1 = n1
        self.epoch = epoch
        self.lost = lost  # exact count (skipped included), or None when unknowable
        self.skipped = skipped  # held by the device but passed over by the chase guard
        self.chase = 0  # overrun RECOVERYs in a row, nothing taken between, this one included
        self.recovered = 0  # events consumed during the recovery phase
        self.ended = False

    def __repr__(self):
        return "Loss(%s n=%d n0=%d n1=%d lost=%s skipped=%d recovered=%d%s)" % (
            self.cause,
            self.client_n,
            self.n0,
            self.n1,
            self.lost,
            self.skipped,
            self.recovered,
            " ended" if self.ended else "",
        )


class PollClient:
    loss_type = Loss  # what _begin makes (a host caller's subclass adds its row's fields)

    def __init__(self, n=0, epoch=None, fresh=True):
        self.n = n  # offset of the last event received (0 before any, spec 004)
        self.epoch = epoch  # boot epoch of the device as last seen
        self.left = None  # the epoch before it: a boot once left is never current again
        self.state = START if epoch is None else FIRST if fresh else NORMAL
        self.hello = None
        self.loss = None  # the current (or last) Loss record
        self.tag = 0  # message id of the outstanding request
        self.max_frames = 1  # frames the outstanding POLL asked for
        self.pipeline = False  # predict a burst's end and poll from it before it is in (above)
        self.ahead = None  # the predicted end of the burst in flight: the next POLL's n
        self.prev_tag = -1  # tag of the burst still arriving after a pipelined POLL went out
        self.poll_n = n  # n of the outstanding POLL (ahead of self.n when pipelined)
        self.poll_pipelined = False  # the outstanding POLL went out before the burst it follows was in
        self.pipelined = 0  # pipelined POLLs sent
        self.mispredicted = 0  # answers to a pipelined POLL that did not fit n: polled again
        self.repoll = False  # the outstanding pipelined POLL was answered stale: poll n again now
        self.burst_done = True  # no more answer frames are due for the outstanding request
        self.follow = False  # burst POLLs ask the device to go on past a RECOVERY (from n0)
        self.burst_from = 0  # fragment index of the first EVENTS frame of the burst
        self.hello_due = False  # the next request is a HELLO (see ask_hello)
        self.turnover = 0  # events the ring is expected to turn over before the next POLL gets there
        self.backlog = 0  # events the device still held after the last batch
        self.consecutive_errors = 0
        self.received = 0
        self.lost = 0  # exact lost events, summed (skipped included)
        self.unknown_losses = 0  # losses whose size cannot be known (restarts)
        self.recoveries = 0
        self.restarts = 0
        self.stale = 0
        self.no_events = 0
        self.transport_errors = 0

    @property
    def fresh(self):
        """No event and no held range of the current boot known yet (FIRST, RESTARTED)."""
        return self.state == FIRST or self.state == RESTARTED

    @property
    def polling(self):
        """A boot epoch is known: requests are POLLs (unless a HELLO is due)."""
        return self.state != START

    def _fire(self, event):
        # the one place the state moves
        nxt = TRANSITIONS[self.state].get(event)
        if nxt is None:
            raise PollStateError("poll client: %s is not allowed in state %s" % (event, self.state))
        self.state = nxt

    def _chase(self):
        # overrun RECOVERYs in a row before the one at hand (0 unless in CHASE)
        loss = self.loss  # (never None in CHASE: the table enters it only with a loss open)
        return loss.chase if self.state == CHASE and loss is not None else 0

    def next_request(self, max_events=wire.MAX_BATCH, max_bytes=wire.MAX_PAYLOAD, max_frames=1, hello=False):
        """The request to send now (each call makes a new tag: a retry is a new request). hello: a
        HELLO whatever is due (the caller's periodic one, between two POLLs); unlike ask_hello it
        leaves nothing due if it goes unanswered."""
        ahead = self.ahead
        self.ahead = None
        self.repoll = False
        self.prev_tag = self.tag if ahead is not None else -1  # its burst is still arriving
        self.tag = (self.tag + 1) & 0xFF
        self.burst_done = False
        self.burst_from = 0
        if self.state != START and not self.hello_due and not hello:
            self.max_frames = max_frames
            n = self.n
            if ahead is not None:
                n = ahead
                self.pipelined += 1
            self.poll_n = n
            self.poll_pipelined = ahead is not None
            follow = self.follow and max_frames > 1
            return messages.poll_frame(n, max_events, max_bytes, self.tag, max_frames, follow)
        self.max_frames = 1
        self.poll_n = self.n
        self.poll_pipelined = False
        return messages.hello_request(self.tag)

    def _mispredicted(self):
        # a stale answer to a pipelined POLL (the burst before it did not end where predicted)
        self.mispredicted += 1
        self.repoll = True
        self.burst_done = True

    def ask_hello(self):
        """Make the next request a HELLO: at start-up, periodically (a device that restarted and has
        generated nothing yet shows it only there), or after a long silence."""
        self.hello_due = True

    def on_timeout(self):
        """Transport error: the same request goes again (spec 004: poll with offset n)."""
        self._fire(ON_TIMEOUT)
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
        if t == wire.HELLO and frame.payload and frame.message_id != self.tag:
            # unsolicited (a boot announcement) or late: a different epoch is only a hint to ask
            if self.epoch is not None and messages.decode_hello(frame).boot_epoch != self.epoch:
                self.hello_due = True
            return self._stale()
        if t == wire.EVENTS and frame.message_id == self.prev_tag and self.prev_tag >= 0:
            result = self._events(frame)  # the pipelined burst, still arriving: takes what fits n
            if result[0] == STALE and lt(succ(self.n), frame.seq):
                self.prev_tag = -1  # a frame of it went missing: the rest cannot fit either
            return result
        if t in (wire.EVENTS, wire.NO_EVENT, wire.RECOVERY) and frame.message_id != self.tag:
            return self._stale()
        if t == wire.EVENTS:
            result = self._events(frame)
            # done when the last frame asked for came, the device had no more, or a frame of the
            # burst went missing (this one did not continue from n)
            if result[0] == STALE:
                self.burst_done = True
                self.ahead = None
                if self.poll_pipelined and frame.seq == succ(self.poll_n) != succ(self.n):
                    self._mispredicted()
            elif frame.index >= self.max_frames - 1 or not self.backlog:
                self.burst_done = True
            elif self.pipeline and frame.index == self.burst_from and not self.hello_due:
                # the burst ends at n + backlog when the frames still due carry it, else where
                # max_frames cuts it: n + frames due x this frame's records (same-size records).
                # Told only from this frame's records alone (leadwire.hold may take held frames of
                # another burst with it: n and the backlog are theirs). The caller may send the
                # next POLL, from there, now
                k = len(result[1])
                if frame.payload[0] == k:  # (the batch's count byte: messages.py)
                    self.ahead = add(self.n, min(self.backlog, (self.max_frames - 1 - frame.index) * k))
                    self.burst_done = True
            return result
        if t in (wire.NO_EVENT, wire.RECOVERY, wire.HELLO):
            self.burst_done = True
        if t == wire.NO_EVENT:
            if self.state == START or frame.seq != self.n:
                if self.poll_pipelined and frame.seq == self.poll_n != self.n:
                    self._mispredicted()
                return self._stale()
            self.consecutive_errors = 0
            self.no_events += 1
            if self.fresh:
                return self._probe_again()
            self.backlog = 0
            self._fire(ON_NOTHING)
            return (NOTHING, None)
        if t == wire.RECOVERY:
            result = self._recovery(frame)
            if result[0] in (RECOVER, EVENTS) and self._follows(frame):
                self.burst_done = False  # the burst goes on with the events from n0
                self.burst_from = frame.index + 1
            return result
        if t == wire.HELLO and frame.payload:
            return self._hello(messages.decode_hello(frame))
        return (OTHER, frame)

    def _stale(self):
        self._fire(ON_STALE)
        self.stale += 1
        return (STALE, None)

    def _follows(self, frame):
        # a RECOVERY the device goes on from in the same burst: the events from n0 follow (we asked:
        # follow, a burst POLL; and it says so: no F_LAST), so n goes to n0 - 1, no skip
        return self.follow and self.max_frames > 1 and not frame.flags & wire.F_LAST

    def _events(self, frame):
        if self.state == START or frame.seq != succ(self.n):
            return self._stale()
        if self.fresh:
            return self._probe_again()
        backlog, recs = messages.decode_records(frame.payload)
        if not recs:
            raise wire.WireError(wire.E_PAYLOAD, "empty batch")
        first = frame.seq
        out = [((first + i) & MASK, r[0], r[1]) for i, r in enumerate(recs)]
        self.n = add(first, len(recs) - 1)
        self.consecutive_errors = 0
        self._took(len(recs), backlog)
        return (EVENTS, out)

    def _took(self, k, backlog):
        # k records taken, up to self.n (already moved): the counters and the open loss's
        # recovery, which ends when n reaches its n1 (hold.py's held frames too); allocates nothing
        self.received += k
        self.backlog = backlog
        self._fire(ON_EVENTS)
        loss = self.loss
        if self.state == RECOVERY and loss is not None:  # (never None in RECOVERY)
            loss.recovered += k
            if le(loss.n1, self.n):
                loss.ended = True
                self._fire(ON_N1)

    def _probe_again(self):
        # fresh, and the device may hold our probe offset: whatever precedes it would never be
        # offered. Ask with the other probe, which that ring cannot hold.
        self._fire(ON_PROBE)
        self.n ^= PROBE_FLIP
        self.backlog = 0
        return (NOTHING, None)

    def _recovery(self, frame):
        if self.state == START:
            return self._stale()
        n0, n1 = messages.decode_recovery(frame)
        epoch = messages.recovery_epoch(frame)
        if epoch == self.left and epoch != self.epoch:
            return self._stale()  # a late answer of the boot before (a copy it answered), not a restart
        self.consecutive_errors = 0
        if epoch != self.epoch:
            # a new boot: its range is the whole story we can know
            if self.epoch is not None:
                self.restarts += 1
                self.left = self.epoch
            self.epoch = epoch
            return (RECOVER, self._begin(RESTART, n0, n1, None, 0, ON_RESTART))
        if self.fresh:
            if self.state == RESTARTED:
                return (RECOVER, self._begin(RESTART, n0, n1, None, 0, ON_RESTART))
            return (RECOVER, self._begin(FIRST_CONTACT, n0, n1, None, 0, ON_FIRST))
        start = succ(self.n)
        if not lt(start, n0):
            if self.poll_pipelined and self.poll_n != self.n:
                self._mispredicted()
            return self._stale()  # same boot, range not ahead of s(n): cannot answer our poll
        # chase guard: the 2nd overrun in a row skips 1/4 of the held range, the 3rd 1/2, then 3/4
        c = self._chase()
        held = distance(n1, n0)
        skip = held * min(c, 3) // 4
        if self.turnover > skip:
            skip = min(self.turnover, held * 3 // 4)  # gone before our POLL gets there (above)
        if self._follows(frame):
            skip = 0  # the events from n0 are on their way: nothing to chase
        loss = self._begin(OVERRUN, n0, n1, distance(n0, start) + skip, skip, ON_OVERRUN)
        loss.chase = c + 1
        return (RECOVER, loss)

    def _begin(self, cause, n0, n1, lost, skip, event):
        # a new Loss, the one open from now on (the one before ends), and the event it is
        if self.loss is not None:
            self.loss.ended = True
        self.loss = self.loss_type(cause, self.n, n0, n1, self.epoch, lost, skip)
        self.recoveries += 1
        if lost is None:
            if cause == RESTART:
                self.unknown_losses += 1
        else:
            self.lost += lost
        self.prev_tag = -1  # nothing of a burst before this answer can go on from the new n
        self.n = pred(add(n0, skip))
        self._fire(event)
        return self.loss

    def _hello(self, hello):
        if hello.boot_epoch == self.left and hello.boot_epoch != self.epoch:
            return self._stale()  # a late answer of the boot before (see _recovery)
        self.hello = hello
        self.consecutive_errors = 0
        self.hello_due = False
        restarted = self.epoch is not None and hello.boot_epoch != self.epoch
        if restarted:
            self.left = self.epoch
        self.epoch = hello.boot_epoch
        if restarted:
            # a new boot announced itself: nothing of it received yet; its first RECOVERY is the
            # restart's (spec 004: n = 0 for a server we have no event from)
            self.restarts += 1
            self.n = 0
            self.prev_tag = -1
            if self.loss is not None:
                self.loss.ended = True
            self._fire(ON_NEW_BOOT)
        else:
            self._fire(ON_HELLO)
        return (HELLO, hello)
