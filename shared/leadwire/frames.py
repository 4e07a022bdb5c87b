# Priority frame queue and reassembly (spec 002).
#
# One FrameQueue per communication channel. post() fragments a message into frames of at most
# frame_size bytes and inserts them after every frame of equal or higher priority (FIFO within a
# priority) and before every frame of lower priority -- except the frame at the head of the
# queue, which is pinned (it may already be on the wire). close(priority) lets messages of higher
# priority, and earlier ones of the same priority, finish; lower-priority messages still queued
# are abandoned (their pinned head frame, if any, still goes; the receiver drops the partial).
#
# Spec 002's worked example: A (p0, 3 frames) then B (p5, 2 frames) -> A1 B1 B2 A2 A3; a close
# with p3 in that state -> A1 B1 B2 CLOSE.
#
# The receiving side is reassembly.py (host only, so the device does not load it).
# Allocation: post() and close() build Frame objects and list entries (control path: reports,
# alarms); the polled event path does not use this module. post() holds one copy of a message (none
# when it is bytes already): a one-fragment message is that object, the fragments of a longer one
# are memoryviews into it, not copies of its pieces.
from leadwire._compat import const

MAX_FRAGMENTS = const(32)  # the wire's 5-bit fragment index


class QueueClosed(Exception):
    """post() or close() on a queue whose close was already requested (a local error)."""


class Frame:
    __slots__ = ("data", "index", "is_close", "last", "message_id", "priority")

    def __init__(self, message_id, index, last, priority, data, is_close=False):
        self.message_id = message_id
        self.index = index
        self.last = last
        self.priority = priority
        self.data = data
        self.is_close = is_close

    def __eq__(self, other):
        return isinstance(other, Frame) and (
            self.message_id,
            self.index,
            self.last,
            self.priority,
            self.data,
            self.is_close,
        ) == (other.message_id, other.index, other.last, other.priority, other.data, other.is_close)


class FrameQueue:
    def __init__(self, frame_size):
        if frame_size < 1:
            raise ValueError("frame_size")
        self.frame_size = frame_size
        self._frames = []
        self._next_id = 0
        self.closing = False  # a close was requested; no more posts
        self.closed = False  # the close frame has been popped

    def __len__(self):
        return len(self._frames)

    def _insert_at(self, priority):
        # First position after the pinned head whose frame has lower priority; else the end.
        fr = self._frames
        for i in range(1, len(fr)):
            if fr[i].priority < priority:
                return i
        return len(fr)

    def post(self, data, priority=0):
        """Fragment and queue a message; returns its message id (0..255, wrapping)."""
        if self.closing:
            raise QueueClosed("closed")
        if not 0 <= priority <= 15:
            raise ValueError("priority")
        data = bytes(data)
        size = self.frame_size
        count = max(1, (len(data) + size - 1) // size)
        if count > MAX_FRAGMENTS:
            raise ValueError("too large")
        mid = self._next_id
        self._next_id = (mid + 1) & 0xFF
        if count == 1:  # the message as it is: a slice would copy it again
            new = [Frame(mid, 0, True, priority, data)]
        else:  # views into the one copy of the message, not copies of its pieces (a device keeps
            # a report's fragments for resends: at 64K, copies cost ~1 KB per report in flight)
            mv = memoryview(data)
            new = [
                Frame(mid, i, i == count - 1, priority, mv[i * size : (i + 1) * size]) for i in range(count)
            ]
        at = self._insert_at(priority)
        self._frames[at:at] = new
        return mid

    def close(self, priority=0):
        """Queue a close request; returns the ids of the messages it abandons."""
        if self.closing:
            raise QueueClosed("closed")
        fr = self._frames
        abandoned = []
        keep = fr[:1]
        for f in fr[1:]:
            if f.priority < priority:
                if f.message_id not in abandoned:
                    abandoned.append(f.message_id)
            else:
                keep.append(f)
        if fr and fr[0].priority < priority and not fr[0].last and fr[0].message_id not in abandoned:
            abandoned.append(fr[0].message_id)  # its pinned head still goes, the rest does not
        self._frames = keep
        at = self._insert_at(priority)
        self._frames.insert(at, Frame(self._next_id, 0, True, priority, b"", True))
        self.closing = True
        return abandoned

    def pop(self):
        """The next frame to transmit, or None."""
        if not self._frames:
            return None
        f = self._frames.pop(0)
        if f.is_close:
            self.closed = True
        return f

    def peek(self):
        return self._frames[0] if self._frames else None

    def reopen(self):
        """Start accepting messages again after a close (a new session on the channel)."""
        self._frames = [f for f in self._frames if not f.is_close]
        self.closing = False
        self.closed = False
