# PollClient with held frames (spec 004 client, host side: the bridge uses it; not loaded on boards).
#
# Over a lossy link a frame lost inside a burst made every later frame of it stale: thrown away
# and asked for again -- at 5% loss most of a 16-frame burst. HoldingPollClient keeps an EVENTS
# frame of one of its recent POLLs (their tags, since the last RECOVERY or restart) that starts
# ahead of s(n) (at most MAX_HELD frames); the repoll asks for just the gap (max_events = the gap,
# one frame) when one answer can carry it; once n reaches a held frame's first offset, that frame
# is taken too, in the same on_frame() result. The events still go in order, each once; `taken`
# lists the frames a result came from, for callers that need each frame's header. Held frames are
# dropped when n passes them some other way, on a RECOVERY and on a restart.
#
# Depth two across a gap (with pipeline set): when the held frames are one run from the gap on and
# the last of them says how many events the device still held (backlog) that the frames still due
# can carry, the gap repoll also sets `ahead` to where that burst will end, so the caller sends a
# second POLL from there at once (as after a pipelined burst's first frame): the device drains its
# ring while the gap is filled, instead of waiting a round trip for it. The gap's answer comes under
# the previous tag and is taken as a pipelined burst's is; if the gap POLL or its answer is lost,
# the second answer does not fit n, is held, and the gap is asked for again (one round trip, as
# without the second POLL). `gap_ahead` counts these second POLLs.
#
# Past the newest event (with turnover set): where the ring turns over faster than a round trip,
# the turnover skip capped at three quarters of the held range (PollClient) lands on events already
# gone when the POLL gets there, and the chase repeats. Here, once a chase shows that (an overrun
# RECOVERY after another, no event between), the recovery starts past the turnover uncapped (at most
# 4 rings), even past n1: at an offset the device will have reached when the POLL lands. (Not on the
# first overrun: a device that stopped generating right after it would lose the ring it still
# holds.) The events up to n1 are counted lost at once; those after n1 (`unproven`: not
# generated yet when the RECOVERY left) only once an answer shows the device got there (EVENTS from
# s(n), an overrun RECOVERY past them, or NO_EVENT(n) and then a HELLO answer of the same boot: an
# empty ring answers NO_EVENT to any n), added to the same Loss (lost and skipped).
# Until then a RECOVERY of the same boot whose range ends before n answers "not there yet": AHEAD,
# poll again (no new recovery; the events up to its n1 are proven, the rest stays unproven). If its
# n1 is the one the answer before showed (nothing generated since: the device stopped, or makes less
# than an event per round trip), the skip is taken back to what the ring still holds, those events
# no longer counted lost, and polling goes on from there. A
# restart drops the unproven part: never counted. received + lost = the events generated up to
# n - unproven, exactly, at every step.
#
# A subclass, not part of PollClient: the board-sized heap that runs the core's tests on
# MicroPython has no room for the extra code, and no board needs it.
from leadwire import messages, wire
from leadwire.client import (
    EVENTS,
    HELLO,
    NORMAL,
    NOTHING,
    ON_AHEAD,
    ON_HELD,
    ON_N1,
    ON_OVERRUN,
    ON_TIMEOUT,
    ON_UNPROVEN,
    OVERRUN,
    RECOVER,
    RECOVERY,
    STALE,
    PollClient,
)
from leadwire.u32 import add, distance, le, lt, pred, succ

AHEAD = "ahead"  # on_frame() result: a RECOVERY says the device has not reached n yet; data: its n1

MAX_HELD = 64  # frames held ahead of a gap
RECENT_TAGS = 6  # POLL tags whose frames may be held


class HoldingPollClient(PollClient):
    # the rules above, each on unless left out of `rules` (to measure what it pays):
    #   chase_past_n1     a chase's turnover skip uncapped, past n1 if need be (else 3/4 of the range)
    #   take_held         an overrun RECOVERY takes the held frames whose gaps it shows overwritten
    #   skip_past_held    ... and starts past the turnover after them (_skip_after_held)
    #   predict_held_end  a gap repoll goes with a POLL from the held burst's end (_held_end)
    RULES = ("chase_past_n1", "take_held", "skip_past_held", "predict_held_end")

    def __init__(self, n=0, epoch=None, fresh=True, rules=RULES):
        super().__init__(n, epoch, fresh)
        self.rules = frozenset(rules)
        self.held = {}  # first offset -> EVENTS frame, all ahead of s(n)
        self.recent = []  # tags of the last RECENT_TAGS POLLs since a RECOVERY or restart
        self.taken = []  # (frame, events) the last EVENTS result came from
        self.held_taken = 0  # held frames taken after their gap was filled
        self.gap_ahead = 0  # second POLLs sent with a gap repoll, from the held burst's end
        self.gap_tag = -1  # tag of the gap repoll a second POLL followed (its RECOVERY is acted on)
        self.unproven = 0  # events after the device's newest seen, up to n: counted lost once proven
        self.proof_due = False  # a NO_EVENT(n) showed them, a HELLO answer of the same boot will prove them
        self.aheads = 0  # AHEAD answers (a POLL past the device's newest landed too early)
        self.past_newest = 0  # overrun recoveries started past n1
        self.taken_back = 0  # such skips taken back: the device had generated nothing more
        self._ahead_n1 = 0  # the device's newest in the last answer while past it (a stop shows)
        # the Losses of an overrun RECOVERY that took held frames (answered EVENTS): the gaps behind
        # them, and the overrun after them when they end before n0 (or the turnover skip past their
        # end: _skip_after_held); the caller records them in order
        self.gap_losses = []
        self.absorbed = 0  # overrun RECOVERYs that took held frames
        self.turnover_skips = 0  # of those, the ones that then started past the held frames' end

    def resume(self, tag, loss=None):
        """Start the tags at `tag`, and go on with `loss` as the open Loss (a caller restoring its
        stored state: the recovery phase it had not finished)."""
        self.tag = tag & 0xFF
        if loss is not None:
            self.loss = loss
            if not loss.ended and self.state == NORMAL:
                self.state = RECOVERY  # (restored, as the constructor restores n and the epoch)

    def on_probe(self):
        """A tail-loss probe timed out before the RTO: a transport error, not a silent round (the
        caller sends the same request again at once)."""
        self._fire(ON_TIMEOUT)
        self.transport_errors += 1

    def ask_gap(self):
        """A frame of the burst before the outstanding pipelined POLL went missing: the next request
        asks for the gap now (the pipelined POLL's answer is still taken or held when it comes)."""
        self.repoll = True

    def take_gap_losses(self):
        """The Losses an overrun RECOVERY that took held frames wrote since the last call, in order
        (the caller records them before the events of that answer)."""
        out = self.gap_losses
        self.gap_losses = []
        return out

    def next_request(self, max_events=wire.MAX_BATCH, max_bytes=wire.MAX_PAYLOAD, max_frames=1, hello=False):
        end = None
        if self.ahead is None:
            self.gap_tag = -1  # (a POLL from a predicted end keeps the gap repoll's tag before it)
        if self.held and self.ahead is None:
            gap = self._gap()
            if 0 < gap <= max_events:
                if self.pipeline and max_frames > 1 and self.polling and not (self.hello_due or hello):
                    # (not after a mispredicted answer: the gap's answer may be on its way, later than
                    # the second POLL's; asking for both again would bring both twice)
                    end = None if self.repoll else self._held_end(max_frames)
                max_events, max_frames = gap, 1  # just the gap: the held frames go on from it
        f = super().next_request(max_events, max_bytes, max_frames, hello)
        if f.type == wire.POLL:
            self.recent.append(self.tag)
            if len(self.recent) > RECENT_TAGS:
                self.recent.pop(0)
            if end is not None:
                self.ahead = end  # the caller sends the next POLL, from there, now (above)
                self.gap_ahead += 1
                self.gap_tag = self.tag
        return f

    def ahead_past_gap(self, max_frames):
        # Three in flight across an early gap: the gap was asked for while a pipelined POLL was out,
        # and that POLL's answer now arrives held behind the gap. Once the held frames run on from
        # the gap and the last of them tells where that burst ends (_held_end), the next POLL may
        # go from there at once (ahead; the gap's RECOVERY is still acted on: gap_tag). One per
        # gap. True: the caller sends it now. (docs/protocol.md 6.5)
        if self.ahead is not None or self.gap_tag >= 0 or not self.polling or self.hello_due:
            return False
        end = self._held_end(max_frames) if self.pipeline and self.held else None
        if end is None:
            return False
        self.ahead = end
        self.gap_tag = self.tag  # the outstanding request is the gap repoll
        self.gap_ahead += 1
        return True

    def _held_end(self, max_frames):
        # where the burst the held frames belong to ends: their run from the gap on, plus the last
        # one's backlog when the frames still due can carry it; None if that cannot be told
        if "predict_held_end" not in self.rules:
            return None
        held = self.held
        n = self.n
        k = min(held, key=lambda x: distance(x, n))
        seen = 0
        last = None
        end = n
        while True:
            f = held.get(k)
            if f is None:
                break
            p = f.payload
            if len(p) < wire.BATCH_HEAD or not p[0]:  # count u8, backlog u16 (messages.py)
                return None
            last = f
            end = (k + p[0] - 1) & 0xFFFFFFFF
            seen += 1
            k = succ(end)
        if last is None or seen != len(held):
            return None  # a second gap: one at a time
        p = last.payload
        backlog = (p[1] << 8) | p[2]
        if backlog > (max_frames - 1 - last.index) * p[0]:
            return None  # the burst will be cut short of the device's newest event
        return (end + backlog) & 0xFFFFFFFF

    def on_frame(self, frame):
        tag = frame.message_id
        if (
            self.unproven
            and frame.type == wire.NO_EVENT
            and tag == self.tag
            and frame.seq == self.n
            and self.polling
        ):
            # "the device holds n", or an empty ring answering any n: a boot that restarted since and
            # has generated nothing yet (NO_EVENT carries no epoch). The proof waits for a HELLO
            # answer that shows the same boot (asked now): boots only move on, and this NO_EVENT
            # answered a POLL sent after that boot's RECOVERY, so it came from that boot
            self.consecutive_errors = 0
            self.no_events += 1
            self.backlog = 0
            self.burst_done = True
            self.hello_due = True
            self.proof_due = True
            self._fire(ON_UNPROVEN)
            return (NOTHING, None)
        if frame.type != wire.EVENTS:
            if frame.type == wire.RECOVERY and tag == self.gap_tag and tag == self.prev_tag:
                # the gap repoll's answer (it asked from n): the gap was overwritten. Acted on as the
                # answer to n, though a second POLL went out after it (that one cannot fit n now)
                self.gap_tag = -1
                self.burst_done = True
                self.ahead = None
                return self._recovery(frame)
            return super().on_frame(frame)
        prev = self.prev_tag
        if tag != self.tag and tag != prev and tag in self.recent:
            # a frame of an earlier burst of ours (after a repoll): taken if it goes on from n
            result = self._events(frame)
        else:
            result = super().on_frame(frame)
        if result[0] == STALE and (tag == self.tag or tag == prev or tag in self.recent):
            if lt(succ(self.n), frame.seq):
                self._hold(frame)
                if tag == prev and prev >= 0:
                    self.prev_tag = prev  # the rest of that burst may be held too
        return result

    def _hold(self, frame):
        if self.fresh or len(self.held) >= MAX_HELD:
            return
        if distance(frame.seq, self.n) < 0x10000:  # within a ring's reach
            self.held[frame.seq] = frame

    def _gap(self):
        # events from s(n) up to the first held frame (0: nothing held ahead of n)
        n = self.n
        for k in [k for k in self.held if le(k, n)]:
            del self.held[k]  # n passed it: its events came another way
        if not self.held:
            return 0
        return min(distance(k, n) for k in self.held) - 1

    def _events(self, frame):
        result = super()._events(frame)
        if result[0] != EVENTS:
            return result
        if self.unproven:
            self._prove()  # events from s(n) of the old n: every one up to it was generated
        out = result[1]
        self.taken = [(frame, out)]
        held = self.held
        while held:
            nxt = held.pop(succ(self.n), None)
            if nxt is None:
                break
            backlog, recs = messages.decode_records(nxt.payload)
            if not recs:
                break
            more = [((nxt.seq + i) & 0xFFFFFFFF, r[0], r[1]) for i, r in enumerate(recs)]
            self.n = (nxt.seq + len(recs) - 1) & 0xFFFFFFFF
            self._took(len(recs), backlog)
            self.taken.append((nxt, more))
            out = out + more
            self.held_taken += 1
        return (EVENTS, out)

    def _prove(self, u=-1):
        # u (all by default) of the events after the newest seen up to n were generated: lost, in
        # the Loss that skipped them
        if u < 0 or u > self.unproven:
            u = self.unproven
        self.unproven -= u
        self.proof_due = False
        loss = self.loss
        if loss is not None and loss.lost is not None:
            loss.lost += u
            loss.skipped += u
            self.lost += u

    def _recovery(self, frame):
        if not self.polling or self.fresh:
            self.unproven = 0
            return super()._recovery(frame)
        n0, n1 = messages.decode_recovery(frame)
        epoch = messages.recovery_epoch(frame)
        if epoch != self.epoch:
            if epoch != self.left:  # (the boot before: a late answer, stale)
                self.unproven = 0  # a restart: the old boot may never have got that far
            return super()._recovery(frame)
        start = succ(self.n)
        if not lt(start, n0):
            if self.unproven and lt(n1, self.n):
                # our POLL from past the newest landed before the device got there: poll again.
                # What it generated since (up to n1) is lost now, the rest still unproven
                self.consecutive_errors = 0
                self.burst_done = True
                self.aheads += 1
                self._fire(ON_AHEAD)
                loss = self.loss
                last = self._ahead_n1
                self._ahead_n1 = n1
                if loss is not None and loss.lost is not None and n1 == last:
                    # nothing generated since the last answer (the skip's RECOVERY or an AHEAD): the
                    # device stopped, or is slower than one event per round trip. The skip is taken
                    # back to what its ring still holds: those events are no longer counted lost
                    start = n0 if lt(loss.n0, n0) else loss.n0
                    back = distance(n1, start) + 1
                    loss.lost -= back
                    loss.skipped -= back
                    self.lost -= back
                    self.unproven = 0
                    self.n = (start - 1) & 0xFFFFFFFF
                    self.taken_back += 1
                    return (AHEAD, n1)
                self._prove(self.unproven - distance(self.n, n1))
                return (AHEAD, n1)
            return super()._recovery(frame)
        c = self._chase()  # (before held frames are taken: taking them ends the chase)
        self._prove()  # n0 is past n: every event before it was generated
        self.consecutive_errors = 0
        follows = self._follows(frame)  # the events from n0 come in this burst: no skip at all
        # held frames first: what they carry is in hand, whatever the ring overwrote since; only the
        # gaps between them that end before n0 are gone (a gap reaching n0 the device still holds).
        # When the events from n0 follow, only frames that end before n0 (the rest come again)
        take = self.held and "take_held" in self.rules
        out, gaps = self._take_held(n0, follows) if take else (None, None)
        start = succ(self.n)
        if out is not None and not lt(start, n0):
            # they reach what the device holds: the gaps are the loss, nothing restarts (unless the
            # ring will have turned over past their end before our next POLL lands: below)
            skip = 0 if follows else self._skip_after_held(frame.message_id, start, n0, n1)
            if gaps:
                self._gap_loss(n0, n1, gaps).ended = le(n1, self.n) or skip > 0
            if skip > 0:
                # n: start + skip - 1
                loss = self._begin(OVERRUN, n0, n1, skip, distance(start, n0) + skip, ON_HELD)
                loss.skipped = skip
                self.turnover_skips += 1
                self.gap_losses.append(loss)
            elif gaps:
                self._fire(ON_HELD)
                if self.loss is not None and self.loss.ended:
                    self._fire(ON_N1)
            return (EVENTS, out)
        held = distance(n1, n0)
        skip = held * min(c, 3) // 4
        if self.turnover > skip:
            # past n1 (at most 4 rings) only in a chase: a RECOVERY after one with no event between
            # shows the ring turning over faster than a round trip. The first stays within 3/4 of
            # the held range (PollClient's cap): a device that stopped still has its ring to give
            cap = 4 * (held + 1) if c and "chase_past_n1" in self.rules else held * 3 // 4
            skip = min(self.turnover, cap)
            if skip == held + 1:
                # not onto n1 exactly: the whole ring skipped and nothing unproven, so a device that
                # stopped there would not have it taken back (AHEAD, above): one past n1 instead
                skip += 1
        if follows:
            skip = 0
        past = skip - held - 1 if skip > held + 1 else 0  # offsets after n1 skipped over
        if gaps:  # the gaps behind the held frames taken: Losses of their own (closed), then this one
            self._gap_loss(n0, n1, gaps).ended = True
        loss = self._begin(OVERRUN, n0, n1, distance(n0, start) + skip - past, skip, ON_OVERRUN)
        loss.skipped = skip - past
        loss.chase = c + 1
        self.unproven = past
        self.proof_due = False
        self._ahead_n1 = n1
        if past:
            self.past_newest += 1
        if out is not None:
            self.gap_losses.append(loss)  # the held frames' events, then polling from past n0 (above)
            return (EVENTS, out)
        return (RECOVER, loss)

    def _skip_after_held(self, tag, start, n0, n1):
        # Held frames an overrun RECOVERY took reach what the device held (start >= n0); but its ring
        # goes on turning over until our next POLL gets there: the events less than `turnover` past
        # n0 are gone by then, and the POLL from start would be answered with another RECOVERY a
        # round trip later. When no later POLL of ours is out (the RECOVERY answers the last one
        # sent: a POLL in flight from the held frames' end must still fit n), start that far past
        # n0 at once, within 3/4 of the rest of the held range (all generated: counted lost, exact)
        # (No skip when the held frames end at n1: the device generated nothing after them, and
        # distance() is unsigned: n1 - start would wrap to ~2^32 and skip past the newest event)
        if tag != self.tag or lt(n1, start) or "skip_past_held" not in self.rules:
            return 0
        return min(self.turnover - distance(start, n0), distance(n1, start) * 3 // 4)

    def _gap_loss(self, n0, n1, gaps):
        # the Losses of the gaps behind held frames an overrun RECOVERY took: one per gap, so that
        # every Loss covers one run of offsets, client_n + 1 .. client_n + lost (the frames between
        # the gaps are stored). gaps: [(first offset, count)] in order; returns the last Loss (all
        # but it ended). One recovery, however many gaps.
        if self.loss is not None:
            self.loss.ended = True
        loss = None
        for first, k in gaps:
            if loss is not None:
                loss.ended = True
            loss = self.loss = self.loss_type(OVERRUN, pred(first), n0, n1, self.epoch, k)
            self.lost += k
            self.gap_losses.append(loss)
        self.recoveries += 1
        return loss

    def _take_held(self, n0, follows=False):
        # The run of held frames from s(n) on whose gaps all end before n0 (gone from the ring): taken
        # (n moves to their end, `taken` lists them); returns (their events, the gaps as [(first
        # offset, count)]), or (None, []) when the first held frame's gap reaches into the ring.
        # follows: only frames that end before n0 (the burst brings the events from n0 again)
        held = self.held
        n = self.n
        for k in [k for k in held if le(k, n)]:
            del held[k]
        out = None
        gaps = []
        taken = []
        while held:
            k = None
            for x in held:
                if k is None or lt(x, k):
                    k = x
            if le(k, n):
                del held[k]  # overlaps what was just taken (frames of other sizes): its tail is lost
                continue
            if k != succ(n) and lt(n0, k):
                break  # the gap before it reaches into the ring: polled as usual
            p = held[k].payload
            if follows and (len(p) < wire.BATCH_HEAD or not lt(add(k, p[0] - 1), n0)):
                break  # reaches n0: it comes again in the burst
            f = held.pop(k)
            backlog, recs = messages.decode_records(f.payload)
            if not recs:
                break
            if k != succ(n):
                gaps.append((succ(n), distance(k, succ(n))))
            evs = [((k + i) & 0xFFFFFFFF, r[0], r[1]) for i, r in enumerate(recs)]
            n = add(k, len(recs) - 1)
            self.n = n
            self._took(len(recs), backlog)
            taken.append((f, evs))
            out = evs if out is None else out + evs
        if out is not None:
            self.taken = taken
            self.absorbed += 1
        return out, gaps

    def _begin(self, cause, n0, n1, lost, skip, event):
        self.held = {}
        self.recent = []
        return super()._begin(cause, n0, n1, lost, skip, event)

    def _hello(self, hello):
        e = hello.boot_epoch
        restarted = self.epoch is not None and e != self.epoch and e != self.left
        if restarted:
            self.held = {}
            self.recent = []
            self.unproven = 0
            self.proof_due = False
        result = super()._hello(hello)
        if self.proof_due and result[0] == HELLO:
            self._prove()  # the boot of the NO_EVENT(n) that waited for it: the device got to n
        return result
