# A fake `machine` module for the MicroPython unix port: the parts of a Pico's machine module that
# the firmware uses (UART, Pin, WDT, unique_id, reset_cause, reset), with the UART on the virtual
# board's pty (its path from config.json, as the launcher writes it). The tests copy it into a
# board directory as machine.py, where it shadows the unix port's own (an extensible built-in).
#
# The UART cuts writes short as rp2's does (timeout=0, a 256-byte TX ring): a file "partial"
# holding N makes write() take at most N bytes a call, and every third call nothing at all (None,
# as a stream with nothing written answers). Every UART() call's keyword arguments are appended to
# the file "uart.log" and the bytes each write() took to "writes.log" (one count a line), so the
# tests read exactly what the board's code asked for and what it did with partial counts.
import io

_UID = b"\xe6\x61\x38\x52\x83\x1c\x45\x2e"


def unique_id():
    return _UID


def reset_cause():
    return 1  # machine.PWRON_RESET


def reset():
    # what the board would do: start again. Here: say so in the file "resets" and end
    with open("resets", "a") as f:
        f.write("reset\n")
    raise SystemExit(0)


class WDT:
    # the watchdog: its timeout, and every 5th feed (the agent feeds it every 100 ms at least), in
    # the file "wdt.log"
    def __init__(self, id=0, timeout=5000):
        self.n = 0
        with open("wdt.log", "a") as f:
            f.write("timeout %d\n" % timeout)

    def feed(self):
        self.n += 1
        if self.n % 5 == 0:
            with open("wdt.log", "a") as f:
                f.write("fed %d\n" % self.n)


class Pin:
    OUT = 1

    def __init__(self, *a, **k):
        self.a = a

    def value(self, v=None):
        if v and self.a[0] == "LED":
            try:
                open("fatal").close()
            except OSError:
                return 0
            raise OSError("injected fatal")  # a file "fatal": the LED fails (test_supervisor)
        return 0


class UART(io.IOBase):
    def __init__(self, n, **kw):
        with open("config.json") as f:  # the launcher's pty: "path": "/dev/pts/N" (no json: heap)
            t = f.read()
        i = t.index('"path"')
        i = t.index('"', i + 6) + 1
        p = t[i : t.index('"', i)]
        with open("uart.log", "a") as f:
            f.write("%d %s\n" % (n, " ".join("%s=%r" % (k, kw[k]) for k in sorted(kw))))
        self.f = open(p, "r+b", buffering=0)
        self.most = 0
        try:
            with open("partial") as f:
                self.most = int(f.read())
        except OSError:
            pass
        self.calls = 0
        self.log = open("writes.log", "a") if self.most else None
        self.num = bytearray(8)  # a count as text for the log: written without allocating

    def readinto(self, b, n=None):
        return self.f.readinto(b) if n is None else self.f.readinto(memoryview(b)[:n])

    def write(self, b, off=0, n=None):
        # allocates nothing for write(buf, off, n), as a real UART's: the agent answers a POLL
        # with the heap locked (lwagent.io)
        if n is None:  # write(buf) or write(buf, n)
            n = len(b) if off == 0 else off
            off = 0
        if self.most:
            self.calls += 1
            if self.calls % 3 == 0:
                self._log(0)
                return None  # the TX ring is full: nothing taken
            n = min(n, self.most)
            self._log(n)
        m = 0
        while m < n:  # the pty takes all of it (a real UART: into its TX ring)
            m += self.f.write(b, off + m, n - m) or 0
        return n

    def _log(self, n):
        t = self.num
        i = 7
        t[i] = 10  # "\n"
        while True:
            i -= 1
            t[i] = 48 + n % 10
            n //= 10
            if not n:
                break
        self.log.write(t, i, 8 - i)

    def ioctl(self, req, arg):
        if req == 10:  # MP_STREAM_GET_FILENO: select.poll watches the pty itself
            return self.f.fileno()
        return 0

    def close(self):
        self.f.close()
