"""Many simulated devices (tools/simdevice.py) for benchmarks and demos.

Runs ``--devices`` devices split over ``--procs`` worker processes, prints one JSON line
``{"devices": [{"id": ..., "udp": "127.0.0.1:PORT"}, ...], "pids": [...]}`` and, with
``--config PATH``, writes a bridge.toml polling all of them. Stops on SIGTERM/SIGINT.

Authentication (issue 6) is on by default: each device draws a random key; the keys go into the
written config only (``key = "..."`` per device), never into the printed line. ``--no-auth`` runs
unsigned devices (``auth = false`` in the config). ``Fleet(..., auth=False)`` from Python.

By default the workers are the light simulator (``simdevice --fast``: VirtualRing, one epoll loop,
answers computed when polled), so that on a small machine the simulators leave the CPU to the
bridge being measured; ``--core`` runs full SimCore devices (EventRing, push sessions) instead.

    python -m leadwire.tools.fleetsim --devices 1000 --rate 10 --config /tmp/fleet.toml
    leadwire bridge --config /tmp/fleet.toml
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from leadwire.tools.procstat import cpu_seconds

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
        lines = ["[bridge]", 'id = "fleetsim"', "[store]", 'path = "%s"' % store, "[polling]"]
        lines += ["%s = %s" % (k, json.dumps(v)) for k, v in polling.items()]
        for d in self.devices:
            lines += ["[[device]]", 'id = "%s"' % d["id"], 'udp = "%s"' % d["udp"], 'timestamp = "prefix_us"',
                      'key = "%s"' % d["key"] if "key" in d else "auth = false"]  # fmt: skip
        path.write_text("\n".join(lines) + "\n")
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", type=int, default=100)
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--rate", type=float, default=10.0, help="events per second per device")
    ap.add_argument("--capacity", type=int, default=1024)
    ap.add_argument("--payload", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config", type=Path, default=None, help="write a bridge.toml for these devices")
    ap.add_argument("--store", default="fleetsim.db")
    ap.add_argument("--core", action="store_true", help="full SimCore devices instead of the light simulator")
    ap.add_argument(
        "--no-auth", action="store_true", help="devices without keys (auth = false in the config)"
    )
    args = ap.parse_args(argv)
    with Fleet(
        args.devices, args.rate, args.procs, args.capacity, args.seed, args.payload, fast=not args.core,
        auth=not args.no_auth,
    ) as fleet:
        if args.config:
            fleet.config(args.config, args.store)
        public = [{k: v for k, v in d.items() if k != "key"} for d in fleet.devices]  # keys: config only
        print(json.dumps({"devices": public, "pids": [p.pid for p in fleet.procs]}), flush=True)
        stop = []
        signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
        try:
            while not stop and all(p.poll() is None for p in fleet.procs):
                time.sleep(0.2)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
