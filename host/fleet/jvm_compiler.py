"""The local Spark JVM's compiler directives: the driver's planning code left to C1.

A new JVM that runs the fleet job on a large export spends ~30 CPU s in its JIT compiler threads,
CPU that the tasks wait for on a small machine. About 30% of the optimising compiler's (C2's)
time there goes to code that runs only while the driver plans a query: Janino compiling Spark's
generated code, the SQL parser (ANTLR), the analyser and optimiser, the closure cleaner's class
reader and Java serialisation of tasks (JFR compile events of a cold 10M run:
docs/design/fleet-job.md, "A new JVM's compilers"). C1's code is fast enough for that; C2 is left
to the per-row code: Spark's generated classes, its operators and readers.

HotSpot's compiler directives (JDK 9+) exclude those classes from C2: a JSON file named by
``-XX:CompilerDirectivesFile`` (a diagnostic option, hence ``-XX:+UnlockDiagnosticVMOptions``).
It is written once into ``$XDG_CACHE_HOME/leadwire/jvm/``, named by a digest of its text, and
only for the JVMs leadwire starts itself with C2 on (session.launch_conf: a local master and an
input not known to be small). A pattern that matches nothing (another Spark) costs nothing.
``LEADWIRE_SPARK_C2_PLANNING=1`` leaves C2 everywhere.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from leadwire.fleet.jvm_archive import user_cache

ENV_SWITCH = "LEADWIRE_SPARK_C2_PLANNING"
# class patterns (package/Class.method, `*` at either end of each part): planning-only code
PLANNING_CODE = (
    "org/codehaus/*.*",  # Janino: compiles the generated Java
    "org/antlr/*.*",  # the SQL parser
    "org/apache/xbean/*.*",  # ASM in the closure cleaner
    "java/io/Object*.*",  # Java serialisation of tasks and their closures
    "com/fasterxml/*.*",  # JSON of plans and metadata
    "org/apache/spark/sql/catalyst/analysis/*.*",
    "org/apache/spark/sql/catalyst/optimizer/*.*",
    "org/apache/spark/sql/catalyst/parser/*.*",
    "org/apache/spark/sql/catalyst/trees/*.*",
    "org/apache/spark/sql/catalyst/rules/*.*",
)


def cache_dir() -> Path:
    return user_cache() / "jvm"


def directives() -> str:
    """The directives file's text: one directive, C2 off for PLANNING_CODE."""
    return json.dumps([{"match": list(PLANNING_CODE), "c2": {"Exclude": True}}], indent=1) + "\n"


def java_options(directory: Path | None = None) -> str:
    """The JVM options that load the directives, the file written first where missing; "" when
    switched off or the cache cannot be written (the JVM's defaults then)."""
    if os.environ.get(ENV_SWITCH, "0") == "1":
        return ""
    text = directives()
    d = directory or cache_dir()
    path = d / ("c2-planning-%s.json" % hashlib.sha256(text.encode()).hexdigest()[:12])
    try:
        if not path.is_file():
            d.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name("%s.%d.tmp" % (path.name, os.getpid()))
            tmp.write_text(text)
            os.replace(tmp, path)  # a JVM starting beside never reads half a file
    except OSError:
        return ""
    return "-XX:+UnlockDiagnosticVMOptions -XX:CompilerDirectivesFile=%s" % path
