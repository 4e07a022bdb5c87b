"""The core poll client's states and transitions (spec 004, docs/protocol.md 6.1), as a table a reader can
check (after h11's _state.py): STATES, the EVENTS that move between them, and TRANSITIONS, state ->
{event: next state}. In the host package (not loaded on boards: the table and state_of cost heap the
board-sized core tests do not have); PollClient keeps its fields, and state_of() reads the state
from them. tests/core/test_client.py drives PollClient and HoldingPollClient through lossy,
overrunning, restarting runs and checks every step against TRANSITIONS, and docs/protocol.md 6.1
carries markdown() verbatim.

Which fields make the state:
  START          no boot epoch known yet (a HELLO answer gives it)
  FIRST_CONTACT  an epoch, but no event and no held range of the current boot (`fresh`): only a
                 RECOVERY is taken (it names the whole held range), EVENTS/NO_EVENT flip the probe
  RECOVERY       a RECOVERY acted on and its range n0..n1 not consumed yet (the Loss is open)
  NORMAL         everything else: polling from n
"""

from __future__ import annotations

from typing import Any

from leadwire import client as c
from leadwire.hold import AHEAD

START = "start"
FIRST_CONTACT = "first contact"
NORMAL = "normal"
RECOVERY = "recovery phase"
STATES = (START, FIRST_CONTACT, NORMAL, RECOVERY)

# what happens, from the caller's side: a HELLO answer (same boot, new boot), events taken (all of
# the range still open, or reaching its n1), nothing new, a RECOVERY acted on, a RECOVERY saying the
# device has not reached n yet (AHEAD, leadwire.hold), an answer ignored (stale), a timeout
HELLO_SAME = "HELLO, same epoch"
HELLO_NEW = "HELLO, new epoch"
EVENTS_TAKEN = "EVENTS taken"
EVENTS_TO_N1 = "EVENTS taken up to n1"
NOTHING = "NO_EVENT (or EVENTS while fresh)"
RECOVER = "RECOVERY acted on"
AHEAD_OF_DEVICE = "RECOVERY behind n (AHEAD)"
STALE = "stale answer"
TIMEOUT = "timeout"
EVENTS = (
    HELLO_SAME,
    HELLO_NEW,
    EVENTS_TAKEN,
    EVENTS_TO_N1,
    NOTHING,
    RECOVER,
    AHEAD_OF_DEVICE,
    STALE,
    TIMEOUT,
)

_ANY: dict[str, str | None] = {STALE: None, TIMEOUT: None}  # None: the state does not change
TRANSITIONS: dict[str, dict[str, str | None]] = {
    START: {**_ANY, HELLO_SAME: FIRST_CONTACT},  # (no epoch known: every HELLO is "the same")
    FIRST_CONTACT: {**_ANY, HELLO_SAME: None, HELLO_NEW: FIRST_CONTACT, NOTHING: None, RECOVER: RECOVERY},
    NORMAL: {**_ANY, HELLO_SAME: None, HELLO_NEW: FIRST_CONTACT, EVENTS_TAKEN: None, NOTHING: None,
             RECOVER: RECOVERY},
    RECOVERY: {**_ANY, HELLO_SAME: None, HELLO_NEW: FIRST_CONTACT, EVENTS_TAKEN: None, EVENTS_TO_N1: NORMAL,
               NOTHING: None, RECOVER: None, AHEAD_OF_DEVICE: None},
}  # fmt: skip


def state_of(cl: Any) -> str:
    """The state of a PollClient (or HoldingPollClient), read from its fields."""
    if cl.epoch is None:
        return START
    if cl.fresh:
        return FIRST_CONTACT
    loss = cl.loss
    if loss is not None and not loss.ended:
        return RECOVERY
    return NORMAL


def event_of(
    before: str,
    after: str,
    kind: str | None,
    epoch_before: int | None,
    epoch_after: int | None,
    timed_out: bool = False,
) -> str:
    """The event one on_frame() result (kind) or a timeout was, given the states around it."""
    if timed_out:
        return TIMEOUT
    if kind == c.HELLO:
        return HELLO_SAME if epoch_before in (None, epoch_after) else HELLO_NEW
    if kind == c.STALE or kind == c.OTHER:
        return STALE
    if kind == AHEAD:
        return AHEAD_OF_DEVICE
    if kind == c.NOTHING:
        return NOTHING
    if kind == c.RECOVER:
        return RECOVER
    if kind == c.EVENTS:
        if before == RECOVERY and after == NORMAL:
            return EVENTS_TO_N1
        if after == RECOVERY and before != RECOVERY:
            return RECOVER  # held frames an overrun RECOVERY took (leadwire.hold): answered EVENTS
        return EVENTS_TAKEN
    return STALE


def next_state(state: str, event: str) -> str:
    """TRANSITIONS as a function: the state after `event` (KeyError: not allowed in `state`)."""
    nxt = TRANSITIONS[state][event]
    return state if nxt is None else nxt


def markdown() -> str:
    """The table for docs/protocol.md 6.1: a row per state, a column per event; '·' where the
    state stays, '—' where the event cannot happen in that state."""
    head = "| state | " + " | ".join(EVENTS) + " |"
    rule = "|---" * (len(EVENTS) + 1) + "|"
    rows = [head, rule]
    for s in STATES:
        cells = []
        for e in EVENTS:
            if e not in TRANSITIONS[s]:
                cells.append("—")
            else:
                nxt = TRANSITIONS[s][e]
                cells.append("·" if nxt is None else "→ " + nxt)
        rows.append("| **%s** | %s |" % (s, " | ".join(cells)))
    return "\n".join(rows)
