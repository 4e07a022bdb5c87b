"""Forwarding to MQTT: the bridge's ``[mqtt]`` section; every stored event, loss and boot published.

    [mqtt]
    url = "mqtt://127.0.0.1:1883"        # mqtts://host[:8883] for TLS
    topic = "leadwire/{device}/{channel}" # events; {device} and {channel} filled in per event
    qos = 1

A :class:`Forwarder` thread follows the store read-only (what it reads is committed: publishing
always comes after the commit) and publishes, in the store's order:

* every event arrival (first arrivals and the flagged later copies) on ``topic``, a JSON object:
  id, device, boot_epoch, channel, offset, lead, duplicate, rx_us and the payload in hex;
* every loss row (a recovery: n0, n1, lost, cause; published again when its recovery ends) on
  ``loss_topic``, and every boot seen (a restart) on ``boot_topic``.

At least once: the position of the last row the broker acknowledged (QoS 1 and 2; QoS 0: written
to the socket) is kept in a cursor file beside the store and advanced only over acknowledged rows,
so after a broker outage or a bridge restart publishing resumes from there (a row may be published
twice, never skipped; the ``id`` field tells copies apart). A broker that is away only stops this
thread's progress: polling and the store go on (the rows wait in the store, not in memory; at most
``MAX_PENDING`` messages are unacknowledged at a time).
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from . import logs
from .config import ConfigError, _int, _str, _unknown
from .store_reader import BootEntry, EventArrival, LossEntry, StoreReader

MAX_PENDING = 2000  # messages published and not yet acknowledged
PAGE = 500  # rows read from the store at a time
SAVE_INTERVAL = 0.5  # seconds between cursor file writes while publishing
KINDS = ("arrivals", "losses", "boots")  # the cursor's positions: arrival id, loss rowid, boot rowid


@dataclass(frozen=True)
class MqttConfig:
    host: str
    port: int
    tls: bool
    topic: str = "leadwire/{device}/{channel}"
    loss_topic: str = "leadwire/{device}/loss"
    boot_topic: str = "leadwire/{device}/boot"
    qos: int = 1
    client_id: str = ""
    username: str = ""
    password: str = field(default="", repr=False, compare=False)  # a secret: never in a log line
    ca_file: str = ""  # TLS: the CA bundle (empty: the system's)
    cert_file: str = ""  # TLS: a client certificate and its key
    key_file: str = ""
    keepalive: int = 30
    cursor: str = ""  # the cursor file (default: the store's path + ".mqtt-cursor")


_KEYS = {
    "url", "topic", "loss_topic", "boot_topic", "qos", "client_id", "username", "password", "password_file",
    "ca_file", "cert_file", "key_file", "keepalive", "cursor",
}  # fmt: skip
_SCHEMES = {"mqtt": (False, 1883), "tcp": (False, 1883), "mqtts": (True, 8883), "ssl": (True, 8883)}


def _topic(t: dict[str, Any], key: str, default: str, channel: bool) -> str:
    v = _str(t, key, "mqtt.", default)
    need = ("{device}", "{channel}") if channel else ("{device}",)
    try:
        v.format(device="d", channel=0)
    except (KeyError, IndexError, ValueError):
        raise ConfigError(
            "mqtt." + key, "may hold only {device}%s, got %r" % (" and {channel}" * channel, v)
        ) from None
    if any(n not in v for n in need) or "+" in v or "#" in v or not v:
        raise ConfigError("mqtt." + key, "must hold %s and no + or #, got %r" % (" and ".join(need), v))
    return v


def _file(t: dict[str, Any], key: str, base: Path | None) -> str:
    v = _str(t, key, "mqtt.", "")
    if not v:
        return ""
    p = Path(v) if base is None or Path(v).is_absolute() else base / v
    if not p.is_file():
        raise ConfigError("mqtt." + key, "file %s not found" % p)
    return str(p)


def parse_mqtt(t: dict[str, Any], base: Path | None, store: str, bridge_id: str) -> MqttConfig:
    """The [mqtt] table -> MqttConfig; ConfigError naming the key (never a password) when bad."""
    _unknown(t, _KEYS, "mqtt.")
    url = _str(t, "url", "mqtt.", "")
    u = urlsplit(url)
    if u.scheme not in _SCHEMES or not u.hostname or u.path not in ("", "/") or u.username:
        raise ConfigError("mqtt.url", "must be mqtt://HOST[:PORT] or mqtts://HOST[:PORT], got %r" % url)
    tls, port = _SCHEMES[u.scheme]
    try:
        port = u.port or port
    except ValueError:
        raise ConfigError("mqtt.url", "bad port in %r" % url) from None
    if store == ":memory:":
        raise ConfigError("mqtt", "forwarding reads the store: give [store] path a file")
    if "password" in t and "password_file" in t:
        raise ConfigError("mqtt.password", "give one of password or password_file, not both")
    password = _str(t, "password", "mqtt.", "")
    if "password_file" in t:
        pf = _file(t, "password_file", base)
        try:
            password = Path(pf).read_text().strip()
        except (OSError, UnicodeError) as e:
            raise ConfigError("mqtt.password_file", "cannot read %s (%s)" % (pf, type(e).__name__)) from None
    files = {k: _file(t, k, base) for k in ("ca_file", "cert_file", "key_file")}
    if not tls and any(files.values()):
        raise ConfigError("mqtt.url", "ca_file, cert_file and key_file need an mqtts:// url")
    if bool(files["cert_file"]) != bool(files["key_file"]):
        raise ConfigError("mqtt.cert_file", "give cert_file and key_file together")
    cursor = _str(t, "cursor", "mqtt.", "")
    if cursor and base is not None and not Path(cursor).is_absolute():
        cursor = str(base / cursor)
    return MqttConfig(
        host=u.hostname,
        port=port,
        tls=tls,
        topic=_topic(t, "topic", MqttConfig.topic, True),
        loss_topic=_topic(t, "loss_topic", MqttConfig.loss_topic, False),
        boot_topic=_topic(t, "boot_topic", MqttConfig.boot_topic, False),
        qos=_int(t, "qos", "mqtt.", 1, 0, 2),
        client_id=_str(t, "client_id", "mqtt.", "leadwire-" + bridge_id),
        username=_str(t, "username", "mqtt.", ""),
        password=password,
        keepalive=_int(t, "keepalive", "mqtt.", 30, 5, 3600),
        cursor=cursor or store + ".mqtt-cursor",
        **files,
    )


def _level(device_id: str) -> str:
    """A device id as one topic level (no separators or wildcards)."""
    return device_id.replace("/", "_").replace("+", "_").replace("#", "_")


def event_message(cfg: MqttConfig, e: EventArrival) -> tuple[str, dict[str, Any]]:
    return cfg.topic.format(device=_level(e.device_id), channel=e.channel), e.as_json()


def loss_message(cfg: MqttConfig, r: LossEntry) -> tuple[str, dict[str, Any]]:
    body = r._asdict()
    body["device"] = body.pop("device_id")
    body["recovered"] = bool(r.recovered)
    del body["rowid"]
    return cfg.loss_topic.format(device=_level(r.device_id)), body


def boot_message(cfg: MqttConfig, b: BootEntry) -> tuple[str, dict[str, Any]]:
    body = b._asdict()
    body["device"] = body.pop("device_id")
    del body["rowid"]
    return cfg.boot_topic.format(device=_level(b.device_id)), body


def load_cursor(path: str) -> dict[str, int]:
    try:
        d = json.loads(Path(path).read_text())
        return {k: int(d.get(k, 0)) for k in KINDS}
    except FileNotFoundError:
        return dict.fromkeys(KINDS, 0)
    except (OSError, ValueError, TypeError, AttributeError) as e:
        msg = "mqtt cursor %s is unreadable (%s): remove it to publish everything again"
        raise OSError(msg % (path, e)) from None


def save_cursor(path: str, cursor: dict[str, int]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(cursor, f)
    os.replace(tmp, path)


class Forwarder:
    """The publishing thread and its MQTT client (paho's network thread). start(), poke() after a
    commit (publishing starts at once instead of at the next read), stop()."""

    def __init__(self, cfg: MqttConfig, store_path: str, log: logging.Logger | None = None) -> None:
        self.cfg = cfg
        self.store_path = store_path
        self.log = log or logging.getLogger(logs.LOGGER)
        self.acked = load_cursor(cfg.cursor)  # everything up to these positions is acknowledged
        self.read = dict(self.acked)  # everything up to these positions is published (or pending)
        self.pending: deque[tuple[str, int, Any]] = deque()  # (kind, position, MQTTMessageInfo)
        self.published = 0  # messages handed to the client
        self.last_stored = 0  # the store's last arrival id when last read (for the backlog)
        self.connected = threading.Event()
        self._wake = threading.Event()
        self._stop = False
        self._saved = dict(self.acked)
        self._saved_at = 0.0
        self._save_failed = False  # the last cursor write failed (said once until one succeeds)
        self._client: Any = None
        self._thread: threading.Thread | None = None

    # -- lifecycle
    def start(self) -> None:
        import paho.mqtt.client as mqtt

        c = self.cfg
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=c.client_id)
        if c.username:
            client.username_pw_set(c.username, c.password or None)
        if c.tls:
            ctx = ssl.create_default_context(cafile=c.ca_file or None)
            if c.cert_file:
                ctx.load_cert_chain(c.cert_file, c.key_file)
            client.tls_set_context(ctx)
        client.max_inflight_messages_set(100)
        client.reconnect_delay_set(0.2, 5)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.connect_async(c.host, c.port, c.keepalive)
        client.loop_start()
        self._client = client
        self._thread = threading.Thread(target=self._run, name="leadwire-mqtt", daemon=True)
        self._thread.start()
        logs.event(self.log, logging.INFO, "mqtt_started", broker="%s:%d" % (c.host, c.port), tls=c.tls,
                   qos=c.qos, cursor=c.cursor, resume=self.acked)  # fmt: skip

    def poke(self) -> None:
        self._wake.set()

    def stop(self, drain: float = 5.0) -> None:
        """Publish what is stored (waiting up to `drain` seconds for the broker), save the cursor,
        disconnect. What is not acknowledged by then is published after the next start."""
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(drain + 5.0)
        if self._client is not None:
            self._client.disconnect()
            self._client.loop_stop()
        logs.event(self.log, logging.INFO, "mqtt_stopped", published=self.published, cursor=self.acked)

    # -- paho's callbacks (its network thread)
    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any = None) -> None:
        if reason.is_failure:
            logs.event(self.log, logging.WARNING, "mqtt_refused", reason=str(reason))
            return
        self.connected.set()
        self._wake.set()
        logs.event(self.log, logging.INFO, "mqtt_connected", broker="%s:%d" % (self.cfg.host, self.cfg.port))

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any = None) -> None:
        if self.connected.is_set():
            logs.event(self.log, logging.WARNING, "mqtt_disconnected", reason=str(reason))
        self.connected.clear()

    # -- the publishing thread
    def _run(self) -> None:
        """Read, publish, settle until stopped. An error (the store unreadable for a moment) is
        logged once and the loop goes on a second later: forwarding never ends while the bridge
        runs. A cursor file that cannot be written does not stop publishing (_settle)."""
        reader: StoreReader | None = None
        deadline = None
        said = ""
        while True:
            try:
                self._settle()
                if self._stop and deadline is None:
                    deadline = time.monotonic() + 5.0
                if reader is None:
                    reader = StoreReader.open(self.store_path)
                more = False
                if reader is not None and self.connected.is_set() and len(self.pending) < MAX_PENDING:
                    more = self._publish_some(reader)
                done = (not more and not self.pending) or not self.connected.is_set()
                if deadline is not None and (done or time.monotonic() > deadline):
                    break
                if not more:
                    self._wake.wait(0.05 if self.pending or deadline else 0.5)
                    self._wake.clear()
                said = ""
            except Exception as e:
                if repr(e) != said:
                    said = repr(e)
                    logs.event(self.log, logging.ERROR, "mqtt_failed", store=self.store_path, error=said)
                if reader is not None:
                    reader.close()
                    reader = None
                if self._stop:
                    break
                self._wake.wait(1.0)
                self._wake.clear()
        self._settle(force=True)
        if reader is not None:
            reader.close()

    def metrics(self) -> list[Any]:
        """Prometheus metric families (the bridge's /metrics, metrics.py)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        behind = max(0, self.last_stored - self.acked["arrivals"])
        up = 1 if self.connected.is_set() else 0
        published = (
            "messages handed to the MQTT client (events, losses, boots; QoS 0: again after a reconnect)"
        )
        lag = "store arrival rows (reports included) after the last one the broker acknowledged"
        return [
            GaugeMetricFamily("leadwire_mqtt_connected", "1 while connected to the MQTT broker", value=up),
            CounterMetricFamily("leadwire_mqtt_published", published, value=self.published),
            GaugeMetricFamily("leadwire_mqtt_behind", lag, value=behind),
        ]

    def _publish_some(self, r: StoreReader) -> bool:
        """Publish one page of each kind after what was read; True when any rows were found."""
        self.last_stored = r.last_arrival_id()
        c, room = self.cfg, MAX_PENDING - len(self.pending)
        rows: list[tuple[str, int, tuple[str, dict[str, Any]]]] = []
        for e in r.event_arrivals(self.read["arrivals"], limit=min(PAGE, room)):
            rows.append(("arrivals", e.id, event_message(c, e)))
        for lr in r.losses_after(self.read["losses"], limit=PAGE):
            rows.append(("losses", lr.rowid, loss_message(c, lr)))
        for b in r.boots_after(self.read["boots"], limit=PAGE):
            rows.append(("boots", b.rowid, boot_message(c, b)))
        for kind, pos, (topic, body) in rows:
            info = self._client.publish(topic, json.dumps(body, separators=(",", ":")), qos=c.qos)
            self.pending.append((kind, pos, info))
            self.read[kind] = pos
            self.published += 1
        return bool(rows)

    def _settle(self, force: bool = False) -> None:
        """Advance the acknowledged positions over the acknowledged head of the pending queue; a
        QoS 0 message the client could not send puts reading back there (published again)."""
        while self.pending:
            kind, pos, info = self.pending[0]
            if info.rc != 0 and self.cfg.qos == 0:  # not sent (QoS 1 and 2: kept, sent again)
                self.pending.clear()
                self.read = dict(self.acked)
                break
            if not info.is_published():
                break
            self.pending.popleft()
            self.acked[kind] = pos
        now = time.monotonic()
        if self.acked != self._saved and (force or now - self._saved_at >= SAVE_INTERVAL):
            self._saved_at = now
            try:
                save_cursor(self.cfg.cursor, self.acked)
            except OSError as e:  # publishing goes on; a restart before the next save repeats more
                if not self._save_failed:
                    logs.event(
                        self.log, logging.ERROR, "mqtt_cursor_failed", cursor=self.cfg.cursor, error=repr(e)
                    )
                self._save_failed = True
                return
            self._saved = dict(self.acked)
            if self._save_failed:
                logs.event(self.log, logging.INFO, "mqtt_cursor_saved", cursor=self.cfg.cursor)
            self._save_failed = False
