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
# A subclass, not part of PollClient: the board-sized heap that runs the core's tests on
# MicroPython has no room for the extra code, and no board needs it.
from leadwire import messages, wire
from leadwire.client import EVENTS, STALE, PollClient
from leadwire.u32 import distance, le, lt, succ

MAX_HELD = 64  # frames held ahead of a gap
RECENT_TAGS = 4  # POLL tags whose frames may be held


class HoldingPollClient(PollClient):
    def __init__(self, n=0, epoch=None, fresh=True):
        super().__init__(n, epoch, fresh)
        self.held = {}  # first offset -> EVENTS frame, all ahead of s(n)
        self.recent = []  # tags of the last RECENT_TAGS POLLs since a RECOVERY or restart
        self.taken = []  # (frame, events) the last EVENTS result came from
        self.held_taken = 0  # held frames taken after their gap was filled

    def next_request(self, max_events=wire.MAX_BATCH, max_bytes=wire.MAX_PAYLOAD, max_frames=1):
        if self.held and self.ahead is None:
            gap = self._gap()
            if 0 < gap <= max_events:
                max_events, max_frames = gap, 1  # just the gap: the held frames go on from it
        f = super().next_request(max_events, max_bytes, max_frames)
        if f.type == wire.POLL:
            self.recent.append(self.tag)
            if len(self.recent) > RECENT_TAGS:
                self.recent.pop(0)
        return f

    def on_frame(self, frame):
        tag = frame.message_id
        if frame.type != wire.EVENTS:
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
