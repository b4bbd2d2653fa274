"""Produce v3-v13 responses written directly, without building kio entities.

Every acknowledged write a Kafka producer makes ends in one of these, and a producer that sends
one record per request (``linger.ms=0``) gets one per record: building the response dataclasses
from dicts and running kio's generic writer over them was about a fifth of the broker's work per
request. The layout is Kafka's ProduceResponse schema; tests/test_produce_response.py checks
every version byte for byte against :func:`wire.kafka.respond`, which stays the path for
anything this one does not cover (per-record errors, versions it does not know).
"""
from __future__ import annotations

import struct

from wire.kafka import RequestHeader
from wire.kafka_direct import length, nullable_string, string

VERSIONS = range(3, 14)
# v10+ only add tagged fields (KIP-951's leader hints, which this writer never has: written as
# "no tagged fields"); v13 gives each topic as its 16-byte id instead of its name.

_SIZE_ID = struct.Struct(">ii")  # frame size, correlation id
_INT32 = struct.Struct(">i")
_PARTITION = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time_ms
_INT64 = struct.Struct(">q")


def encode_produce_response(header: RequestHeader, responses: list[dict], throttle_ms: int) -> bytes | None:
    """The framed response for ``responses`` (``[{"name", "partition_responses": [{"index",
    "error_code", "base_offset", "log_start_offset", "error_message", ...}]}]``, the dicts the
    Produce handler gives :func:`wire.kafka.respond`), or None when it needs the general path."""
    version = header.api_version
    if version not in VERSIONS:
        return None
    flexible = version >= 9
    out = [b"", b"\0"] if flexible else [b""]  # frame size and correlation id; header v1: no tags
    add = out.append
    add(length(len(responses), flexible))
    for topic in responses:
        add(topic["topic_id"].bytes if version >= 13 else string(topic["name"], flexible))
        parts = topic["partition_responses"]
        add(length(len(parts), flexible))
        for part in parts:
            if part.get("record_errors") or part.get("log_append_time") is not None:
                return None
            add(_PARTITION.pack(part["index"], int(part["error_code"]), part["base_offset"], -1))
            if version >= 5:
                add(_INT64.pack(part["log_start_offset"]))
            if version >= 8:
                add(b"\1" if flexible else b"\0\0\0\0")  # record_errors: empty
                message = part.get("error_message")
                add(nullable_string(message, flexible))
            if flexible:
                add(b"\0")
        if flexible:
            add(b"\0")
    add(_INT32.pack(throttle_ms))  # throttle_time_ms, v1+
    if flexible:
        add(b"\0")
    body_size = sum(map(len, out)) + 4  # + the correlation id
    out[0] = _SIZE_ID.pack(body_size, header.correlation_id)
    return b"".join(out)

