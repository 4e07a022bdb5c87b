"""Whether each device answers, since when it does not, and the likely causes told apart.

A *valid answer* is any frame that passed decoding and authentication (the client's counters of
round trips, stale answers, reports, unsolicited reports and ERROR frames grow). A *silent round* is
a request that timed out (the client's ``timeouts``). :class:`ReachMonitor` looks at every device
a few times a second (never per datagram): ``unreachable_rounds`` silent rounds in a row make a
``device_unreachable`` warning naming the causes it can tell apart from what did arrive meanwhile,
and the next valid answer a ``device_reachable`` line.

The causes (codes in the log line's ``causes``, a sentence each in ``detail``):

* ``send_failed``: sending fails (the errno: e.g. EINVAL from a socket bound to 127.0.0.1 sending
  to a LAN address);
* ``port_unreachable`` / ``host_unreachable``: ICMP errors for the device's address (the UDP socket
  reads them with IP_RECVERR): nothing listens on that port, or no route to the host;
* ``other_port``: datagrams from the device's IP but another port;
* ``bad_tag``: answers whose authentication tag fails (the board has another key); ``replayed``;
* ``unsigned``: unsigned answers while this device has a key (the board has none);
* ``signed``: signed answers while this device has ``auth = false`` (the board has a key);
* ``crc_errors`` / ``bad_frames``: broken frames (a serial line's baud rate, another protocol);
* ``port_closed``: a serial port that cannot be opened;
* ``no_answer``: none of the above: nothing came back at all.

A device with a key gets one *probe* per silent episode: a POLL signed under a throwaway key. The
leadwire firmware answers a refused frame other than a HELLO with its boot HELLO (signed with its
own key) while it has no session (a new boot): under our key that is a valid hint (the handshake
goes on) or a bad tag (a wrong key). The handshake HELLOs signed with a wrong key get no answer at
all, by design of the protocol (no oracle), so without the probe a wrong key looks like silence. The
board counts the probe as forged, as it counts a wrong key's HELLOs. A board that already has a
session with another host stays silent: then a wrong key is ``no_answer``. A device with
``auth = false`` needs no probe: its unsigned requests are refused frames already.
"""

from __future__ import annotations

import errno as errno_mod
import logging
import os
from operator import itemgetter
from typing import Any

from leadwire import wire

from . import logs

VALID = ("round_trips", "stale_answers", "reports_stored", "unsolicited", "error_frames")
REFUSED = ("auth_forged", "auth_replayed", "auth_unsigned", "bad_frames", "crc_errors")
_valid = itemgetter(*VALID)
_refused = itemgetter(*REFUSED)
TICK = 0.5  # s between looks at every device: 1.3 ms a look at 1,000 answering devices, 0.6 idle
_SIGNED = wire.F_AUTH << 4  # the flag bit in a frame's second byte
_MAX_PORTS = 8  # other source ports remembered per device
STORE_EVERY_US = 5_000_000  # a device's last contact goes to the store at most this often (and at stop)


def _err(code: int) -> str:
    return "%s (%s)" % (errno_mod.errorcode.get(code, str(code)), os.strerror(code))


class Reach:
    """One device's reachability; counts fed by the I/O layer (rare paths only)."""

    def __init__(
        self,
        device_id: str,
        transport: str,
        address: str,
        auth: bool,
        counters: dict[str, int],
        last_seen_us: int | None = None,
    ) -> None:
        self.device_id = device_id
        self.transport = transport
        self.address = address
        self.auth = auth
        self.up = True
        self.last_seen_us = last_seen_us
        self.stored_us = last_seen_us or 0  # the last contact the store has
        self.down_since_us = 0
        self.valid = sum(_valid(counters))
        self.probed = False
        self.signed = self.unsigned = 0
        self.icmp: dict[int, int] = {}
        self.other_ports: dict[int, int] = {}
        self.sends_failed: dict[int, int] = {}
        self.refused0: tuple[int, ...] = ()
        self.reset(counters)
        self.send_errors = 0  # every failed send (the metric)
        # errnos already logged: once each until the device is reachable again after being down (the
        # metric counts every failed send)
        self.send_logged: set[int] = set()
        self.open_error: str | None = None  # the serial port's last open failure
        self.open_logged: str | None = None

    def reset(self, counters: dict[str, int]) -> None:
        """A valid answer: the silent episode (if any) ends; its evidence starts from zero. (Runs for
        every answering device at every tick: nothing is allocated unless there was evidence.)"""
        self.timeouts0 = counters["timeouts"]
        refused = _refused(counters)
        if refused != self.refused0:  # the same counts keep their tuple: a new one at every tick
            self.refused0 = refused  # would be young for the collector to walk (heap.py)
        if self.probed or self.signed or self.unsigned or self.icmp or self.other_ports or self.sends_failed:
            self.probed = False
            self.signed = 0  # frames with the auth flag seen while silent (inspect)
            self.unsigned = 0
            self.icmp = {}
            self.other_ports = {}
            self.sends_failed = {}

    # -- evidence, from the I/O layer ----------------------------------------------------

    def inspect(self, data: bytes) -> None:
        """A datagram from the device while it is silent: signed or not (before any check)."""
        if len(data) > 1:
            if data[1] & _SIGNED:
                self.signed += 1
            else:
                self.unsigned += 1

    def on_icmp(self, code: int) -> None:
        self.icmp[code] = self.icmp.get(code, 0) + 1

    def on_other_port(self, port: int) -> None:
        if port in self.other_ports or len(self.other_ports) < _MAX_PORTS:
            self.other_ports[port] = self.other_ports.get(port, 0) + 1

    def on_send_error(self, code: int) -> bool:
        """Count a failed send; True when this cause is new in the episode (log it)."""
        self.send_errors += 1
        self.sends_failed[code] = self.sends_failed.get(code, 0) + 1
        if code in self.send_logged:
            return False
        self.send_logged.add(code)
        return True

    # -- the causes ----------------------------------------------------------------------

    def causes(self, counters: dict[str, int]) -> list[tuple[str, str]]:
        """(code, sentence) for every cause the silent episode shows; no_answer when none."""
        d = {k: now - then for k, now, then in zip(REFUSED, _refused(counters), self.refused0, strict=True)}
        out: list[tuple[str, str]] = []
        if self.sends_failed:
            errs = ", ".join(_err(e) for e in sorted(self.sends_failed))
            out.append(("send_failed", "sending to %s fails: %s" % (self.address, errs)))
        if self.open_error is not None:
            out.append(("port_closed", "the serial port cannot be opened: %s" % self.open_error))
        refused = self.icmp.get(errno_mod.ECONNREFUSED, 0)
        if refused:
            out.append(("port_unreachable", "%d ICMP port unreachable: nothing listens on %s (the udp port?)"
                        % (refused, self.address)))  # fmt: skip
        other = {e: n for e, n in self.icmp.items() if e != errno_mod.ECONNREFUSED}
        if other:
            errs = ", ".join(_err(e) for e in sorted(other))
            out.append(("host_unreachable", "ICMP errors for %s: %s" % (self.address, errs)))
        if self.other_ports:
            ports = ", ".join("%d (%d)" % kv for kv in sorted(self.other_ports.items()))
            out.append(("other_port", "datagrams from the device's host but port %s, not %s"
                        % (ports, self.address.rpartition(":")[2])))  # fmt: skip
        if d["auth_forged"]:
            out.append(("bad_tag", "%d answers with a bad authentication tag: the board has another key"
                        % d["auth_forged"]))  # fmt: skip
        if d["auth_unsigned"]:
            out.append(("unsigned", "%d unsigned answers: the board has no key, this device has one"
                        % d["auth_unsigned"]))  # fmt: skip
        if not self.auth and self.signed:
            out.append(("signed", "%d signed answers: the board has a key, this device has auth = false"
                        % self.signed))  # fmt: skip
        if d["auth_replayed"]:
            out.append(("replayed", "%d answers refused as replays" % d["auth_replayed"]))
        if d["crc_errors"]:
            n = d["crc_errors"]
            out.append(("crc_errors", "%d frames with CRC errors: the baud rate, or line noise" % n))
        bad = d["bad_frames"]
        if bad > 0 and (self.auth or not self.signed):  # (with auth = false, the signed ones are bad frames)
            out.append(("bad_frames", "%d broken frames: another protocol or firmware" % bad))
        if not out:
            where = "not at this address, or its datagrams are dropped" if self.transport == "udp" else (
                "not on this port, or at another baud rate")  # fmt: skip
            out.append(("no_answer", "no answer at all: the board is off, %s" % where))
        return out


class ReachMonitor:
    """Looks at every device every TICK seconds (the daemon calls :meth:`tick`)."""

    def __init__(self, log: logging.Logger, rounds: int) -> None:
        self.log = log
        self.rounds = rounds

    def tick(self, items: list[tuple[Reach, dict[str, int], Any]], now_us: int) -> list[tuple[int, int]]:
        """items: (reach, the client's counters, the runner). Returns (last_seen_us, dev) of the
        devices seen since the last tick, for the store."""
        seen: list[tuple[int, int]] = []
        for r, dc, runner in items:
            valid = sum(_valid(dc))
            if valid != r.valid:
                r.valid = valid
                r.last_seen_us = now_us
                if now_us - r.stored_us >= STORE_EVERY_US:
                    r.stored_us = now_us
                    seen.append((now_us, runner.client.dev_key))
                r.reset(dc)
                runner.suspect = False
                if not r.up:
                    r.up = True
                    r.send_logged.clear()  # a send error after this is news again
                    down_s = round((now_us - r.down_since_us) / 1e6, 1)
                    logs.event(self.log, logging.INFO, "device_reachable", device=r.device_id,
                               address=r.address, down_s=down_s)  # fmt: skip
                continue
            rounds = dc["timeouts"] - r.timeouts0
            if rounds < 1:
                continue
            runner.suspect = True
            if r.auth and not r.probed and rounds * 2 >= self.rounds:
                r.probed = True
                runner.probe()
                continue  # declared at a later tick, once the probe's answer could be in
            if r.up and rounds >= self.rounds:
                r.up = False
                r.down_since_us = r.last_seen_us or now_us
                causes = r.causes(dc)
                logs.event(self.log, logging.WARNING, "device_unreachable", device=r.device_id,
                           transport=r.transport, address=r.address, rounds=rounds,
                           causes=[c for c, _ in causes], detail="; ".join(t for _, t in causes))  # fmt: skip
        return seen

    @staticmethod
    def unsaved(items: list[tuple[Reach, dict[str, int], Any]]) -> list[tuple[int, int]]:
        """(last_seen_us, dev) of the devices whose last contact the store does not have yet."""
        out = []
        for r, _, runner in items:
            if r.last_seen_us is not None and r.last_seen_us != r.stored_us:
                r.stored_us = r.last_seen_us
                out.append((r.last_seen_us, runner.client.dev_key))
        return out
