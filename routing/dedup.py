"""Publish de-duplication: a message whose key was seen within the window is stored only once.

A publisher that loses a confirm (connection dropped, broker restarted) cannot know whether
its message was stored, so it publishes again; with de-duplication on, the retry is
confirmed but not stored a second time. On a queue (argument ``x-message-deduplication``)
a duplicate is not appended to that queue; on an exchange (the same argument on
exchange.declare) it is not routed at all. Arguments, named as in the community
rabbitmq-message-deduplication plugin where it has them:

* ``x-message-deduplication``: ``true`` -> the key is the ``message-id`` property (or the
  plugin's ``x-deduplication-header`` header when a message carries it); a string -> the
  key is the value of the header of that name. A message without a key is never dropped.
* ``x-cache-size``: how many keys are remembered (default 100,000; the oldest go first).
* ``x-cache-ttl``: how long (ms) a key is remembered (default: until pushed out by size).

Nothing is written for the cache itself: the window is rebuilt from the messages already in
the queues' logs (each stores its key in its properties, and its publish time), lazily on
first use after a start. A confirmed message is durable in its queue's log, so its key
comes back after any crash.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Iterable, Iterator

from core.log import PartitionLog
from routing import mapping, message_fields
from routing.errors import PRECONDITION_FAILED, ChannelError
from wire.records import Record

ARGUMENT = "x-message-deduplication"
PLUGIN_HEADER = "x-deduplication-header"
DEFAULT_SIZE = 100_000


def _positive(args: dict, name: str, what: str) -> int | None:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ChannelError(PRECONDITION_FAILED, f"invalid arg '{name}' for {what}: {value!r} is not a positive integer")
    return value


def _key_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    return str(value).encode()


class Deduplicator:
    """The keys seen recently by one queue or exchange: insertion order, bounded by size and age."""

    __slots__ = ("header", "size", "ttl_ms", "_seen", "loaded")

    def __init__(self, header: str | None, size: int = DEFAULT_SIZE, ttl_ms: int | None = None):
        self.header = header  # None: message-id
        self.size = size
        self.ttl_ms = ttl_ms
        self._seen: OrderedDict[bytes, int] = OrderedDict()  # key -> publish time (ms)
        self.loaded = False  # rebuilt from the logs yet?

    @classmethod
    def from_arguments(cls, args: dict, what: str) -> "Deduplicator | None":
        """The de-duplicator ``args`` ask for, None if off; 406 on a bad argument (``what`` names the owner)."""
        spec = args.get(ARGUMENT)
        if spec is None or spec is False:
            return None
        if spec is not True and not (isinstance(spec, (str, bytes)) and spec):
            raise ChannelError(PRECONDITION_FAILED, f"invalid arg '{ARGUMENT}' for {what}: expected true or a "
                                                    f"header name, got {spec!r}")
        header = None if spec is True else (spec.decode() if isinstance(spec, bytes) else spec)
        size = _positive(args, "x-cache-size", what) or DEFAULT_SIZE
        return cls(header, size, _positive(args, "x-cache-ttl", what))

    def key(self, source: message_fields.Source) -> bytes | None:
        """The de-duplication key of a publish (its property section) or of a stored record."""
        if self.header is not None:
            return _key_bytes(message_fields.headers_table(source).get(self.header))
        return _key_bytes(message_fields.headers_table(source).get(PLUGIN_HEADER)) or message_fields.message_id(source)

    def _expire(self, now_ms: int) -> None:
        if self.ttl_ms is None:
            return
        seen = self._seen
        while seen:
            key, at = next(iter(seen.items()))
            if now_ms - at < self.ttl_ms:
                break
            del seen[key]

    def admit(self, key: bytes | None, now_ms: int) -> bool:
        """True (and remember ``key``) unless it is a duplicate within the window."""
        if key is None:
            return True
        self._expire(now_ms)
        if key in self._seen:
            return False
        self.remember(key, now_ms)
        return True

    def remember(self, key: bytes, at_ms: int) -> None:
        self._seen[key] = at_ms
        self._seen.move_to_end(key)
        while len(self._seen) > self.size:
            self._seen.popitem(last=False)

    def forget(self, key: bytes | None) -> None:
        """A message admitted but then not stored (its append failed): a retry must get through."""
        if key is not None:
            self._seen.pop(key, None)

    def rebuild(self, records: Iterable[Record], now_ms: int, exchange: str | None = None) -> None:
        """Remember the keys of stored records within the window (of ``exchange`` only, if given)."""
        for record in records:
            if self.ttl_ms is not None and now_ms - record.timestamp >= self.ttl_ms:
                continue
            if exchange is not None and mapping.amqp_from_record(record)[0] != exchange:
                continue
            key = self.key(record)
            if key is not None:
                self.remember(key, record.timestamp)
        self._expire(now_ms)
        self.loaded = True

    def __len__(self) -> int:
        return len(self._seen)


def recent_records(plog: PartitionLog, count: int) -> Iterator[Record]:
    """The last ``count`` records stored in a queue's log (up to its end, flushed or not)."""
    start = plog.next_offset - count
    for batch in plog.replay(start):
        if not batch.is_control:
            for record in batch.records:
                if record.offset >= start:
                    yield record
