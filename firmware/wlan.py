# WLAN station bring-up for the boards that have one (esp32, rp2): join with retry at boot, then
# keep() re-joins in the background whenever the link drops. Loaded only when config has an ssid.
import time

import network
from micropython import const

_RESTARTS = const(11)  # lwagent's health list: failed passes of a task (tests/firmware/test_records.py)


def why(w):
    # a failed join's cause as the console says it (None: not failed, or a cause the port does not
    # name): the station's status against the port's STAT_* names (rp2: -3, -2, -1; ESP32: 202 ..)
    s = w.status()
    for n, t in (("STAT_WRONG_PASSWORD", "wrong key"), ("STAT_NO_AP_FOUND", "no such network")):
        if s == getattr(network, n, None):
            return t
    return "join failed" if s == getattr(network, "STAT_CONNECT_FAIL", None) else None


def join(c):
    ssid = c.get("ssid")
    if not ssid:
        return None
    w = network.WLAN(network.STA_IF)
    w.active(True)
    n = c.get("tries", 3)
    for i in range(n):
        print("wlan: joining %s (try %d)" % (ssid, i + 1))
        w.connect(ssid, c.get("key", ""))
        t = time.ticks_ms()
        e = None
        while time.ticks_diff(time.ticks_ms(), t) < 1000 * c.get("wait", 10):
            if w.isconnected():
                print("wlan: up", w.ifconfig()[0])
                return w
            e = why(w)
            if e:  # refused: said at once, the next try after a second
                time.sleep_ms(1000)
                break
            time.sleep_ms(250)
        e = e or "timed out"
        print("wlan: cannot join %s: %s (status %d, try %d of %d)" % (ssid, e, w.status(), i + 1, n))
        w.disconnect()
    print("wlan: no link yet; retrying in the background")
    return w


async def keep(w, c, h):
    # Every 5 s: connected, or an attempt under way (status() STAT_CONNECTING: a connect() now
    # would break it, on ESP32 with "Wifi Internal Error"; on ESP32 a disconnected status() is
    # the reason code, 2 included), nothing to do; else join again, the
    # next check 5, 10, 20 .. 60 s later while it fails. An OSError from connect() (ESP32: "Wifi
    # Internal Error" during the driver's own attempt) is said and retried; any other failure of
    # a check (a MemoryError) is counted in the agent's health list h (lwagent's _RESTARTS)
    # as well: never the end of the task.
    import asyncio

    d = 5
    up = -1  # the link at the last check (-1: not looked yet): each change is said once
    while True:
        await asyncio.sleep(d)
        try:
            if w.isconnected():
                if up == 0:
                    print("wlan: link up")
                up = 1
                d = 5
                continue
            if up:
                print("wlan: no link")
            up = 0
            s = w.status()
            if s == network.STAT_CONNECTING or (s == 2 and network.STAT_CONNECTING == 1):
                continue  # under way (Pico W's CYW43: 1 joining, 2 joined and waiting for DHCP)
            print("wlan: link down (%s), re-joining" % (why(w) or "status %d" % s))
            d = min(d * 2, 60)
            w.connect(c.get("ssid"), c.get("key", ""))
        except Exception as e:
            if not isinstance(e, OSError):
                h[_RESTARTS] += 1
            print("wlan:", repr(e))
