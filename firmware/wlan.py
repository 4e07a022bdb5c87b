# WLAN station bring-up for the boards that have one (esp32, rp2): join with retry at boot, then
# keep() re-joins in the background whenever the link drops. Loaded only when config has an ssid.
import time

import network


def join(c):
    ssid = c.get("ssid")
    if not ssid:
        return None
    w = network.WLAN(network.STA_IF)
    w.active(True)
    for i in range(c.get("tries", 3)):
        print("wlan: joining %s (try %d)" % (ssid, i + 1))
        w.connect(ssid, c.get("key", ""))
        t = time.ticks_ms()
        while time.ticks_diff(time.ticks_ms(), t) < 1000 * c.get("wait", 10):
            if w.isconnected():
                print("wlan: up", w.ifconfig()[0])
                return w
            time.sleep_ms(250)
        w.disconnect()
    print("wlan: no link yet; retrying in the background")
    return w


async def keep(w, c):
    import asyncio

    while True:
        await asyncio.sleep(5)
        if not w.isconnected():
            print("wlan: link down, re-joining")
            w.connect(c.get("ssid"), c.get("key", ""))
