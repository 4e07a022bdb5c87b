# Thumb code (rp2: ARMv6-M) for _viper's byte loops: frame, below, encode_into, crc16_viper and
# scan (at the end).
#
# frame: the ring's EVENTS answer's byte loop, where _viper.frame is viper: the header, the
# records read in the store, the CRC bytes after them through the CRC-16 and the COBS encoder,
# then the delimiter (_viper.frame says what it takes and returns; _viper.answer writes the header
# and calls it). Only Thumb ports compile asm_thumb: tools/firmware_build.py puts this module on
# Thumb boards only (rp2), and _viper binds these where they load (its viper ones are then
# garbage: their machine code leaves the heap). ~23 cycles a byte on an RP2040 against viper's
# ~95 (which keeps three locals in registers and reloads the rest each byte). As .mpy for armv6m
# frame and encode_into are 384 B (viper's loop alone ~980), the scan ~300 (viper's 1,408 B of
# code). Allocates nothing.
#
# Arguments: r0 buf, r1 st (the ring's state), r2 cb, r3 t (crc16.TABLE), as _viper.frame's.
# Registers: r0 the next byte in (q), r1 the end of this piece (e), r2 the CRC, r3 the CRC table,
# r4 the COBS code byte (c), r5 the next byte out (o), r6 the byte (b), r7 scratch; across pieces
# r8 the records left, r9 the next record, r10 the store's end, r11 its first record, r12 where the
# CRC goes (0 once it went), lr the stride. asm_thumb's entry saves r4-r7 and lr, not r8-r11
# (the caller's: saved here on the stack, under cb).
# mypy: ignore-errors
# ruff: noqa: F821  (asm_thumb's instructions are names only its compiler knows)
import micropython


@micropython.asm_thumb
def frame(r0, r1, r2, r3):
    mov(r4, r8)
    mov(r5, r9)
    mov(r6, r10)
    mov(r7, r11)
    push({r4, r5, r6, r7})
    push({r2})
    ldrb(r4, [r0, 10])  # records taken
    mov(r8, r4)
    ldrb(r4, [r0, 4])  # the CRC at buf + 10 + the payload's length
    mov(r5, 7)
    and_(r4, r5)
    lsl(r4, r4, 8)
    ldrb(r5, [r0, 5])
    orr(r4, r5)
    add(r4, r4, r0)
    add(r4, 10)
    mov(r12, r4)
    ldr(r4, [r1, 24])  # st[6]: the stride
    mov(lr, r4)
    ldr(r5, [r1, 56])  # st[14] + st[16]: the first record
    ldr(r6, [r1, 64])
    add(r5, r5, r6)
    mov(r11, r5)
    ldr(r6, [r1, 20])  # st[5]: the capacity
    mov(r7, r6)
    mul(r7, r4)
    add(r7, r7, r5)
    mov(r10, r7)
    ldr(r7, [r1, 0])  # the slot of s(n): st[0] - (st[7] - 1)
    ldr(r2, [r1, 28])
    sub(r7, r7, r2)
    add(r7, 1)
    cmp(r7, 0)
    bge(SLOT)
    add(r7, r7, r6)
    label(SLOT)
    mul(r7, r4)
    add(r7, r7, r5)
    mov(r9, r7)
    mov(r7, 0)
    mvn(r2, r7)  # crc 0xFFFF
    lsr(r2, r2, 16)
    mov(r4, sp)
    ldr(r4, [r4, 0])  # c: cb
    add(r5, r4, 1)
    add(r1, r0, 0)  # the header: buf[:13]
    add(r1, 13)
    mov(r6, 0)
    label(LOOP)
    cmp(r0, r1)
    beq(PIECE)
    ldrb(r6, [r0, 0])
    add(r0, 1)
    lsr(r7, r2, 8)  # crc = (crc << 8) & 0xFFFF ^ t[(crc >> 8) ^ b]
    eor(r7, r6)
    lsl(r7, r7, 1)
    add(r7, r7, r3)
    ldrh(r7, [r7, 0])
    lsl(r2, r2, 24)
    lsr(r2, r2, 16)
    eor(r2, r7)
    cmp(r6, 0)
    beq(ZERO)
    strb(r6, [r5, 0])
    add(r5, 1)
    sub(r7, r5, r4)
    cmp(r7, 255)
    bne(LOOP)
    label(ZERO)  # a 0, or a run of 254: its code byte, the next run
    sub(r7, r5, r4)
    strb(r7, [r4, 0])
    mov(r4, r5)
    add(r5, 1)
    b(LOOP)
    label(PIECE)
    mov(r7, r8)
    cmp(r7, 0)
    beq(TAIL)
    sub(r7, 1)  # the next record, from the store
    mov(r8, r7)
    mov(r0, r9)
    ldrb(r1, [r0, 1])
    lsl(r1, r1, 8)
    ldrb(r7, [r0, 2])
    orr(r1, r7)
    add(r1, 3)
    add(r1, r1, r0)
    mov(r7, lr)
    add(r7, r7, r0)
    mov(r6, r10)
    cmp(r7, r6)
    bne(NEXT)
    mov(r7, r11)
    label(NEXT)
    mov(r9, r7)
    b(LOOP)
    label(TAIL)
    mov(r7, r12)
    cmp(r7, 0)
    beq(DONE)
    lsr(r0, r2, 8)  # the CRC, after the rest
    strb(r0, [r7, 0])
    strb(r2, [r7, 1])
    add(r0, r7, 0)
    add(r1, r7, 2)
    mov(r7, 0)
    mov(r12, r7)
    b(LOOP)
    label(DONE)
    sub(r7, r5, r4)
    cmp(r6, 0)
    beq(PUT)
    cmp(r7, 1)
    bne(PUT)
    sub(r5, 1)  # the last byte ended a run of 254: no code byte
    b(END)
    label(PUT)
    strb(r7, [r4, 0])
    label(END)
    mov(r7, 0)  # the delimiter; the size: o + 1 - cb
    strb(r7, [r5, 0])
    add(r5, 1)
    pop({r0})
    sub(r0, r5, r0)
    pop({r4, r5, r6, r7})
    mov(r8, r4)
    mov(r9, r5)
    mov(r10, r6)
    mov(r11, r7)


# framing's COBS encoder (_viper.encode_into's, which says what it does; _twins.encode_into the
# bytecode twin): src[:n] into dst at d, returns the end position. The run's code is always the
# distance from its code byte to the next byte out: r0 the next byte in, r1 src's end, r2 dst,
# r4 the code byte, r5 the next byte out, r6 the byte, r7 scratch.
@micropython.asm_thumb
def encode_into(r0, r1, r2, r3):
    add(r1, r1, r0)
    add(r4, r2, r3)
    add(r5, r4, 1)
    label(LOOP)
    cmp(r0, r1)
    beq(DONE)
    ldrb(r6, [r0, 0])
    add(r0, 1)
    cmp(r6, 0)
    beq(ZERO)
    strb(r6, [r5, 0])
    add(r5, 1)
    sub(r7, r5, r4)
    cmp(r7, 255)
    bne(LOOP)
    cmp(r0, r1)  # a run of 254: a new run unless the last byte ended it
    beq(DONE)
    label(ZERO)
    sub(r7, r5, r4)
    strb(r7, [r4, 0])
    mov(r4, r5)
    add(r5, 1)
    b(LOOP)
    label(DONE)
    sub(r7, r5, r4)
    strb(r7, [r4, 0])
    sub(r0, r5, r2)


# The CRC-16 of buf[start:end] through the table t (crc16.TABLE), as _viper.crc16_viper (its name:
# no new name on a board): what crc16.crc16 calls. r0 the CRC, r1 the next byte, r2 the end.
@micropython.asm_thumb
def crc16_viper(r0, r1, r2, r3):
    add(r1, r1, r0)
    add(r2, r2, r0)
    mov(r0, 0)
    mvn(r0, r0)
    lsr(r0, r0, 16)
    label(LOOP)
    cmp(r1, r2)
    bcs(DONE)
    ldrb(r4, [r1, 0])
    add(r1, 1)
    lsr(r5, r0, 8)  # crc = (crc << 8) & 0xFFFF ^ t[(crc >> 8) ^ b]
    eor(r5, r4)
    lsl(r5, r5, 1)
    add(r5, r5, r3)
    ldrh(r5, [r5, 0])
    lsl(r0, r0, 24)
    lsr(r0, r0, 16)
    eor(r0, r5)
    b(LOOP)
    label(DONE)


# framing's serial receive path (_viper.scan's, which says what it does; _twins.scan_py the
# bytecode twin): scan(s, h, b, k), the bytes s[h:k[4]] kept in the frame buffer b, the COBS
# decode in place and wire.check, whose codes are the literals here; returns the new h. k: the
# decoder's state, array "i": held, overflow, ready, the size of b, the end. The CRC without
# crc16.TABLE (CRC-16/CCITT-FALSE a byte at a time: x = crc >> 8 ^ byte, x ^= x >> 4, crc = crc << 8
# ^ x << 12 ^ x << 5 ^ x): ~20 cycles a byte. Registers: r0 the next byte in, r1 the end, r2 b,
# r3 k, r4 the next byte kept (b + held), r5 b + its size, r6 the byte, r7 scratch, r12 s; for a
# frame, r0 on the stack, r1 and r5 the decode's read and write pointers, r7 the result.
@micropython.asm_thumb
def scan(r0, r1, r2, r3):
    mov(r12, r0)
    add(r0, r0, r1)
    ldr(r1, [r3, 16])  # the end
    mov(r4, r12)
    add(r1, r1, r4)
    ldr(r4, [r3, 0])  # held
    add(r4, r4, r2)
    ldr(r5, [r3, 12])  # the size of b
    add(r5, r5, r2)
    mov(r6, 0)
    str(r6, [r3, 8])  # ready: 0
    label(LOOP)
    cmp(r0, r1)
    bne(BYTE)
    sub(r4, r4, r2)  # the end: held
    str(r4, [r3, 0])
    b(END)
    label(BYTE)
    ldrb(r6, [r0, 0])
    add(r0, 1)
    cmp(r6, 0)
    beq(DELIM)
    cmp(r4, r5)
    bcs(OVER)
    strb(r6, [r4, 0])
    add(r4, 1)
    b(LOOP)
    label(OVER)  # what does not fit is dropped: an oversize frame
    mov(r6, 1)
    str(r6, [r3, 4])
    b(LOOP)
    label(DELIM)
    cmp(r4, r2)
    beq(LOOP)  # empty: a delimiter used to resynchronise
    label(SKIP)  # the delimiters after it: empty frames, taken now
    cmp(r0, r1)
    beq(FRAME)
    ldrb(r6, [r0, 0])
    cmp(r6, 0)
    bne(FRAME)
    add(r0, 1)
    b(SKIP)
    label(FRAME)
    push({r0})
    mov(r6, 0)
    str(r6, [r3, 0])  # held: 0
    ldr(r7, [r3, 4])
    str(r6, [r3, 4])  # overflow: 0
    cmp(r7, 0)
    beq(DECODE)
    mov(r7, 8)  # E_OVERSIZE
    neg(r7, r7)
    b(READY)
    label(DECODE)  # COBS decode in place (_twins.decode_in_place): r1 in, r5 out, r4 the end
    mov(r1, r2)
    mov(r5, r2)
    label(RUN)
    cmp(r1, r4)
    bcs(CHECK)
    ldrb(r6, [r1, 0])  # the code byte
    add(r1, 1)
    add(r7, r1, r6)
    sub(r7, 1)
    cmp(r7, r4)
    bhi(COBS)
    label(COPY)
    cmp(r1, r7)
    beq(CODE)
    ldrb(r0, [r1, 0])
    strb(r0, [r5, 0])
    add(r1, 1)
    add(r5, 1)
    b(COPY)
    label(CODE)  # a 0 after the run, unless it was 254 long or the last
    cmp(r6, 255)
    beq(RUN)
    cmp(r1, r4)
    bcs(RUN)
    mov(r0, 0)
    strb(r0, [r5, 0])
    add(r5, 1)
    b(RUN)
    label(COBS)
    mov(r7, 7)  # E_COBS
    neg(r7, r7)
    b(READY)
    label(CHECK)  # wire.check of the r4 = r5 - b bytes decoded
    sub(r4, r5, r2)
    ldrb(r6, [r2, 0])
    mov(r7, 1)  # E_SHORT
    neg(r7, r7)
    cmp(r4, 12)
    blt(READY)
    lsr(r0, r6, 5)
    sub(r7, 1)  # E_VERSION
    cmp(r0, 1)
    bne(READY)
    mov(r0, 31)
    and_(r0, r6)
    sub(r7, 1)  # E_TYPE
    cmp(r0, 0)
    beq(READY)
    cmp(r0, 10)
    bhi(READY)
    sub(r7, 1)  # E_LENGTH: 12 + the length field (+ 8: a signed frame's trailer) is the size
    ldrb(r0, [r2, 4])
    mov(r1, 7)
    and_(r0, r1)
    lsl(r0, r0, 8)
    ldrb(r1, [r2, 5])
    orr(r0, r1)
    add(r0, 12)
    ldrb(r1, [r2, 1])
    mov(r6, 0x20)
    tst(r1, r6)
    beq(SIZE)
    add(r0, 8)
    label(SIZE)
    cmp(r0, r4)
    bne(READY)
    sub(r5, 2)  # the CRC of b[:size - 2]
    mov(r1, r2)
    mov(r0, 0)
    mvn(r0, r0)
    lsr(r0, r0, 16)
    label(CRC)
    cmp(r1, r5)
    beq(CRCEND)
    ldrb(r6, [r1, 0])
    add(r1, 1)
    lsr(r7, r0, 8)
    eor(r6, r7)
    lsr(r7, r6, 4)
    eor(r6, r7)
    lsl(r0, r0, 8)
    eor(r0, r6)
    lsl(r7, r6, 5)
    eor(r0, r7)
    lsl(r7, r6, 12)
    eor(r0, r7)
    lsl(r0, r0, 16)
    lsr(r0, r0, 16)
    b(CRC)
    label(CRCEND)
    ldrb(r6, [r5, 0])
    lsl(r6, r6, 8)
    ldrb(r1, [r5, 1])
    orr(r6, r1)
    mov(r7, 5)  # E_CRC
    neg(r7, r7)
    cmp(r0, r6)
    bne(READY)
    ldrb(r6, [r2, 1])
    mov(r7, 6)  # E_FLAGS: (b[1] >> 4) & 12
    neg(r7, r7)
    mov(r1, 0xC0)
    tst(r6, r1)
    bne(READY)
    mov(r7, r4)  # a frame of r4 bytes
    label(READY)
    str(r7, [r3, 8])  # ready
    pop({r0})
    label(END)
    mov(r1, r12)
    sub(r0, r0, r1)
