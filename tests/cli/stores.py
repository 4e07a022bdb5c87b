"""Small stores written row by row through the bridge's own Store (no bridge, no devices): the
fixtures of the `events`, install and MQTT forwarder tests."""

from __future__ import annotations

from pathlib import Path

from leadwire.bridge.client import SEG_ARRIVAL, SEG_EVENT
from leadwire.bridge.store import Batch, Store

EPOCH = 0x1234ABCD
T0_US = 1_767_225_600_000_000  # 2026-01-01 00:00:00 UTC


def event_row(dev: int, offset: int, channel: int, data: bytes, rx_us: int) -> tuple[object, ...]:
    """A first arrival (SEG_EVENT row): lead 1, priority 0, 12 B of frame overhead."""
    return (dev, offset, EPOCH, 1, channel, offset, 1, 0, 12, None, rx_us, data)


def duplicate_row(dev: int, offset: int, channel: int, rx_us: int) -> tuple[object, ...]:
    """A later copy of an event (SEG_ARRIVAL row): lead 0, duplicate, no payload kept."""
    return (dev, offset, 0, EPOCH, 1, channel, 0, -1, offset, 0, True, False, 0, 4, 16, None, rx_us, None)


def fill(path: Path, devices: dict[str, list[tuple[int, int, bytes]]], duplicates: int = 0) -> Store:
    """A store with, per device id, its events (offset, channel, payload), one commit per device
    (rx_us: T0_US + offset ms), then `duplicates` copies of the first device's first events.
    Returns the open Store (the caller closes it; or writes more with write_events)."""
    store = Store(str(path), "test-bridge")
    devs = {}
    for i, (device_id, evs) in enumerate(devices.items()):
        dev, _ = store.register(device_id, "udp", "127.0.0.1:%d" % (4000 + i))
        devs[device_id] = dev
        write_events(store, dev, evs)
    if duplicates:
        first_id, evs = next(iter(devices.items()))
        rows = [duplicate_row(devs[first_id], o, ch, T0_US + o * 1000 + 1) for o, ch, _ in evs[:duplicates]]
        store.write(Batch(segments=[(SEG_ARRIVAL, rows)], commit_us=T0_US, arrivals=len(rows)))
    return store


def write_events(store: Store, dev: int, evs: list[tuple[int, int, bytes]]) -> None:
    rows = [event_row(dev, o, ch, data, T0_US + o * 1000) for o, ch, data in evs]
    store.write(Batch(segments=[(SEG_EVENT, rows)], commit_us=T0_US, arrivals=len(rows), events=len(rows)))
