"""docs/protocol.md 6.1's transition table, generated from the core poll client's own table
(leadwire.client: STATES, EVENTS_ORDER, TRANSITIONS; PollClient moves its `state` only through it).
In the host package: the core runs on MicroPython's small heap and needs the table, not its markdown.
tests/core/test_client.py checks that the document carries markdown() verbatim.
"""

from __future__ import annotations

from leadwire import client as c


def markdown() -> str:
    """The table for docs/protocol.md 6.1: a row per state, a column per event; '·' where the
    state stays, '—' where the event is not allowed in that state (PollStateError)."""
    rows = ["| state | " + " | ".join(c.EVENTS_ORDER) + " |", "|---" * (len(c.EVENTS_ORDER) + 1) + "|"]
    for s in c.STATES:
        row = c.TRANSITIONS[s]
        cells = ["—" if e not in row else "·" if row[e] == s else "→ " + row[e] for e in c.EVENTS_ORDER]
        rows.append("| **%s** | %s |" % (s, " | ".join(cells)))
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown())
