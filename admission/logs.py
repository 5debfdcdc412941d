"""Logging for the long-running processes: text for people, or one JSON object per line.

``--log-format json`` writes ``{"time", "level", "logger", "message", ...}`` per line, plus the
decision fields a log line carries (``extra=``): ``workload``, ``namespace``, ``cluster_queue``,
``local_queue``, ``decision``, ``reason``, ``by``, ``flavors``, so a log pipeline can filter
every decision about one workload or queue without parsing sentences.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys

FIELDS = ("workload", "namespace", "cluster_queue", "local_queue", "decision", "reason", "by", "flavors")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for field in FIELDS:
            value = record.__dict__.get(field)
            if value is not None:
                line[field] = value
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure(level: str, fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper()))
