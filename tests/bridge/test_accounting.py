"""Exact accounting (host/bridge/accounting.py): the one check of "stored once or counted lost".

The scenario behind the peer bench's silent events: the first events a run stores are held frames an
overrun RECOVERY took (leadwire.hold), with a lost frame before them and one between them. The
client writes one loss row for both gaps, from the n it had before the frames (client_n + 1 lies
before the first stored offset), then the overrun past them. Every event is stored or counted;
the bench's own count dropped that row for starting before the first stored event and called the
second gap (one frame: 21 events of 64 B, 5 of 256 B) silent.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from leadwire import codec, wire
from leadwire.bridge.accounting import AccountingError, check_boot, check_client, check_store, require
from leadwire.bridge.client import DeviceClient
from leadwire.bridge.config import DeviceConfig, PollConfig
from leadwire.bridge.store import Batch, Store, drain
from leadwire.bridge.store_reader import LossRow, StoreReader
from leadwire.tools.simdevice import SimCore

from . import lossy_sim

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(60)


def row(client_n: int, lost: int | None, cause: str = "overrun", n0: int = 0) -> LossRow:
    return LossRow(1, 0, 7, client_n, n0, 0, lost, cause)


def test_classes_of_every_offset() -> None:
    # boot from 100: 100-104 before contact, 105-107 stored, 108-109 lost, 110 stored, 111 silent,
    # 112 stored, then 113-114 pending (the bridge's n is 112)
    rows = [row(0, None, "first_contact", n0=105), row(107, 2)]
    led = check_boot(100, 114, [105, 106, 107, 110, 112], rows, polled_to=112)
    assert (led.generated, led.stored, led.lost, led.before_contact, led.pending, led.silent) == (
        15, 5, 2, 5, 2, 1)  # fmt: skip
    assert not led.ok and "silent offsets [111]" in led.problems[0]
    with pytest.raises(AccountingError, match="silent 1"):
        require(led, "dev")
    # drained: nothing may be pending, the tail is silent
    assert check_boot(100, 114, [105, 106, 107, 110, 112], rows).silent == 3


def test_a_row_is_one_run_of_offsets() -> None:
    # held frames 20-24 and 30-34 taken by a RECOVERY from n = 9: gaps 10-19 and 25-29, a row each
    stored = [*range(20, 25), *range(30, 35), *range(40, 46)]
    rows = [row(0, None, "first_contact", n0=10), row(9, 10), row(24, 5), row(34, 5)]  # 35-39 overwritten
    led = require(check_boot(10, 45, stored, rows))
    assert (led.stored, led.lost, led.silent) == (16, 20, 0)
    # one row for both gaps (from n = 9, 15 lost) would cover the frame 20-24 and leave 25-29 silent
    led = check_boot(10, 45, stored, [rows[0], row(9, 15), rows[3]])
    assert (led.double, led.silent) == (5, 5)


def test_twice_double_and_phantom_are_errors() -> None:
    led = check_boot(0, 9, [0, 1, 1, 2, 12], [row(2, 3), row(3, 1)], polled_to=9)
    assert (led.twice, led.phantom, led.double) == (1, 1, 1)  # 1 twice; 12 never made; 4 counted twice
    assert led.silent == 4  # 6-9: below n, in no row
    led = check_boot(0, 9, list(range(8)), [row(7, 5)])
    assert led.phantom == 3 and led.lost == 2


def lw_host_account() -> Any:
    """bench/peer_mqtt/lw_host.py's account (the bench's own summary of a store)."""
    spec = importlib.util.spec_from_file_location("lw_host", ROOT / "bench" / "peer_mqtt" / "lw_host.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.account


def test_held_frames_first_in_a_run_two_gaps_two_rows_nothing_silent(tmp_path: Path) -> None:
    """First contact (n0 = 1072), then POLL(1071) answered by 4 frames of 21 events of which 0 and 2
    are lost; the ring turns over past all of it before the gap repoll gets there: its RECOVERY takes
    frames 1 and 3 (the run's first stored events) and counts both gaps and the overwritten rest."""
    core = SimCore(0, capacity=128, slot_size=64, payload_size=64, start=1000)
    poll = PollConfig(batch=255, max_bytes=1460, frames=4, pipeline=False, follow=False, copies=False)
    st = Store(str(tmp_path / "lw.db"), "t")
    dev, _ = st.register("dev", "udp", "127.0.0.1:1")
    cl = DeviceClient(dev, DeviceConfig("dev", "udp"), poll)
    t = [0.0]

    def exchange(drop: tuple[int, ...] = ()) -> list[tuple[int, int]]:
        t[0] += 0.001
        data = cl.request_bytes(t[0])
        outs = core.handle(data, t[0])
        for i, out in enumerate(outs):
            if i not in drop:
                cl.receive(out, t[0], int(t[0] * 1e6))
        return [(codec.decode(o).type, codec.decode(o).seq) for o in outs]

    def newest() -> int:
        return core.ring.newest()

    core.write_events(200)
    assert exchange()[0][0] == wire.HELLO
    assert exchange() == [(wire.RECOVERY, 1072)]  # first contact: 1072..1199 held
    assert exchange(drop=(0, 2)) == [(wire.EVENTS, o) for o in (1072, 1093, 1114, 1135)]
    assert sorted(cl.pc.held) == [1093, 1135]
    require(check_client(cl, core.start, newest()))  # nothing silent at any step
    core.write_events(300)  # the ring (128) turns over past all of it
    assert exchange() == [(wire.RECOVERY, 1372)]
    require(check_client(cl, core.start, newest()))
    rows = {r.seq: (r.cause, r.client_n, r.lost) for r in cl.out_losses}
    assert list(rows.values()) == [("first_contact", 0, None), ("overrun", 1071, 21), ("overrun", 1113, 21),
                                   ("overrun", 1155, 216)]  # fmt: skip
    assert [e[2] for e in cl.out_events] == [*range(1093, 1114), *range(1135, 1156)]
    for _ in range(3):
        exchange()
    assert cl.n == newest() == 1499
    led = require(check_client(cl, core.start, newest(), drained=True))
    assert (led.generated, led.stored, led.lost, led.before_contact) == (500, 42 + 128, 258, 72)
    b = Batch()
    drain([cl], b)
    st.write(b)
    st.close()
    with StoreReader(tmp_path / "lw.db") as r:
        assert require(check_store(r, dev, {cl.epoch: (1000, 1499)})).line() == led.line()
        own = require(check_store(r, dev))  # the store its own witness: from first contact's n0 on
        assert (own.generated, own.stored, own.lost, own.silent) == (428, 170, 258, 0)
    acc = lw_host_account()(str(tmp_path / "lw.db"))
    got = (acc["silent_lost"], acc["counted_lost"], acc["events_all_channels"], acc["offset_span"])
    assert got == (0, 258, 170, 428)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    point=st.sampled_from([(64, 264, 300_000), (64, 264, 60_000), (256, 60, 100_000), (256, 60, 10_000)]),
    loss=st.sampled_from([0.0, 0.01, 0.05, 0.2]),
    dup=st.sampled_from([0.0, 0.05]),
    reorder=st.sampled_from([0.0, 0.1]),
    spike=st.sampled_from([0.0, 0.02]),
    host=st.sampled_from([(0, 0, 0.0), (10, 10, 0.0), (30, 20, 0.01), (60, 40, 0.03)]),
    follow=st.booleans(),
    restart=st.sampled_from([0.0, 0.0, 0.002]),
)
# the device restarts at the window's end and writes nothing more: the client waits in RESTARTED
# for the new boot's first RECOVERY with no n of that boot, and there is nothing to drain
@example(seed=254, point=(256, 60, 10_000), loss=0.0, dup=0.05, reorder=0.0, spike=0.02, host=(0, 0, 0.0),
         follow=False, restart=0.002)  # fmt: skip
def test_property_bridge_client_overloaded_slow_host_exact_at_every_step(
    seed: int, point: tuple[int, int, int], loss: float, dup: float, reorder: float, spike: float,
    host: tuple[int, int, float], follow: bool, restart: float,
) -> None:  # fmt: skip
    """The bridge client (DeviceClient) against a device far faster than it (the ring turning over
    within a round trip at the top rates), over a link that loses, duplicates, reorders and delays
    (late answers), with a host slow per frame, per event and in stalls of up to 20 ms (a loaded
    machine, the store writer), and device restarts (a new boot every ~0.5 s of 20 us steps in a
    third of the examples): after every frame the host reads, every offset of the device's boot up
    to the client's n is stored once or in one loss row (check_client), and a boot that ends is
    exact when it ends; drained at the end, nothing pending (lossy_sim.drain_and_account)."""
    size, ring, rate = point
    host_us, host_ev_us, stall = host
    lossy_sim.run(size, ring, rate, loss, seed=seed, window=0.03, dup=dup, reorder=reorder, spike=spike,
                  host_us=host_us, host_ev_us=host_ev_us, stall=stall, stall_ms=20, follow=follow,
                  restart=restart, check_every=1)  # fmt: skip
