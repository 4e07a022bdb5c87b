# The leadwire device agent: event ring (spec 004), push sessions (spec 003) through one outgoing
# FrameQueue per link (spec 002), synthetic sensor / health / alarm sources, UDP and serial links.
# lwboot.build() makes the config list and the links from config.json; main.py runs the agent.
#
# Memory: every name a module defines is a qstr that stays for good (~30 B each on a 64-bit port,
# and past ~300 of them the interpreter adds a 3.6 KB pool), so links, sessions and settings are
# lists indexed by const() names, which cost nothing. The push-session modules (frames, reports:
# ~4.7 KB) are loaded on the first SUBSCRIBE: a board that is only polled never pays for them.
#
# Allocation (checked on the unix port with gc.mem_alloc deltas and heap_lock, tests/firmware):
#   0 bytes  emit() (ring write + report accumulation), POLL answers (bursts too) and HELLO
#            answers, serial receive (readinto + COBS scan) and send (COBS encode + write(buf, off, n)
#            until the whole frame is taken), the loops when idle.
#   UDP      recvfrom() allocates the datagram and the peer address (~160 B on 64-bit) and each
#            sendto() slice a memoryview (~32 B): per datagram, not per event.
#   control  SUBSCRIBE, report build / post / ACK, NOTIFY fragments (Frame objects, kept after
#            sending for the identical resend), health (gc.collect), exceptions.
#   auth     with a key, every frame received is verified and every frame sent is
#            signed: the HMAC allocates per frame (auth.py: two sha256 objects and digests), never
#            per event; emit() stays 0 B.
#
# Authentication (config "key"; lwboot decides, auth.py is the protocol): each link has an
# auth.Endpoint, reached through lwauth's list of its bound methods (L[_EP], None with "auth":
# false: this module names none of them, so a board without a key pays no qstr for them). A HELLO
# request starts a session (answered at once with the signed HELLO carrying the session K); every
# other frame must verify before it is acted on (forged, replayed, unsigned: refused, not
# answered, counted in the health record, no alarm); every frame sent is signed (poll answers and
# each frame of a burst, HELLO answers and the boot HELLO, ACKs, NOTIFY fragments and their
# resends: the trailer is per transmission). The payload budget of every frame (L[_LIM]) leaves
# room for the 8-byte trailer within the link's frame size. With auth off, a signed frame is a
# bad frame.
import asyncio
import gc
import time

# heap_lock around the ring's calls, and on a serial link without auth around a received frame's
# whole answer (the scan, device.respond, the ring's answer, _send's COBS encode and UART write:
# 0 bytes, proven by the tests): a bytecode call whose frame is over 11 words (MicroPython's
# VM_MAX_STATE_ON_STACK: write_samples, answer_into, respond, _send) takes it from the GC heap and
# frees it on return unless the heap is locked, when it goes on the C stack instead. Net 0 bytes
# either way, but the heap search costs: on the emulated Pico (rp2, 246 KB heap) a ring write
# took 64,145 cycles unlocked against 11,444 locked (bench/pico_bench.py, docs/design/board-hot-path.md),
# a call 3,558 against 1,682. The lock is released in `finally`; a stream a serial link writes to
# must not allocate in write(buf, off, n) (machine.UART and FileIO do not).
from micropython import const, heap_lock, heap_unlock

from leadwire import device as dv
from leadwire import wire
from leadwire.device import hello, respond
from leadwire.framing import encode_into, scan

_RX = const(136)  # largest frame accepted (a SUBSCRIBE of up to 115 channels, signed)
_FAST = const(200)  # events per pass of a sensor with hz 0 (as fast as it can: benchmarks)
_STALL = const(100)  # 1 ms waits a serial frame may spend on writes that took nothing before it is
# dropped (rp2's write() itself waits while bytes drain: it takes nothing only when its TX ring is
# full on entry; a UART frees a byte every ~1 ms even at 9600 baud: a line that stalls is stuck)
# Records are lists indexed by these names: the same `_NAME = const(n)` lines in every module that
# indexes them (lwboot builds the settings, links and sensors; lwauth the auth list), and
# tests/firmware/test_records.py fails if two files disagree about a name.
# settings, k (lwboot.SPEC order; 0 and 1 are the ring's capacity and slot size)
_TICK = const(2)
_HCH = const(3)
_HMS = const(4)
_ACH = const(5)
_APRIO = const(6)
_AMS = const(7)
_AGAP = const(8)
_RMS = const(9)
_RBYTES = const(10)
_RTO = const(11)
_RPRIO = const(12)
_CPRIO = const(13)
_NBOOT = const(14)  # the boot count
_KEY = const(15)  # the auth key lwboot read (None: auth off), dropped by lwauth.setup
_WDT = const(16)  # the machine.WDT lwboot started (None: off)
_CHANS = const(17)  # the channels a SUBSCRIBE may name: the sources', health, alarms, and the
# application's (Agent.channel adds them); Agent() appends it
# health values and counters (the first 8 are the health record, device.health_into)
_BOOTS = const(0)
_CAUSE = const(1)
_UP = const(2)
_FREE = const(3)
_LOW = const(4)
_OVER = const(5)
_DROP = const(6)
_BAD = const(7)
_OVERFLOW = const(8)  # events that found a report body full (they are still in the ring)
_ALARMS = const(9)
_ALAST = const(10)  # ticks_ms of the last bad-frame alarm
_RESTARTS = const(11)  # failed passes of a task (sources, wlan.keep): a record of its own once
# not 0 (2 bytes: health_into(ev, h, _RESTARTS, 1))
# with auth on: auth rejects summed over the links at each health record (lwauth.rejects), and
# sent after it as a record of its own (health_into(ev, h, _FORGED): 6 bytes)
_FORGED = const(12)
_REPLAYED = const(13)
_UNSIGNED = const(14)
_NHEALTH = const(12)  # the health list's length (auth off)
_NHEALTH_AUTH = const(15)  # (auth on)
# a link (lwboot.link builds it)
_IO = const(0)  # socket or stream
_UDP = const(1)
_TX = const(2)  # frame buffer (a memoryview when links share one)
_MV = const(3)  # memoryview of _TX
_Q = const(4)  # FrameQueue (made on the first SUBSCRIBE)
_GAP = const(5)  # ms between queued frames (models the link's bandwidth)
_NEXT = const(6)
_SUBS = const(7)  # channel -> session
_OWN = const(8)  # message id -> session
_RAW = const(9)  # recorded fragments to send again (timeouts)
_PEER = const(10)  # UDP: where reports go (the subscriber)
_HELLO = const(11)
_RB = const(12)  # serial: read chunk, COBS buffer, stream decoder
_CB = const(13)
_DEC = const(14)
_EP = const(15)  # lwauth.link(): the endpoint's bound methods, or None (auth off)
_LIM = const(16)  # payload budget of a frame: link frame size - overhead (- auth trailer)
_LASTP = const(17)  # messages.poll_key of the last POLL answered (a copy is not answered twice)
_READY = const(2)  # framing.scan's state (StreamDecoder.st): held, overflow, ready, size, end
_STOP = const(4)
# what leadwire.device.respond returns besides the frames dropped (>= 0)
_R_BAD = const(-1)
_R_OTHER = const(-4)
# a push session (one per subscribed channel on a link)
_RS = const(0)  # ReportSequence
_BODY = const(1)  # report body being accumulated (count, backlog 0, records)
_END = const(2)
_K = const(3)  # records in the report awaiting its ACK (0: none)
_SENT = const(4)  # its fragments (frames.Frame) as sent: the identical resend
_DEAD = const(5)  # ticks_ms deadline of its ACK; None while fragments are queued
_DUE = const(6)  # ticks_ms when the next report may be built
_CH = const(7)
_PRIO = const(8)
_EVERY = const(9)
# a sensor (lwboot builds it): channel, period us, size, due (ticks_us), sample number, payload,
# reader (None: synthetic, the sample number and filler; else a config-declared source, lwsrc:
# reader(payload) -> bytes read into it, one reading per period)
_SCH = const(0)
_SPER = const(1)
_SSIZE = const(2)
_SDUE = const(3)
_SNUM = const(4)
_SBUF = const(5)
_SREAD = const(6)


# lwauth.link() builds it: verify, sign_into, device_hello, device_sign_hello, rejects, epoch hi,
# epoch lo, endpoint, hint (the responder uses the others)
_ASIGN = const(1)
_AREJ = const(4)
# frames (leadwire.wire; test_records checks these copies against wire and frames the core encodes)
_TYPE_BITS = const(0x1F)  # byte 0: the frame type (wire.frame_type)
_AUTH_BIT = const(0x20)  # byte 1: wire.F_AUTH << 4, a signed frame
_CH_AT = const(2)  # the channel byte
_TAG_AT = const(3)  # the message id byte: a request's tag, which its answer echoes (wire.tag)
_AUTH_SIZE = const(8)  # wire.AUTH_SIZE: the trailer of a signed frame
_ACK_SIZE = const(14)  # wire.ACK_SIZE


_dma = None  # rp2, serial "dma": lwdma.send, the serial transmit (start() takes it from the board)


def _send(L, b, n, a):
    # b[:n] to address a (UDP) or down the serial line, signed first when the link has auth (a
    # frame already signed, the HELLO, goes as it is); returns 1 for a dropped frame
    A = L[_EP]
    if A is not None and not b[1] & _AUTH_BIT:
        n = A[_ASIGN](b, n)
    try:
        if L[_UDP]:
            L[_IO].sendto(L[_MV][:n] if b is L[_TX] else b, a)
        elif _dma is not None:  # COBS-encoded into a buffer the DMA sends from (lwdma)
            return _dma(L, b, n)
        else:
            cb = L[_CB]
            m = n  # b is cb: a frame the ring built COBS-framed (EventRing.respond with cb)
            if b is not cb:
                m = encode_into(b, n, cb, 0) + 1
                cb[m - 1] = 0
            io = L[_IO]
            p = t = 0
            while p < m:
                # the whole frame: a UART may take part of it (rp2: a full TX ring and timeout 0
                # answer a short count after ~1 ms) or nothing (None). write(buf, off, len) takes
                # the buffer as it is and returns a small int: no allocation, however many calls
                w = io.write(cb, p, m - p)
                if w:
                    p += w
                else:  # nothing went: wait for the line to drain, at most _STALL ms a frame
                    t += 1
                    if t > _STALL:
                        return 1  # a stuck line: the rest of the frame is dropped (counted)
                    time.sleep_ms(1)
        return 0
    except OSError:
        return 1


class Agent:
    def __init__(self, k, ring, sensors, links, board):
        self.k = k
        self.sensors = sensors
        self.links = links
        self.ring = ring
        self.ev = bytearray(24)  # scratch payload: health and alarm records
        h: list = [0] * (_NHEALTH_AUTH if links and links[0][_EP] is not None else _NHEALTH)
        h[_BOOTS] = k[_NBOOT]
        h[_CAUSE] = board.reset_cause()
        h[_LOW] = gc.mem_free()
        h[_ALAST] = time.ticks_add(time.ticks_ms(), -k[_AGAP])
        self.h = h
        self.tasks: list = []  # main.py keeps the asyncio tasks here
        k.append([s[_SCH] for s in sensors] + [k[_HCH], k[_ACH]])  # k[_CHANS]
        self.pushing = 0  # push sessions on all links

    def emit(self, channel, data, n):
        """One event: into the ring, and into the report body of every session on its channel."""
        heap_lock()
        try:
            self.ring.write(data, channel, n)
        finally:
            heap_unlock()
        if not self.pushing:  # no push session on any link: the ring is all (the fast path)
            return
        for L in self.links:
            s = L[_SUBS].get(channel)
            if s is not None:
                e = dv.record_into(s[_BODY], s[_END], channel, data, n)
                if e < 0:
                    self.h[_OVERFLOW] += 1
                else:
                    s[_END] = e
                    if not s[_EVERY] and not s[_K] and not L[_Q].closing:
                        self._post(L, s, s[_BODY][0])  # alarms go at once (allocates: rare)

    def channel(self, channel):
        """Declare an application's channel: a SUBSCRIBE may name it (its events are reported)."""
        if channel not in self.k[_CHANS]:
            self.k[_CHANS].append(channel)

    def alarm(self, status, data):
        self.h[_ALARMS] += 1
        self.emit(self.k[_ACH], self.ev, dv.alarm_into(self.ev, status, data))

    def _bad(self):
        h = self.h
        h[_BAD] += 1
        now = time.ticks_ms()
        if time.ticks_diff(now, h[_ALAST]) >= self.k[_AGAP]:
            h[_ALAST] = now
            self.alarm(1, h[_BAD])  # messages.ALARM_BAD_FRAME

    def _rx(self, L, b, n, a, m):
        # what device.respond made of the frame in b[:n] (m, not 0: the io loop's fast path is
        # 0, answered with nothing dropped), from a (UDP) or None (serial): the frames dropped, a
        # bad frame, the push sessions' frames (a copy, or refused by auth: nothing to do here)
        if m > 0:
            self.h[_DROP] += m
        elif m == _R_BAD:
            self._bad()
        elif m == _R_OTHER:
            if b[1] & _AUTH_BIT:
                n -= _AUTH_SIZE  # verified: the frame as if unsigned
            t = b[0] & _TYPE_BITS
            if t == wire.ACK and n == _ACK_SIZE:
                self._ack(L, b[_CH_AT], (wire.seq_hi(b) << 16) | wire.seq_lo(b), dv.u16(b, 0))
            elif t == wire.SUBSCRIBE and dv.subscribe_channels(b, n) is not None:
                self._sub(L, dv.subscribe_channels(b, n), a, b[_TAG_AT])
            else:
                self._bad()

    def _sub(self, L, chs, a, tag):
        # a new session (spec 003) for each listed channel this board has; an empty list ends
        # them all and closes the queue with the configured priority (spec 002)
        from leadwire.reports import ReportSequence

        k = self.k
        if L[_Q] is None:
            from leadwire.frames import FrameQueue

            L[_Q] = FrameQueue(L[_LIM])
        L[_PEER] = a
        L[_SUBS] = {}
        L[_RAW] = []
        for ch in chs:
            if ch in k[_CHANS]:
                rs = ReportSequence()
                rs.begin()
                s = [rs, bytearray(k[_RBYTES]), 3, 0, None, None, 0, ch, k[_RPRIO], k[_RMS]]  # _RS.._EVERY
                if ch == k[_ACH]:
                    s[_PRIO] = k[_APRIO]
                    s[_EVERY] = 0
                L[_SUBS][ch] = s
        self.pushing = 0
        for x in self.links:
            self.pushing += len(x[_SUBS])
        tx = L[_TX]
        self.h[_DROP] += _send(L, tx, dv.ack_into(tx, 0, tag, 0, 0, 200), a)
        if not chs and not L[_Q].closing:
            L[_Q].close(k[_CPRIO])

    def _ack(self, L, ch, number, status):
        s = L[_SUBS].get(ch)
        if s is None or not s[_K] or number != s[_RS].number:
            return  # not for a report awaiting confirmation: a late or duplicated ACK
        if s[_RS].confirm(status):
            s[_END] = dv.records_drop(s[_BODY], s[_END], s[_K])
            s[_K] = 0
            s[_DUE] = time.ticks_add(time.ticks_ms(), s[_EVERY])
        else:
            # a fault (R0802): same number, the report rebuilt; after 413 with half the events
            n = s[_K]
            self._post(L, s, max(1, n // 2) if status == 413 else n)

    def _post(self, L, s, n):
        body = dv.report_body(s[_BODY], n)
        s[_RS].hold(body)
        s[_K] = n
        s[_SENT] = []
        s[_DEAD] = None
        L[_OWN][L[_Q].post(body, s[_PRIO])] = s

    def _step(self, L, now):
        # reports due or timed out, then at most one queued frame (paced by the link's gap)
        subs = L[_SUBS]
        for ch in subs:
            s = subs[ch]
            if s[_K]:
                d = s[_DEAD]
                if d is not None and time.ticks_diff(now, d) >= 0:
                    s[_RS].timeout()  # no answer (R0802): the identical bytes, same number
                    for f in s[_SENT]:
                        L[_RAW].append((s, f))
                    s[_DEAD] = time.ticks_add(now, self.k[_RTO] + L[_GAP] * len(s[_SENT]))
            elif s[_BODY][0] and not L[_Q].closing and time.ticks_diff(now, s[_DUE]) >= 0:
                self._post(L, s, s[_BODY][0])
        if time.ticks_diff(now, L[_NEXT]) < 0:
            return
        q = L[_Q]
        f = q.peek()
        h = self.h
        if L[_RAW] and (f is None or f.priority <= self.k[_RPRIO]):
            s, f = L[_RAW].pop(0)  # a resend: the same fragment, number and channel again
        elif f is not None:
            q.pop()
            s = L[_OWN].get(f.message_id)
        else:
            return
        n = s[_RS].number if s else 0
        tx = L[_TX]
        m = dv.fragment_into(tx, s[_CH] if s else 0, n >> 16, n & 0xFFFF, f)
        h[_DROP] += _send(L, tx, m, L[_PEER])
        if f.is_close:
            q.reopen()
            L[_OWN] = {}
        elif s and L[_OWN].get(f.message_id) is s:
            s[_SENT].append(f)  # kept for an identical resend (R0802)
            if f.last:
                s[_DEAD] = time.ticks_add(now, self.k[_RTO])
                del L[_OWN][f.message_id]
        L[_NEXT] = time.ticks_add(now, L[_GAP])

    async def io(self, L=None):
        # Serve a link (None: every link, one task each beyond the first, which this one serves):
        # the task waits in asyncio's poller on the link's socket or stream and is woken by data
        # (the rp2 UART's RX interrupt wakes the core from its WFE): no tick, 0 cycles while idle.
        # (`yield` of the poller's queue_read is what asyncio's own stream readers await.)
        # Each frame received goes to the core's responder (device.respond: auth, the copy rule,
        # POLL, HELLO); what it leaves goes to _rx. On a serial line without auth a POLL is 0
        # bytes from the scan to the UART write, and is made with the heap locked: the calls'
        # bytecode frames then go on the C stack, not the heap (1,900 cycles a call less on rp2).
        if L is None:
            for L in self.links[1:]:
                self.tasks.append(asyncio.create_task(self.io(L)))
            L = self.links[0]
        h = self.h
        ring = self.ring
        obj = L[_IO]
        udp = L[_UDP]
        A = L[_EP]
        rb = L[_RB]
        if not udp:
            f = L[_DEC].frame  # the decoder's frame buffer and its state (framing.scan)
            st = L[_DEC].st
            # a UART reads only what it holds (any()): readinto(rb) would wait for rb's rest, on
            # rp2 until the inter-character timeout (at least 1 ms, counted in whole ticks: 1-2 ms
            # after a POLL's last byte, the line idle meanwhile); a pty (unix) returns what it has
            ready = getattr(obj, "any", None)
        wait = asyncio.core._io_queue.queue_read  # type: ignore[attr-defined]
        # a serial link without auth sending by DMA: the responder hands its frames to lwdma.send
        # itself (_send would only pass them on: ~3,000 cycles a frame on an RP2040)
        tx = _dma if _dma is not None and A is None and not udp else _send
        while True:
            yield wait(obj)  # type: ignore[misc]
            try:
                if udp:
                    d, a = obj.recvfrom(_RX)
                    n = len(d)
                    m = _R_BAD if wire.check(d, n) else respond(L, d, n, a, ring, _send)
                    if m:
                        self._rx(L, d, n, a, m)
                    continue
                n = (obj.readinto(rb, ready()) if ready else obj.readinto(rb)) or 0
                st[_STOP] = n  # (framing.scan's end of the bytes in rb)
                p = 0
                while p < n:
                    heap_lock()  # 0 bytes: the scan (native: one call), and auth off the answer
                    try:
                        p = scan(rb, p, f, st)  # type: ignore[arg-type]  # ptr32: an array
                        k = st[_READY]  # > 0: a checked frame of k bytes in f; < 0: a bad one
                        m = respond(L, f, k, None, ring, tx) if k > 0 and A is None else 0
                    finally:
                        heap_unlock()
                    if k > 0 and A is not None:  # signed: the HMAC allocates
                        m = respond(L, f, k, None, ring, _send)
                    if m:
                        self._rx(L, f, k, None, m)
                    elif k < 0:
                        self._bad()
            except Exception as e:  # a bug or an exhausted heap must not stop the board
                h[_DROP] += 1
                print("agent:", repr(e))

    # One coroutine on purpose (over ~100 lines): every function the board keeps costs heap for its
    # bytecode, and the pass's state lives in this frame's locals instead of attributes.
    async def sources(self):
        k = self.k
        h = self.h
        t = time.ticks_us()
        for s in self.sensors:
            s[_SDUE] = t
        sec = hdue = adue = time.ticks_ms()
        most = self.ring.capacity  # samples one pass makes at most (more would overrun the ring)
        fast_n = min(_FAST, most)
        # a sensor that fills a quarter of the ring within one 1 ms pass: passes go round at once
        # (smaller batches, more often), so a poll finds the ring before a whole pass overruns it
        spin = 0
        for s in self.sensors:
            if s[_SPER] and 4000 // s[_SPER] > most:
                spin = 1
        d = 1  # s before a failed pass is tried again (doubles while passes keep failing)
        while True:
            # The supervisor of this task: a pass that fails -- a MemoryError while posting an
            # alarm or a report, a bug -- is counted in the health record, said, and tried again
            # after d s (1, 2, 4 .. 64 while passes keep failing), never the end of the task: the
            # events and health records would stop while polls were still answered. (Allocates:
            # failures only.)
            try:
                now = time.ticks_us()
                for s in self.sensors:
                    p = s[_SPER]
                    n = fast_n  # hz 0: a batch every pass, the pass again at once
                    if s[_SREAD] is not None:  # a real source: one reading when due (none owed)
                        if time.ticks_diff(now, s[_SDUE]) < 0:
                            continue
                        s[_SDUE] = time.ticks_add(now, p)
                        n = s[_SREAD](s[_SBUF])
                        if n:  # (0 or None: nothing to say this time)
                            self.emit(s[_SCH], s[_SBUF], n)
                        continue
                    if p:  # the samples due since the last pass, at once
                        n = time.ticks_diff(now, s[_SDUE]) // p + 1
                        if n <= 0:
                            continue
                        if n > most:  # fell behind: resynchronise (a synthetic source owes nothing)
                            n = most
                            s[_SDUE] = time.ticks_add(now, -n * p)
                        s[_SDUE] = time.ticks_add(s[_SDUE], n * p)
                    if self.pushing:  # a push session may want them: one emit per sample
                        while n:
                            dv.sample_into(s[_SBUF], s[_SNUM])
                            s[_SNUM] = (s[_SNUM] + 1) & 0xFFFF
                            self.emit(s[_SCH], s[_SBUF], s[_SSIZE])
                            n -= 1
                    else:  # the ring is all: one call, the byte loop in native code (~0.2 us per 64 B)
                        heap_lock()
                        try:
                            self.ring.write_samples(s[_SBUF], s[_SCH], s[_SSIZE], n, s[_SNUM])
                        finally:
                            heap_unlock()
                        s[_SNUM] = (s[_SNUM] + n) & 0xFFFF
                ms = time.ticks_ms()
                while time.ticks_diff(ms, sec) >= 0:  # (a pass may come after several seconds)
                    h[_UP] += 1
                    sec = time.ticks_add(sec, 1000)
                if k[_HMS] and time.ticks_diff(ms, hdue) >= 0:
                    hdue = time.ticks_add(ms, k[_HMS])
                    # the heap's low-water, sampled here: gc.mem_free() walks the whole allocation
                    # table (1,114,800 cycles = 8.9 ms on a Pico's 246 KB heap, emulated RP2040)
                    f = gc.mem_free()
                    if f < h[_LOW]:
                        h[_LOW] = f
                    gc.collect()  # heap free = what is live; the low-water includes garbage
                    h[_FREE] = gc.mem_free()
                    h[_OVER] = self.ring._st[4]  # overwritten (the ring's state: ring._SOVER)
                    self.emit(k[_HCH], self.ev, dv.health_into(self.ev, h))
                    A = self.links[0][_EP]
                    if A is not None:  # auth on: the rejects of all links, a record of their own
                        A[_AREJ](self.links, h)
                        self.emit(k[_HCH], self.ev, dv.health_into(self.ev, h, _FORGED))
                    if h[_RESTARTS]:  # a task failed and was restarted: say how often
                        self.emit(k[_HCH], self.ev, dv.health_into(self.ev, h, _RESTARTS, 1))
                if k[_AMS] and time.ticks_diff(ms, adue) >= 0:
                    adue = time.ticks_add(ms, k[_AMS])
                    self.alarm(2, h[_ALARMS] + 1)  # messages.ALARM_PERIODIC
                # Sleep until the next thing is due: the uptime's second, health, alarms, each
                # source's next sample; a push queue with work is stepped every tick (its frames
                # are paced by the link's gap, its reports and ACK deadlines timed). Each asyncio
                # wake costs 25-40k cycles on an RP2040: a fixed 1 ms tick was 62% of its CPU.
                w = time.ticks_diff(sec, ms)
                if k[_HMS]:
                    w = min(w, time.ticks_diff(hdue, ms))
                if k[_AMS]:
                    w = min(w, time.ticks_diff(adue, ms))
                if k[_WDT]:  # the watchdog (config "wdt"): fed while this task goes round
                    k[_WDT].feed()
                    w = min(w, 100)
                for L in self.links:
                    if L[_Q] is not None:
                        self._step(L, ms)
                        if L[_SUBS] or L[_RAW] or L[_Q].peek() is not None:
                            w = min(w, k[_TICK])
                now = time.ticks_us()
                for s in self.sensors:
                    if not s[_SPER] or spin:
                        w = 0
                    else:
                        w = min(w, (time.ticks_diff(s[_SDUE], now) + 999) // 1000)
                d = 1
            except Exception as e:
                h[_RESTARTS] += 1
                print("task: %r; %d s" % (e, d))
                await asyncio.sleep(d)
                d = min(d + d, 64)
                continue
            await asyncio.sleep_ms(w if w > 0 else 0)


def start(b, board):
    # lwapp.start's last boot step, here so that its code is freed once run (lwapp deletes it):
    # authentication with a key, the agent on lwboot's (settings, ring, sensors, links, tasks),
    # its tasks started; returns the agent (asyncio.run(agent.io()) serves the links)
    global _dma
    k, ring, sensors, links, tasks = b
    _dma = getattr(board, "dma", None)
    if k[_KEY]:  # a key: auth.py and an endpoint per link, where the boot code was
        import lwauth

        lwauth.setup(k, ring, links)  # (it deletes itself: boot only)
    ag = Agent(k, ring, sensors, links, board)
    # kept: the scheduler holds weak references. lwboot's (wlan.keep) count their failures in h
    ag.tasks = [asyncio.create_task(f(*a, ag.h)) for f, a in tasks] + [asyncio.create_task(ag.sources())]
    board.led(1)
    for n in ("uid", "serial", "network", "mem_free", "reset_cause", "led"):  # boot-only: gone
        if hasattr(board, n):
            delattr(board, n)
    # Boot-only code freed (heap: ~1 KB of bytecode): the constructors of the agent's objects, all
    # built now, the HELLO's builder (L[_HELLO] holds it), and the stream decoder's methods the
    # agent never calls (it calls framing.scan itself; feed is the host's). A class attribute is
    # set to None before it is deleted: a deleted one keeps its value in the class's map.
    from leadwire.framing import StreamDecoder
    from leadwire.ring import EventRing

    free = [
        (Agent, "__init__"),
        (EventRing, "__init__"),
        (StreamDecoder, "__init__"),
        (StreamDecoder, "feed"),
        (StreamDecoder, "scan"),
    ]
    # the ring's bytecode burst (EventRing.respond) where no link can reach it: device.respond
    # native (_viper.respond answers every POLL on a serial link without auth) and no other link
    if respond is not getattr(dv, "slow", respond) and not [L for L in links if L[_UDP] or L[_EP]]:
        free.append((EventRing, "respond"))
    for c, n in free:
        setattr(c, n, None)
        delattr(c, n)
    del dv.hello_into
    gc.threshold(4096)  # collect after 4 KB of garbage: bounds the low-water's dip
    for L in links:
        if not L[_UDP] or L[_PEER]:  # HELLO after boot
            ag.h[_DROP] += hello(L, 0, L[_PEER], _send)
    return ag
