"""One bridge config run as K processes on one host: ``leadwire bridge --processes K``.

A bridge is one event loop on one core. Its CPU per signed round trip is tens of microseconds
(docs/design/bridge-fleet-scale.md), so past some fleet size and rate one process cannot poll every
device at its interval however idle the other cores are. ``bridge.shard`` already splits a fleet
between bridges by a stable hash of the device id (config.shard_of); this starts K of them from one
config, shard i of K polling the devices with ``crc32(id) % K == i`` under its own id, store and
metrics port:

==================  =====================  ====================================================
setting             shard i of K           why
==================  =====================  ====================================================
``bridge.id``       ``ID-i``               the export's file names carry it (one directory)
``store.path``      ``DIR/NAME-i.SUFFIX``  one SQLite writer per store (leadwire.db: leadwire-0.db)
``bridge.metrics``  ``HOST:PORT+i``        one endpoint each (port 0 stays 0, "" stays off)
==================  =====================  ====================================================

Keep K fixed for a set of stores: a device that moves to another shard is a first contact there
(docs/operations.md). The parent forwards SIGTERM and SIGINT to every shard, which stop cleanly
(their last batch committed); a shard gets SIGTERM when the parent dies. The exit status is the
worst shard's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import os
import signal
import sys
from pathlib import Path
from typing import Any

from .config import BridgeConfig, parse_address


def shard_config(cfg: BridgeConfig, i: int, k: int) -> BridgeConfig:
    """The config of shard i of k (see the module docstring)."""
    store = Path(cfg.store)
    metrics = cfg.metrics
    if metrics:
        host, port = parse_address(metrics, "bridge.metrics")
        metrics = "%s:%d" % (host, port + i if port else 0)
    return dataclasses.replace(
        cfg,
        shard=(i, k),
        bridge_id="%s-%d" % (cfg.bridge_id, i),
        store=str(store.with_name("%s-%d%s" % (store.stem, i, store.suffix))),
        metrics=metrics,
    )


def _shard_main(cfg: BridgeConfig, duration: float, log_format: str | None) -> None:
    from .cli import run_bridge
    from .writer import die_with_parent

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)  # not the parent's forwarding handler
    die_with_parent(signal.SIGTERM)
    sys.exit(asyncio.run(run_bridge(cfg, duration, log_format)))


def run(cfg: BridgeConfig, k: int, duration: float = 0.0, log_format: str | None = None) -> int:
    """Run shards 0..k-1 of cfg (an unsharded config) until they stop; the worst exit status.
    Call it before any event loop or thread exists in this process (the shards are forked)."""
    ctx = multiprocessing.get_context("fork")
    procs = [
        ctx.Process(target=_shard_main, args=(shard_config(cfg, i, k), duration, log_format),
                    name="leadwire-shard-%d" % i)
        for i in range(k)
    ]  # fmt: skip
    for p in procs:
        p.start()

    def forward(sig: int, _frame: Any) -> None:
        for p in procs:
            if p.pid is not None and p.exitcode is None:
                try:
                    os.kill(p.pid, sig)
                except ProcessLookupError:
                    pass

    old = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for p in procs:
            p.join()
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
    return max((p.exitcode if p.exitcode is not None and p.exitcode >= 0 else 1) for p in procs)
