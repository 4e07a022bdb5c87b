"""Structured logs on stderr, one record per line: JSON objects for machines, text for people.

Every record is an event name and its fields. ``format`` (``[bridge] log_format``, ``--log-format``):
``"json"`` writes ``{"ts":..,"level":..,"event":..,<fields>}``; ``"text"`` writes
``HH:MM:SS.mmm LEVEL   event key=value ...`` (values with spaces quoted); ``"auto"`` is text when
the stream is a terminal and JSON otherwise (a pipe, a file, journald).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any

LOGGER = "leadwire.bridge"
FORMATS = ("auto", "text", "json")


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return getattr(record, "fields", None) or {}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="microseconds"),
            "level": record.levelname.lower(),
            "event": record.getMessage(),
        }
        out.update(_fields(record))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, separators=(",", ":"), default=str)


def _text_value(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(v, separators=(",", ":"), default=str)
    s = str(v)
    if not s or any(c in s for c in ' "=\n\t'):
        return json.dumps(s)
    return s


class TextFormatter(logging.Formatter):
    """``06:50:14.123 WARNING device_unreachable device=greenhouse-1 rounds=5 ...`` (local time)."""

    def format(self, record: logging.LogRecord) -> str:
        t = dt.datetime.fromtimestamp(record.created).strftime("%H:%M:%S.%f")[:-3]
        parts = [t, record.levelname.ljust(7), record.getMessage()]
        parts += ["%s=%s" % (k, _text_value(v)) for k, v in _fields(record).items()]
        out = " ".join(parts)
        if record.exc_info:
            out += "\n" + self.formatException(record.exc_info)
        return out


def resolve(fmt: str, stream: Any) -> str:
    """ "text" or "json": "auto" is text on a terminal, JSON otherwise."""
    if fmt != "auto":
        return fmt
    isatty = getattr(stream, "isatty", None)
    try:
        return "text" if isatty is not None and isatty() else "json"
    except ValueError:  # a closed stream
        return "json"


def setup(level: str = "info", stream: Any = None, fmt: str = "json") -> logging.Logger:
    if fmt not in FORMATS:
        raise ValueError("log format must be one of %s, got %r" % (", ".join(FORMATS), fmt))
    stream = stream or sys.stderr
    log = logging.getLogger(LOGGER)
    log.handlers.clear()
    h = logging.StreamHandler(stream)
    h.setFormatter(TextFormatter() if resolve(fmt, stream) == "text" else JsonFormatter())
    log.addHandler(h)
    log.setLevel(level.upper())
    log.propagate = False
    return log


def event(log: logging.Logger, level: int, name: str, **fields: Any) -> None:
    if log.isEnabledFor(level):
        log.log(level, name, extra={"fields": fields})
