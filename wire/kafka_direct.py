"""Kafka's primitive fields as bytes, for the messages this broker writes directly instead of
through kio (wire.produce_request, wire.produce_response): each in its classic form or, in a
flexible version (``flexible``), its compact one."""
from __future__ import annotations

import struct

from wire.varint import encode_uvarint

_INT16, _INT32 = struct.Struct(">h"), struct.Struct(">i")


def length(n: int, flexible: bool) -> bytes:
    """The length before an array of ``n`` items or ``n`` bytes (INT32, or UNSIGNED_VARINT n + 1)."""
    return encode_uvarint(n + 1) if flexible else _INT32.pack(n)


def string(text: str, flexible: bool) -> bytes:
    raw = text.encode()
    return (encode_uvarint(len(raw) + 1) if flexible else _INT16.pack(len(raw))) + raw


def nullable_string(text: str | None, flexible: bool) -> bytes:
    if text is None:
        return b"\0" if flexible else b"\xff\xff"
    return string(text, flexible)
