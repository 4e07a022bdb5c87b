"""POLL copies on a lossy link: when the bridge sends a POLL twice (docs/protocol.md 5 "Copies", 6.5).

Sans-I/O, one per device (DeviceClient.copies). The caller reports every polling frame received
(`on_frame`), every gap (`on_gap`: a frame arrived past s(n)) and, for each POLL it sends, asks
`on_send(tag, lossy)` whether the same bytes go a second time. The device answers one copy of a
POLL (a POLL with the tag and low half of n of the one it answered last is not answered again):

| condition                                                       | result                      |
|-----------------------------------------------------------------|-----------------------------|
| off (config, serial, auth on: a signed copy is a replay)        | one send                    |
| the link not lossy lately (the caller's probe condition)        | one send                    |
| estimated frame loss < COPY_MIN_LOSS                            | one send                    |
| otherwise                                                       | two sends                   |
| frame 0 of a copied POLL's answer arrives twice, COPIES_ANSWERED | off for good, `off_reason`  |
|   times and a quarter of the copies sent (older firmware)       |                             |

Why the floor: a copy costs the bridge a send and the board a read per POLL, and pays only where
datagrams are lost often enough (docs/design/lossy-links.md: paired runs at 1% and 5%). The loss
estimate: gaps, each counted once (at the n it stood at: the frames held behind one gap are one
loss), per polling frame received, both halved every LOSS_SPAN frames.
"""

from __future__ import annotations

from collections import deque
from typing import Any

COPIES_ANSWERED = 16
COPY_MIN_LOSS = 0.025
LOSS_SPAN = 4096
_TAGS = 8  # copied POLLs remembered (the 8-bit tag comes round again after 256 sends)


class PollCopies:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.sent = 0  # POLLs sent twice
        self.answered_twice = 0  # ... whose answer began twice (the device answered the copy too)
        self.off_reason: dict[str, Any] | None = None  # set once when copies turned off
        self._tags: deque[int] = deque(maxlen=_TAGS)  # tags of the last POLLs sent twice
        self._began: set[int] = set()  # of those, the ones whose answer's frame 0 arrived
        self._frames = 0
        self._gaps = 0
        self._gap_n = -1

    def on_frame(self, tag: int, index: int) -> None:
        """A polling frame arrived (before the core acts on it)."""
        self._frames += 1
        if self._frames >= LOSS_SPAN:
            self._frames >>= 1
            self._gaps >>= 1
        if index == 0 and tag in self._tags:
            self._first_frame(tag)

    def on_gap(self, n: int) -> None:
        """A frame arrived past s(n): one before it was lost (counted once per n)."""
        if self._gap_n != n:
            self._gap_n = n
            self._gaps += 1

    def on_send(self, tag: int, lossy: bool) -> bool:
        """A POLL with `tag` goes out now; `lossy`: the link lost a datagram lately (the tail-loss
        probe's condition). True: send the same bytes twice."""
        if tag in self._tags:  # the tag came round again: the old copy's record goes
            self._tags.remove(tag)
            self._began.discard(tag)
        if not (lossy and self.enabled and self._gaps >= COPY_MIN_LOSS * max(self._frames, 200)):
            return False
        self.sent += 1
        self._tags.append(tag)
        return True

    def _first_frame(self, tag: int) -> None:
        began = self._began
        if tag not in began:
            began.add(tag)
            if len(began) > 8 * _TAGS:
                began.intersection_update(self._tags)
            return
        # a second frame 0: the device answered the copy too (or the network duplicated the answer)
        self.answered_twice += 1
        if self.enabled and self.answered_twice >= COPIES_ANSWERED and 4 * self.answered_twice >= self.sent:
            self.enabled = False
            self.off_reason = {"copies": self.sent, "answered_twice": self.answered_twice}
