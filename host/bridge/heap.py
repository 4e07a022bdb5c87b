"""The garbage collector while a bridge runs: its long-lived objects frozen, young collections rarer.

A bridge's heap is mostly what :meth:`Bridge.start <leadwire.bridge.daemon.Bridge.start>` built
and keeps for the whole run (per device a client, its runner, timers, counters, reach state), and
none of its round trips leaves cyclic garbage. CPython's full collection still walks every tracked
object: 131-150 ms of CPU for a 5,000-device shard (docs/design/bridge-fleet-cost.md, "The
tail"), on the event loop's thread: every poll due during it goes out late. So once the devices
are set up:

* ``gc.freeze()`` moves every tracked object into the permanent generation, which no collection
  walks: a full collection then covers only what was allocated since (the clients' current
  state, replaced as they go), a quarter of the pause. No collection first: it would cost every
  start a full one (25-40 ms in a test process, where many bridges start), and what
  garbage there is then stays frozen until the stop;
* the young generation's threshold goes from 700 to :data:`GEN0` allocations: a commit's worth of
  rows (alive from an answer to the next commit, then freed by reference counting) no longer
  triggers young collections that promote them to the older generations, whose collections they
  would then make more frequent.

What is frozen is never collected while frozen: a cycle among those objects that became garbage
would stay until :func:`release`, which the bridge's stop calls (everything back in the oldest
generation, thresholds as they were). Settle/release nest: with several bridges in one process
(tests) the last release restores the collector.
"""

from __future__ import annotations

import gc

GEN0 = 10_000  # young-generation threshold while a bridge runs (CPython's default: 700)

_held = 0
_saved: tuple[int, ...] = ()


def settle() -> None:
    """Freeze what is tracked and raise the young threshold (a bridge just started)."""
    global _held, _saved
    if _held == 0:
        _saved = gc.get_threshold()
    _held += 1
    gc.freeze()
    gc.set_threshold(max(GEN0, _saved[0]), *_saved[1:])


def release() -> None:
    """The inverse of one :func:`settle` (a bridge stopped); the last one unfreezes."""
    global _held
    if _held == 0:
        return
    _held -= 1
    if _held == 0:
        gc.unfreeze()
        gc.set_threshold(*_saved)
