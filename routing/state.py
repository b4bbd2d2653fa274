"""Where the AMQP model keeps its own state: durable definitions, ack floors, transient topics.

Small JSON documents rewritten whole when they change, and a journal of keyed entries for what
grows with the broker (the durable definitions, routing.definitions): a change appends only the
entries it touched. A single node keeps them as files under ``<data-dir>/amqp/``
(:class:`FileState`: ``<name>.json``, and for a journal ``<name>.json`` as its last snapshot plus
``<name>.journal``, one JSON line per entry changed). In cluster mode they are records of the
compacted, replicated topic ``__amqp_state`` (:class:`LogState`: key = document name, or the
journal's name and the entry's key), so that the broker taking over as AMQP home after a failure
finds the definitions and every queue's ack floor in its own replica of that log: ack state
travels through the log.
"""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Iterable, Iterator

from core.checkpoint import fsync_dir, write_atomic, write_synced
from core.log import PartitionLog
from wire.records import Header, Record, RecordBatch, encode_batch

log = logging.getLogger(__name__)

STATE_TOPIC = "__amqp_state"
STATE_TOPIC_CONFIGS = {"cleanup.policy": "compact"}
_ENTRY = "\x00"  # a journal entry's record key: the journal's name, this, the JSON [vhost, entry key]


class FileState:
    def __init__(self, directory: Path):
        self.dir = Path(directory)
        self._journal_lines: dict[str, int] = {}

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

    # --- journals: a snapshot document and the changes made after it ----------------------------
    def read_journal(self, name: str) -> tuple[Any, list[list]]:
        """(the last snapshot or None, the changes appended since, in order). A last line cut short
        by a crash is dropped (its change was never acknowledged) and cut from the file."""
        snapshot = self.read(name, None)
        path = self.dir / f"{name}.journal"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            self._journal_lines[name] = 0
            return snapshot, []
        changes, start = [], 0
        while start < len(data):
            end = data.find(b"\n", start)
            if end < 0:
                log.warning("%s: an unfinished last change (%d bytes) dropped", path, len(data) - start)
                os.truncate(path, start)
                break
            try:
                changes.append(json.loads(data[start:end]))
            except ValueError as exc:
                raise ValueError(f"{path} line {len(changes) + 1} is not valid JSON ({exc}); restore the amqp "
                                 f"directory from a backup") from None
            start = end + 1
        self._journal_lines[name] = len(changes)
        return snapshot, changes

    def append_journal(self, name: str, changes: list) -> int:
        """Append changes durably (fsync'd); returns how many the journal holds since its snapshot."""
        data = b"".join(json.dumps(c, sort_keys=True, separators=(",", ":")).encode() + b"\n" for c in changes)
        path = self.dir / f"{name}.journal"
        made = not path.exists()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            write_synced(fd, data)
        finally:
            os.close(fd)
        if made:
            fsync_dir(self.dir)  # the new file's name is durable too
        self._journal_lines[name] = self._journal_lines.get(name, 0) + len(changes)
        return self._journal_lines[name]

    def needs_fold(self, name: str) -> bool:
        """After :meth:`read_journal`: whether it found changes beyond the snapshot (or no snapshot)."""
        return self._journal_lines.get(name, 0) > 0 or not (self.dir / f"{name}.json").exists()

    def compact_journal(self, name: str, doc: Any, changes: list) -> None:
        """Write ``doc`` (everything the journal adds up to) as the snapshot and empty the journal.
        A crash between the two leaves changes the snapshot already has: replaying them is harmless."""
        self.write(name, doc, pretty=True)
        path = self.dir / f"{name}.journal"
        if path.exists():
            os.truncate(path, 0)
        self._journal_lines[name] = 0


class LogState:
    """The documents as the latest record per key of one partition log (read once, at open).

    ``origin`` (cluster mode 'spread', where every broker writes the log): each record carries it
    in a header, and :attr:`in_flight` counts, per record key of the journal ``track`` (the
    definitions), this broker's records not yet read back from the log by its
    routing.definitions_follower. Until they are, another broker's record of the same key that the
    follower meets was written before ours (the log's order is the one that counts) and ours,
    already applied here, supersedes it: so every broker ends with what the log's last record of
    each key says, its own included."""

    def __init__(self, plog: PartitionLog, origin: bytes | None = None, track: str | None = None):
        self.plog = plog
        self.origin = origin
        self._tracked = None if track is None else (track + _ENTRY).encode()
        self.in_flight: dict[bytes, int] = {}
        self._docs: dict[str, Any] = {}
        self._journals: dict[str, dict[str, list]] = {}  # journal -> entry record key -> change
        self.opened_at = 0  # the log end (or high watermark) that open read up to

    def open(self, end: int | None = None) -> None:
        """Read the documents; ``end``: up to there only (a replica's high watermark)."""
        self._docs.clear()
        self._journals.clear()
        self.opened_at = self.plog.next_offset if end is None else end
        for (name, entry), value in decode_state_records(self.plog.replay(end=end), end=end):
            if entry is None:
                self._docs[name] = value
            elif value is None:
                self._journals.get(name, {}).pop(entry, None)
            else:
                self._journals.setdefault(name, {})[entry] = value

    def read(self, name: str, default: Any) -> Any:
        doc = self._docs.get(name)
        return default if doc is None else doc

    def write(self, name: str, doc: Any, *, pretty: bool = False) -> None:
        self._docs[name] = doc
        value = None if doc is None else json.dumps(doc, sort_keys=True).encode()
        self._append([Record(0, int(time.time() * 1000), name.encode(), value, [])])

    def _append(self, records: list[Record]) -> None:
        self.plog.append(encode_batch(self._tagged(records)))

    def _tagged(self, records: list[Record]) -> list[Record]:
        if self.origin is None:
            return records
        header, in_flight, tracked = (Header(ORIGIN, self.origin),), self.in_flight, self._tracked
        for record in records:
            if tracked is not None and record.key.startswith(tracked):
                in_flight[record.key] = in_flight.get(record.key, 0) + 1
        return [Record(r.offset, r.timestamp, r.key, r.value, header) for r in records]

    # --- journals: one record per entry (the topic's compaction keeps the latest of each) ---------
    def read_journal(self, name: str) -> tuple[Any, list[list]]:
        """(a whole document written before journals, or None; the entries as changes)."""
        entries = self._journals.get(name, {})
        return self._docs.get(name), list(entries.values())

    def append_journal(self, name: str, changes: list) -> int:
        now, records, entries = int(time.time() * 1000), [], self._journals.setdefault(name, {})
        for change in changes:
            vhost, key, value = change
            entry = json.dumps([vhost, key], separators=(",", ":"))
            if value is None:
                entries.pop(entry, None)
            else:
                entries[entry] = change
            records.append(Record(len(records), now, (name + _ENTRY + entry).encode(),
                                  None if value is None else json.dumps(change, sort_keys=True).encode(), []))
        if records:
            self._append(records)
        return 0  # never outgrows anything: compaction keeps one record per entry

    def needs_fold(self, name: str) -> bool:
        return self._docs.get(name) is not None  # a document written whole before journals

    def compact_journal(self, name: str, doc: Any, changes: list) -> None:
        """Only once, for a document written whole before journals: its entries become records."""
        if self._docs.get(name) is None:
            return
        self.append_journal(name, changes)
        self.write(name, None)  # a tombstone: compaction drops the old document
        del self._docs[name]


ORIGIN = "origin"  # a record header: the node id of the broker that wrote it (cluster mode 'spread')


def decode_state_records(batches: Iterable[RecordBatch], start: int = 0, end: int | None = None,
                         only: str | None = None, not_from: bytes | None = None,
                         in_flight: dict[bytes, int] | None = None) -> Iterator[tuple[tuple[str, str | None], Any]]:
    """The records of ``__amqp_state`` batches (offsets in [start, end)) as ((document or journal
    name, journal entry key or None), decoded JSON value or None for a deletion); ``only``: of that
    document or journal alone (the ack floors, rewritten every tick, are not even decoded);
    ``not_from``: leaving out those whose origin header is this (a broker's own writes);
    ``in_flight``: that broker's LogState.in_flight, counted down as its own records pass, and
    leaving out the others' records of a key it has written since (see LogState)."""
    for batch in batches:
        if batch.is_control:
            continue
        for record in batch.records:
            if record.key is None or record.offset < start or (end is not None and record.offset >= end):
                continue
            if not_from is not None and Header(ORIGIN, not_from) in record.headers:
                if in_flight is not None and record.key in in_flight:
                    left = in_flight.pop(record.key) - 1
                    if left > 0:
                        in_flight[record.key] = left
                continue
            if in_flight and record.key in in_flight:
                continue
            name = record.key.decode()
            if only is not None and name != only and not name.startswith(only + _ENTRY):
                continue
            try:
                value = None if record.value is None else json.loads(record.value)
            except ValueError:
                log.warning("%s: unreadable %r record at offset %d skipped", STATE_TOPIC, name, record.offset)
                continue
            journal, sep, entry = name.partition(_ENTRY)
            yield ((journal, entry) if sep else (name, None)), value


class NoState:
    """Cluster mode, on a broker that is not the AMQP home: nothing to read, nothing kept."""

    def open(self) -> None:
        pass

    def read(self, name: str, default: Any) -> Any:
        return default

    def write(self, name: str, doc: Any, *, pretty: bool = False) -> None:
        pass

    def read_journal(self, name: str) -> tuple[Any, list[list]]:
        return None, []

    def append_journal(self, name: str, changes: list) -> int:
        return 0

    def needs_fold(self, name: str) -> bool:
        return False

    def compact_journal(self, name: str, doc: Any, changes: list) -> None:
        pass
