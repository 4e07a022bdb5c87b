"""The leadwire side of the benches that run the bridge against a board (peer_mqtt_bench,
netem_bench): the lw_host process (bench/peer_mqtt/lw_host.py, run by path so that a --before tree's
bridge runs it), a git ref's package laid out for PYTHONPATH, the commit rate, the lossy-link report
and the network-namespace check. Benches import these from here, never from each other.
"""

from __future__ import annotations

import io
import math
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

from leadwire.tools.benchkit import Proc, fmt, table

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "bench" / "peer_mqtt"


def netns_usable() -> str | None:
    """None when `unshare -n` and nftables work here, else why not."""
    if not shutil.which("unshare"):
        return "no `unshare` command (util-linux)"
    if os.geteuid() != 0:
        return "not root: a network namespace with nftables needs CAP_SYS_ADMIN and CAP_NET_ADMIN"
    probe = "ip link set lo up && nft add table inet probe && nft delete table inet probe"
    r = subprocess.run(["unshare", "-n", "sh", "-c", probe], capture_output=True, text=True)
    if r.returncode:
        return "unshare -n / nft failed: %s" % (r.stderr.strip() or r.returncode)
    return None


def commit_rate(commits: list[list[float]] | list[tuple[float, int]]) -> float:
    """Events committed per second between the first and the last commit (the first batch excluded)."""
    if len(commits) < 2:
        return float("nan")
    (t0, c0), (t1, c1) = commits[0], commits[-1]
    return (c1 - c0) / (t1 - t0) if t1 > t0 else float("nan")


def lw_host(
    link: list[str], store: Path, events: int, seconds: float, timeout: float, frames: int, pipeline: bool,
    code: str | None, rto_min: float, max_bytes: int | None = None,
) -> Proc:  # fmt: skip
    """bench/peer_mqtt/lw_host.py polling the board on `link` (--board ADDR, or --serial PORT --baud B),
    with the bridge code of `code` (--before) when given; --rto-min for either code whose bridge has
    it (host/bridge/rtt.py), so a pair runs with the same floor (a before tree without it has none)."""
    rto = code is None or (Path(code) / "leadwire" / "bridge" / "rtt.py").exists()
    return Proc(
        [sys.executable, str(HERE / "lw_host.py"), *link, "--store", str(store), "--events", str(events),
         "--seconds", str(seconds), "--timeout", str(timeout), "--frames", str(frames),
         *(["--max-bytes", str(max_bytes)] if max_bytes else []), "--pipeline", str(int(pipeline)),
         *(["--rto-min", str(rto_min)] if rto else [])],
        env={**os.environ, "PYTHONPATH": code} if code else None,
    )  # fmt: skip


def before_tree(ref: str, dest: Path) -> str:
    """The leadwire package of git ref `ref` laid out under dest (as the editable install maps it):
    PYTHONPATH=dest makes a bridge run that code against the same board (the firmware is this tree's)."""
    src = dest / "src"
    src.mkdir(parents=True)
    arch = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "shared/leadwire", "host/bridge", "tools"],
                          check=True, capture_output=True).stdout  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(arch)) as tf:
        tf.extractall(src, filter="data")
    pkg = dest / "leadwire"
    shutil.copytree(src / "shared" / "leadwire", pkg)
    shutil.copytree(src / "host" / "bridge", pkg / "bridge")
    shutil.copytree(src / "tools", pkg / "tools")
    return str(dest)


def best(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    ok = [r for r in runs if not math.isnan(r["rate"])]
    return max(ok, key=lambda r: r["rate"]) if ok else None


def paired(res: dict[str, Any], code: str, size: int, loss: float) -> str:
    """This tree's best acknowledged events/s over the --before code's, same size and loss: the two
    ladders ran point by point back to back, so the load drift of a shared machine mostly cancels."""
    if code != "now":
        return ""
    at = [r for r in res["ladders"] if r["size"] == size and r["loss"] == loss]
    best_of = {c: best([r for r in at if r["code"] == c]) for c in ("now", "before")}
    n, b = best_of["now"], best_of["before"]
    return "%.2f" % (n["rate"] / b["rate"]) if n and b and b["rate"] else "-"


def loss_report(res: dict[str, Any]) -> str:
    """Per size and code: lossy / lossless acknowledged events/s, highest loss-free offered rate, RTO."""
    rows = [["code", "size", "loss each way", "best ack events/s", "ratio to lossless",
             "highest offered rate with no counted loss", "ratio to lossless", "RTO samples",
             "SRTT ms", "RTO p50 / p99 ms", "timeouts", "spurious retransmissions",
             "now / before (paired runs)"]]  # fmt: skip
    out = []
    for code in ("before", "now"):
        for size in res["sizes"]:
            runs = [r for r in res["ladders"] if r["code"] == code and r["size"] == size]
            if not runs:
                continue
            clean = [r for r in runs if r["loss"] == 0]
            b0 = best(clean)
            free0 = max((r["offered_hz"] for r in clean if r["known_lost"] == 0), default=0)
            for loss in sorted({r["loss"] for r in runs}):
                lr = [r for r in runs if r["loss"] == loss]
                b = best(lr)
                if b is None or b0 is None:
                    continue
                free = max((r["offered_hz"] for r in lr if r["known_lost"] == 0), default=0)
                rto = b.get("rto") or {}

                def ms(v: Any) -> str:
                    return "%.2f" % (1e3 * v) if isinstance(v, float) else "-"

                rows.append([code, str(size), "%g%%" % (100 * loss), fmt(b["rate"]),
                             "%.3f" % (b["rate"] / b0["rate"]),
                             fmt(free) if free else "none", "%.2f" % (free / free0) if free0 else "n/a",
                             fmt(rto.get("samples")), ms(rto.get("srtt")),
                             "%s / %s" % (ms(rto.get("rto_p50")), ms(rto.get("rto_p99"))),
                             fmt(b["counters"].get("timeouts")), fmt(rto.get("spurious")),
                             paired(res, code, size, loss)])  # fmt: skip
    out.append(table(rows))
    out.append(
        "\n(best = the offered rate of the ladder with the most acknowledged events/s; loss-free = no "
        "event counted lost by a RECOVERY; RTO statistics of the best run; silent loss in every "
        "leadwire run: %s)" % fmt(sum(r["silent_lost"] for r in res["ladders"]))
    )
    return "\n".join(out)
