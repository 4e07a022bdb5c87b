# Offsets and message numbers live in Z/2^32 (spec 004: N = 2^32).
# On 32-bit boards small ints stop below 2^30: the device hot path keeps u32 values as 16-bit
# halves (hi, lo) and never calls the int helpers here; the host uses them freely.
from leadwire._compat import const

N = const(0x100000000)
MASK = const(0xFFFFFFFF)
HALF = const(0x80000000)


def succ(n):
    """s(n) = (n + 1) % N."""
    return (n + 1) & MASK


def pred(n):
    return (n - 1) & MASK


def add(n, k):
    return (n + k) & MASK


def diff(a, b):
    """Wrap-safe signed difference a - b in [-2^31, 2^31) (RFC 1982 style)."""
    d = (a - b) & MASK
    return d - N if d >= HALF else d


def lt(a, b):
    """a is before b in serial-number order."""
    return diff(a, b) < 0


def le(a, b):
    return diff(a, b) <= 0


def distance(a, b):
    """Unsigned forward distance from b to a: (a - b) % N."""
    return (a - b) & MASK


def halves(n):
    return (n >> 16) & 0xFFFF, n & 0xFFFF


def join(hi, lo):
    return ((hi & 0xFFFF) << 16) | (lo & 0xFFFF)
