"""netem between the host and a real virtual board (the firmware on the MicroPython unix port)."""

from __future__ import annotations

import asyncio
import os
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
def test_udp_board_answers_each_copy_of_a_duplicated_poll(udp_board: VirtualBoard) -> None:
    assert udp_board.address is not None

    async def go() -> tuple[list[bytes], dict[str, Any]]:
        client = await peer()
        async with UdpImpairer(("127.0.0.1", 0), udp_board.address, Impairment(dup=1.0), Impairment()) as imp:
            assert imp.address is not None
            for i in range(5):
                client.transport.sendto(codec.encode(messages.poll_frame(0, 4, 512, tag=i + 1)), imp.address)
                await asyncio.sleep(0.01)
            await wait_for(lambda: len(client.got) >= 10, 5)
            await asyncio.sleep(0.1)
            snap = imp.snapshot()
        client.close()
        return client.data, snap

    answers, snap = asyncio.run(go())
    assert len(answers) == 10  # every POLL arrived twice and was answered twice
    for a in answers:
        f = codec.decode(a)
        assert f.type in (wire.NO_EVENT, wire.RECOVERY, wire.EVENTS)
    assert snap["up"]["duplicated"] == 5 and snap["down"]["in"] == snap["down"]["out"] == 10


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
