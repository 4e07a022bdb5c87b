# The event ring's answers as tuples (spec 004's three cases), and a POLL's whole burst as the
# firmware sends it (burst): a host-side view for the simulated devices (tools/simdevice.py), tests
# and the golden vectors (tests/vectors/make_vectors.py), never loaded on a board. Kept out of ring.py,
# whose every line of code is board heap: these four methods were 704 B of the unix port's 64 KB
# heap (tests/firmware/test_auth_cost.py), and no board calls them. Allocates freely.
from leadwire import codec, messages, wire
from leadwire.ring import EVENT, NO_EVENT, RECOVERY, EventRing
from leadwire.wire import BATCH_HEAD, MAX_BATCH, RECORD_HEAD


def _slot(i):
    # a read-only view of the ring's state slot i (EventRing._st; ring.py's _S* numbers)
    return property(lambda self: self._st[i])


class HostRing(EventRing):
    # the ring's state (EventRing._st) by name, for the host and the tests
    slot_size = _slot(13)
    count = _slot(3)
    overwritten = _slot(4)
    _hi = _slot(1)
    _lo = _slot(2)
    _head = _slot(0)
    _d = _slot(7)
    last_hi = _slot(8)
    last_lo = _slot(9)
    backlog = _slot(10)

    def write(self, payload, channel=0, length=-1):  # type: ignore[override]
        """EventRing.write with the host's defaults: channel 0, the whole payload."""
        EventRing.write(self, payload, channel, len(payload) if length < 0 else length)

    def append(self, payload, channel=0):
        """Append and return the event's offset."""
        self.write(payload, channel)
        return self.newest()

    def oldest(self):
        return (self.newest() - max(self.count, 1) + 1) & 0xFFFFFFFF

    def _event_at(self, back):
        # the event `back` places before the newest: (channel, payload)
        slot = (self._head - back) % self.capacity
        p = slot * self._st[6] + self._st[16]  # the record: channel, length, data (ring._SSTRIDE, _SREC)
        n = (self._store[p + 1] << 8) | self._store[p + 2]
        return self._store[p], bytes(self._store[p + RECORD_HEAD : p + RECORD_HEAD + n])

    def poll(self, n):
        """(EVENT, offset, payload) | (NO_EVENT, n) | (RECOVERY, n0, n1) for a poll with offset n."""
        answer = self.poll_batch(n, 1)
        if answer[0] != EVENT:
            return answer
        return (EVENT, answer[1], answer[2][0][1])

    def poll_batch(self, n, max_events=MAX_BATCH, max_bytes=wire.MAX_PAYLOAD):
        """Like poll, but case 1 answers (EVENT, first_offset, [(channel, payload), ...])."""
        n &= 0xFFFFFFFF
        kind = self._classify(n >> 16, n & 0xFFFF)
        if kind == NO_EVENT:
            return (NO_EVENT, n)
        if kind == RECOVERY:
            return (RECOVERY, self.oldest(), self.newest())
        out = []  # type: list[tuple[int, bytes]]
        used = BATCH_HEAD
        back = self._d - 1
        while back >= 0 and len(out) < min(max_events, MAX_BATCH):
            ch, data = self._event_at(back)
            size = RECORD_HEAD + len(data)
            if out and used + size > min(max_bytes, wire.MAX_PAYLOAD):
                break
            out.append((ch, data))
            used += size
            back -= 1
        return (EVENT, (n + 1) & 0xFFFFFFFF, out)

    def burst(self, n, max_events, max_bytes, tag=0, max_frames=1, follow=False):
        """The frames answering POLL(n) (docs/protocol.md 4.2), as firmware/lwagent.py sends them:
        EventRing.respond on that POLL's bytes, each frame kept as it is handed over."""
        req = codec.encode(messages.poll_frame(n, max_events, max_bytes, tag, max_frames, follow))
        out = []

        def keep(L, buf, m, a):
            out.append(bytes(buf[:m]))
            return 0

        buf = bytearray(wire.OVERHEAD + wire.MAX_PAYLOAD)
        self.respond(req, len(req), buf, wire.MAX_PAYLOAD, keep, None, None)
        return out
