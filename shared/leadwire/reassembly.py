# Receiving side of the frame queue (spec 002): interleaved frames in, complete messages out.
# Host side (the device only sends multi-frame messages), so it lives apart from frames.py.


class Message:
    __slots__ = ("data", "is_close", "message_id", "priority")

    def __init__(self, message_id, priority, data, is_close=False):
        self.message_id = message_id
        self.priority = priority
        self.data = data
        self.is_close = is_close

    def __repr__(self):
        return "Message(%s%d p%d %d B)" % (
            "CLOSE " if self.is_close else "m",
            self.message_id,
            self.priority,
            len(self.data),
        )


class Reassembler:
    """Interleaved frames of one sender's channel in, complete messages out, in completion order.

    Memory is bounded: at most max_messages partial messages and max_bytes buffered. A frame that
    would exceed that, or arrives out of sequence within its message, is dropped with its message
    and counted in `dropped`; partial messages discarded by a close are counted in `abandoned`.
    """

    def __init__(self, max_messages=8, max_bytes=8192):
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self._partial = {}  # message_id -> [next_index, priority, list of chunks, size]
        self._bytes = 0
        self.dropped = 0
        self.abandoned = 0
        self.completed = 0

    @property
    def in_flight(self):
        return len(self._partial)

    @property
    def buffered(self):
        return self._bytes

    def _drop(self, mid):
        p = self._partial.pop(mid, None)
        if p is not None:
            self._bytes -= p[3]

    def feed(self, frame):
        """Take one frame; return a completed Message, a close Message, or None."""
        if frame.is_close:
            self.abandoned += len(self._partial)
            self._partial = {}
            self._bytes = 0
            return Message(frame.message_id, frame.priority, b"", True)
        mid = frame.message_id
        p = self._partial.get(mid)
        if p is None:
            if frame.index != 0:
                self.dropped += 1  # head of this message was lost or dropped
                return None
            if frame.last:
                self.completed += 1
                return Message(mid, frame.priority, bytes(frame.data))
            if len(self._partial) >= self.max_messages or self._bytes + len(frame.data) > self.max_bytes:
                self.dropped += 1
                return None
            self._partial[mid] = [1, frame.priority, [bytes(frame.data)], len(frame.data)]
            self._bytes += len(frame.data)
            return None
        if frame.index != p[0] or self._bytes + len(frame.data) > self.max_bytes:
            self._drop(mid)
            self.dropped += 1
            return None
        p[0] += 1
        p[2].append(bytes(frame.data))
        p[3] += len(frame.data)
        self._bytes += len(frame.data)
        if not frame.last:
            return None
        self._drop(mid)
        self.completed += 1
        return Message(mid, p[1], b"".join(p[2]))
