# ESP32 (the classic ESP32, WROOM or WROVER, on current MicroPython). What differs from the other
# boards: UART pins, WLAN bring-up, the LED pin, the reset cause, the heap figure. Defaults: UART2
# on GPIO26 (tx) / GPIO25 (rx), LED on GPIO2 (DevKitC-style boards); all overridable in config.json
# (other chips -- S2, S3, C3, C6 -- have other pins: set "tx" and "rx").
import gc

import machine

KIND = "esp32"
_led = None


def uid():
    return "esp32-" + "".join("%02x" % b for b in machine.unique_id()[-3:])


def serial(c, buf):
    # buf: the link's COBS buffer (rp2 sends by DMA from it; unused here)
    # default pins per UART, free on WROOM and WROVER modules alike (GPIO16/17, UART2's usual
    # pair, are the PSRAM's on WROVER; UART1's own 9/10 are the flash's): UART2 GPIO26 tx /
    # GPIO25 rx, UART1 GPIO33 / GPIO32, UART0 GPIO1 / GPIO3 (the REPL's)
    u = c.get("uart", 2)
    tx, rx = (1, 3) if u == 0 else (33, 32) if u == 1 else (26, 25)
    return machine.UART(
        u,
        baudrate=c.get("baud", 115200),
        tx=c.get("tx", tx),
        rx=c.get("rx", rx),
        rxbuf=1024,
        timeout=0,  # reads: the agent polls first; writes (IDF uart_write_bytes) block until the
        # whole buffer is queued, and lwagent._send loops on the count anyway
    )


def network(c):
    if not c.get("ssid"):
        return None  # wlan.py (and the network stack) not loaded on a serial-only board
    from wlan import join

    return join(c)


def led(on):
    global _led
    if _led is None:
        _led = machine.Pin(2, machine.Pin.OUT)
    _led.value(1 if on else 0)


def reset_cause():
    return machine.reset_cause()


def mem_free():
    # What the ring may take at boot. gc.mem_free() counts, besides the heap's free blocks, the
    # largest free ESP-IDF block the heap could still grow into (MicroPython's split heap); Wi-Fi
    # and lwIP take their buffers from that same IDF heap while they run (dynamic RX/TX buffers,
    # pbufs): 40 KB of it is left to them. From ESP-IDF's defaults, read, not measured on a board.
    import esp32

    big = max([r[2] for r in esp32.idf_heap_info(esp32.HEAP_DATA)] + [0])
    return gc.mem_free() - min(big, 40960)
