# What differs between MicroPython and CPython, in one place.
import sys

MICROPYTHON = sys.implementation.name == "micropython"

try:
    from micropython import const  # type: ignore[import-not-found]
except ImportError:  # CPython

    def const(x):  # type: ignore[no-redef, misc]
        return x


def random_u32():
    """A random 32-bit value from the OS entropy source (allocates; boot-time only)."""
    import os

    b = os.urandom(4)
    return (b[0] << 24) | (b[1] << 16) | (b[2] << 8) | b[3]
