# Virtual board: the MicroPython unix port (`leadwire board`). The serial "UART" is a pty whose
# path the launcher writes into the config; there is no WLAN (the host's loopback is the network),
# no LED and no reset cause.
from gc import mem_free  # noqa: F401 -- lwboot's free heap

KIND = "unix"


def uid():
    return "unix"


def serial(c, buf):
    # buf: the link's COBS buffer (rp2 sends by DMA from it; unused here)
    # raw pty set up by the launcher (tty.setraw): bytes pass unchanged
    p = c.get("path")
    return open(p, "r+b", buffering=0) if p else None


def network(c):
    return None


def led(on):
    pass


def reset_cause():
    return 0


def _trace():
    # Device-side record for the chaos run (tools/chaos.py), virtual board only: when the board's
    # flash holds a file "trace", every event the ring takes is appended to it as the ring stores
    # it (channel u8, length u16, data), one unbuffered write() each, so a power cut (SIGKILL) keeps
    # every event the agent could ever have sent. Each ring built starts with a boot record:
    # 0x00 0xFFFF (no event is that long), epoch u32, start offset u32, boot count u32, ring
    # capacity u16. While a file
    # "pause" exists (looked for every 64 events the ring is given) the ring takes nothing: the chaos
    # run holds the boards until the bridge is up, and stops them at the end so that the bridge can
    # drain every ring to its last event.
    # The methods read os, micropython and EventRing as globals of this module, not as closure
    # variables: the agent calls write_samples with the heap locked, and a closure called with
    # more than 5 closed-over values and arguments builds its argument array on the heap. (Names
    # the board already has: every new name is a qstr that stays, test_qstr_budget.)
    global os, micropython, EventRing
    import os

    try:
        os.stat("trace")  # type: ignore[name-defined]
    except OSError:
        return
    import micropython

    from leadwire import ring
    from leadwire.ring import EventRing

    class Traced(EventRing):  # type: ignore[name-defined]
        def __init__(self, capacity, start=None, slot_size=64, epoch=0):
            EventRing.__init__(self, capacity, start, slot_size, epoch)
            n = 0
            try:
                with open("boots") as f:
                    n = int(f.read())
            except (OSError, ValueError):
                pass
            s = (self.newest() + 1) & 0xFFFFFFFF
            h = bytearray(b"\x00\xff\xff")
            for v in (epoch, s, n):
                h.extend(bytes(((v >> 24) & 0xFF, (v >> 16) & 0xFF, (v >> 8) & 0xFF, v & 0xFF)))
            h.extend(bytes((capacity >> 8, capacity & 0xFF)))
            self._t = open("trace", "ab")
            self._t.write(h)
            self._q = 1  # events until the next look for "pause"
            self._p = 0  # paused

        def write(self, payload, channel=0, length=-1):
            if length < -1:  # EventRing.write_samples's own call of the native write: taken below
                EventRing.write(self, payload, channel, length)
                return
            self.write_samples(payload, channel, len(payload) if length < 0 else length, 1, -1)

        def write_samples(self, payload, channel, n, count, start):
            # the ring's one way in (write() comes here too): take the events, then record each.
            # The agent holds the heap locked here; tracing allocates (os.stat, file writes), so
            # it runs unlocked and locks again on the way out.
            micropython.heap_unlock()
            try:
                q = self._q - count
                if q <= 0:
                    q = 64
                    try:
                        os.stat("pause")
                        self._p = 1
                    except OSError:
                        self._p = 0
                self._q = q
                if self._p or count <= 0:
                    return
                EventRing.write_samples(self, payload, channel, n, count, start)
                s = self._store
                cap = self.capacity
                slot = self._st[0] - count + 1  # the slot of the newest (ring._SHEAD), back count - 1
                if slot < 0:
                    slot += cap
                for _ in range(count):
                    p = slot * self._st[6] + self._st[16]  # the record (ring._SSTRIDE, _SREC)
                    self._t.write(s, p, 3 + ((s[p + 1] << 8) | s[p + 2]))
                    slot += 1
                    if slot == cap:
                        slot = 0
            finally:
                micropython.heap_lock()

    setattr(ring, "EventRing", Traced)  # lwboot imports EventRing when it builds the ring


_trace()
del _trace
