"""The metric names a running bridge exposes on /metrics (for the tests of the alert rules and the
dashboard: every name they use must exist)."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from pathlib import Path

from leadwire.bridge import logs
from leadwire.bridge.daemon import Bridge
from leadwire.tools.simdevice import SimFleet

from .helpers import bridge_config, wait_for

NAME = re.compile(r"\bleadwire_[a-z0-9_]+")  # recording rules (leadwire:...) do not match


def exposed(tmp: Path) -> set[str]:
    """Sample names of one scrape of a bridge polling one simulated device (timestamps on, so the
    latency histogram has samples too)."""

    async def main() -> str:
        fleet = await SimFleet(1, rate=50, seed=9).start()
        devs = [{**d, "timestamp": "prefix_us"} for d in fleet.describe()]
        b = Bridge(bridge_config(tmp, devs, bridge={"metrics": "127.0.0.1:0"}), logs.setup("warning"))
        await b.start()
        try:
            await wait_for(
                lambda: b.events_committed > 0 and all(r.reach.last_seen_us for r in b.runners.values())
            )
            url = "http://127.0.0.1:%d/metrics" % b.metrics_port
            raw = await asyncio.get_running_loop().run_in_executor(
                None, lambda: urllib.request.urlopen(url).read()
            )
        finally:
            await b.stop()
            await fleet.stop()
        return raw.decode()

    text = asyncio.run(main())
    return {re.split(r"[{ ]", ln, maxsplit=1)[0] for ln in text.splitlines() if ln and not ln.startswith("#")}


def used(text: str) -> set[str]:
    return set(NAME.findall(text))
