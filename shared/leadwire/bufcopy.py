# copy_into(dst, dpos, src, spos, n): dst[dpos:dpos+n] = src[spos:spos+n] without allocating.
# On MicroPython a slice of a bytearray or memoryview is a new heap object, so the device copies
# with a viper loop (or a bytecode loop on ports without a native emitter).
from leadwire._compat import MICROPYTHON


def copy_py(dst, dpos, src, spos, n):
    for i in range(n):
        dst[dpos + i] = src[spos + i]


if MICROPYTHON:
    copy_into = copy_py
    try:
        from leadwire._viper import copy_viper as copy_into  # type: ignore[no-redef]
    except (ImportError, SyntaxError, NotImplementedError, ValueError):  # ValueError: _viper.mpy refused
        pass
else:

    def copy_into(dst, dpos, src, spos, n):
        memoryview(dst)[dpos : dpos + n] = memoryview(src)[spos : spos + n]
