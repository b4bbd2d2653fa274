"""TEMPORARY SHIM (to be replaced by the real AMQP 1.0 conversion being written now)."""
from wire.records import Header

STREAM_ONLY_HEADERS = frozenset({"x-stream-filter-value", "x-stream-writer", "x-stream-message", "x-stream-raw"})


def record_from_stream(message: bytes, now_ms: int):
    return None, message, (Header("x-stream-raw", None),), now_ms


def stream_from_record(record) -> bytes:
    return record.value or b""
