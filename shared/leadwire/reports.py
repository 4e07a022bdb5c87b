# Report sequence (spec 003) for push sessions, provider side.
#
# R0800  a session (begun on SUBSCRIBE) numbers its first report 1.
# R0801  the number goes up by exactly 1, and only on confirmed delivery (status 200-299).
# R0802  reports sent with the same number are identical unless a fault response came back:
#        a timeout resends the cached encoded bytes as they were; a fault keeps the number and
#        lets the provider rebuild the report (e.g. with fewer events after a 413).


class ReportSequence:
    def __init__(self):
        self.number = 0  # 0: no session yet
        self.active = False
        self.sessions = 0
        self.delivered = 0
        self.retransmissions = 0
        self.faults = 0
        self._pending = None

    def begin(self):
        """Start a new publish-subscribe session: next report is number 1."""
        self.number = 1
        self.active = True
        self.sessions += 1
        self._pending = None

    def end(self):
        self.active = False
        self._pending = None

    @property
    def pending(self):
        """Encoded report awaiting confirmation, or None."""
        return self._pending

    def hold(self, encoded):
        """Record the encoded report sent with the current number; returns it.

        Holding a different report while one awaits confirmation would break R0802: refused.
        """
        if not self.active:
            raise ValueError("no session: call begin() first")
        if self._pending is not None and self._pending != encoded:
            raise ValueError("report %d is awaiting confirmation; resend it with timeout()" % self.number)
        self._pending = encoded
        return encoded

    def timeout(self):
        """No answer: the identical bytes to send again (same number)."""
        if self._pending is None:
            raise ValueError("nothing to retransmit")
        self.retransmissions += 1
        return self._pending

    def confirm(self, status):
        """Apply a delivery status; True (and number + 1) only for success."""
        if not self.active:
            return False
        if 200 <= status <= 299:
            self.number = (self.number + 1) & 0xFFFFFFFF
            self.delivered += 1
            self._pending = None
            return True
        self.faults += 1
        self._pending = None  # fault: same number, the report may be rebuilt
        return False
