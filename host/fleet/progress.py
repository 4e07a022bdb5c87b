"""Progress lines of the fleet job on stderr: stage names, row counts, timings, and how far the
Spark stages that run long have got."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import IO, Any


class Progress:
    """Progress lines on stderr: stage names, row counts, timings; and Spark stage completion for
    stages that run longer than `tick` seconds."""

    def __init__(self, stream: IO[str] | None = None, enabled: bool = True, tick: float = 10.0) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tick = tick
        self.t0 = time.monotonic()
        self.timings: dict[str, float] = {}
        self._handler: Any = None
        self._spark: Any = None

    def log(self, msg: str) -> None:
        if self.enabled:
            print("[fleet %7.1fs] %s" % (time.monotonic() - self.t0, msg), file=self.stream, flush=True)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t = time.monotonic()
        self.log("%s ..." % name)
        yield
        self.timings[name] = time.monotonic() - t
        self.log("%s done in %.1fs" % (name, self.timings[name]))

    def watch(self, spark: Any) -> None:
        """Under Spark Connect, the task counts of the running Spark stages at most every `tick`
        seconds, from the progress the server sends with each result (registerProgressHandler).
        A classic session has no such handler: there the stage lines and timings are the
        progress (and Spark's own console progress bar, spark.ui.showConsoleProgress)."""
        from leadwire.fleet.session import is_connect

        if not self.enabled or self._handler is not None or not is_connect(spark):
            return
        last = [0.0]

        def handler(stages: Any, inflight_tasks: int, operation_id: Any, done: bool) -> None:
            now = time.monotonic()
            if done or now - last[0] < self.tick:
                return
            last[0] = now
            for st in stages or ():
                if not st.done and st.num_tasks > 0:
                    self.log(
                        "  spark stage %d: %d/%d tasks" % (st.stage_id, st.num_completed_tasks, st.num_tasks)
                    )

        self._handler = handler
        self._spark = spark
        spark.registerProgressHandler(handler)

    def close(self) -> None:
        if self._handler is not None:
            self._spark.removeProgressHandler(self._handler)
            self._handler = None
