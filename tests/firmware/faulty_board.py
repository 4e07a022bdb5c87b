# A virtual board (boards/unix.py) whose serial port fails on the first boot attempt, after the
# UDP socket is open -- the boot-fallback tests compile it to boards/unix.mpy in a board directory.
# On that failure it rewrites config.json, so a retry that read the file again would show it (its
# HELLO would carry the board id "reread"). A file "fail_always" makes every attempt fail.
from gc import mem_free  # noqa: F401 -- lwboot's free heap (boards/unix.py)

KIND = "unix"
_calls = [0]


def uid():
    return "unix"


def serial(c):
    _calls[0] += 1
    try:
        open("fail_always").close()
        always = True
    except OSError:
        always = False
    if _calls[0] == 1 or always:
        with open("config.json", "w") as f:
            f.write('{"id": "reread", "ring": 64, "udp": false, "serial": false}')
        raise MemoryError("injected %d" % _calls[0])
    p = c.get("path")
    return open(p, "r+b", buffering=0) if p else None


def network(c):
    return None


def led(on):
    pass


def reset_cause():
    return 0
