"""wire.produce_response writes what kio writes (wire.kafka.respond), for every version it serves
(v13: topics by id, the name dropped)."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st
from kio.schema.errors import ErrorCode

from wire.kafka import PRODUCE, RequestHeader, respond
from wire.produce_response import VERSIONS, encode_produce_response

_ERRORS = [ErrorCode.none, ErrorCode.not_leader_or_follower, ErrorCode.request_timed_out,
           ErrorCode.kafka_storage_error, ErrorCode.not_enough_replicas_after_append, ErrorCode.invalid_required_acks]

partitions = st.lists(st.fixed_dictionaries({
    "index": st.integers(0, 2**31 - 1), "error_code": st.sampled_from(_ERRORS),
    "base_offset": st.integers(-1, 2**63 - 1), "log_append_time": st.none(),
    "log_start_offset": st.integers(-1, 2**63 - 1), "record_errors": st.just([]),
    "error_message": st.none() | st.text(max_size=40)}), max_size=4)
topics = st.lists(st.fixed_dictionaries({"name": st.text(min_size=1, max_size=30), "topic_id": st.uuids(),
                                         "partition_responses": partitions}), max_size=4)


@settings(max_examples=300)
@given(st.sampled_from(VERSIONS), st.integers(-2**31, 2**31 - 1), topics, st.integers(0, 2**31 - 1))
def test_same_bytes_as_kio(version, correlation_id, responses, throttle):
    header = RequestHeader(PRODUCE, version, correlation_id, "c", version >= 9)
    expected = respond(header, {"responses": [dict(t, partition_responses=[dict(p) for p in t["partition_responses"]])
                                              for t in responses], "throttle_time": throttle})
    assert encode_produce_response(header, responses, throttle) == expected


def test_what_it_leaves_to_the_general_path():
    part = {"index": 0, "error_code": ErrorCode.none, "base_offset": 0, "log_append_time": None,
            "log_start_offset": 0, "record_errors": [{"batch_index": 0, "batch_index_error_message": "bad"}],
            "error_message": None}
    header = RequestHeader(PRODUCE, 9, 1, "c", True)
    assert encode_produce_response(header, [{"name": "t", "partition_responses": [part]}], 0) is None
    assert encode_produce_response(RequestHeader(PRODUCE, 14, 1, "c", True), [], 0) is None
