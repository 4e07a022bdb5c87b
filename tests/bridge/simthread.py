"""A SimFleet running in a background thread with its own event loop (for subprocess bridges)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from leadwire.tools.simdevice import SimFleet


class FleetThread:
    def __init__(self, **kw: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.fleet: SimFleet = self.call(lambda: SimFleet(**kw).start())

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run fn on the fleet's loop (awaiting it if it returns a coroutine) and return the result."""

        async def wrap() -> Any:
            r = fn()
            if asyncio.iscoroutine(r):
                r = await r
            return r

        return asyncio.run_coroutine_threadsafe(wrap(), self.loop).result(timeout=30)

    def close(self) -> None:
        self.call(self.fleet.stop)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()
