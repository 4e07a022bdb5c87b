"""Push sessions (spec 003) of the bridge client: SUBSCRIBE, reports reassembled and ACKed after commit.

One concern of :class:`~leadwire.bridge.client.DeviceClient` in its own module (a mixin for the
same reason as :mod:`~leadwire.bridge.timing`: one client's state and its public attribute names).
A report counts for a session only once the device ACKed the SUBSCRIBE that started it; its ACK
goes out only after the transaction holding it commits (the store sends ``out_acks``), so a crash
before that makes the device send the identical report again instead of losing it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leadwire import codec, frames, messages, u32
from leadwire.reassembly import Reassembler

from .rows import C_DUPLICATES, C_GAPS, C_RECEIVED, C_RETRANSMISSIONS, KIND_REPORT, Delivery
from .timing import REQ_SUBSCRIBE


class PushSessions:
    """The push-session half of DeviceClient (see the module docstring)."""

    if TYPE_CHECKING:  # the client's state these rules use
        pc: Any
        cfg: Any
        poll_cfg: Any
        dc: dict[str, int]
        cc: dict[int, list[int]]
        lead: Any
        device_id: str
        dev_key: int
        boots: int
        arrival: int
        deliver: bool
        dirty: bool
        outstanding: int
        next_delay: float
        rto: float
        log: list[tuple[str, dict[str, Any]]]
        out_acks: list[bytes]
        out_deliveries: list[tuple[Delivery, int]]

        def _arrival(self, row: tuple[Any, ...]) -> None: ...

    def _init_push(self) -> None:
        self.need_subscribe = bool(self.cfg.subscribe)
        self.sub_channels: dict[int, int] = {}  # channel -> session, for reports
        self.sub_tag = 0
        self.reasm = Reassembler(max_messages=16, max_bytes=65536)
        self._msg_meta: dict[int, list[int]] = {}  # message id -> [MessageNumber, channel, frame bytes]

    def _end_sessions(self) -> None:
        """The device restarted: no push session survives its boot; SUBSCRIBE again."""
        self.reasm = Reassembler(max_messages=16, max_bytes=65536)
        self._msg_meta.clear()
        self.sub_channels = {}
        self.need_subscribe = bool(self.cfg.subscribe)

    def _subscribe_request(self) -> codec.Frame:
        """The SUBSCRIBE to send now: a new session of the device (numbers from 1)."""
        self.outstanding = REQ_SUBSCRIBE
        self.sub_tag = (self.sub_tag + 1) & 0xFF
        self.session += 1
        # Reports count for this session only once the device has ACKed the SUBSCRIBE (_on_ack):
        # until then one may be from its previous session, and our ACK for it (an ACK names no
        # session) would confirm the new session's report of the same number, which the device then
        # forgets. The previous session's ACKs not yet committed go for the same reason (its reports
        # are still stored; the device drops them unconfirmed).
        self.sub_channels = {}
        self.out_acks = []
        self.dirty = True
        self.rto = self.poll_cfg.ack_timeout
        return messages.subscribe_frame(self.cfg.subscribe, self.sub_tag)

    def _on_close(self, f: codec.Frame) -> None:
        self.reasm.feed(frames.Frame(f.message_id, 0, True, f.priority, b"", True))
        self._msg_meta.clear()
        self.sub_channels.pop(f.channel, None)
        self.log.append(("session_closed", {"channel": f.channel}))

    def _on_ack(self, f: codec.Frame) -> bool:
        number, status = messages.decode_ack(f)
        if self.outstanding == REQ_SUBSCRIBE and number == 0 and f.message_id == self.sub_tag:
            self.outstanding = 0
            self.dc["round_trips"] += 1
            self.dirty = True
            if messages.is_success(status):
                self.need_subscribe = False
                self.sub_channels = {ch: self.session for ch in self.cfg.subscribe}
                self.next_delay = 0.0
                self.log.append(
                    ("subscribed", {"channels": list(self.cfg.subscribe), "session": self.session})
                )
            else:
                self.log.append(("subscribe_refused", {"status": status}))
                self.next_delay = self.poll_cfg.ack_timeout
            return True
        return False

    def _on_notify(self, f: codec.Frame, nbytes: int, rx_us: int) -> None:
        if f.index == 0:
            self._msg_meta[f.message_id] = [f.seq, f.channel, 0]
        meta = self._msg_meta.get(f.message_id)
        if meta is not None:
            meta[2] += nbytes
        m = self.reasm.feed(frames.Frame(f.message_id, f.index, f.last, f.priority, f.payload))
        if m is None or m.is_close:
            return
        meta = self._msg_meta.pop(m.message_id, None)
        if meta is None:
            return
        number, ch, fbytes = meta
        self._on_report(ch, number, m.priority, m.data, fbytes, rx_us)

    def _on_report(self, ch: int, number: int, prio: int, body: bytes, fbytes: int, rx_us: int) -> None:
        session = self.sub_channels.get(ch)
        epoch = self.pc.epoch
        if session is None or epoch is None:
            self.dc["unsolicited"] += 1  # not subscribed (any more): not ours to confirm
            self.dirty = True
            return
        messages.decode_records(body)  # a report body must be a record batch (WireError if not)
        key = (ch, session)
        last = self.lead.last(self.device_id, key)
        dup = last is not None and u32.diff(number, last) <= 0
        lead = self.lead.lead(self.device_id, key, number)
        self.arrival += 1
        c = self.cc.get(ch)
        if c is None:
            c = self.cc[ch] = [0, 0, 0, 0, 0]
        c[C_RECEIVED] += 1
        if dup:
            c[C_DUPLICATES] += 1
            c[C_RETRANSMISSIONS] += 1
        elif lead > 1:
            c[C_GAPS] += 1
        self._arrival(
            (self.dev_key, self.arrival, 1, epoch, self.boots, ch, session, ch, number, lead, dup, dup,
             prio, len(body), fbytes, None, rx_us, None if dup else body)
        )  # fmt: skip
        if not dup:
            self.dc["reports_stored"] += 1
        # confirm only once stored (the store sends it after commit): a crash before that makes
        # the device retransmit the identical report instead of losing it (spec 003 R0801/R0802)
        self.out_acks.append(codec.encode(messages.ack_frame(number, messages.STATUS_OK, ch)))
        self.dc["acks_sent"] += 1
        if self.deliver:
            self.out_deliveries.append(
                (Delivery(KIND_REPORT, ch, number, body, prio, dup, dup, session, rx_us), lead)
            )
        self.dirty = True
