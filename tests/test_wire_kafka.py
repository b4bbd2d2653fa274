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
    assert ADVERTISED[0] == (0, 13)


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


# --- length guard (wire/kafka_guard.py) --------------------------------------------------------
# kio's native reader pre-allocates an array from its declared count; a huge count aborts the
# whole process (SIGABRT from Rust), so these inputs are fed to parse_request in a child process:
# a regression then fails the test with the signal instead of killing pytest.
import os  # noqa: E402
import random  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from wire.kafka_guard import check_request  # noqa: E402

_ROOT = Path(__file__).resolve().parent.parent
_HUGE_LENGTHS = (
    b"\x7f\xff\xff\xff",          # int32 0x7fffffff (legacy array / bytes count)
    b"\xff\xff\xff\xff\x0f",      # 5-byte uvarint 2**32 - 1 (compact length + 1)
    b"\xff\xff\xff\xff\x7f",      # 5-byte uvarint 2**35 - 1, the largest kio reads
    b"\x80\x80\x80\x80\x01",      # 5-byte uvarint 2**28
    b"\x7f\xff",                  # int16 32767 (legacy string)
)


def _supported_pairs():
    return [(k, v) for k, (lo, hi) in sorted(ADVERTISED.items()) for v in range(lo, hi + 1) if supported(k, v)]


def _head(api_key, version):
    head = struct.pack(">hhih", api_key, version, 1, -1)
    return head + b"\0" if request_class(api_key, version).__flexible__ else head


def _random_value(rnd, kafka_type, nullable):
    import datetime
    import uuid
    if nullable and kafka_type in ("string", "bytes", "records", "uuid") and rnd.random() < 0.2:
        return None
    ints = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
    if kafka_type in ints:
        bits = ints[kafka_type]
        return rnd.randint(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if kafka_type in ("uint8", "uint16", "uint32", "uint64"):
        return rnd.getrandbits(int(kafka_type[4:]))
    if kafka_type == "string":
        return "".join(rnd.choice("ab-_.é0") for _ in range(rnd.choice((0, 1, 6, 40))))
    if kafka_type in ("bytes", "records"):
        return rnd.randbytes(rnd.choice((0, 1, 9, 300)))
    return {
        "bool": lambda: rnd.random() < 0.5,
        "float64": rnd.random,
        "error_code": lambda: rnd.choice(list(ErrorCode)),
        "uuid": lambda: uuid.UUID(int=rnd.getrandbits(128)),
        "timedelta_i32": lambda: datetime.timedelta(milliseconds=rnd.randint(0, 2**31 - 1)),
        "timedelta_i64": lambda: datetime.timedelta(milliseconds=rnd.randint(0, 2**40)),
        "datetime_i64": lambda: datetime.datetime.fromtimestamp(rnd.randint(0, 2**31), datetime.timezone.utc),
    }[kafka_type]()


def _random_entity(rnd, cls, depth=0):
    """A random instance of a kio entity class, every field filled from its schema."""
    import dataclasses
    from kio.serial._introspect import (EntityField, PrimitiveField, PrimitiveTupleField, classify_field,
                                        get_field_tag, get_schema_field_type, is_optional)
    values = {}
    for f in dataclasses.fields(cls):
        kind, nullable = classify_field(f), is_optional(f) and get_field_tag(f) is None
        if isinstance(kind, PrimitiveField):
            values[f.name] = _random_value(rnd, get_schema_field_type(f), nullable)
        elif isinstance(kind, EntityField):
            values[f.name] = None if nullable and rnd.random() < 0.3 else _random_entity(rnd, kind.type_, depth + 1)
        elif isinstance(kind, PrimitiveTupleField):
            values[f.name] = tuple(_random_value(rnd, get_schema_field_type(f), False) for _ in range(rnd.randint(0, 3)))
        else:
            values[f.name] = tuple(_random_entity(rnd, kind.type_, depth + 1)
                                   for _ in range(rnd.randint(0, 3 if depth < 2 else 1)))
    return cls(**values)


def _fuzz_child(seed: int) -> None:
    """Run in a subprocess by the test below: every input must parse or raise RequestError."""
    rnd = random.Random(seed)
    pairs = _supported_pairs()

    def feed(frame):
        try:
            parse_request(frame)
        except RequestError:
            pass

    # 1. a huge length at each of the first offsets of a zero body (zeros read as 0, empty
    #    strings/arrays or null, so the first length field of every API is reached), and
    #    the same behind random bytes
    for api_key, version in pairs:
        head = _head(api_key, version)
        for at in range(48):
            for huge in _HUGE_LENGTHS:
                feed(head + bytes(at) + huge + bytes(rnd.choice((0, 3, 40))))
                feed(head + rnd.randbytes(at) + huge + rnd.randbytes(rnd.choice((0, 3, 40))))
    # 2. random bodies behind a valid header
    for _ in range(20000):
        api_key, version = rnd.choice(pairs)
        feed(_head(api_key, version) + rnd.randbytes(rnd.randint(0, 120)))
    # 3. valid random requests of every API and version must parse; then mutate them: huge
    #    lengths anywhere (nested arrays, tagged fields), random bytes, truncation
    for _ in range(1500):
        api_key, version = rnd.choice(pairs)
        cls = request_class(api_key, version)
        out = io.BytesIO()
        out.write(_head(api_key, version))
        head_len = out.tell()
        entity_writer(cls)(out, _random_entity(rnd, cls))
        frame = out.getvalue()
        assert parse_request(frame).body is not None, (api_key, version)
        for _ in range(10):
            b = bytearray(frame)
            how = rnd.random()
            if how < 0.6:
                at = rnd.randrange(head_len, len(b) + 1)
                huge = rnd.choice(_HUGE_LENGTHS)
                b[at:at + len(huge)] = huge
            elif how < 0.85:
                for _ in range(rnd.randint(1, 4)):
                    if len(b) > head_len:
                        b[rnd.randrange(head_len, len(b))] = rnd.getrandbits(8)
            else:
                del b[rnd.randrange(head_len, len(b) + 1):]
            feed(bytes(b))
    # 4. the message names the request, the length, the bytes left and the field
    try:
        parse_request(_head(20, 5) + b"\xff\xff\xff\xff\x0f" + bytes(40))
    except RequestError as exc:
        assert str(exc) == ("malformed DeleteTopicsRequest v5: array length 4294967294 exceeds "
                            "the 40 bytes left (field topic_names)"), str(exc)
    else:
        raise AssertionError("a huge array length was accepted")
    print("ok")


@pytest.mark.parametrize("seed", [1, 2])
def test_huge_lengths_and_random_bodies_never_abort_the_process(seed):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, __file__, "--fuzz-child", str(seed)], cwd=_ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    died = f"killed by {signal.Signals(-proc.returncode).name}" if proc.returncode < 0 else f"exit {proc.returncode}"
    assert proc.returncode == 0, f"fuzz child {died}:\n{proc.stderr[-3000:]}"
    assert proc.stdout.strip() == "ok"


def test_guard_compiles_for_every_supported_version_and_passes_empty_bodies():
    for api_key, version in _supported_pairs():
        check_request(request_class(api_key, version), b"", 0)  # runs out of bytes: kio reports it


def test_string_length_past_the_end_is_a_request_error():
    # safe in-process: kio bounds-checks strings, only arrays are pre-allocated
    frame = _head(20, 5) + b"\x02" + b"\xff\xff\xff\xff\x0f" + b"abc"
    with pytest.raises(RequestError, match=r"malformed DeleteTopicsRequest v5: string/bytes length 4294967294 "
                                           r"exceeds the 3 bytes left \(field topic_names\)"):
        parse_request(frame)
    frame = _head(3, 4) + struct.pack(">ih", 1, 0x7FFF) + b"orders"  # Metadata v4: legacy int16 string
    with pytest.raises(RequestError, match=r"string/bytes length 32767 exceeds the 6 bytes left \(field name\)"):
        parse_request(frame)


def test_null_array_where_the_schema_has_none_is_a_request_error():
    # Produce v9 (flexible): transactional_id null, acks, timeout, then topic_data null (compact 0)
    frame = _head(0, 9) + b"\x00" + struct.pack(">hi", -1, 5000) + b"\x00" + b"\x00"
    with pytest.raises(RequestError, match=r"null array in non-nullable field topic_data"):
        parse_request(frame)
    frame = _head(2, 2) + struct.pack(">iBi", -1, 0, -1)  # ListOffsets v2 (legacy): topics null
    with pytest.raises(RequestError, match=r"null array in non-nullable field topics"):
        parse_request(frame)
    body = _head(3, 4) + struct.pack(">i", -1) + b"\x01"  # Metadata v4: topics null is "all topics"
    assert parse_request(body).body.topics is None


if __name__ == "__main__" and sys.argv[1:2] == ["--fuzz-child"]:
    _fuzz_child(int(sys.argv[2]))


@pytest.mark.parametrize("api_key,version", [(3, 12), (3, 4), (0, 9), (78, 1), (18, 0)])
def test_client_side_codec_round_trips_through_the_server_side(api_key, version):
    """wire.kafka.encode_request (the clients' side) is what parse_request reads; respond's bytes
    are what decode_response reads (header v0 for ApiVersions, v1 for other flexible versions)."""
    from wire.kafka import decode_response, encode_request, response_correlation
    data = {3: {"topics": [{"name": "t", "topic_id": None}], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False},
            0: {"transactional_id": None, "acks": -1, "timeout": 1000, "topic_data": []},
            78: {"group_id": "g", "member_id": "m", "share_session_epoch": 0, "max_wait": 0, "min_bytes": 1,
                 "max_records": 5, "batch_size": 5, "topics": [], "forgotten_topics_data": []},
            18: {}}[api_key]
    frame = encode_request(api_key, version, 41, b"peer", data)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    request = parse_request(frame[4:])
    assert (request.header.api_key, request.header.api_version, request.header.correlation_id,
            request.header.client_id) == (api_key, version, 41, "peer")
    assert request.body == build(request_class(api_key, version), data)
    answer = {3: {"throttle_time": 0, "brokers": [], "cluster_id": "c", "controller_id": 1, "topics": []},
              0: {"responses": [], "throttle_time": 0},
              78: {"throttle_time": 0, "error_code": 0, "error_message": None, "acquisition_lock_timeout": 1000,
                   "responses": [], "node_endpoints": []},
              18: {"error_code": 0, "api_keys": [{"api_key": 3, "min_version": 0, "max_version": 12}]}}[api_key]
    framed = respond(request.header, answer)
    assert response_correlation(framed[4:]) == 41
    assert decode_response(api_key, version, framed[4:]) == build(response_class(api_key, version), answer)
