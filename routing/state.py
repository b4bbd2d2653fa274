"""Where the AMQP model keeps its own state: durable definitions, ack floors, transient topics.

Three small JSON documents, each rewritten whole when it changes. A single node keeps them
as files under ``<data-dir>/amqp/`` (:class:`FileState`). In cluster mode they are records of
the compacted, replicated topic ``__amqp_state`` (:class:`LogState`, key = document name), so
that the broker taking over as AMQP home after a failure finds the definitions and every
queue's ack floor in its own replica of that log: ack state travels through the log.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from core.checkpoint import write_atomic
from core.log import PartitionLog
from wire.records import Record, encode_batch

log = logging.getLogger(__name__)

STATE_TOPIC = "__amqp_state"
STATE_TOPIC_CONFIGS = {"cleanup.policy": "compact"}


class FileState:
    def __init__(self, directory: Path):
        self.dir = Path(directory)

    def open(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)

    def read(self, name: str, default: Any) -> Any:
        path = self.dir / f"{name}.json"
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return default
        except ValueError as exc:
            raise ValueError(f"{path} is not valid JSON ({exc}); restore it from a backup or remove it") from None

    def write(self, name: str, doc: Any, *, pretty: bool = False) -> None:
        data = json.dumps(doc, indent=1 if pretty else None, sort_keys=True).encode()
        write_atomic(self.dir / f"{name}.json", data)


class LogState:
    """The documents as the latest record per key of one partition log (read once, at open)."""

    def __init__(self, plog: PartitionLog):
        self.plog = plog
        self._docs: dict[str, Any] = {}

    def open(self) -> None:
        self._docs.clear()
        for batch in self.plog.replay():
            if batch.is_control:
                continue
            for record in batch.records:
                if record.key is None:
                    continue
                name = record.key.decode()
                try:
                    self._docs[name] = None if record.value is None else json.loads(record.value)
                except ValueError:
                    log.warning("%s: unreadable %r record at offset %d skipped", STATE_TOPIC, name, record.offset)

    def read(self, name: str, default: Any) -> Any:
        doc = self._docs.get(name)
        return default if doc is None else doc

    def write(self, name: str, doc: Any, *, pretty: bool = False) -> None:
        self._docs[name] = doc
        value = json.dumps(doc, sort_keys=True).encode()
        self.plog.append(encode_batch([Record(0, int(time.time() * 1000), name.encode(), value, [])]))


class NoState:
    """Cluster mode, on a broker that is not the AMQP home: nothing to read, nothing kept."""

    def open(self) -> None:
        pass

    def read(self, name: str, default: Any) -> Any:
        return default

    def write(self, name: str, doc: Any, *, pretty: bool = False) -> None:
        pass
