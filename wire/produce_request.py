"""Produce v3-v12 request bodies written directly, without building kio entities.

Brokers forward AMQP publishes for queues led elsewhere as Produce requests of many small record
batches (one per queue per event-loop turn): building a kio entity per partition from dicts and
running kio's generic writer over them cost more than the records' own encoding. The layout is
Kafka's ProduceRequest schema (v13 names topics by id and is left to kio);
tests/test_produce_request.py checks every version byte for byte against
:func:`wire.kafka.encode_request`.
"""
from __future__ import annotations

import struct

from wire.kafka_direct import length, nullable_string, string

VERSIONS = range(3, 13)

_ACKS_TIMEOUT = struct.Struct(">hi")
_INT32 = struct.Struct(">i")


class ProduceBody:
    """A body writer for :func:`wire.kafka.encode_request`: called with the version, the bytes of
    a Produce request (no transactional id) of ``topics``: name -> [(partition, record batches)]."""
    __slots__ = ("acks", "timeout_ms", "topics")

    def __init__(self, acks: int, timeout_ms: int, topics: dict[str, list[tuple[int, bytes]]]):
        self.acks, self.timeout_ms, self.topics = acks, timeout_ms, topics

    def __call__(self, version: int) -> bytes:
        if version not in VERSIONS:
            raise ValueError(f"Produce v{version} is not written here")
        flexible = version >= 9
        out = [nullable_string(None, flexible), _ACKS_TIMEOUT.pack(self.acks, self.timeout_ms),
               length(len(self.topics), flexible)]
        add = out.append
        for name, parts in self.topics.items():
            add(string(name, flexible))
            add(length(len(parts), flexible))
            for index, records in parts:
                add(_INT32.pack(index))
                add(length(len(records), flexible))
                add(records)
                if flexible:
                    add(b"\0")  # the partition's tagged fields: none
            if flexible:
                add(b"\0")  # the topic's
        if flexible:
            add(b"\0")  # the request's
        return b"".join(out)
