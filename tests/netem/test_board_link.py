"""netem between the host and a real virtual board (the firmware on the MicroPython unix port)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from leadwire import codec, framing, messages, wire
from leadwire.tools.board import VirtualBoard, start_board
from leadwire.tools.netem import Impairment, SerialImpairer, UdpImpairer

from .util import collect, open_port, peer, read_fd, wait_for

pytestmark = pytest.mark.micropython


@pytest.fixture
def udp_board() -> Iterator[VirtualBoard]:
    with start_board("udp", config={"sensors": []}) as b:
        yield b


@pytest.fixture
def serial_board() -> Iterator[VirtualBoard]:
    with start_board("serial", config={"sensors": []}) as b:
        yield b


@pytest.mark.timeout(60)
def test_udp_board_answers_one_copy_of_a_duplicated_poll(udp_board: VirtualBoard) -> None:
    """netem duplicates every POLL: the board answers each POLL once (a copy of the POLL it answered
    last -- same tag, same n: messages.poll_key -- is not answered again), and the next POLL, with the
    same n and a new tag, is answered."""
    assert udp_board.address is not None

    async def go() -> tuple[list[bytes], dict[str, Any]]:
        client = await peer()
        async with UdpImpairer(("127.0.0.1", 0), udp_board.address, Impairment(dup=1.0), Impairment()) as imp:
            assert imp.address is not None
            for i in range(5):
                client.transport.sendto(codec.encode(messages.poll_frame(0, 4, 512, tag=i + 1)), imp.address)
                await asyncio.sleep(0.01)
            await wait_for(lambda: len(client.got) >= 5, 5)
            await asyncio.sleep(0.3)  # (a copy answered would be in by now)
            snap = imp.snapshot()
        client.close()
        return client.data, snap

    answers, snap = asyncio.run(go())
    assert snap["up"]["duplicated"] == 5  # every POLL arrived twice
    assert sorted(codec.decode(a).message_id for a in answers) == [1, 2, 3, 4, 5]  # each answered once
    for a in answers:
        f = codec.decode(a)
        assert f.type in (wire.NO_EVENT, wire.RECOVERY, wire.EVENTS)
    assert snap["down"]["in"] == snap["down"]["out"] == 5


@pytest.mark.timeout(60)
def test_serial_board_through_the_pty_proxy(serial_board: VirtualBoard) -> None:
    assert serial_board.port is not None

    async def go() -> tuple[list[Any], dict[str, Any]]:
        async with SerialImpairer(serial_board.port, Impairment(rate=115200)) as imp:
            assert imp.port is not None
            host = open_port(imp.port)
            try:
                read_fd(host)  # the boot HELLO, if it came through before we opened the port
                req = framing.encode(codec.encode(messages.hello_request(7)))
                os.write(host, b"\x00" + req)
                got = await collect(lambda: read_fd(host), 30, timeout=5, settle=0.2)
            finally:
                os.close(host)
            return framing.StreamDecoder().feed(got), imp.snapshot()

    items, snap = asyncio.run(go())
    hellos = [x for x in items if isinstance(x, codec.Frame) and x.type == wire.HELLO]
    assert hellos, items
    assert messages.decode_hello(hellos[-1]).board == "unix"
    assert snap["up"]["out_bytes"] == snap["up"]["in_bytes"] > 0


@pytest.mark.timeout(60)
def test_udp_board_with_auth_answers_a_duplicated_poll_once_and_counts_the_copy() -> None:
    """Authentication under duplication: the copy of a signed POLL is a replay, refused and
    counted; the board's answers, duplicated on the way back, are each taken once by the host."""
    from leadwire.tools.authclient import AuthClient
    from leadwire.tools.wireclient import UdpLink

    with start_board("udp", key="auto", config={"sensors": [], "health": {"ms": 200}}) as b:
        assert b.address is not None and b.key is not None
        c = AuthClient(UdpLink(b.address), b.key)  # direct: the handshake, then the auth record
        try:
            assert c.handshake().session == 1

            async def go() -> tuple[list[bytes], dict[str, Any]]:
                client = await peer()
                async with UdpImpairer(
                    ("127.0.0.1", 0), b.address, Impairment(dup=1.0), Impairment(dup=1.0)
                ) as imp:
                    assert imp.address is not None
                    for i in range(5):
                        signed = c.sign(messages.poll_frame(0, 4, 512, tag=i + 1))
                        client.transport.sendto(signed, imp.address)
                        await asyncio.sleep(0.01)
                    await wait_for(lambda: len(client.got) >= 10, 5)
                    await asyncio.sleep(0.3)
                    snap = imp.snapshot()
                client.close()
                return client.data, snap

            answers, snap = asyncio.run(go())
            assert snap["up"]["duplicated"] == 5 and snap["down"]["in"] == 5  # 5 answers, not 10
            assert len(answers) == 10  # each answer twice (duplicated on the way back)
            took = []
            for a in answers:
                buf = bytearray(a)
                r = c.ep.verify(buf, len(buf))
                if r == wire.OK:
                    took.append(codec.decode(a).message_id)
                else:
                    assert r == wire.E_REPLAY
            assert sorted(took) == [1, 2, 3, 4, 5] and c.ep.replayed == 5
            want = {"auth_forged": 0, "auth_replayed": 5, "auth_unsigned": 0}
            got = None
            for _ in range(20):
                got = c.auth_health()
                if got == want:
                    break
                time.sleep(0.2)
            assert got == want
        finally:
            c.close()
