"""stages.concurrent: the output stages at once. No Spark: the stages here are plain functions of
the run."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from leadwire.fleet.stages import (
    STAGES,
    concurrent,
    stage_rollout,
    stage_small_tables,
    stage_write_executor_tables,
)


class FakeRun:
    def __init__(self) -> None:
        self.collected: dict[str, Any] = {}


def test_the_stages_run_at_once_and_each_writes_its_own_keys() -> None:
    both = threading.Barrier(2, timeout=10)  # broken (an error) unless both stages wait at once
    threads: list[str] = []

    def small(run: Any) -> None:
        both.wait()
        threads.append(threading.current_thread().name)
        run.collected.update(summary=1)

    def rollout(run: Any) -> None:
        both.wait()
        threads.append(threading.current_thread().name)
        run.collected["rollout_windows"] = 2

    run = FakeRun()
    concurrent(small, rollout)(run)  # type: ignore[arg-type]
    assert run.collected == {"summary": 1, "rollout_windows": 2}
    assert len(set(threads)) == 2 and all(t.startswith("fleet-stage") for t in threads)


def test_the_first_stages_error_is_raised_after_every_stage_ended() -> None:
    ended: list[str] = []

    def slow_fail(run: Any) -> None:
        time.sleep(0.2)
        ended.append("slow")
        raise ValueError("first")

    def fast_fail(run: Any) -> None:
        ended.append("fast")
        raise KeyError("second")

    def ok(run: Any) -> None:
        time.sleep(0.3)
        ended.append("ok")

    with pytest.raises(ValueError, match="first"):
        concurrent(slow_fail, fast_fail, ok)(FakeRun())  # type: ignore[arg-type]
    assert sorted(ended) == ["fast", "ok", "slow"]


def test_the_job_runs_its_output_stages_at_once() -> None:
    names = [s.__name__ for s in STAGES]
    together = "concurrent(%s)" % ", ".join(
        s.__name__ for s in (stage_write_executor_tables, stage_small_tables, stage_rollout)
    )
    assert names[2] == together and names.index("stage_load") == 3
