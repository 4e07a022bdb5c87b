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
# Storage is one bytearray preallocated at construction: `capacity` slots of `stride` bytes, each
# holding the event exactly as it goes on the wire (channel u8, length u16, data), so a batch answer
# is a straight copy. From 32-byte slots the stride is a multiple of 4 (1 spare byte, RECORD_HEAD,
# slot_size rounded up to 4) with the record at byte 1 and its data word-aligned at byte 4: the
# native write copies words. Smaller slots keep RECORD_HEAD + slot_size, the record at byte 0 (the
# default 256 x 16 ring: 4,864 B, where a 64 KB board has no 256 B to spare; bytes are copied).
#
# The ring's state is one array('I') (_st, the _S* slots below), updated by one native call per
# write or batch and read by the native answer: the newest offset as 16-bit halves (hi, lo), so no
# int on the bytecode paths reaches 2^30, the small-int limit of 32-bit ports.
#
# Allocation on the device (checked with heap_lock and gc.mem_alloc on the unix port):
#   write(), answer_into(),        0 bytes.
#   answer_cobs()
#   respond()                      0 bytes but what its sender allocates: the rules of answering a
#                                  POLL (its burst and follow) once, for the firmware and the host.
#   newest()                       builds ints >= 2^30: a host/test convenience. The rest (append,
#                                  the answers as tuples: poll, poll_batch) is in ring_host.py: a
#                                  board loads none of it.
from leadwire import wire
from leadwire._compat import const, heap_lock, heap_unlock
from leadwire.bufcopy import copy_into
from leadwire.wire import BATCH_HEAD, MAX_BATCH, RECORD_HEAD

# the state's slots (_viper.py has the same numbers)
_SHEAD = const(0)  # slot of the newest event
_SHI = const(1)  # newest offset, high half (before the first event: s^-1(start))
_SLO = const(2)  # ... low half
_SN = const(3)  # events held, <= capacity
_SOVER = const(4)  # events pushed out by newer ones (saturates at 2^30 - 1): "overwritten"
_SCAP = const(5)  # capacity
_SSTRIDE = const(6)  # bytes a slot
_SD = const(7)  # distance newest - n from the last classify when below 2^16, else 0x10000
_SLHI = const(8)  # after an answer: the last offset it carried (halves) and how many events the
_SLLO = const(9)  # ring still holds after it -- what a burst answer (several frames to one POLL)
_SBACK = const(10)  # goes on from
_SEHI = const(11)  # the boot epoch this ring belongs to, as halves: RECOVERY answers carry it, so
# that a client can tell a restart from an overrun without another round trip
_SELO = const(12)
_SSLOT = const(13)  # the slot size
# 14, 15: the store's address (low and high 32 bits), kept by the native write (_viper.write)
_SREC = const(16)  # where a record starts in its slot: 1 (word-aligned data) or 0


# The module's names stay at 17 (each a slot of its globals table: one more doubles it, and on a
# 64 KB board that block was the one that did not fit while the agent boots); the write and the
# CRC table are the class's.
answer = None  # native: answer_cobs's EVENTS; else answer_into's bytecode and encode_into
try:
    from leadwire._viper import answer  # type: ignore[no-redef, assignment]
except (ImportError, SyntaxError, NotImplementedError, ValueError):  # ValueError: _viper.mpy refused
    pass

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
            from leadwire._compat import random_u32

            start = random_u32()
        start &= 0xFFFFFFFF
        self.capacity = capacity
        stride = RECORD_HEAD + slot_size
        if slot_size >= 32:
            stride = 4 + ((slot_size + 3) & ~3)
        self._store = bytearray(capacity * stride)
        before = (start - 1) & 0xFFFFFFFF  # the newest before the first event: s^-1(start)
        from array import array

        # the state's slots, _SHEAD.._SREC (14, 15: the store's address, the native write's),
        # made in one block: no garbage left in the heap the boot is laying out
        st = array("I", range(17))
        st[_SHEAD] = capacity - 1
        st[_SHI] = before >> 16
        st[_SLO] = before & 0xFFFF
        for i in range(_SN, 17):
            st[i] = 0
        st[_SCAP] = capacity
        st[_SSTRIDE] = stride
        st[_SEHI] = (epoch >> 16) & 0xFFFF
        st[_SELO] = epoch & 0xFFFF
        st[_SSLOT] = slot_size
        st[_SREC] = 1 if slot_size >= 32 else 0
        self._st = st
        # the write bound once (a 32-byte object): a call of r.write then finds it in the instance
        # and skips the class's lookup (~210 cycles of a ~3,600-cycle write on an RP2040)
        self.write = self.write

    # -- device hot path (allocation-free) --------------------------------------------------

    # write(payload, channel, length): append an event, payload[:length] (length 0..slot size and
    # channel 0..255, else ValueError). write_samples(payload, channel, n, count, start): append
    # `count` (0..capacity) events of n bytes (2..slot size) on `channel`: the i-th (from 0)
    # carries the u16 start + i (mod 2^16, big-endian), then payload[2:n] -- a sensor's samples
    # in one call (start -1: payload[:n] as it is); the ring ends exactly as after `count`
    # write() calls of those payloads, and the caller keeps to those bounds (the agent does: its
    # sensors are checked at boot). Both allocate nothing. On MicroPython where _viper loads,
    # write is a native function itself (one call, no bytecode frame) and write_samples one call
    # of it; elsewhere they are _twins' bytecode (the reference the native write is checked
    # against).
    TOO_LARGE = ValueError("event too large")  # what the native write raises
    # (answer_cobs's: an import there would allocate)
    from leadwire.crc16 import TABLE  # type: ignore[misc]

    try:  # (the COBS encoder from _viper: framing, which has it too, is ~2 KB more of a heap)
        from leadwire._viper import encode_into, write  # type: ignore[misc]

        def write_samples(self, d, channel, m, k, b):
            # through the native write: a negative length, -1 - (n | (start + 1) << 11), and
            # count - 1 above the channel's 8 bits (_viper.write). 20 events a call cost ~120
            # cycles each more than a native write_samples would, which would take ~1.2 KB more
            # of a board's heap.
            if k > 0:
                self.write(d, channel | ((k - 1) << 8), -1 - (m | ((b + 1) << 11)))

    except (ImportError, SyntaxError, NotImplementedError, ValueError):
        from leadwire._twins import encode_into, write, write_samples  # type: ignore[misc]

    def _classify(self, hi, lo):
        # Which spec 004 case a poll with n = (hi, lo) is; sets _st[_SD] = (newest - n) mod 2^32
        # when that is below 2^16 (else 0x10000), computed on halves.
        st = self._st
        dl = st[_SLO] - lo
        dh = st[_SHI] - hi
        if dl < 0:
            dl += 0x10000
            dh -= 1
        if dh & 0xFFFF:
            st[_SD] = 0x10000
            return RECOVERY if st[_SN] else NO_EVENT
        st[_SD] = dl
        if st[_SN] == 0 or dl == 0:
            return NO_EVENT
        if dl <= st[_SN]:
            return EVENT
        return RECOVERY

    def answer_into(self, buf, hi, lo, max_events, max_bytes, tag=0, index=0, follow=0):
        """Write the complete answer frame to a poll with n = (hi, lo) into buf; return its size.

        tag is the poll's message id, echoed so the client can match answer to request; index
        numbers the frames of a burst answer (0 for the first). A burst goes on from the last
        offset the answer carried (_st[_SLHI], _st[_SLLO]) while events remain (_st[_SBACK]).

        follow (the POLL asked for it and the burst has a frame left): a RECOVERY goes without
        F_LAST, with backlog = count and the last offset n0 - 1, so the burst goes on with the
        events from n0.

        EVENTS carries up to max_events consecutive events from s(n) within max_bytes of payload
        (and the room in buf); at least one event always goes. Allocates nothing."""
        kind = self._classify(hi, lo)
        self._st[_SBACK] = 0
        if kind == NO_EVENT:
            wire.put_header(buf, wire.NO_EVENT, wire.F_LAST, 0, 0, tag, index, 0, hi, lo)
            return wire.seal(buf, 0)
        if kind == RECOVERY:
            return self._recovery_into(buf, tag, index, follow)
        return self._events_into(buf, hi, lo, max_events, max_bytes, tag, index)

    def answer_cobs(self, buf, dst, hi, lo, max_events, max_bytes, tag, index, follow):
        """The answer of answer_into, COBS-encoded into dst with its delimiter (framing.encode_into,
        then a 0): returns the size in dst. dst holds max_encoded(len(buf)) + 1 bytes (None: the
        answer of answer_into, in buf). On
        MicroPython an EVENTS answer is built, CRC'd and encoded from the ring in one native pass
        (_viper.answer; buf then holds the header and the CRC only); the rest, and every answer
        where _viper does not load, is answer_into into buf, then encode_into: the reference
        the native pass is checked against. Allocates nothing."""
        if dst is None:  # (respond: a link whose frames go as they are)
            return self.answer_into(buf, hi, lo, max_events, max_bytes, tag, index, follow)
        if answer is not None:  # EVENTS natively (it classifies the poll: -1 when not EVENT)
            m = answer(hi, lo, tag, self._st, buf, dst, self.TABLE, max_events, max_bytes, index, len(buf))
            if m >= 0:
                return m
        m = self.answer_into(buf, hi, lo, max_events, max_bytes, tag, index, follow)
        m = EventRing.encode_into(buf, m, dst, 0)  # (through the class: not a bound method)
        dst[m] = 0
        return m + 1

    def respond(self, b, n, buf, max_bytes, d, L, a, dst=None):
        """Answer the POLL in b[:n] (n: the unsigned size, wire.POLL_SIZE, or POLL_BURST_SIZE with
        max_frames at byte 14, its top bit follow) with frames built in buf, each handed to
        d(L, buf, size, a) as soon as it is made (d returns 1 for a frame it dropped, else 0):
        up to max_frames, each from the last offset of the one before while the ring holds more;
        with follow a RECOVERY that leaves a frame goes on with the events from n0 (docs/
        protocol.md 4.2, 5). max_bytes: the link's payload budget (a POLL asking more gets it).
        dst given (a serial link whose frames go unsigned): the slot of L holding a buffer (or
        None) where each frame is built COBS-encoded with its delimiter (answer_cobs) and handed
        over as d(L, L[dst], size, a); read at each frame (a sender by DMA names the next free
        one there). The frames are
        one snapshot of the ring: no await in between. Returns the frames dropped, or -1 for a
        bad max_frames (not 1..32: nothing sent). Allocates nothing but what d does (an answer in
        bytecode is made with the heap locked: its frames go on the C stack; with dst an EVENTS
        answer is _viper.answer's, called here directly where it loads)."""
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
        st = self._st
        while True:
            c = None if dst is None else L[dst]  # read each frame: d may hand the link another
            m = -1
            if c is not None and answer is not None:  # EVENTS natively (answer_cobs's, one call less)
                m = answer(hi, lo, b[3], st, buf, c, self.TABLE, n, max_bytes, index, len(buf))
            if m < 0:
                heap_lock()
                try:
                    m = self.answer_cobs(buf, c, hi, lo, n, max_bytes, b[3], index, follow and index + 1 < f)
                finally:
                    heap_unlock()
            count += d(L, buf if c is None else c, m, a)
            index += 1
            if index == f or not st[_SBACK]:  # 0 unless EVENTS, or a RECOVERY going on (follow)
                return count
            hi = st[_SLHI]
            lo = st[_SLLO]

    def _recovery_into(self, buf, tag, index, follow):
        st = self._st
        back = st[_SN] - 1
        olo = st[_SLO] - back
        ohi = st[_SHI]
        if olo < 0:
            olo += 0x10000
            ohi = (ohi - 1) & 0xFFFF
        if follow:
            st[_SBACK] = st[_SN]  # the burst goes on from n0 - 1: all held
            if olo:
                st[_SLHI] = ohi
                st[_SLLO] = olo - 1
            else:
                st[_SLHI] = (ohi - 1) & 0xFFFF
                st[_SLLO] = 0xFFFF
        wire.put_header(buf, wire.RECOVERY, 0 if follow else wire.F_LAST, 0, 0, tag, index, 8, ohi, olo)
        buf[10] = st[_SHI] >> 8
        buf[11] = st[_SHI] & 0xFF
        buf[12] = st[_SLO] >> 8
        buf[13] = st[_SLO] & 0xFF
        buf[14] = st[_SEHI] >> 8
        buf[15] = st[_SEHI] & 0xFF
        buf[16] = st[_SELO] >> 8
        buf[17] = st[_SELO] & 0xFF
        return wire.seal(buf, 8)

    def _events_into(self, buf, hi, lo, max_events, max_bytes, tag, index):
        budget = len(buf) - wire.OVERHEAD
        if max_bytes < budget:
            budget = max_bytes
        if budget > wire.MAX_PAYLOAD:
            budget = wire.MAX_PAYLOAD
        if max_events > MAX_BATCH:
            max_events = MAX_BATCH
        st = self._st
        s = self._store
        stride = st[_SSTRIDE]
        cap = self.capacity
        k = st[_SD] - 1  # events after s(n) up to the newest
        slot = st[_SHEAD] - k
        if slot < 0:
            slot += cap
        pos = wire.HEADER_SIZE + BATCH_HEAD
        used = BATCH_HEAD
        taken = 0
        while k >= 0 and taken < max_events:
            p = slot * stride + st[_SREC]  # the record: channel, length, data
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
        st[_SLHI] = hi
        if llo > 0xFFFF:
            llo -= 0x10000
            st[_SLHI] = (hi + 1) & 0xFFFF
        st[_SLLO] = llo
        st[_SBACK] = k + 1
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
        return (self._st[_SHI] << 16) | self._st[_SLO]
