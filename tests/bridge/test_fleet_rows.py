"""What a big fleet's commits carry per device: the devices row whose counters alone changed waits
(store.drain, COUNTERS_EVERY), and a one-event answer's arrival row."""

from __future__ import annotations

import json

import pytest

from leadwire import codec, messages, wire
from leadwire.bridge.config import PollConfig
from leadwire.bridge.rows import SEG_EVENT
from leadwire.bridge.store import COUNTERS_EVERY, Batch, drain
from leadwire.tools.simdevice import SimCore

from .helpers import make_client

pytestmark = pytest.mark.timeout(30)


def polls_in(row: tuple[object, ...]) -> int:
    return int(json.loads(str(row[11]))["device"]["polls"])


def test_counters_alone_wait_rows_do_not() -> None:
    cl, core, d = make_client(SimCore(0, key=b"k" * 16), PollConfig(batch=16))
    core.write_events(3)
    d.drain(4)  # HELLO, the first contact's RECOVERY and events, then NO_EVENT
    b = Batch()
    drain([cl], b, now=10.0)
    assert len(b.devices) == 1 and not cl.dirty
    written = b.devices[0]
    assert written[5] == cl.arrival == 3  # the arrival counter of the rows just drained

    d.exchange()  # NO_EVENT: the counters alone change
    assert cl.dirty
    b = Batch()
    drain([cl], b, now=10.0 + COUNTERS_EVERY / 2)
    assert b.devices == [] and cl.row_pending and not cl.dirty  # waits, pending
    b = Batch()
    drain([cl], b, now=10.0 + COUNTERS_EVERY * 0.9)
    assert b.devices == [] and cl.row_pending  # not looked at again before its time
    b = Batch()
    drain([cl], b, now=10.0 + COUNTERS_EVERY)
    assert len(b.devices) == 1 and not cl.dirty and not cl.row_pending
    assert polls_in(b.devices[0]) == polls_in(written) + 1

    core.write_events(1)
    d.exchange()  # an event: its row and the devices row (n, arrival) in the same batch at once
    b = Batch()
    drain([cl], b, now=10.0 + COUNTERS_EVERY + 0.01)
    assert b.events == 1 and len(b.devices) == 1
    assert b.devices[0][0] == cl.n and b.devices[0][5] == cl.arrival == 4

    d.exchange()  # NO_EVENT again: pending; a flush on request (no clock) writes it at once
    drain([cl], Batch(), now=10.0 + COUNTERS_EVERY + 0.02)
    assert cl.row_pending
    b = Batch()
    drain([cl], b)
    assert len(b.devices) == 1 and not cl.dirty and not cl.row_pending
    assert polls_in(b.devices[0]) == cl.dc["polls"]


def test_state_change_without_rows_is_written_at_once() -> None:
    """A devices row that differs in more than its counters goes out with the next commit even
    without rows (here the firmware a HELLO named, set by hand)."""
    cl, core, d = make_client(SimCore(0, key=b"k" * 16), PollConfig(batch=16))
    core.write_events(2)
    d.drain(4)
    drain([cl], Batch(), now=5.0)
    d.exchange()
    cl.firmware = "other"
    b = Batch()
    drain([cl], b, now=5.1)
    assert len(b.devices) == 1 and b.devices[0][8] == "other"


def test_one_event_answer_row() -> None:
    """A batch of one event: the arrival row of a column-wise batch (frame bytes = the EVENTS
    frame's size, unsigned), its counters and lead."""
    cl, core, d = make_client(SimCore(0, key=None), PollConfig(batch=16))
    core.write_events(2)
    d.drain(4)
    cl.clear_outputs()
    before = {ch: v[0] for ch, v in cl.cc.items()}
    stored = cl.dc["events_stored"]
    core.write_events(1)
    answers = core.handle(cl.request_bytes(d.t), d.t)
    assert len(answers) == 1 and codec.decode(answers[0]).type == wire.EVENTS
    assert cl.receive(answers[0], d.t, 123)
    (kind, rows), = cl.out_segments  # fmt: skip
    assert kind == SEG_EVENT and len(rows) == 1
    (a,) = cl.out_arrivals
    f = codec.decode(answers[0])
    _, records = messages.decode_records(f.payload)
    ch, data = records[0]
    assert a[0] == 1 and a[1] == cl.arrival and a[3] == cl.epoch and a[5] == ch and a[8] == f.seq == cl.n
    assert a[9] == 1 and a[12] == f.priority and a[13] == len(data) and a[14] == len(answers[0])
    assert a[16] == 123 and a[17] == data
    assert cl.cc[ch][0] == before.get(ch, 0) + 1 and cl.dc["events_stored"] == stored + 1
    assert cl.lead_last == cl.n
