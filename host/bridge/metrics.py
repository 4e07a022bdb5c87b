"""Prometheus metrics: a custom collector reading the clients' counters at scrape time.

The hot path only increments plain ints in each DeviceClient; nothing here runs per event.
Served by prometheus-client's HTTP server, bound to 127.0.0.1 by default (``bridge.metrics``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from .client import CHANNEL_COUNTERS, DEVICE_COUNTERS

if TYPE_CHECKING:  # pragma: no cover
    from .daemon import Bridge

DEVICE_HELP = {
    "polls": "POLL requests sent",
    "round_trips": "requests answered (poll, hello and subscribe round trips)",
    "timeouts": "transport errors: no answer in time or a broken answer",
    "crc_errors": "frames dropped for a CRC mismatch",
    "bad_frames": "frames dropped for any other wire or payload error",
    "auth_forged": "frames refused for a wrong authentication tag (forged, wrong key, no session)",
    "auth_replayed": "signed frames refused as replays (counter seen or too old, an older session's)",
    "auth_unsigned": "unsigned frames refused from a device with a key",
    "overruns": "recoveries caused by a ring overrun (spec 004 case 3, same boot)",
    "overrun_lost": "events lost to overruns, exact (n0 - s(n)) mod 2^32",
    "restarts": "device restarts seen (new boot epoch)",
    "recoveries": "recovery phases entered (any cause)",
    "stale_answers": "answers that did not answer the outstanding request (late or duplicated datagrams)",
    "events_stored": "events stored (exactly once)",
    "reports_stored": "pushed reports stored (exactly once)",
    "acks_sent": "ACKs sent for reports",
    "error_frames": "ERROR frames received from the device",
    "unsolicited": "reports on channels without a session",
}
CHANNEL_HELP = {
    "received": "messages received (every arrival, duplicates included)",
    "duplicates": "arrivals of a message already received",
    "late": "arrivals with lead < 0 that were not duplicates",
    "gaps": "arrivals with lead > 1 (messages skipped before them)",
    "retransmissions": "reports received again with the same MessageNumber",
}
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class BridgeCollector(Collector):
    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge

    def collect(self) -> Iterator[Any]:
        b = self.bridge
        clients = list(b.clients.values())
        for name in DEVICE_COUNTERS:
            m = CounterMetricFamily("leadwire_" + name, DEVICE_HELP[name], labels=["device"])
            for c in clients:
                m.add_metric([c.device_id], c.dc[name])
            yield m
        for i, name in enumerate(CHANNEL_COUNTERS):
            m = CounterMetricFamily("leadwire_" + name, CHANNEL_HELP[name], labels=["device", "channel"])
            for c in clients:
                for ch, v in sorted(c.cc.items()):
                    m.add_metric([c.device_id, str(ch)], v[i])
            yield m
        g = GaugeMetricFamily("leadwire_client_offset", "client offset n (spec 004)", labels=["device"])
        iv = GaugeMetricFamily(
            "leadwire_poll_interval_seconds", "current adaptive poll interval", labels=["device"]
        )
        rec = GaugeMetricFamily("leadwire_recovering", "1 while in a recovery phase", labels=["device"])
        for c in clients:
            g.add_metric([c.device_id], c.n)
            iv.add_metric([c.device_id], c.interval)
            rec.add_metric([c.device_id], 1 if c.recovery is not None else 0)
        yield g
        yield iv
        yield rec
        yield from self._reach(list(b.runners.values()))
        faults = CounterMetricFamily(
            "leadwire_client_faults",
            "poll client errors (PollStateError) caught, each followed by a reset of the device's client",
            labels=["device"],
        )
        for r in b.runners.values():
            faults.add_metric([r.client.device_id], r.faults)
        yield faults
        yield CounterMetricFamily("leadwire_store_commits", "store transactions committed", value=b.commits)
        yield CounterMetricFamily("leadwire_store_arrivals", "arrival rows committed", value=b.rows_committed)
        yield GaugeMetricFamily("leadwire_devices", "devices polled by this bridge", value=len(clients))
        if b.forwarder is not None:  # [mqtt]
            yield from b.forwarder.metrics()
        yield from self._histogram(
            "leadwire_commit_latency_seconds",
            "event generation (prefix_us timestamp) to store commit",
            b.latency,
        )
        yield from self._histogram(
            "leadwire_commit_seconds", "duration of one store transaction", b.commit_time
        )

    @staticmethod
    def _reach(runners: list[Any]) -> Iterable[Any]:
        """Per device: answering or not (reach.py), its last valid answer, its release."""
        up = GaugeMetricFamily(
            "leadwire_device_up",
            "1 while the device answers; 0 after polling.unreachable_rounds silent rounds",
            labels=["device"],
        )
        seen = GaugeMetricFamily(
            "leadwire_device_last_seen_seconds",
            "time of the device's last valid answer, seconds since the epoch (absent: none yet)",
            labels=["device"],
        )
        info = GaugeMetricFamily(
            "leadwire_device_info",
            "1 per device, with its firmware, transport and board (from its HELLO) as labels",
            labels=["device", "firmware", "transport", "board"],
        )
        sends = CounterMetricFamily(
            "leadwire_send_errors", "requests the operating system refused to send", labels=["device"]
        )
        for r in runners:
            c = r.client
            up.add_metric([c.device_id], 1 if r.reach.up else 0)
            if r.reach.last_seen_us is not None:
                seen.add_metric([c.device_id], r.reach.last_seen_us / 1e6)
            info.add_metric([c.device_id, c.firmware, r.cfg.transport, c.board], 1)
            sends.add_metric([c.device_id], r.reach.send_errors)
        yield up
        yield seen
        yield info
        yield sends

    @staticmethod
    def _histogram(name: str, doc: str, h: Histogram) -> Iterable[Any]:
        acc = 0
        buckets = []
        for bound, count in zip(h.bounds, h.counts, strict=False):
            acc += count
            buckets.append((repr(bound), acc))
        acc += h.counts[-1]
        buckets.append(("+Inf", acc))
        yield HistogramMetricFamily(name, doc, buckets=buckets, sum_value=h.sum)


class Histogram:
    """A fixed-bucket histogram updated in bulk (once per commit, not per event)."""

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe_many(self, values_s: Iterable[float]) -> None:
        import bisect

        b = self.bounds
        counts = self.counts
        s = 0.0
        for v in values_s:
            counts[bisect.bisect_left(b, v)] += 1
            s += v
        self.sum += s


def make_registry(bridge: Bridge) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(BridgeCollector(bridge))
    return reg


def serve(registry: CollectorRegistry, host: str, port: int) -> tuple[Any, Callable[[], None], int]:
    """Start the /metrics HTTP server; returns (server, stop function, bound port)."""
    server, thread = start_http_server(port, addr=host, registry=registry)
    bound = server.server_address[1]

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return server, stop, bound


def render(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()
