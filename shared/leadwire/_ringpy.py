# The ring's write in bytecode (EventRing.write and write_samples where _viper's native write does
# not load: CPython, ports without a native emitter), and the reference the native write is checked
# against (tests/mpy/twin_checks.py). A module of its own: a board that runs the native write never
# loads it (its code would be heap there). The state's slots are ring.py's _S* numbers.
from leadwire._compat import const
from leadwire.bufcopy import copy_into

_SHEAD = const(0)
_SHI = const(1)
_SLO = const(2)
_SN = const(3)
_SOVER = const(4)
_SCAP = const(5)
_SSTRIDE = const(6)
_SREC = const(16)


def write_samples(self, d, channel, m, k, b):
    # EventRing.write_samples in bytecode: k records after the newest (k <= capacity): channel,
    # length m, the u16 b (+1 each), then d[2:m]; b -1: d[:m] as it is. The ring's state follows:
    # as after k single writes.
    st = self._st
    s = self._store
    c = st[_SCAP]
    n = st[_SSTRIDE]
    h = st[_SHEAD] + 1  # the slot of the first
    if h == c:
        h = 0
    x = st[_SHEAD] + k
    if x >= c:
        x -= c
    st[_SHEAD] = x
    x = st[_SLO] + k
    if x > 0xFFFF:
        x -= 0x10000
        st[_SHI] = (st[_SHI] + 1) & 0xFFFF
    st[_SLO] = x
    x = st[_SN] + k - c  # pushed out, when above 0
    if x <= 0:
        st[_SN] += k
    elif st[_SOVER] < 0x3FFFFFFF - x:
        st[_SN] = c
        st[_SOVER] += x
    else:
        st[_SN] = c
        st[_SOVER] = 0x3FFFFFFF
    while k > 0:
        p = h * n + st[_SREC]  # the record
        s[p] = channel
        s[p + 1] = m >> 8
        s[p + 2] = m & 0xFF
        if b < 0:
            copy_into(s, p + 3, d, 0, m)
        else:
            s[p + 3] = (b >> 8) & 0xFF
            s[p + 4] = b & 0xFF
            copy_into(s, p + 5, d, 2, m - 2)
            b = (b + 1) & 0xFFFF
        h += 1
        if h == c:
            h = 0
        k -= 1


def write(self, d, channel, m):
    # EventRing.write in bytecode
    if m > self._st[13] or channel > 0xFF:  # (13: the slot size)
        raise ValueError("event too large")
    write_samples(self, d, channel, m, 1, -1)
