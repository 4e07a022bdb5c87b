"""One store, one bridge: an exclusive lock beside the store, naming the process that holds it.

The lock is ``flock(LOCK_EX | LOCK_NB)`` on ``<store>.lock``, which holds the holder's pid as text.
The kernel drops a flock when its process dies, however it dies (SIGKILL, power loss of a
container), so a lock file left by a dead bridge never blocks: the next bridge takes it and writes
its own pid. The holder removes the file on a clean stop. (Two bridges on one store would poll the
same devices from two offsets and store every event twice.)

Why a file of its own and not a lock on the database: the check runs before the store is created
(a refused bridge creates nothing), and SQLite's own POSIX locks on the database file are released
by any close() of it in the same process, which a flock is not.
"""

from __future__ import annotations

import contextlib
import fcntl
import os


class StoreLocked(Exception):
    """Another live process holds the store's lock."""

    def __init__(self, path: str, pid: int | None) -> None:
        who = "process %d" % pid if pid else "another process"
        super().__init__("store %s is in use by %s (one bridge per store)" % (path, who))
        self.path = path
        self.pid = pid


def lock_path(store: str) -> str:
    return store + ".lock"


def _pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class StoreLock:
    """Held from :meth:`acquire` to :meth:`release` (or the end of the process)."""

    def __init__(self, store: str) -> None:
        self.store = store
        self.path = lock_path(store)
        self.fd: int | None = None

    def acquire(self) -> StoreLock:
        """Take the lock or raise StoreLocked (naming the holder's pid); OSError if the file
        cannot be created (the store's directory: preflight.check_store names it first)."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = _pid(fd)
                os.close(fd)
                raise StoreLocked(self.store, pid) from None
            except BaseException:
                os.close(fd)
                raise
            # the holder before us may have removed the file between our open and our flock: then
            # we hold a lock on a name nobody sees, and must take the file that is there now
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, b"%d\n" % os.getpid(), 0)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)  # still ours: unlinked while locked (acquire checks the inode)
        os.close(self.fd)
        self.fd = None


def holder(store: str) -> int | None:
    """The pid of the live process holding the store's lock (0: its pid is unknown), or None when
    no process holds it (no lock file, or a stale one). Creates nothing."""
    try:
        fd = os.open(lock_path(store), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _pid(fd) or 0
        return None
    finally:
        os.close(fd)
