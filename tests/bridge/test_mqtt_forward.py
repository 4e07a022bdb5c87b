"""Forwarding to MQTT against a real mosquitto (started here on a free 127.0.0.1 port): every stored
event arrival, loss and boot arrives at a subscriber, through a broker stopped and started again
mid-run, and a restarted forwarder resumes from its cursor."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from leadwire.bridge import logs
from leadwire.bridge.config import ConfigError, parse
from leadwire.bridge.daemon import Bridge
from leadwire.bridge.metrics import generate_latest, make_registry
from leadwire.bridge.mqtt_forward import Forwarder, load_cursor, parse_mqtt
from leadwire.bridge.store import Batch
from leadwire.bridge.store_reader import StoreReader
from leadwire.tools.mosquitto import Mosquitto
from leadwire.tools.simdevice import SimFleet

from ..cli.stores import EPOCH, T0_US, fill, write_events
from .helpers import bridge_config, wait_for

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.skipif(Mosquitto.find() is None, reason="mosquitto is missing: apt-get install mosquitto"),
]


class Subscriber:
    """A persistent-session subscriber (QoS 1): the broker keeps what it misses. Returns once the
    broker has acknowledged the subscription."""

    def __init__(self, port: int, topic: str = "leadwire/#") -> None:
        import paho.mqtt.client as mqtt

        self.got: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        subscribed = threading.Event()
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="test-sub", clean_session=False)
        self.c.on_connect = lambda c, u, f, rc, p=None: c.subscribe(topic, qos=1)
        self.c.on_subscribe = lambda *a: subscribed.set()
        self.c.on_message = self._on_message
        self.c.reconnect_delay_set(0.1, 0.5)
        self.c.connect("127.0.0.1", port, 10)
        self.c.loop_start()
        assert subscribed.wait(10), "no SUBACK from the broker"

    def _on_message(self, c: Any, u: Any, msg: Any) -> None:
        with self.lock:
            self.got.append((msg.topic, json.loads(msg.payload)))

    def event_ids(self) -> set[int]:
        with self.lock:
            return {b["id"] for t, b in self.got if "id" in b}

    def wait(self, cond: Any, timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while not cond():
            assert time.monotonic() < end, "not within %.0f s: %d messages" % (timeout, len(self.got))
            time.sleep(0.02)

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def mqtt_cfg(port: int, store: Path, qos: int = 1) -> Any:
    return parse_mqtt({"url": "mqtt://127.0.0.1:%d" % port, "qos": qos}, None, str(store), "b")


def test_every_event_loss_and_boot_arrives_through_a_broker_restart(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    st = fill(db, {"pico-1": [(o, 1, b"%03d" % o) for o in range(50)]}, duplicates=3)
    st.write(Batch(boots=[(1, EPOCH, 1, "0.1.0", "rp2", T0_US, "hello")],
                   losses=[(1, 1, EPOCH, 50, 50, 60, 10, "overrun", T0_US, None, 0, "0.1.0")],
                   commit_us=T0_US))  # fmt: skip
    with Mosquitto(tmp_path) as broker:
        sub = Subscriber(broker.port)
        fwd = Forwarder(mqtt_cfg(broker.port, db), str(db), logs.setup("warning"))
        fwd.start()
        try:
            sub.wait(lambda: len(sub.event_ids()) == 53)
            broker.stop()  # the broker goes away: the store keeps taking events
            write_events(st, 1, [(o, 2, b"%03d" % o) for o in range(50, 150)])
            st.write(
                Batch(
                    losses=[(1, 1, EPOCH, 50, 50, 60, 10, "overrun", T0_US, T0_US + 5, 1, "0.1.0")],
                    commit_us=T0_US,
                )
            )  # fmt: skip: the recovery ended: the loss row again
            time.sleep(0.5)
            assert not fwd.connected.is_set()
            broker.start()
            write_events(st, 1, [(o, 1, b"%03d" % o) for o in range(150, 200)])
            sub.wait(lambda: len(sub.event_ids()) == 203)
            sub.wait(lambda: len([t for t, _ in sub.got if t.endswith("/loss")]) >= 2)
        finally:
            fwd.stop()
            sub.close()
            st.close()
        with StoreReader(db) as r:
            stored = {e.id for e in r.event_arrivals(0, limit=1000)}
        assert sub.event_ids() == stored and len(stored) == 203
        by_id = {b["id"]: (t, b) for t, b in sub.got if "id" in b}
        assert by_id[154] == ("leadwire/pico-1/1", {
            "id": 154, "device": "pico-1", "boot_epoch": EPOCH, "channel": 1, "offset": 150, "lead": 1,
            "duplicate": False, "rx_us": T0_US + 150_000, "payload": b"150".hex()})  # fmt: skip
        assert [b["duplicate"] for _, b in (by_id[i] for i in (51, 52, 53))] == [True] * 3
        boots = [b for t, b in sub.got if t == "leadwire/pico-1/boot"]
        assert boots[0] == {"device": "pico-1", "boot_epoch": EPOCH, "boots": 1, "firmware": "0.1.0",
                            "board": "rp2", "detected_by": "hello", "first_seen_us": T0_US}  # fmt: skip
        losses = [(b["lost"], b["recovered"], b["ended_us"]) for t, b in sub.got if t.endswith("/loss")]
        assert losses[0] == (10, False, None) and losses[-1] == (10, True, T0_US + 5)
        assert load_cursor(fwd.cfg.cursor)["arrivals"] == 203


def test_a_restarted_forwarder_resumes_from_its_cursor(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    st = fill(db, {"esp-2": [(o, 3, b"x") for o in range(20)]})
    with Mosquitto(tmp_path, persistence=False) as broker:
        sub = Subscriber(broker.port)
        try:
            fwd = Forwarder(mqtt_cfg(broker.port, db, qos=0), str(db))
            fwd.start()
            sub.wait(lambda: len(sub.event_ids()) == 20)
            fwd.stop()
            assert fwd.published == 20
            write_events(st, 1, [(o, 3, b"y") for o in range(20, 25)])
            again = Forwarder(mqtt_cfg(broker.port, db, qos=0), str(db))
            again.start()
            sub.wait(lambda: len(sub.event_ids()) == 25)
            again.stop()
            assert again.published == 5  # the 20 acknowledged before were not published again
        finally:
            sub.close()
            st.close()


def test_the_bridge_forwards_what_it_commits_through_a_broker_outage(tmp_path: Path) -> None:
    """The bridge goes on polling and storing while the broker is away; every event is published
    once it is back."""

    async def run(broker: Mosquitto) -> Bridge:
        fleet = await SimFleet(1, rate=0, capacity=64, seed=5).start()
        cfg = bridge_config(tmp_path, fleet.describe())
        cfg = parse({**_doc(cfg, tmp_path), "mqtt": {"url": "mqtt://127.0.0.1:%d" % broker.port,
                                                     "topic": "plant/{device}/ch{channel}"}})  # fmt: skip
        b = Bridge(cfg, logs.setup("warning"))
        await b.start()
        for want in (30, 60, 90):
            fleet.cores[0].write_events(30)
            await wait_for(lambda w=want: b.events_committed >= w)
            if want == 30:
                broker.stop()  # away while the next 30 are polled and stored
            elif want == 60:
                broker.start()
        fwd = b.forwarder
        assert fwd is not None
        with StoreReader(cfg.store) as r:  # every row stored so far acknowledged by the broker
            await wait_for(lambda: fwd.acked["arrivals"] == fwd.last_stored == r.last_arrival_id())
        metrics = generate_latest(make_registry(b)).decode()
        assert "leadwire_mqtt_connected 1.0" in metrics and "leadwire_mqtt_behind 0.0" in metrics
        assert "leadwire_mqtt_published_total %.1f" % fwd.published in metrics
        await b.stop()
        await fleet.stop()
        return b

    with Mosquitto(tmp_path) as broker:
        sub = Subscriber(broker.port, "plant/#")
        try:
            b = asyncio.run(run(broker))
            sub.wait(lambda: len({m["offset"] for t, m in sub.got if t.startswith("plant/sim-0/ch")}) >= 90)
        finally:
            sub.close()
    offsets = {m["offset"] for t, m in sub.got if t.startswith("plant/sim-0/ch") and not m["duplicate"]}
    assert len(offsets) == b.events_committed == 90


def _doc(cfg: Any, tmp: Path) -> dict[str, Any]:
    """bridge_config's document again (its devices with auth off), for adding [mqtt]."""
    devs = [{"id": d.id, "udp": "%s:%d" % (d.host, d.port), "auth": False} for d in cfg.devices]
    return {
        "bridge": {"metrics": "", "id": "test-bridge"},
        "store": {"path": cfg.store, "commit_interval": 0.02},
        "polling": {"interval": 0.01, "interval_min": 0.002, "interval_max": 0.05},
        "device": devs,
    }


@pytest.mark.parametrize(
    ("table", "error"),
    [
        ({"url": "http://x"}, "mqtt.url: must be mqtt://HOST[:PORT] or mqtts://HOST[:PORT], got 'http://x'"),
        ({"url": "mqtt://h", "qos": 3}, "mqtt.qos: must be between 0 and 2, got 3"),
        ({"url": "mqtt://h", "topic": "a/{device}"}, "mqtt.topic: must hold {device} and {channel}"),
        ({"url": "mqtt://h", "topic": "a/{dev}/{channel}"}, "mqtt.topic: may hold only {device} and"),
        ({"url": "mqtt://h", "ca_file": "x"}, "mqtt.ca_file: file x not found"),
        ({"url": "mqtt://h", "colour": 1}, "mqtt.colour: unknown key"),
        ({"url": "mqtt://h", "password": "p", "password_file": "f"}, "mqtt.password: give one of"),
    ],
)
def test_bad_mqtt_settings_name_the_key(table: dict[str, Any], error: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_mqtt(table, None, "s.db", "b")
    assert str(e.value).startswith(error)


def test_a_cursor_that_cannot_be_written_is_said_once_and_publishing_goes_on(tmp_path: Path) -> None:
    """The cursor file cannot be written (its directory is missing): one error line, publishing
    goes on (events stored meanwhile arrive too), and the cursor is saved once it can be."""
    import io

    db = tmp_path / "s.db"
    st = fill(db, {"esp-2": [(o, 3, b"x") for o in range(10)]})
    cursor = tmp_path / "later" / "cursor"
    stream = io.StringIO()
    with Mosquitto(tmp_path, persistence=False) as broker:
        sub = Subscriber(broker.port)
        cfg = parse_mqtt(
            {"url": "mqtt://127.0.0.1:%d" % broker.port, "cursor": str(cursor)}, None, str(db), "b"
        )
        fwd = Forwarder(cfg, str(db), logs.setup("error", stream))
        fwd.start()
        try:
            sub.wait(lambda: len(sub.event_ids()) == 10)
            time.sleep(1.2)  # two more saves tried
            write_events(st, 1, [(o, 3, b"y") for o in range(10, 15)])
            sub.wait(lambda: len(sub.event_ids()) == 15)
            cursor.parent.mkdir()
            end = time.monotonic() + 10
            while not cursor.exists() and time.monotonic() < end:
                time.sleep(0.05)
        finally:
            fwd.stop()
            sub.close()
            st.close()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(x["event"], "No such file or directory" in x["error"]) for x in lines] == [
        ("mqtt_cursor_failed", True)
    ]
    assert load_cursor(str(cursor))["arrivals"] == 15
