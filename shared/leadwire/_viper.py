# Native-code versions of the two byte loops on the device hot path (CRC and copy).
# Imported only on MicroPython; ports without a native emitter fail to compile this module
# and the callers fall back to bytecode loops. Viper frames live on the C stack: 0 heap bytes.
import micropython


@micropython.viper
def crc16_viper(buf: ptr8, start: int, end: int, table: ptr16) -> int:  # noqa: F821
    crc = 0xFFFF
    i = start
    while i < end:
        crc = ((crc << 8) & 0xFFFF) ^ table[((crc >> 8) ^ buf[i]) & 0xFF]
        i += 1
    return crc


@micropython.viper
def copy_viper(dst: ptr8, dpos: int, src: ptr8, spos: int, n: int):  # noqa: F821
    i = 0
    while i < n:
        dst[dpos + i] = src[spos + i]
        i += 1
