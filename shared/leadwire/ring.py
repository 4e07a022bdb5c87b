# Event ring with offsets (spec 004).
#
# The device numbers events with offsets mod 2^32, starting at a random offset after every boot,
# and keeps the last `capacity` events. A poll with offset n is answered:
#   case 1  event s(n) is held                     -> EVENT  (one, or a batch s(n), s(s(n)), ...)
#   case 2  event n is held and s(n) is not        -> NO_EVENT
#   case 3  otherwise                              -> RECOVERY(n0, n1), the oldest and newest held,
#                                                     with the boot epoch of this ring
# A burst POLL may ask the device to go on past a RECOVERY (follow): the RECOVERY then goes without
# F_LAST, and the burst goes on with the events from n0 (as if the client had polled n0 - 1: what
# it would do next, a round trip later, when the ring may have turned over again).
# An empty ring (just booted, nothing generated) answers NO_EVENT: it holds no n0..n1 to recover
# to, and spec 004 notes a restart is only detectable once the server has generated an event.
#
# Storage is one bytearray preallocated at construction: `capacity` slots of
# RECORD_HEAD + slot_size bytes, each holding the event exactly as it goes on the wire
# (channel u8, length u16, data), so a batch answer is a straight copy.
#
# Allocation on the device (checked with heap_lock and gc.mem_alloc on the unix port):
#   write(), answer_into()         0 bytes: offsets are kept as 16-bit halves (_hi, _lo), so no int
#                                  reaches 2^30, the small-int limit of 32-bit ports.
#   respond()                      0 bytes but what its sender allocates: the rules of answering a
#                                  POLL (its burst and follow) once, for the firmware and the host.
#   append(), newest()             build ints >= 2^30: host/test conveniences. The answers as tuples
#                                  (poll, poll_batch) are in ring_host.py: a board loads none of it.
from leadwire import wire
from leadwire._compat import const, heap_lock, heap_unlock, random_u32
from leadwire.bufcopy import copy_into
from leadwire.wire import BATCH_HEAD, MAX_BATCH, RECORD_HEAD

# The sensor's batch write loop: native code on MicroPython (_viper); the bytecode twin is defined
# only where that is missing (CPython, ports without a native emitter).
try:  # (on CPython importing _viper fails: no micropython module)
    from leadwire._viper import samples
except (ImportError, SyntaxError, NotImplementedError, ValueError):  # ValueError: _viper.mpy refused
    # (argument names as in _viper: each name a board loads is a qstr, even in code it never runs)
    def samples(s, h, n, c, k, channel, d, m, b):  # type: ignore[misc]
        # k records from slot h (stride n, c slots): channel, length m, the u16 b (+1 each), then
        # d[2:m]; b -1: d[:m] as it is. The bytecode twin of _viper.samples.
        while k > 0:
            p = h * n
            s[p] = channel
            s[p + 1] = m >> 8
            s[p + 2] = m & 0xFF
            if b < 0:
                copy_into(s, p + RECORD_HEAD, d, 0, m)
            else:
                s[p + 3] = (b >> 8) & 0xFF
                s[p + 4] = b & 0xFF
                copy_into(s, p + RECORD_HEAD + 2, d, 2, m - 2)
                b = (b + 1) & 0xFFFF
            h += 1
            if h == c:
                h = 0
            k -= 1


EVENT = const(1)
NO_EVENT = const(2)
RECOVERY = const(3)

MAX_CAPACITY = const(65535)
MAX_SLOT = const(2000)  # one event must fit in one frame: RECORD_HEAD + BATCH_HEAD + slot <= 2047


class EventRing:
    def __init__(self, capacity, start=None, slot_size=64, epoch=0):
        if not 1 <= capacity <= MAX_CAPACITY:
            raise ValueError("capacity")
        if not 0 <= slot_size <= MAX_SLOT:
            raise ValueError("slot_size")
        if start is None:
            start = random_u32()
        start &= 0xFFFFFFFF
        self.capacity = capacity
        self.slot_size = slot_size
        self._stride = RECORD_HEAD + slot_size
        self._store = bytearray(capacity * self._stride)
        # newest offset as halves; before the first event it is s^-1(start)
        before = (start - 1) & 0xFFFFFFFF
        self._hi = before >> 16
        self._lo = before & 0xFFFF
        self._head = capacity - 1  # slot of the newest event
        self.count = 0  # events held, <= capacity
        self.overwritten = 0  # events pushed out by newer ones (saturates below 2^30)
        self._d = 0  # distance newest - n from the last _classify (scratch, avoids a tuple)
        # after answer_into: the last offset the answer carried (halves) and how many events the
        # ring still holds after it -- what a burst answer (several frames to one POLL) goes on from
        self.last_hi = 0
        self.last_lo = 0
        self.backlog = 0
        # the boot epoch this ring belongs to, sent in RECOVERY answers so that a client can tell
        # a restart from an overrun without another round trip (kept as 4 bytes: no big int)
        self.epoch = bytes(((epoch >> 24) & 0xFF, (epoch >> 16) & 0xFF, (epoch >> 8) & 0xFF, epoch & 0xFF))

    # -- device hot path (allocation-free) --------------------------------------------------

    def write(self, payload, channel=0, length=-1):
        """Append an event (payload[:length], or all of it). Allocates nothing."""
        n = len(payload) if length < 0 else length
        if n > self.slot_size:
            raise ValueError("event too large")
        self.write_samples(payload, channel, n, 1, -1)

    def write_samples(self, payload, channel, n, count, start):
        """Append `count` (0..capacity) events of n bytes (2..slot size) on `channel`: the i-th
        (from 0) carries the u16 start + i (mod 2^16, big-endian), then payload[2:n] -- a
        sensor's samples in one call (start -1: one event, payload[:n] as it is: write()). The
        ring ends exactly as after `count` write() calls of those payloads. Allocates nothing;
        the byte loop is native code on MicroPython. The caller keeps to those bounds (the
        agent does: its sensors are checked at boot)."""
        cap = self.capacity
        f = self._head + 1  # the slot of the first
        if f == cap:
            f = 0
        h = self._head + count
        if h >= cap:
            h -= cap
        self._head = h
        h = self._lo + count
        if h > 0xFFFF:
            h -= 0x10000
            self._hi = (self._hi + 1) & 0xFFFF
        self._lo = h
        h = self.count + count - cap  # pushed out, when above 0
        if h <= 0:
            self.count += count
        else:
            self.count = cap
            if self.overwritten < 0x3FFFFFFF - h:
                self.overwritten += h
            else:
                self.overwritten = 0x3FFFFFFF
        samples(self._store, f, self._stride, cap, count, channel, payload, n, start)  # type: ignore[arg-type]

    def _classify(self, hi, lo):
        # Which spec 004 case a poll with n = (hi, lo) is; sets self._d = (newest - n) mod 2^32
        # when that is below 2^16 (else -1), computed on halves.
        dl = self._lo - lo
        dh = self._hi - hi
        if dl < 0:
            dl += 0x10000
            dh -= 1
        d = -1 if dh & 0xFFFF else dl
        self._d = d
        if self.count == 0 or d == 0:
            return NO_EVENT
        if 0 < d <= self.count:
            return EVENT
        return RECOVERY

    def answer_into(self, buf, hi, lo, max_events, max_bytes, tag=0, index=0, follow=0):
        """Write the complete answer frame to a poll with n = (hi, lo) into buf; return its size.

        tag is the poll's message id, echoed so the client can match answer to request; index
        numbers the frames of a burst answer (0 for the first). A burst goes on with
        (last_hi, last_lo) as the next n while backlog > 0.

        follow (the POLL asked for it and the burst has a frame left): a RECOVERY goes without
        F_LAST, with backlog = count and (last_hi, last_lo) = n0 - 1, so the burst goes on with
        the events from n0.

        EVENTS carries up to max_events consecutive events from s(n) within max_bytes of payload
        (and the room in buf); at least one event always goes. Allocates nothing.
        """
        kind = self._classify(hi, lo)
        self.backlog = 0
        if kind == NO_EVENT:
            wire.put_header(buf, wire.NO_EVENT, wire.F_LAST, 0, 0, tag, index, 0, hi, lo)
            return wire.seal(buf, 0)
        if kind == RECOVERY:
            return self._recovery_into(buf, tag, index, follow)
        return self._events_into(buf, hi, lo, max_events, max_bytes, tag, index)

    def respond(self, b, n, buf, max_bytes, d, L, a):
        """Answer the POLL in b[:n] (n: the unsigned size, wire.POLL_SIZE, or POLL_BURST_SIZE with
        max_frames at byte 14, its top bit follow) with frames built in buf, each handed to
        d(L, buf, size, a) as soon as it is made (d returns 1 for a frame it dropped, else 0):
        up to max_frames, each from the last offset of the one before while the ring holds more;
        with follow a RECOVERY that leaves a frame goes on with the events from n0 (docs/
        protocol.md 4.2, 5). max_bytes: the link's payload budget (a POLL asking more gets it).
        The frames are one snapshot of the ring: no await in between. Returns the frames
        dropped, or -1 for a bad max_frames (not 1..32: nothing sent). Allocates nothing but what
        d does (answer_into runs with the heap locked)."""
        f = b[14] if n == 17 else 1  # wire.POLL_BURST_SIZE (a module attribute is a lookup a POLL)
        follow = f >> 7
        f &= 0x7F
        if not 0 < f <= 32:  # wire.MAX_INDEX + 1
            return -1
        hi = (b[6] << 8) | b[7]  # wire.seq_hi, seq_lo in place (a call each otherwise)
        lo = (b[8] << 8) | b[9]
        n = (b[10] << 8) | b[11]  # max_events (n is free once the size is read)
        if (b[12] << 8) | b[13] < max_bytes:
            max_bytes = (b[12] << 8) | b[13]
        index = 0
        count = 0  # frames dropped
        while True:
            heap_lock()
            try:
                m = self.answer_into(buf, hi, lo, n, max_bytes, b[3], index, follow and index + 1 < f)
            finally:
                heap_unlock()
            count += d(L, buf, m, a)
            index += 1
            if index == f or not self.backlog:  # 0 unless EVENTS, or a RECOVERY going on (follow)
                return count
            hi = self.last_hi
            lo = self.last_lo

    def _recovery_into(self, buf, tag, index, follow):
        back = self.count - 1
        olo = self._lo - back
        ohi = self._hi
        if olo < 0:
            olo += 0x10000
            ohi = (ohi - 1) & 0xFFFF
        if follow:
            self.backlog = self.count  # the burst goes on from n0 - 1: all held
            self.last_hi = ohi
            self.last_lo = olo - 1
            if olo == 0:
                self.last_lo = 0xFFFF
                self.last_hi = (ohi - 1) & 0xFFFF
        wire.put_header(buf, wire.RECOVERY, 0 if follow else wire.F_LAST, 0, 0, tag, index, 8, ohi, olo)
        buf[10] = self._hi >> 8
        buf[11] = self._hi & 0xFF
        buf[12] = self._lo >> 8
        buf[13] = self._lo & 0xFF
        e = self.epoch
        buf[14] = e[0]
        buf[15] = e[1]
        buf[16] = e[2]
        buf[17] = e[3]
        return wire.seal(buf, 8)

    def _events_into(self, buf, hi, lo, max_events, max_bytes, tag, index):
        budget = len(buf) - wire.OVERHEAD
        if max_bytes < budget:
            budget = max_bytes
        if budget > wire.MAX_PAYLOAD:
            budget = wire.MAX_PAYLOAD
        if max_events > MAX_BATCH:
            max_events = MAX_BATCH
        s = self._store
        stride = self._stride
        cap = self.capacity
        k = self._d - 1  # events after s(n) up to the newest
        slot = self._head - k
        if slot < 0:
            slot += cap
        pos = wire.HEADER_SIZE + BATCH_HEAD
        used = BATCH_HEAD
        taken = 0
        while k >= 0 and taken < max_events:
            p = slot * stride
            size = RECORD_HEAD + ((s[p + 1] << 8) | s[p + 2])
            if taken and used + size > budget:
                break
            copy_into(buf, pos, s, p, size)
            pos += size
            used += size
            taken += 1
            k -= 1
            slot += 1
            if slot == cap:
                slot = 0
        # the last offset carried is n + taken; the first is s(n)
        llo = lo + taken
        self.last_hi = hi
        if llo > 0xFFFF:
            llo -= 0x10000
            self.last_hi = (hi + 1) & 0xFFFF
        self.last_lo = llo
        self.backlog = k + 1
        lo += 1
        if lo == 0x10000:
            lo = 0
            hi = (hi + 1) & 0xFFFF
        wire.put_header(buf, wire.EVENTS, wire.F_LAST, 0, 0, tag, index, used, hi, lo)
        buf[10] = taken
        buf[11] = (k + 1) >> 8
        buf[12] = (k + 1) & 0xFF
        return wire.seal(buf, used)

    # -- host / test conveniences (allocate) ---------------------------------------------

    def newest(self):
        """Offset of the newest event (or s^-1(start) before the first one)."""
        return (self._hi << 16) | self._lo

    def append(self, payload, channel=0):
        """Append and return the event's offset (an int: allocates above 2^30 on 32-bit ports)."""
        self.write(payload, channel)
        return self.newest()
