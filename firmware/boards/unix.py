# Virtual board: the MicroPython unix port (`leadwire board`). The serial "UART" is a pty whose
# path the launcher writes into the config; there is no WLAN (the host's loopback is the network),
# no LED and no reset cause.
KIND = "unix"


def uid():
    return "unix"


def serial(c):
    # raw pty set up by the launcher (tty.setraw): bytes pass unchanged
    p = c.get("path")
    return open(p, "r+b", buffering=0) if p else None


def network(c):
    return None


def led(on):
    pass


def reset_cause():
    return 0
