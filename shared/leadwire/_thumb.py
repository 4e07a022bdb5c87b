# Thumb code (rp2: ARMv6-M) for _viper's byte loops: frame, below, and encode_into (at the end).
#
# frame: the ring's EVENTS answer's byte loop, where _viper.frame is viper: the header, the
# records read in the store, the CRC bytes after them through the CRC-16 and the COBS encoder,
# then the delimiter (_viper.frame says what it takes and returns; _viper.answer writes the header
# and calls it). Only Thumb ports compile asm_thumb: tools/firmware_build.py puts this module on
# Thumb boards only (rp2), and _viper binds these where they load (its viper ones are then
# garbage: their machine code leaves the heap). ~23 cycles a byte on an RP2040 against viper's
# ~95 (which keeps three locals in registers and reloads the rest each byte); this whole module
# is 384 B as .mpy, the viper loop alone ~980. Allocates nothing.
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
