"""Many simulated devices (tools/simdevice.py) for benchmarks and demos.

Runs ``--devices`` devices split over ``--procs`` worker processes, prints one JSON line
``{"devices": [{"id": ..., "udp": "127.0.0.1:PORT"}, ...], "pids": [...]}`` and, with
``--config PATH``, writes a bridge.toml polling all of them. Stops on SIGTERM/SIGINT.

Authentication is on by default: each device draws a random key; the keys go into the
written config only (``key = "..."`` per device), never into the printed line. ``--no-auth`` runs
unsigned devices (``auth = false`` in the config). ``Fleet(..., auth=False)`` from Python.

By default the workers are the light simulator (``simdevice --fast``: VirtualRing, one epoll loop,
answers computed when polled), so that on a small machine the simulators leave the CPU to the
bridge being measured; ``--core`` runs full SimCore devices (EventRing, push sessions) instead.

    python -m leadwire.tools.fleetsim --devices 1000 --rate 10 --config /tmp/fleet.toml
    leadwire bridge --config /tmp/fleet.toml
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

from leadwire.tools.procstat import cpu_seconds
from leadwire.tools.testbed import Link, bridge_config, write_config

WORKER = "leadwire.tools.simdevice"


class Fleet:
    """Worker processes running SimFleets; use as a context manager (kills them on exit)."""

    def __init__(
        self,
        devices: int,
        rate: float,
        procs: int = 1,
        capacity: int = 1024,
        seed: int = 0,
        payload: int = 16,
        tick: float = 0.01,
        fast: bool = True,
        auth: bool = True,
    ) -> None:
        self.procs: list[subprocess.Popen[str]] = []
        self.devices: list[dict[str, Any]] = []
        per = [devices // procs + (1 if i < devices % procs else 0) for i in range(procs)]
        first = 0
        for count in per:
            if not count:
                continue
            p = subprocess.Popen(
                [sys.executable, "-m", WORKER, "--devices", str(count), "--rate", str(rate), "--capacity",
                 str(capacity), "--seed", str(seed), "--payload", str(payload), "--tick", str(tick),
                 "--first-index", str(first), *(["--fast"] if fast else []), *(["--auth"] if auth else [])],
                stdout=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            self.procs.append(p)
            first += count
        for p in self.procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            if not line:
                self.close()
                raise RuntimeError("a simulator process did not start")
            self.devices.extend(json.loads(line)["devices"])

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the worker processes have used so far (Linux /proc)."""
        return sum(cpu_seconds(p.pid) or 0.0 for p in self.procs)

    def config(self, path: Path, store: str, **polling: Any) -> Path:
        """A bridge config polling every device (checked by the bridge's parser; owner-only: keys)."""
        links = [Link(d["id"], "udp", d["udp"], d.get("key"), "prefix_us") for d in self.devices]
        write_config(path, bridge_config(links, store=store, bridge={"id": "fleetsim"}, polling=polling))
        return path

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@click.command(help=__doc__.split("\n")[0])
@click.option("--devices", type=int, default=100, show_default=True)
@click.option("--procs", type=int, default=1, show_default=True)
@click.option("--rate", type=float, default=10.0, show_default=True, help="events per second per device")
@click.option("--capacity", type=int, default=1024, show_default=True)
@click.option("--payload", type=int, default=16, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--config", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="write a bridge.toml for these devices")  # fmt: skip
@click.option("--store", default="fleetsim.db", show_default=True)
@click.option("--core", is_flag=True, help="full SimCore devices instead of the light simulator")
@click.option("--no-auth", is_flag=True, help="devices without keys (auth = false in the config)")
def main(devices: int, procs: int, rate: float, capacity: int, payload: int, seed: int, config: Path | None,
         store: str, core: bool, no_auth: bool) -> None:  # fmt: skip
    """Run the fleet until SIGTERM."""
    with Fleet(devices, rate, procs, capacity, seed, payload, fast=not core, auth=not no_auth) as fleet:
        if config:
            fleet.config(config, store)
        public = [{k: v for k, v in d.items() if k != "key"} for d in fleet.devices]  # keys: config only
        print(json.dumps({"devices": public, "pids": [p.pid for p in fleet.procs]}), flush=True)
        stop = []
        signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
        try:
            while not stop and all(p.poll() is None for p in fleet.procs):
                time.sleep(0.2)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
