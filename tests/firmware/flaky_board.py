# A virtual board (boards/unix.py's functions, imported from boards/unix_base.mpy) whose ring
# refuses one batch of samples with a MemoryError -- what posting an alarm or a report does on a
# board whose heap has run out -- for
# the supervisor tests (tests/firmware/test_supervisor.py compiles it to boards/unix.mpy). The
# file "fail_at" holds N: the N-th write_samples call raises, once.
from boards.unix_base import *  # noqa: F403 -- boards/unix.py's functions (the test renames its .mpy)


def _flaky():
    from leadwire import ring
    from leadwire.ring import EventRing as Ring

    try:
        with open("fail_at") as f:
            at = int(f.read())
    except OSError:
        return

    class Flaky(Ring):
        calls = [0]

        def write_samples(self, payload, channel, n, count, start):
            self.calls[0] += 1
            if self.calls[0] == at:
                raise MemoryError("injected")
            Ring.write_samples(self, payload, channel, n, count, start)

    ring.EventRing = Flaky  # lwboot imports EventRing when it builds the ring


_flaky()
del _flaky
