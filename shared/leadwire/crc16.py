# CRC-16/CCITT-FALSE: poly 0x1021, init 0xFFFF, not reflected, xorout 0; check("123456789") = 0x29B1.
# Why this CRC (docs/protocol.md has the numbers): Hamming distance 4 up to 32,751 bits covers our
# 2,047-byte maximum payload, and it keeps header + CRC at 12 bytes (CRC-32 would make it 14).
#
# crc16(buf, start, end) -> CRC of buf[start:end], with no allocation on the device:
#   CPython     -> crcmod (C extension)
#   MicroPython -> viper table loop where the port has a native emitter, else a bytecode table loop.
import array

from leadwire._compat import MICROPYTHON

INIT = 0xFFFF


TABLE = array.array("H", bytes(512))
for _i in range(256):
    _c = _i << 8
    for _ in range(8):
        _c = ((_c << 1) ^ 0x1021) if _c & 0x8000 else (_c << 1)
    TABLE[_i] = _c & 0xFFFF
del _i, _c


def crc16_py(buf, start, end):
    # Bytecode fallback; allocation-free (ints stay below 2^17).
    crc = 0xFFFF
    t = TABLE
    for i in range(start, end):
        crc = ((crc << 8) & 0xFFFF) ^ t[((crc >> 8) ^ buf[i]) & 0xFF]
    return crc


crc16 = crc16_py

if MICROPYTHON:
    try:
        from leadwire._viper import crc16_viper

        def crc16(buf, start, end):
            # viper turns any buffer into a raw pointer at the call: an array passes as ptr16
            return crc16_viper(buf, start, end, TABLE)  # type: ignore[arg-type]

    except (ImportError, SyntaxError, NotImplementedError, ValueError):
        # no native emitter, or _viper.mpy refused: "incompatible .mpy file" (native sub-version of
        # another MicroPython release), "incompatible .mpy arch", "native code in .mpy unsupported"
        pass
else:
    try:
        import crcmod.predefined

        _crcmod_fun = crcmod.predefined.mkCrcFun("crc-ccitt-false")

        def crc16(buf, start, end):
            return _crcmod_fun(memoryview(buf)[start:end])

    except ImportError:  # core used without the host dependencies
        pass
