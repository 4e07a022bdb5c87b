# A virtual board (boards/unix.py, imported from boards/unix_base.mpy) whose serial port fails on
# the first boot attempt, after the UDP socket is open -- the boot-fallback tests compile it to
# boards/unix.mpy in a board directory.
# On that failure it rewrites config.json, so a retry that read the file again would show it (its
# HELLO would carry the board id "reread"). A file "fail_always" makes every attempt fail.
from boards.unix_base import *  # noqa: F403 -- boards/unix.py's functions (the test renames its .mpy)

_calls = [0]


def serial(c, buf):
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
