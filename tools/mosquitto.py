"""A mosquitto broker on 127.0.0.1 for tests and benches: its own config and directory, a free port
kept across restarts, stopped with its process group.

    with Mosquitto(tmp) as broker:        # Mosquitto.find() is None when mosquitto is not installed
        ... broker.port ...
        broker.stop(); broker.start()     # the same port; with persistence, sessions survive
"""

from __future__ import annotations

import getpass
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from leadwire.tools.testbed import stop_group


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Mosquitto:
    """One listener on 127.0.0.1:port, anonymous access; `persistence`: the broker saves its
    sessions and queued QoS 1/2 messages in `directory` when stopped (SIGTERM) and loads them when
    started again."""

    def __init__(self, directory: Path, persistence: bool = True, port: int = 0) -> None:
        self.dir = directory
        self.port = port or free_port()
        self.conf = directory / "mosquitto.conf"
        # `user`: mosquitto started by root would switch to the user "mosquitto", who cannot write
        # the persistence file into this directory; it stays the user that started it
        self.conf.write_text(
            "user %s\nallow_anonymous true\nlistener %d 127.0.0.1\npersistence %s\npersistence_location %s/\n"
            "autosave_interval 0\nlog_dest stderr\nlog_type error\nlog_type warning\n"
            % (getpass.getuser(), self.port, "true" if persistence else "false", directory)
        )
        self.proc: subprocess.Popen[Any] | None = None

    @staticmethod
    def find() -> str | None:
        """The mosquitto executable (PATH, then Debian's /usr/sbin), or None."""
        exe = shutil.which("mosquitto")
        return exe or ("/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None)

    def start(self, timeout: float = 10.0) -> Mosquitto:
        exe = self.find()
        if exe is None:
            raise FileNotFoundError("mosquitto is missing: apt-get install mosquitto")
        log = (self.dir / "mosquitto.log").open("ab")
        self.proc = subprocess.Popen(
            [exe, "-c", str(self.conf)], stdout=log, stderr=log, start_new_session=True
        )
        log.close()
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(
            "mosquitto did not start on port %d: see %s" % (self.port, self.dir / "mosquitto.log")
        )

    def stop(self) -> None:
        """SIGTERM (the broker saves its state), SIGKILL after 5 s."""
        if self.proc is not None:
            stop_group(self.proc, signal.SIGTERM, 5.0)
            self.proc = None

    def __enter__(self) -> Mosquitto:
        return self if self.proc is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
