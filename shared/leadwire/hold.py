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
# before). `gap_ahead` counts these second POLLs.
#
# A subclass, not part of PollClient: the board-sized heap that runs the core's tests on
# MicroPython has no room for the extra code, and no board needs it.
from leadwire import messages, wire
from leadwire.client import EVENTS, POLLING, STALE, PollClient
from leadwire.u32 import distance, le, lt, succ

MAX_HELD = 64  # frames held ahead of a gap
RECENT_TAGS = 6  # POLL tags whose frames may be held


class HoldingPollClient(PollClient):
    def __init__(self, n=0, epoch=None, fresh=True):
        super().__init__(n, epoch, fresh)
        self.held = {}  # first offset -> EVENTS frame, all ahead of s(n)
        self.recent = []  # tags of the last RECENT_TAGS POLLs since a RECOVERY or restart
        self.taken = []  # (frame, events) the last EVENTS result came from
        self.held_taken = 0  # held frames taken after their gap was filled
        self.gap_ahead = 0  # second POLLs sent with a gap repoll, from the held burst's end
        self.gap_tag = -1  # tag of the gap repoll a second POLL followed (its RECOVERY is acted on)

    def next_request(self, max_events=wire.MAX_BATCH, max_bytes=wire.MAX_PAYLOAD, max_frames=1):
        end = None
        if self.ahead is None:
            self.gap_tag = -1  # (a POLL from a predicted end keeps the gap repoll's tag before it)
        if self.held and self.ahead is None:
            gap = self._gap()
            if 0 < gap <= max_events:
                if self.pipeline and max_frames > 1 and self.state == POLLING and not self.hello_due:
                    # (not after a mispredicted answer: the gap's answer may be on its way, later than
                    # the second POLL's; asking for both again would bring both twice)
                    end = None if self.repoll else self._held_end(max_frames)
                max_events, max_frames = gap, 1  # just the gap: the held frames go on from it
        f = super().next_request(max_events, max_bytes, max_frames)
        if f.type == wire.POLL:
            self.recent.append(self.tag)
            if len(self.recent) > RECENT_TAGS:
                self.recent.pop(0)
            if end is not None:
                self.ahead = end  # the caller sends the next POLL, from there, now (above)
                self.gap_ahead += 1
                self.gap_tag = self.tag
        return f

    def _held_end(self, max_frames):
        # where the burst the held frames belong to ends: their run from the gap on, plus the last
        # one's backlog when the frames still due can carry it; None if that cannot be told
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

    def _begin(self, cause, n0, n1, lost, skip=0):
        self.held = {}
        self.recent = []
        return super()._begin(cause, n0, n1, lost, skip)

    def _hello(self, hello):
        restarted = self.epoch is not None and hello.boot_epoch != self.epoch
        if restarted:
            self.held = {}
            self.recent = []
        return super()._hello(hello)
