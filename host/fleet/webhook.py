"""Delivering the rollout regression flags: a JSON file a scheduler reads, a webhook POST, and a
distinct exit status (docs/fleet.md, "Rollouts").

* ``OUT/regressions.json`` is written on every run (atomically: a temporary file renamed), with an
  empty ``regressions`` list when nothing is flagged, so that a reader never mistakes a missing
  file for a clean run.
* The webhook gets the same document as one POST (``Content-Type: application/json``), only when
  something is flagged; a non-2xx answer or no answer after RETRIES attempts is an error.
* Exit status: EXIT_OK (0) nothing flagged; EXIT_REGRESSION (3) a release flagged (delivered);
  EXIT_WEBHOOK_FAILED (4) flagged but the webhook did not take it (the file still has it). 2 stays
  the job's bad-input status.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

from .columns import REGRESSION_COLS

EXIT_OK = 0
EXIT_REGRESSION = 3
EXIT_WEBHOOK_FAILED = 4
FLAGS_FILE = "regressions.json"
RETRIES = 3
# the columns of a flagged row that go into the document: the regression table's, less the flag
# itself (every row in the document is flagged) and the before/after intervals' bounds
_NOT_SENT = ("regression", "before_lo", "before_hi", "after_lo", "after_hi")
FLAG_FIELDS = tuple(c for c in REGRESSION_COLS if c not in _NOT_SENT)


class WebhookError(Exception):
    """The webhook did not take the document (one line: the URL and why)."""


def _plain(v: Any) -> Any:
    """A JSON value: numpy scalars as Python ones, NaN as null."""
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def flags_document(rows: Iterable[Mapping[str, Any]], run: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The document: the flagged rows of the regression table (those with `regression` true),
    their FLAG_FIELDS, and what identifies the run (`run`: e.g. out, range)."""
    flagged = [
        {k: _plain(r.get(k)) for k in FLAG_FIELDS} for r in rows if bool(_plain(r.get("regression")) or False)
    ]
    flagged.sort(key=lambda r: (str(r["firmware_version"]), str(r["metric"])))
    return {"source": "leadwire fleet", "run": dict(run or {}), "regressions": flagged}


def write_flags(out_dir: str, doc: Mapping[str, Any]) -> str:
    """Write doc to out_dir/FLAGS_FILE atomically; returns the path."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, FLAGS_FILE)
    fd, tmp = tempfile.mkstemp(prefix=".regressions-", dir=out_dir)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
    return path


def post_json(url: str, doc: Mapping[str, Any], timeout: float = 10.0, retries: int = RETRIES) -> int:
    """POST doc as JSON; returns the HTTP status (2xx). Retries a failed attempt (no answer, 5xx)
    after 0.5 s, 1 s, ...; a 4xx is not retried. Raises WebhookError."""
    body = json.dumps(doc, sort_keys=True).encode()
    req = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "leadwire-fleet"},
    )
    why = ""
    for attempt in range(retries):
        if attempt:
            time.sleep(0.5 * 2 ** (attempt - 1))
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as e:
            why = "HTTP %d" % e.code
            if e.code < 500:
                break
        except (urllib.error.URLError, OSError) as e:
            why = str(getattr(e, "reason", e))
    raise WebhookError("webhook %s: %s" % (url, why))


def exit_for(summary: Mapping[str, Any], fail_on_regression: bool) -> tuple[int, str] | None:
    """The fleet command's exit status and one-line message for a run's flags, or None (exit 0):
    EXIT_WEBHOOK_FAILED when the webhook did not take them; EXIT_REGRESSION when a release is
    flagged and fail_on_regression asks for it."""
    status = summary.get("regression_status", EXIT_OK)
    if status == EXIT_WEBHOOK_FAILED:
        return status, "the webhook did not take the regression flags (they are in %s)" % FLAGS_FILE
    if status == EXIT_REGRESSION and fail_on_regression:
        return status, "%d regression flag(s), in %s" % (summary.get("regressions", 0), FLAGS_FILE)
    return None


def deliver(
    rows: Iterable[Mapping[str, Any]],
    out_dir: str,
    url: str | None = None,
    run: Mapping[str, Any] | None = None,
    log: Any = None,
) -> int:
    """Write the flags file, POST it to `url` when something is flagged; the exit status."""
    log = log or (lambda msg: None)
    doc = flags_document(rows, run)
    path = write_flags(out_dir, doc)
    n = len(doc["regressions"])
    if not n:
        return EXIT_OK
    log("%d regression flag(s) written to %s" % (n, path))
    if url:
        try:
            post_json(url, doc)
        except WebhookError as e:
            log(str(e))
            return EXIT_WEBHOOK_FAILED
        log("regression flags sent to %s" % url)
    return EXIT_REGRESSION
