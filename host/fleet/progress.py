"""Progress lines of the fleet job on stderr: stage names, row counts, timings, and how far the
Spark stages that run long have got."""

from __future__ import annotations

import contextlib
import sys
import threading
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
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

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
        """Every `tick` seconds, the task counts of the active Spark stages (classic sessions: the
        status tracker). A Spark Connect session has no status tracker: there the stage lines
        and timings are the progress."""
        if not self.enabled or self._thread is not None:
            return
        tracker = _status_tracker(spark)
        if tracker is None:
            return

        def run() -> None:
            while not self._stop.wait(self.tick):
                try:
                    for sid in tracker.getActiveStageIds():
                        info = tracker.getStageInfo(sid)
                        if info is not None and info.numTasks > 0:
                            self.log(
                                "  spark stage %d: %d/%d tasks" % (sid, info.numCompletedTasks, info.numTasks)
                            )
                except Exception:  # the JVM may be going away
                    return

        self._thread = threading.Thread(target=run, name="fleet-progress", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()


def _status_tracker(spark: Any) -> Any:
    """The session's status tracker, or None where there is none (Spark Connect)."""
    from leadwire.fleet.session import is_connect

    if is_connect(spark):
        return None
    return spark.sparkContext.statusTracker()
