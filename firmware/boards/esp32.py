# ESP32 (any ESP32 with WLAN on current MicroPython). What differs from the other boards: UART
# pins, WLAN bring-up, the LED pin, the reset cause. Defaults: UART2 on GPIO17 (tx) / GPIO16 (rx),
# LED on GPIO2 (DevKitC-style boards); all overridable in config.json.
import machine

KIND = "esp32"
_led = None


def uid():
    return "esp32-" + "".join("%02x" % b for b in machine.unique_id()[-3:])


def serial(c):
    return machine.UART(
        c.get("uart", 2),
        baudrate=c.get("baud", 115200),
        tx=c.get("tx", 17),
        rx=c.get("rx", 16),
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
