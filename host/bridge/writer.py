"""The store writer process: the bridge's SQLite writes in a child process (``[store] writer``).

Why: with the store on a thread of the bridge process, the store thread (binding parameters,
SQLite) and the event loop (sockets, decoding, the clients) share one GIL; the live ingest profile
showed the loop waiting for it (docs/design/bridge-throughput.md, "One process, one GIL"). In a
child process the writes run on their own interpreter, and the bridge's side of a commit is one
``marshal.dumps`` of the batch's rows (C, ~1-2 us per row) and a pipe write.

Protocol over a socketpair (``multiprocessing.connection.Connection`` framing), one request at a
time, each answered: ``W`` + marshal(batch) -> ``R`` + pickle(conflicts); ``G`` (register a list
of devices, one transaction) and ``C`` (close) with pickled arguments; an exception in the child
comes back as ``E`` + pickle and is raised again in the bridge (the bridge then stops, as with a
failed commit on a thread).

The SIGKILL guarantee (a poll answer's rows and the device's new offset in one transaction, so a
restart from the committed offsets has no duplicate and no gap) holds across the two processes:

* the child dies with the bridge: ``PR_SET_PDEATHSIG`` = SIGKILL (Linux, set through ctypes right
  after start, then ``getppid()`` checked in case the bridge died before), the socket's EOF, and a
  ``getppid()`` check before every transaction; so no transaction STARTS after the bridge died,
  and one in progress is killed with it (rolled back by SQLite) unless its commit already ran;
* the child ignores SIGINT and SIGTERM: Ctrl-C or a SIGTERM to the process group stops the bridge,
  whose clean stop commits the last batch through the child, then closes it;
* a restarted bridge reads the committed offsets under ``BEGIN IMMEDIATE`` (:meth:`Store.register`),
  which waits for any writer still holding the database's write lock.
"""

from __future__ import annotations

import ctypes
import marshal
import os
import pickle
import signal
import socket
import subprocess
import sys
from multiprocessing.connection import Connection
from typing import Any

from .client import ClientState
from .store import Batch, Store

PR_SET_PDEATHSIG = 1


class StoreProcess:
    """The :class:`~leadwire.bridge.store.Store` API the daemon uses (register, write, close), served
    by a child process. Construct it on the thread that lives as long as the bridge (the event
    loop's): PR_SET_PDEATHSIG fires when the thread that started the child ends. Then call
    :meth:`wait_ready` (blocking: on the store executor)."""

    def __init__(self, path: str, bridge_id: str = "bridge", synchronous: str = "full") -> None:
        self.path = path
        self.commits = 0
        self.rows = 0
        self.migrated_from: str | None = None
        mine, theirs = socket.socketpair()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from leadwire.bridge.writer import main; main()",
                 str(theirs.fileno()), path, bridge_id, str(os.getpid()), synchronous],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                # the same leadwire as the bridge's, whatever put it on the bridge's path
                env={**os.environ, "PYTHONPATH": os.pathsep.join(p or os.getcwd() for p in sys.path)},
            )  # fmt: skip
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        self.conn = Connection(mine.detach())
        self._closed = False

    def wait_ready(self) -> StoreProcess:
        self.migrated_from = self._reply()
        return self

    def _reply(self) -> Any:
        try:
            msg = self.conn.recv_bytes()
        except (EOFError, OSError):
            code = self.proc.wait(timeout=10)
            raise RuntimeError("the store writer process ended (exit code %s)" % code) from None
        if msg[:1] == b"E":
            raise pickle.loads(msg[1:])
        return pickle.loads(msg[1:])

    def register(self, device_id: str, transport: str, address: str) -> tuple[int, ClientState | None]:
        return self.register_many([(device_id, transport, address)])[0]

    def register_many(self, devices: list[tuple[str, str, str]]) -> list[tuple[int, ClientState | None]]:
        self.conn.send_bytes(b"G" + pickle.dumps(devices))
        out: list[tuple[int, ClientState | None]] = self._reply()
        return out

    def write(self, b: Batch) -> int:
        """One transaction in the child; returns once it is committed (and, with synchronous
        "full", fsynced): only then does the daemon send the batch's ACKs."""
        data = marshal.dumps(
            (b.segments, b.losses, b.boots, b.devices, b.commit_us, b.arrivals, b.events, b.seen)
        )
        self.conn.send_bytes(b"W" + data)
        conflicts: int = self._reply()
        self.commits += 1
        self.rows += b.arrivals
        return conflicts

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.conn.send_bytes(b"C")
            self._reply()
        except (OSError, EOFError, RuntimeError):
            pass
        finally:
            self.conn.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        """For tests: the writer dies as it would in a crash."""
        self.proc.kill()
        self.proc.wait()


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Linux: this process gets `sig` when the thread that started it ends (PR_SET_PDEATHSIG)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the socket's EOF and the getppid() checks remain


def _error(e: BaseException) -> bytes:
    try:
        return b"E" + pickle.dumps(e)
    except Exception:
        return b"E" + pickle.dumps(RuntimeError(repr(e)))


def main() -> None:
    fd, path, bridge_id, parent = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    synchronous = sys.argv[5] if len(sys.argv) > 5 else "full"
    die_with_parent()
    if os.getppid() != parent:
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    conn = Connection(fd)
    try:
        store = Store(path, bridge_id, checkpoints=True, synchronous=synchronous)
    except BaseException as e:
        conn.send_bytes(_error(e))
        return
    conn.send_bytes(b"R" + pickle.dumps(store.migrated_from))
    while True:
        try:
            msg = conn.recv_bytes()
        except (EOFError, OSError):
            break  # the bridge is gone: write nothing more
        op = msg[:1]
        if op == b"C":
            store.close()
            conn.send_bytes(b"R" + pickle.dumps(None))
            return
        if os.getppid() != parent:
            break
        try:
            if op == b"W":
                segments, losses, boots, devices, commit_us, arrivals, events, seen = marshal.loads(
                    memoryview(msg)[1:]
                )
                out: Any = store.write(
                    Batch(segments, losses, boots, devices, [], seen, commit_us, arrivals, events)
                )
            elif op == b"G":
                out = store.register_many(pickle.loads(msg[1:]))
            else:
                raise ValueError("store writer: unknown request %r" % op)
        except Exception as e:
            conn.send_bytes(_error(e))
            continue
        conn.send_bytes(b"R" + pickle.dumps(out))
    os._exit(0)  # no clean close: whatever was not committed is not
