"""The MQTT receiver of bench/peer_mqtt_bench.py: a paho-mqtt subscriber that stores what arrives.

    python subscriber.py --port P --qos Q --store events.db

For fairness with leadwire's bridge, "acknowledged" means durably received: every message is
written to SQLite (WAL, synchronous=NORMAL, the bridge's settings) in batched transactions, one
every ``--commit-interval`` seconds (the bridge's default, 50 ms). Prints JSON lines on stdout:
``{"ready": 1}`` once subscribed, then one summary when stdin closes (the bench's stop signal).

What the receiver can tell about loss, duplication and reordering is only what MQTT gives it: the
DUP flag of a QoS 1 redelivery. The u32 sequence number at the start of each payload is the
bench's ground truth, used here only to count what MQTT did not signal.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

import click
import paho.mqtt.client as mqtt

from leadwire.bridge.store_baseline import MqttEvents

TOPIC = "lw/b1/1"
DROPPED = "$SYS/broker/publish/messages/dropped"


class Receiver:
    def __init__(self, store: str, interval: float) -> None:
        self.store = MqttEvents(store)
        self.interval = interval
        self.lock = threading.Lock()
        self.pending: list[tuple[int, int, int, bytes]] = []
        self.arrival = 0
        self.dup_flags = 0
        self.broker_dropped: int | None = None
        self.commits: list[tuple[float, int]] = []  # (time, events committed so far)
        self.committed = 0
        self.stop = threading.Event()
        self.subscribed = threading.Event()

    def on_message(self, client: Any, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        if msg.topic == DROPPED:
            try:
                self.broker_dropped = int(msg.payload)
            except ValueError:
                pass
            return
        p = msg.payload
        seq = int.from_bytes(p[:4], "big") if len(p) >= 4 else -1
        with self.lock:
            self.arrival += 1
            if msg.dup:
                self.dup_flags += 1
            self.pending.append((self.arrival, seq, int(msg.dup), p))

    def flush(self) -> None:
        with self.lock:
            rows, self.pending = self.pending, []
        if not rows:
            return
        self.store.write(rows)
        self.committed += len(rows)
        now = time.time()
        self.commits.append((now, self.committed))
        print('{"c": %d}' % self.committed, flush=True)  # progress, for the bench's stop condition

    def flusher(self) -> None:
        while not self.stop.wait(self.interval):
            self.flush()
        self.flush()

    def summary(self) -> dict[str, Any]:
        """Counts from the store: what arrived, and (ground truth) what was duplicated or reordered."""
        seqs = self.store.seqs()
        seen: set[int] = set()
        dups = reordered = 0
        top = -1
        for s in seqs:
            if s in seen:
                dups += 1
            seen.add(s)
            if s < top:
                reordered += 1
            top = max(top, s)
        return {
            "received": len(seqs),
            "distinct": len(seen),
            "max_seq": top,
            "duplicates": dups,
            "reordered": reordered,
            "dup_flags": self.dup_flags,
            "broker_dropped": self.broker_dropped,
            "commits": self.commits,
            "cpu_s": time.process_time(),
        }


@click.command()
@click.option("--port", type=int, required=True)
@click.option("--qos", type=int, default=0)
@click.option("--store", required=True)
@click.option("--commit-interval", type=float, default=0.05)
def main(port: int, qos: int, store: str, commit_interval: float) -> None:
    sys.exit(receive(port, qos, store, commit_interval))


def receive(port: int, qos: int, store: str, commit_interval: float) -> int:
    r = Receiver(store, commit_interval)
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="host-sub", protocol=mqtt.MQTTv311)
    c.max_queued_messages_set(0)

    def on_connect(client: mqtt.Client, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        client.subscribe([(TOPIC, qos), (DROPPED, 0)])

    def on_subscribe(client: mqtt.Client, userdata: Any, mid: int, rcs: Any, props: Any) -> None:
        r.subscribed.set()

    c.on_connect = on_connect
    c.on_subscribe = on_subscribe
    c.on_message = r.on_message
    c.connect("127.0.0.1", port, keepalive=60)
    c.loop_start()
    if not r.subscribed.wait(10):
        print(json.dumps({"error": "not subscribed within 10 s"}), flush=True)
        return 1
    t = threading.Thread(target=r.flusher, name="flusher", daemon=True)
    t.start()
    print(json.dumps({"ready": 1}), flush=True)
    sys.stdin.read()  # the bench closes stdin when the run is over
    time.sleep(1.2)  # one more $SYS interval, for the broker's dropped counter
    c.loop_stop()
    c.disconnect()
    r.stop.set()
    t.join()
    print(json.dumps(r.summary()), flush=True)
    r.store.close()
    return 0


if __name__ == "__main__":
    main()
