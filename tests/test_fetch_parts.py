"""A Fetch response encoded with its records left as ranges (wire.kafka.respond_parts, what the
zero-copy path sends) is, once the ranges are read in, byte for byte the response
wire.kafka.respond encodes, for every Fetch version this broker speaks."""
from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings, strategies as st

from wire.kafka import ADVERTISED, RequestHeader, ResponseParts, respond, respond_parts


class _Range:
    """Stands in for core.segment.FileRange: a length, and the bytes when read."""

    def __init__(self, data: bytes):
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def read(self) -> bytes:
        return self.data


def _response(version: int, records: list, aborted: bool):
    topics = []
    for t, chunk in enumerate([records[:2], records[2:]]):
        parts = [{"partition_index": i, "error_code": 0, "high_watermark": 100 + i, "last_stable_offset": 90,
                  "log_start_offset": 0, "preferred_read_replica": -1,
                  "aborted_transactions": [{"producer_id": 7, "first_offset": 3}] if aborted else None,
                  "records": r} for i, r in enumerate(chunk)]
        topics.append({"topic": f"topic-{t}", "topic_id": uuid.UUID(int=t + 1), "partitions": parts})
    return {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": topics}


@pytest.mark.parametrize("version", range(ADVERTISED[1][0], ADVERTISED[1][1] + 1))
@settings(max_examples=15, deadline=None)
@given(bodies=st.lists(st.binary(max_size=300), min_size=1, max_size=4), ranged=st.data(), aborted=st.booleans())
def test_ranges_encode_to_the_same_bytes(version, bodies, ranged, aborted):
    header = RequestHeader(1, version, 4242, "c", version >= 12)
    as_ranges = [(_Range(b) if b and ranged.draw(st.booleans()) else b) for b in bodies]
    expected = respond(header, _response(version, bodies, aborted))
    got = respond_parts(header, _response(version, as_ranges, aborted))
    if any(isinstance(r, _Range) for r in as_ranges):
        assert isinstance(got, ResponseParts)
        assert len(got) == len(expected)
        assert bytes(got) == expected
    else:
        assert got == expected
