"""Structured logging for the whole process.

Everything logs through the standard ``logging`` module (core/ already does); Twisted's own
log events are routed into it too. Fields passed as ``extra={"fields": {...}}`` are kept as
fields: key=value pairs in text mode, keys of the JSON object in json mode.
"""
from __future__ import annotations

import itertools
import json
import logging
import sys
import time

from twisted.logger import STDLibLogObserver, globalLogBeginner


def _fields(record: logging.LogRecord) -> dict:
    return getattr(record, "fields", None) or {}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        doc.update(_fields(record))
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = _fields(record)
        if extra:
            line += " " + " ".join(f"{k}={v}" for k, v in extra.items())
        return line


def configure(level: str, fmt: str, stream=None) -> None:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    globalLogBeginner.beginLoggingTo([STDLibLogObserver(name="twisted")], redirectStandardIO=False)


connection_ids = itertools.count(1)  # one sequence for the connections of both protocols


def fields(**values) -> dict:
    """``log.info("msg", extra=fields(topic=t))``: structured fields for one log line."""
    return {"fields": values}
