# Raspberry Pi Pico W (RP2040 + CYW43). What differs: UART pins, WLAN bring-up (country code), the
# LED (on the wireless chip: Pin("LED")), the reset cause. Defaults: UART0 on GP0 (tx) / GP1 (rx);
# with "uart": 1, GP4 (tx) / GP5 (rx). Also runs a plain Pico (no Wi-Fi: serial only).
from gc import mem_free  # noqa: F401 -- lwboot's free heap: one fixed heap (CYW43's buffers are static)

import machine

KIND = "rp2"
_led = None
dma = None  # lwdma.send once serial() attached the UART's transmit DMA (lwagent.start takes it)


def uid():
    return "rp2-" + "".join("%02x" % b for b in machine.unique_id()[-3:])


def serial(c, buf):
    # default pins per UART: GP0/GP1 are UART0's only; UART1's first pair is GP4/GP5 (also GP8/GP9);
    # buf: the link's COBS buffer (lwdma sends from it and its twin)
    global dma
    u = c.get("uart", 0)
    tx, rx = (4, 5) if u == 1 else (0, 1)
    dma = None
    if c.get("dma", True):  # frames sent by DMA (lwdma): the driver's TX ring is then unused
        try:
            import lwdma

            dma = lwdma.attach(u, buf)  # None: no rp2.DMA, or the console is on a UART
        except Exception as e:  # no lwdma on the board; no free channel (OSError)
            print("serial: DMA: %r" % e)
        if dma is None:
            print("serial: sent by UART.write (no DMA)")
    return machine.UART(
        u,
        baudrate=c.get("baud", 115200),
        tx=machine.Pin(c.get("tx", tx)),
        rx=machine.Pin(c.get("rx", rx)),
        rxbuf=256,  # (the GC heap's): what arrives while the agent is busy -- its largest frame
        # (136 B signed, 139 COBS-framed) and a bridge's two pipelined POLLs fit
        txbuf=32 if dma else 1024,  # default 256: a frame of up to 1 KB goes into the ring at once
        # (by DMA it is unused: the least, 32)
        timeout=0,  # reads: the agent polls first; writes wait per char and may still come back
        # short when the ring is full (lwagent._send loops until the whole frame is taken)
    )


def network(c):
    # no ssid: no network (a plain Pico has neither the network module nor rp2.country; a board
    # with an ssid but without them fails here, and lwboot turns off only the UDP link)
    if not c.get("ssid"):
        return None
    import rp2

    rp2.country(c.get("country", "GB"))
    from wlan import join

    return join(c)


def led(on):
    global _led
    if _led is None:
        _led = machine.Pin("LED", machine.Pin.OUT)
    _led.value(1 if on else 0)


def reset_cause():
    return machine.reset_cause()
