# What differs between MicroPython and CPython, in one place.
import sys

MICROPYTHON = sys.implementation.name == "micropython"

try:
    from micropython import const  # type: ignore[import-not-found]
except ImportError:  # CPython

    def const(x):  # type: ignore[no-redef, misc]
        return x


try:  # the heap locked around a call whose frame is over VM_MAX_STATE_ON_STACK (11 words): the frame
    # then goes on the C stack, not the GC heap (net 0 bytes either way; the heap search costs)
    from micropython import heap_lock, heap_unlock  # type: ignore[import-not-found]
except ImportError:  # CPython (and a port without a GC heap): nothing to lock

    def heap_lock():  # type: ignore[no-redef, misc]
        pass

    def heap_unlock():  # type: ignore[no-redef, misc]
        pass


def random_u32():
    """A random 32-bit value from the OS entropy source (allocates; boot-time only)."""
    import os

    b = os.urandom(4)
    return (b[0] << 24) | (b[1] << 16) | (b[2] << 8) | b[3]
