"""Host power cuts for tests: an LD_PRELOAD shim that keeps every write not yet fsynced undoable.

A power loss keeps what the disk was told to make durable (fsync / fdatasync returned) and may
drop anything written after it. This module models the worst case of that, exactly: every write
since a file's last successful fsync is gone.

How. :func:`build` compiles :data:`SHIM_C` (below, our own code, no fetched source) with the
system C compiler into ``~/.cache/leadwire/powercut/`` and :func:`env` returns the environment
that preloads it into a process (the bridge's store writer inherits the bridge's environment).
In that process, for every file under ``LEADWIRE_POWERCUT_DIR`` (at any depth), through the calls
SQLite's unix VFS makes (libsqlite3 imports ``open64``, ``pwrite64``, ``write``, ``ftruncate64``,
``fdatasync``, ``close``, ``unlink``; the shim wraps those and their siblings; files opened
read-only are not tracked, and SQLite never writes the database through a mapping):

* before each ``pwrite``/``write``/``ftruncate`` the shim appends the bytes it is about to
  overwrite (and the file's size) to ``<file>.undo``; a file the process creates gets a CREATE
  record;
* after a successful ``fsync``/``fdatasync`` on any descriptor of the file, its ``.undo`` is
  emptied: everything written so far is durable;
* the records go to the undo file with plain ``write()`` before the real write runs, so a SIGKILL
  at any instruction leaves an undo log that covers every byte the real file took.

:func:`cut` is the power loss of one directory: it SIGKILLs the processes that write there (each
process that loaded the shim recorded its pid in ``.powercut-pids`` beside the files it writes),
waits until they are gone, then applies each undo log backwards (old bytes back, old size back,
created files deleted). What survives is exactly the state at each file's last fsync. SQLite's
``-shm`` (the WAL index, a shared mmap that SQLite never fsyncs) is either deleted or left as the
kernel has it (stale, pointing at WAL frames that were just rolled back), chosen at random per
cut: SQLite must rebuild it from the WAL either way.

What it does not model: a torn sector inside one write (SQLite's WAL checksums cover that; a
whole-write undo is the stricter case for "was it fsynced"), reordering among fsynced writes
(impossible: they are all kept) and directory-entry durability beyond "a file's first fsync makes
its creation durable" (SQLite fsyncs the directory after creating a WAL).

Used by tests/bridge/test_powercut.py and bench/powercut_bench.py.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

ENV_DIR = "LEADWIRE_POWERCUT_DIR"
PIDS = ".powercut-pids"
UNDO = ".undo"
# record: kind u32, pad u32, offset i64, length i64 (bytes of old data following), old size i64
REC = struct.Struct("<IIqqq")
K_WRITE, K_TRUNC, K_CREATE = 1, 2, 3

SHIM_C = r"""
/* leadwire power-cut shim (tools/powercut.py): undo logs of unsynced writes. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define MAXFD 4096
struct rec { uint32_t kind, pad; int64_t off, len, old_size; };
static char *paths[MAXFD];          /* tracked fd -> file path */
static int undo_fd[MAXFD];          /* tracked fd -> its undo log (shared per path, dup'd) */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char dir[PATH_MAX];
static size_t dirlen;
static int ready;

static int (*r_open)(const char *, int, ...);
static int (*r_open64)(const char *, int, ...);
static int (*r_openat)(int, const char *, int, ...);
static ssize_t (*r_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*r_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*r_write)(int, const void *, size_t);
static int (*r_ftruncate)(int, off_t);
static int (*r_ftruncate64)(int, off_t);
static int (*r_fsync)(int);
static int (*r_fdatasync)(int);
static int (*r_close)(int);
static int (*r_unlink)(const char *);

static void init(void) {
    if (ready) return;
    r_open = dlsym(RTLD_NEXT, "open"); r_open64 = dlsym(RTLD_NEXT, "open64");
    r_openat = dlsym(RTLD_NEXT, "openat");
    r_pwrite = dlsym(RTLD_NEXT, "pwrite"); r_pwrite64 = dlsym(RTLD_NEXT, "pwrite64");
    r_write = dlsym(RTLD_NEXT, "write");
    r_ftruncate = dlsym(RTLD_NEXT, "ftruncate"); r_ftruncate64 = dlsym(RTLD_NEXT, "ftruncate64");
    r_fsync = dlsym(RTLD_NEXT, "fsync"); r_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    r_close = dlsym(RTLD_NEXT, "close"); r_unlink = dlsym(RTLD_NEXT, "unlink");
    const char *d = getenv("LEADWIRE_POWERCUT_DIR");
    if (d && *d && strlen(d) < sizeof dir - 2) {
        strcpy(dir, d);
        dirlen = strlen(dir);
        if (dir[dirlen - 1] != '/') { dir[dirlen++] = '/'; dir[dirlen] = 0; }
    }
    ready = 1;
}

static int tracked_path(const char *p) {
    size_t n = strlen(p);
    if (!dirlen || strncmp(p, dir, dirlen) != 0) return 0;
    if (n >= 5 && strcmp(p + n - 5, ".undo") == 0) return 0;
    if (strstr(p + dirlen, ".powercut")) return 0;
    return 1;
}

static void log_rec(int u, uint32_t kind, int64_t off, int64_t len, int64_t old_size, const void *data) {
    struct rec r = { kind, 0, off, len, old_size };
    r_write(u, &r, sizeof r);
    if (len > 0) r_write(u, data, (size_t)len);
}

/* this process's pid in <the file's directory>/.powercut-pids, once per directory */
static void note_pid(const char *file) {
    static char noted[8][PATH_MAX];
    char p[PATH_MAX];
    const char *slash = strrchr(file, '/');
    size_t n = (size_t)(slash - file) + 1;
    if (n >= PATH_MAX - 16) return;
    memcpy(p, file, n);
    p[n] = 0;
    for (int i = 0; i < 8; i++) {
        if (strcmp(noted[i], p) == 0) return;
        if (!noted[i][0]) { strcpy(noted[i], p); break; }
    }
    strcat(p, ".powercut-pids");
    int f = r_open(p, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (f < 0) return;
    char b[32];
    int k = snprintf(b, sizeof b, "%d\n", (int)getpid());
    r_write(f, b, (size_t)k);
    r_close(f);
}

static void track(int fd, const char *path, int created) {
    if (fd < 0 || fd >= MAXFD) return;
    char abs[PATH_MAX];
    if (!realpath(path, abs) || !tracked_path(abs)) return;
    char up[PATH_MAX + 8];
    snprintf(up, sizeof up, "%s.undo", abs);
    int u = r_open(up, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (u < 0) return;
    pthread_mutex_lock(&mu);
    note_pid(abs);
    if (created) log_rec(u, 3, 0, 0, 0, NULL);
    paths[fd] = strdup(abs);
    undo_fd[fd] = u;
    pthread_mutex_unlock(&mu);
}

static int do_open(int dfd, const char *path, int flags, mode_t mode, int which) {
    init();
    struct stat st;
    int existed = 1;
    if ((flags & O_CREAT) && dirlen)
        existed = (dfd == AT_FDCWD ? stat(path, &st) : fstatat(dfd, path, &st, 0)) == 0;
    int fd = which == 0 ? r_open(path, flags, mode) : which == 1 ? r_open64(path, flags, mode)
                        : r_openat(dfd, path, flags, mode);
    if (fd >= 0 && dirlen && (flags & O_ACCMODE) != O_RDONLY && (dfd == AT_FDCWD || path[0] == '/'))
        track(fd, path, !existed);
    return fd;
}

int open(const char *path, int flags, ...) {
    mode_t m = 0;
    if (flags & (O_CREAT | O_TMPFILE)) { va_list a; va_start(a, flags); m = va_arg(a, int); va_end(a); }
    return do_open(AT_FDCWD, path, flags, m, 0);
}
int open64(const char *path, int flags, ...) {
    mode_t m = 0;
    if (flags & (O_CREAT | O_TMPFILE)) { va_list a; va_start(a, flags); m = va_arg(a, int); va_end(a); }
    return do_open(AT_FDCWD, path, flags, m, 1);
}
int openat(int dfd, const char *path, int flags, ...) {
    mode_t m = 0;
    if (flags & (O_CREAT | O_TMPFILE)) { va_list a; va_start(a, flags); m = va_arg(a, int); va_end(a); }
    return do_open(dfd, path, flags, m, 2);
}
int openat64(int dfd, const char *path, int flags, ...) {
    mode_t m = 0;
    if (flags & (O_CREAT | O_TMPFILE)) { va_list a; va_start(a, flags); m = va_arg(a, int); va_end(a); }
    return do_open(dfd, path, flags, m, 2);
}

/* the pre-image of [off, off + len): the old bytes that exist, and the old size */
static void save(int fd, int64_t off, int64_t len) {
    struct stat st;
    if (fstat(fd, &st) != 0) return;
    int64_t old = st.st_size, have = old - off;
    if (have < 0) have = 0;
    if (have > len) have = len;
    void *buf = have ? malloc((size_t)have) : NULL;
    if (have && (!buf || pread(fd, buf, (size_t)have, off) != have)) { free(buf); have = 0; buf = NULL; }
    log_rec(undo_fd[fd], 1, off, have, old, buf);
    free(buf);
}

static ssize_t do_pwrite(int fd, const void *b, size_t n, off_t off, int is64) {
    init();
    if (fd < 0 || fd >= MAXFD || !paths[fd])
        return is64 ? r_pwrite64(fd, b, n, off) : r_pwrite(fd, b, n, off);
    pthread_mutex_lock(&mu);
    save(fd, off, (int64_t)n);
    ssize_t r = is64 ? r_pwrite64(fd, b, n, off) : r_pwrite(fd, b, n, off);
    pthread_mutex_unlock(&mu);
    return r;
}
ssize_t pwrite(int fd, const void *b, size_t n, off_t off) { return do_pwrite(fd, b, n, off, 0); }
ssize_t pwrite64(int fd, const void *b, size_t n, off_t off) { return do_pwrite(fd, b, n, off, 1); }

ssize_t write(int fd, const void *b, size_t n) {
    init();
    if (fd < 0 || fd >= MAXFD || !paths[fd]) return r_write(fd, b, n);
    pthread_mutex_lock(&mu);
    struct stat st;
    off_t off = (fcntl(fd, F_GETFL) & O_APPEND) ? (fstat(fd, &st) == 0 ? st.st_size : -1)
                                                : lseek(fd, 0, SEEK_CUR);
    if (off >= 0) save(fd, off, (int64_t)n);
    ssize_t r = r_write(fd, b, n);
    pthread_mutex_unlock(&mu);
    return r;
}

static int do_trunc(int fd, off_t len, int is64) {
    init();
    if (fd < 0 || fd >= MAXFD || !paths[fd]) return is64 ? r_ftruncate64(fd, len) : r_ftruncate(fd, len);
    pthread_mutex_lock(&mu);
    struct stat st;
    if (fstat(fd, &st) == 0) {
        int64_t old = st.st_size, cut = old > len ? old - len : 0;
        void *buf = cut ? malloc((size_t)cut) : NULL;
        if (cut && (!buf || pread(fd, buf, (size_t)cut, len) != cut)) { free(buf); buf = NULL; cut = 0; }
        log_rec(undo_fd[fd], 2, len, cut, old, buf);
        free(buf);
    }
    int r = is64 ? r_ftruncate64(fd, len) : r_ftruncate(fd, len);
    pthread_mutex_unlock(&mu);
    return r;
}
int ftruncate(int fd, off_t len) { return do_trunc(fd, len, 0); }
int ftruncate64(int fd, off_t len) { return do_trunc(fd, len, 1); }

/* durable: everything written to this file (through any descriptor) so far is kept */
static int do_sync(int fd, int data) {
    init();
    int r = data ? r_fdatasync(fd) : r_fsync(fd);
    if (r == 0 && fd >= 0 && fd < MAXFD && paths[fd]) {
        pthread_mutex_lock(&mu);
        r_ftruncate(undo_fd[fd], 0);
        pthread_mutex_unlock(&mu);
    }
    return r;
}
int fsync(int fd) { return do_sync(fd, 0); }
int fdatasync(int fd) { return do_sync(fd, 1); }

int close(int fd) {
    init();
    if (fd >= 0 && fd < MAXFD && paths[fd]) {
        pthread_mutex_lock(&mu);
        free(paths[fd]);
        paths[fd] = NULL;
        r_close(undo_fd[fd]);
        pthread_mutex_unlock(&mu);
    }
    return r_close(fd);
}

/* an unlinked file (SQLite deletes the WAL at a clean close, after a full checkpoint): forget it */
int unlink(const char *path) {
    init();
    int r = r_unlink(path);
    char abs[PATH_MAX];
    if (r == 0 && dirlen && path[0] == '/' && strlen(path) < PATH_MAX - 8) {
        strcpy(abs, path);
        if (tracked_path(abs)) { strcat(abs, ".undo"); r_unlink(abs); }
    }
    return r;
}
"""


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "leadwire" / "powercut"


def compiler() -> str | None:
    """The C compiler the shim is built with, or None (tests then skip, naming it)."""
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    return None


def build() -> Path:
    """The shim's shared object, compiled once per source version (outside the repository)."""
    digest = hashlib.sha256(SHIM_C.encode()).hexdigest()[:16]
    out = cache_dir() / ("powercut-%s.so" % digest)
    if out.exists():
        return out
    cc = compiler()
    if cc is None:
        raise RuntimeError("powercut: no C compiler (cc, gcc or clang) to build the shim")
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.with_suffix(".c")
    src.write_text(SHIM_C)
    tmp = out.with_suffix(".so.%d" % os.getpid())
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(tmp), str(src), "-ldl", "-lpthread"], check=True)
    os.replace(tmp, out)
    return out


def env(directory: Path, shim: Path | None = None) -> dict[str, str]:
    """Variables that preload the shim and point it at directory (absolute, no symlinks)."""
    so = shim or build()
    pre = os.environ.get("LD_PRELOAD", "")
    return {"LD_PRELOAD": str(so) + (" " + pre if pre else ""), ENV_DIR: str(directory.resolve())}


@dataclass
class CutStats:
    """What one cut threw away."""

    files: int = 0  # files with unsynced writes
    records: int = 0  # writes and truncations undone
    bytes_undone: int = 0  # old bytes written back
    deleted: int = 0  # created, never synced: gone
    shm: str = ""  # "deleted" or "stale"


def _alive(pid: int) -> bool:
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def kill_all(directory: Path, timeout: float = 10.0) -> list[int]:
    """SIGKILL every process that loaded the shim for this directory; wait until each is gone."""
    pf = directory / PIDS
    try:
        pids = [int(x) for x in pf.read_text().split()]
    except FileNotFoundError:
        return []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    end = time.monotonic() + timeout
    while any(_alive(p) for p in pids):
        if time.monotonic() > end:
            raise RuntimeError("powercut: processes %s still alive after SIGKILL" % pids)
        time.sleep(0.002)
    pf.unlink()
    return pids


def rollback(directory: Path, rng: random.Random | None = None) -> CutStats:
    """Apply every undo log in directory backwards: each file as of its last fsync.

    Call only when no process writes there any more (:func:`kill_all`)."""
    st = CutStats()
    # the WAL index: never fsynced by SQLite, a shared mmap the kernel may or may not have written
    # back. Either gone, or left exactly as the processes left it (its undo log ignored): stale
    stale = rng is not None and rng.random() < 0.5
    st.shm = "stale" if stale else "deleted"
    for shm in directory.glob("*-shm"):
        Path(str(shm) + UNDO).unlink(missing_ok=True)
        if not stale:
            shm.unlink()
    for undo in sorted(directory.glob("*" + UNDO)):
        target = Path(str(undo)[: -len(UNDO)])
        log = undo.read_bytes()
        recs: list[tuple[int, int, int, int, bytes]] = []
        p = 0
        while p + REC.size <= len(log):
            kind, _, off, ln, old = REC.unpack_from(log, p)
            p += REC.size
            if p + ln > len(log):
                break  # a record cut short by the SIGKILL: its write never ran (logged first)
            recs.append((kind, off, ln, old, log[p : p + ln]))
            p += ln
        undo.unlink()
        if not recs:
            continue
        st.files += 1
        if any(r[0] == K_CREATE for r in recs):
            target.unlink(missing_ok=True)
            st.deleted += 1
            continue
        if not target.exists():
            continue
        fd = os.open(target, os.O_RDWR)
        try:
            for _kind, off, _ln, old, data in reversed(recs):
                if data:
                    os.pwrite(fd, data, off)
                    st.bytes_undone += len(data)
                os.ftruncate(fd, old)
                st.records += 1
        finally:
            os.close(fd)
    return st


def cut(directory: Path, rng: random.Random | None = None) -> CutStats:
    """The power loss: every process writing there killed at once, unsynced writes gone."""
    kill_all(directory)
    return rollback(directory, rng)
