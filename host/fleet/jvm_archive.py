"""The local Spark JVM's class-data archive (CDS): Spark's classes mapped, not loaded, at start.

A local JVM that leadwire starts itself (`leadwire fleet`, the demo's fleet job) spends seconds
loading, parsing and verifying the ~15,000 classes Spark needs before and during its first query.
The JDK can write the classes a run loaded to an archive at exit (``-XX:ArchiveClassesAtExit``,
JDK 13+) and map them from it at the next start (``-XX:SharedArchiveFile``): a shorter JVM start
and first query (docs/design/fleet-job.md, "What made it fast enough").

The archive is a cache of this machine's JVM and Spark jars, like a .pyc: made by the first run
into ``$XDG_CACHE_HOME/leadwire/spark-cds/`` (about 150-190 MB, 10-15 s once at that run's exit),
named by a digest of the java binary and the Spark jars so that an upgrade of either makes a new
one, and never shipped. The JVM writes it at exit, so the first run ends its gateway JVM itself
after ``spark.stop()`` (:meth:`ClassArchive.finish`), waits for the dump and renames it into place:
a reader never sees a half-written archive. A stale or unreadable archive costs nothing but the
speed-up: the JVM's default ``-Xshare:auto`` starts without it. ``LEADWIRE_SPARK_CDS=0`` turns it
off. Under spark-submit the launch's own options stand (nothing here is used).
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

ENV_SWITCH = "LEADWIRE_SPARK_CDS"
# the dump's per-class warnings (signed jars, old class versions: skipped) go to the JVM's stdout
QUIET = "-Xlog:cds=off,cds+dynamic=off"
DUMP_TIMEOUT_S = 180.0


def user_cache() -> Path:
    """leadwire's folder in the user's cache (XDG_CACHE_HOME, else ~/.cache)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "leadwire"


def cache_dir() -> Path:
    return user_cache() / "spark-cds"


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1") != "0"


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    exe = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(exe) if exe and os.path.exists(exe) else None


def digest() -> str | None:
    """What the archive depends on: the java binary (path, size, mtime) and Spark's jars (their
    directory, names, sizes). None when either cannot be found (then no archive). The directory
    counts because the JVM checks the archive's classpath by path: an archive written from another
    install's jars is refused at start, silently, and would never be rebuilt."""
    java = _java()
    try:
        import pyspark

        jars = sorted(glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "*.jar")))
    except ImportError:
        return None
    if java is None or not jars:
        return None
    h = hashlib.sha256()
    st = os.stat(java)
    h.update(("%s %d %d\n" % (java, st.st_size, int(st.st_mtime))).encode())
    h.update(("%s\n" % os.path.realpath(os.path.dirname(jars[0]))).encode())
    for j in jars:
        h.update(("%s %d\n" % (os.path.basename(j), os.path.getsize(j))).encode())
    return h.hexdigest()[:16]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ClassArchive:
    """The archive for this machine's JVM and Spark, ready or to be made by this run.

    ``java_options()`` goes into ``spark.driver.extraJavaOptions`` of a local session leadwire
    starts; ``finish(log)`` runs after that session's ``spark.stop()``."""

    def __init__(self, directory: Path | None = None, key: str | None = None) -> None:
        self.dir = directory or cache_dir()
        self.key = key if key is not None else digest()
        self.path = self.dir / ("spark-%s.jsa" % self.key) if self.key else None
        self.pending: Path | None = None  # the file this run's JVM writes at exit

    def java_options(self) -> str:
        if self.path is None or not enabled():
            return ""
        if self.path.is_file():
            return "-XX:SharedArchiveFile=%s %s" % (self.path, QUIET)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError:
            return ""  # a read-only home: run without
        for tmp in self.dir.glob("spark-*.jsa.*.tmp"):  # left by a run killed before its JVM's exit
            if not _alive(int(tmp.name.split(".")[-2])):
                tmp.unlink(missing_ok=True)
        self.pending = self.dir / ("spark-%s.jsa.%d.tmp" % (self.key, os.getpid()))
        return "-XX:ArchiveClassesAtExit=%s %s" % (self.pending, QUIET)

    def finish(self, log: Callable[[str], None] = lambda _m: None) -> bool:
        """After spark.stop() of the session started with java_options(): when this run makes the
        archive, end the gateway JVM (it dumps the archive as it exits), wait and put the archive
        in place; the next local session of this process starts a new JVM. True when an archive
        was put in place."""
        if self.pending is None or self.path is None:
            return False
        from pyspark import SparkContext

        gw = SparkContext._gateway
        proc = getattr(gw, "proc", None)
        pending, self.pending = self.pending, None
        if gw is None or proc is None:  # not a JVM this process launched: nothing to wait for
            return False
        log("saving the JVM's class archive for faster starts (once): %s" % self.path)
        SparkContext._gateway = None  # type: ignore[assignment]
        SparkContext._jvm = None  # type: ignore[assignment]
        ok = False
        try:
            gw.shutdown()
            proc.stdin.close()  # the gateway JVM exits when its stdin closes (pyspark's contract)
            ok = proc.wait(DUMP_TIMEOUT_S) == 0 and pending.is_file() and pending.stat().st_size > 0
        except Exception:  # timeout, broken pipe: no archive this time
            proc.kill()
        if ok:
            os.replace(pending, self.path)
            for old in self.dir.glob("spark-*.jsa"):
                if old != self.path:
                    old.unlink(missing_ok=True)  # made for a JVM or Spark no longer here
        else:
            pending.unlink(missing_ok=True)
        return ok
