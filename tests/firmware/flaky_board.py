# A virtual board (boards/unix.py's functions, imported from boards/unix_base.mpy) whose ring
# refuses one batch of samples with a MemoryError -- what posting an alarm or a report does on a
# board whose heap has run out -- for
# the supervisor tests (tests/firmware/test_supervisor.py compiles it to boards/unix.mpy). The
# file "fail_at" holds N: the N-th write_samples call raises, once.
# The agent calls write_samples with the heap locked: the override is a plain method reading
# globals (a closure with more than 5 closed-over values and arguments builds its argument array
# on the heap, which fails there).
from boards.unix_base import *  # noqa: F403 -- boards/unix.py's functions (the test renames its .mpy)

from leadwire import ring
from leadwire.ring import EventRing as _Ring

try:
    with open("fail_at") as f:
        _at = int(f.read())
except OSError:
    _at = 0


class _Flaky(_Ring):
    calls = [0]

    def write_samples(self, payload, channel, n, count, start):
        self.calls[0] += 1
        if self.calls[0] == _at:
            raise MemoryError("injected")
        _Ring.write_samples(self, payload, channel, n, count, start)


if _at:
    ring.EventRing = _Flaky  # lwboot imports EventRing when it builds the ring
