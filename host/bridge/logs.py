"""JSON structured logs: one object per line on stderr."""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any

LOGGER = "leadwire.bridge"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="microseconds"),
            "level": record.levelname.lower(),
            "event": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if fields:
            out.update(fields)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, separators=(",", ":"), default=str)


def setup(level: str = "info", stream: Any = None) -> logging.Logger:
    log = logging.getLogger(LOGGER)
    log.handlers.clear()
    h = logging.StreamHandler(stream or sys.stderr)
    h.setFormatter(JsonFormatter())
    log.addHandler(h)
    log.setLevel(level.upper())
    log.propagate = False
    return log


def event(log: logging.Logger, level: int, name: str, **fields: Any) -> None:
    if log.isEnabledFor(level):
        log.log(level, name, extra={"fields": fields})
