"""wire.produce_request writes what kio writes (wire.kafka.encode_request from a dict), for every
version it serves."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from wire.kafka import PRODUCE, encode_request
from wire.produce_request import VERSIONS, ProduceBody

parts = st.lists(st.tuples(st.integers(0, 2**31 - 1), st.binary(max_size=300)), max_size=4)
topics = st.dictionaries(st.text(min_size=1, max_size=30), parts, max_size=4)


@settings(max_examples=300)
@given(st.sampled_from(VERSIONS), st.integers(0, 2**31 - 1), st.sampled_from([-1, 0, 1]),
       st.integers(0, 2**31 - 1), topics, st.none() | st.binary(min_size=1, max_size=20))
def test_same_bytes_as_kio(version, correlation_id, acks, timeout_ms, data, client_id):
    fields = {"transactional_id": None, "acks": acks, "timeout": timeout_ms,
              "topic_data": [{"name": name, "partition_data": [{"index": i, "records": r} for i, r in ps]}
                             for name, ps in data.items()]}
    expected = encode_request(PRODUCE, version, correlation_id, client_id, fields)
    assert encode_request(PRODUCE, version, correlation_id, client_id, ProduceBody(acks, timeout_ms, data)) == expected


def test_versions_it_does_not_write_are_refused():
    for version in (2, 13):
        try:
            ProduceBody(-1, 1000, {})(version)
        except ValueError:
            continue
        raise AssertionError(f"v{version} was written")
