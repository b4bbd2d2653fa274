"""The Kafka request/response codec around kio: headers, unknown versions, malformed bytes."""
import io
import struct

from hypothesis import given, strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

import pytest

from wire.kafka import (ADVERTISED, RequestError, RequestHeader, build, parse_request, request_class, respond,
                        response_class, supported)


def request_bytes(api_key, version, correlation_id, body, client_id=b"test-client"):
    cls = request_class(api_key, version)
    out = io.BytesIO()
    out.write(struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id)
    if cls.__flexible__:
        out.write(b"\0")  # no tagged fields in the header
    entity_writer(cls)(out, body)
    return out.getvalue()


def test_flexible_request_round_trip():
    cls = request_class(3, 12)
    topic_cls = [c for c in vars(__import__(cls.__module__, fromlist=["x"])).values()
                 if getattr(c, "__name__", "") == "MetadataRequestTopic"][0]
    body = cls(topics=(topic_cls(name="orders", topic_id=None),), allow_auto_topic_creation=False,
               include_topic_authorized_operations=False)
    req = parse_request(request_bytes(3, 12, 42, body))
    assert req.header == RequestHeader(3, 12, 42, "test-client", True)
    assert req.body == body


def test_response_headers_v0_for_api_versions_v1_for_other_flexible():
    h = RequestHeader(18, 3, 7, None, True)
    data = respond(h, {"error_code": ErrorCode.none, "api_keys": [], "throttle_time": 0})
    size, corr = struct.unpack_from(">ii", data)
    assert size == len(data) - 4 and corr == 7
    body, _ = entity_reader(response_class(18, 3))(data, 8)  # body right after the correlation id
    assert body.error_code == ErrorCode.none
    h = RequestHeader(60, 1, 9, None, True)
    data = respond(h, {"throttle_time": 0, "error_code": ErrorCode.none, "cluster_id": "c", "brokers": []})
    assert data[8] == 0  # the empty tagged-field section of response header v1
    body, _ = entity_reader(response_class(60, 1))(data, 9)
    assert body.cluster_id == "c"


def test_unknown_version_parses_header_only():
    req = parse_request(struct.pack(">hhih", 18, 99, 5, -1) + b"garbage")
    assert req.body is None and req.header.api_version == 99 and req.header.client_id is None
    assert not supported(0, 2) and supported(0, 3)  # Produce 0-2: advertised, refused
    assert ADVERTISED[0] == (0, 9)


def test_build_drops_fields_a_version_lacks_and_requires_the_rest():
    old = build(response_class(60, 0), {"throttle_time": 0, "error_code": 0, "cluster_id": "x", "brokers": [],
                                         "endpoint_type": 1})
    assert not hasattr(old, "endpoint_type")
    with pytest.raises(KeyError):
        build(response_class(60, 0), {"throttle_time": 0})


@given(st.binary(max_size=200))
def test_random_bytes_only_raise_request_error(data):
    try:
        parse_request(data)
    except RequestError:
        pass


@given(st.sampled_from(sorted(ADVERTISED)), st.binary(max_size=120))
def test_random_bodies_behind_a_valid_header_only_raise_request_error(api_key, body):
    version = ADVERTISED[api_key][1]
    head = struct.pack(">hhih", api_key, version, 1, -1)
    if request_class(api_key, version).__flexible__:
        head += b"\0"
    try:
        parse_request(head + body)
    except RequestError:
        pass
