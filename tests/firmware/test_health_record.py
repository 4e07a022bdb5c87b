"""The health record's heap fields (h16) and the tasks record: a heap above
64 KB (a Pico's ~190 KB, an ESP32's) is reported, not saturated at 65,535; exact below 32 KB."""

from __future__ import annotations

import pytest

from leadwire import device, messages, wire


def record(free: int, low: int, restarts: int = 0) -> tuple[bytes, bytes]:
    # the agent's health list: boots, cause, uptime, free, low, overruns, dropped, bad, overflow,
    # alarms, last alarm, restarts (lwagent's _RESTARTS = 11)
    h = [3, 1, 60, free, low, 70000, 0, 2, 0, 0, 0, restarts]
    buf = bytearray(24)
    assert device.health_into(buf, h) == messages.HEALTH_SIZE
    rec = bytes(buf[:16])
    assert device.health_into(buf, h, 11, 1) == messages.HEALTH_TASKS_SIZE == 2
    return rec, bytes(buf[:2])


@pytest.mark.parametrize(
    "free,sent,read",
    [
        (0, 0x0000, 0),
        (20000, 0x4E20, 20000),  # below 32 KB: bytes, exactly
        (32767, 0x7FFF, 32767),
        (32768, 0x8080, 32768),  # 256-byte units from here (bit 15 set)
        (190000, 0x8000 | 742, 189952),  # a Pico's free heap: 742 x 256, not 65,535
        (8388352, 0xFFFF, 8388352),  # the largest
        (9000000, 0xFFFF, 8388352),  # saturated there
    ],
)
def test_heap_fields_are_h16(free: int, sent: int, read: int) -> None:
    rec, _ = record(free, free)
    assert rec[6:8] == sent.to_bytes(2, "big") and rec[8:10] == sent.to_bytes(2, "big")
    h = messages.decode_health(rec)
    assert (h["heap_free"], h["heap_min"]) == (read, read)
    assert h["overruns"] == 0xFFFF and h["bad_frames"] == 2 and h["boots"] == 3  # the rest as before


def test_tasks_record() -> None:
    _, tasks = record(1000, 900, restarts=5)
    assert tasks == b"\x00\x05" and messages.decode_health_tasks(tasks) == {"restarts": 5}
    _, tasks = record(1000, 900, restarts=70000)
    assert messages.decode_health_tasks(tasks) == {"restarts": 0xFFFF}  # saturated
    with pytest.raises(wire.WireError):
        messages.decode_health_tasks(b"\x00\x05\x00")
