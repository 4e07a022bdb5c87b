"""Bugs the chaos run found, each reduced to a deterministic test (sans-I/O, virtual time)."""

from __future__ import annotations

import json

import pytest

from leadwire import wire
from leadwire.bridge.client import ClientState, DeviceClient
from leadwire.bridge.config import DeviceConfig, PollConfig

from ..bridge.helpers import Driver, make_client

pytestmark = pytest.mark.timeout(30)


def restored(cl: DeviceClient) -> DeviceClient:
    """The client a restarted bridge builds from what the store committed (DeviceClient.snapshot)."""
    n, has_n, epoch, boots, lead_last, arrival, loss_seq, session, fw, board, bid, counters, _ = cl.snapshot()
    st = ClientState(n, bool(has_n), epoch, boots, lead_last, arrival, loss_seq, session, fw, board, bid,
                     json.loads(counters), recovery=cl.recovery)  # fmt: skip
    return DeviceClient(1, DeviceConfig("dev", "udp", key=None), PollConfig(batch=16), st)


def test_restart_found_by_recovery_keeps_its_boots_row_across_a_bridge_kill() -> None:
    # The board restarts; the bridge learns it from a RECOVERY carrying the new epoch and commits
    # (devices.boot_epoch = the new epoch). It is SIGKILLed before the HELLO that fills the new
    # boot's boots row is answered. The restarted bridge must still write that row: the restart
    # happened and was detected, and the boots table is where it is recorded.
    cl, core, d = make_client(capacity=16, start=500)
    core.write_events(4)
    d.run(3)
    old = core.epoch
    core.boot(start=7000)  # power cut
    core.write_events(2)
    d.exchange()  # RECOVERY with the new epoch: restart detected, HELLO asked next
    assert cl.out_losses[-1].cause == "restart" and cl.epoch == core.epoch != old
    assert [b.boot_epoch for b in cl.out_boots] == [old]  # the new boot's row waits for its HELLO
    # SIGKILL here: the store has what drain() took, the new epoch in the devices row
    cl2 = restored(cl)
    d2 = Driver(cl2, core)
    d2.exchange()  # the restarted bridge's HELLO
    assert d2.requests[-1].type == wire.HELLO
    assert [(b.boot_epoch, b.boots, b.detected_by) for b in cl2.out_boots] == [(core.epoch, 2, "recovery")]
