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
        self._handler: Any = None
        self._spark: Any = None
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
        """The task counts of the running Spark stages, at most every `tick` seconds: under Spark
        Connect from the progress the server sends with each result (registerProgressHandler),
        in a classic session from its status tracker (a thread; the SparkContext is touched only
        there: a Connect session has none)."""
        from leadwire.fleet.session import is_connect

        if not self.enabled or self._handler is not None or self._thread is not None:
            return
        if not is_connect(spark):
            tracker = spark.sparkContext.statusTracker()
            self._thread = threading.Thread(
                target=self._poll, args=(tracker,), name="fleet-progress", daemon=True
            )
            self._thread.start()
            return
        last = [0.0]

        def handler(stages: Any, inflight_tasks: int, operation_id: Any, done: bool) -> None:
            now = time.monotonic()
            if done or now - last[0] < self.tick:
                return
            last[0] = now
            for st in stages or ():
                if not st.done and st.num_tasks > 0:
                    self._tasks(st.stage_id, st.num_completed_tasks, st.num_tasks)

        self._handler = handler
        self._spark = spark
        spark.registerProgressHandler(handler)

    def _tasks(self, stage: int, done: int, total: int) -> None:
        self.log("  spark stage %d: %d/%d tasks" % (stage, done, total))

    def _poll(self, tracker: Any) -> None:
        while not self._stop.wait(self.tick):
            try:
                for sid in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(sid)
                    if info is not None and info.numTasks > 0:
                        self._tasks(sid, info.numCompletedTasks, info.numTasks)
            except Exception:  # the session is stopping: its JVM may be gone
                return

    def close(self) -> None:
        self._stop.set()
        if self._handler is not None:
            self._spark.removeProgressHandler(self._handler)
            self._handler = None
