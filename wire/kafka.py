"""Kafka requests and responses: header parsing, body codecs from ``kio``, the version set.

``kio`` is generated from Kafka's own JSON message specs and has a typed, frozen dataclass
for every API, version and direction, with a native reader. This module adds what a broker
needs around it:

* :data:`ADVERTISED`: the API version ranges this broker announces (one coherent set,
  shaped like a Kafka 4.1 broker where it serves the same, so kafka-python infers 4.1;
  never a version that is not served as Kafka defines it);
* :func:`parse_request`: request header v1/v2 (v2, with tagged fields, for flexible
  versions) and the body;
* :func:`build`: a response entity of any version from plain dicts, so handlers write one
  version-agnostic description and fields a version lacks are dropped;
* :func:`encode_response`: the framed response, header v0 for ApiVersions (KIP-511, so a
  client that asked with a version we do not know can still read our answer), v1 for other
  flexible versions.
"""
from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import typing
import uuid
from dataclasses import dataclass
from functools import cache

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i32Timedelta, i64Timedelta

from wire import kafka_private
from wire.errors import RequestError  # noqa: F401 (raised here; importers name it wire.kafka.RequestError)
from wire.kafka_guard import check_request
from wire.varint import decode_uvarint

API_VERSIONS = 18
PRODUCE = 0

# api key -> (min, max). Produce 0-2 are advertised but answered with UNSUPPORTED_VERSION:
# librdkafka before 2.11.1 turns compression off when a broker does not list them.
ADVERTISED: dict[int, tuple[int, int]] = {
    0: (0, 13),   # Produce (v13: topics by id, reads as Kafka 4.1 to kafka-python; see apis/produce.py)
    1: (4, 18),   # Fetch (v13+: topics by id; v18 adds a replica's high watermark hint, a tag consumers leave out)
    2: (1, 10),   # ListOffsets (v8-10: tiered storage's timestamps and timeout; 10 reads as Kafka 4.0)
    3: (0, 13),   # Metadata (v13: a top-level error code, for KIP-1102's REBOOTSTRAP_REQUIRED; never needed here)
    8: (2, 9),    # OffsetCommit (v9: member id + epoch of KIP-848 members)
    9: (1, 9),    # OffsetFetch (v9: member id + epoch per group)
    10: (0, 4),   # FindCoordinator
    11: (0, 9),   # JoinGroup (v8: a reason, logged; v9: skip_assignment for a static leader's rejoin, KIP-814)
    12: (0, 4),   # Heartbeat
    13: (0, 5),   # LeaveGroup (v5: a reason per member, logged)
    14: (0, 5),   # SyncGroup
    15: (0, 6),   # DescribeGroups (v6: GROUP_ID_NOT_FOUND with a reason, KIP-1043)
    16: (0, 5),   # ListGroups (v5: group types)
    17: (0, 1),   # SaslHandshake
    18: (0, 4),   # ApiVersions (v4 only lets a listed feature's minimum be 0: see apis/session.py)
    19: (2, 7),   # CreateTopics
    20: (1, 6),   # DeleteTopics
    21: (0, 2),   # DeleteRecords
    22: (0, 5),   # InitProducerId (v5: may answer TRANSACTION_ABORTABLE)
    23: (2, 4),   # OffsetForLeaderEpoch
    24: (0, 5),   # AddPartitionsToTxn (v4+ is broker-to-broker: a partition leader's KIP-890 check)
    25: (0, 3),   # AddOffsetsToTxn
    26: (0, 5),   # EndTxn (v5: transaction version 2 bumps the epoch per transaction and answers it)
    27: (1, 1),   # WriteTxnMarkers (broker to broker: a transaction coordinator's commit/abort markers)
    28: (0, 5),   # TxnOffsetCommit (v5: transaction version 2 adds the group's partition itself)
    29: (1, 3),   # DescribeAcls
    30: (1, 3),   # CreateAcls
    31: (1, 3),   # DeleteAcls
    32: (1, 4),   # DescribeConfigs
    33: (0, 2),   # AlterConfigs
    34: (1, 2),   # AlterReplicaLogDirs
    35: (1, 4),   # DescribeLogDirs (v5 only adds is_cordoned, and would read as Kafka 4.3 to kafka-python)
    36: (0, 2),   # SaslAuthenticate
    37: (0, 3),   # CreatePartitions
    42: (0, 2),   # DeleteGroups
    43: (0, 2),   # ElectLeaders
    44: (0, 1),   # IncrementalAlterConfigs
    45: (0, 1),   # AlterPartitionReassignments (v1: allow_replication_factor_change)
    46: (0, 0),   # ListPartitionReassignments
    47: (0, 0),   # OffsetDelete
    48: (0, 1),   # DescribeClientQuotas
    49: (0, 1),   # AlterClientQuotas
    50: (0, 0),   # DescribeUserScramCredentials
    51: (0, 0),   # AlterUserScramCredentials
    55: (0, 2),   # DescribeQuorum (single node only: see KRAFT_ONLY)
    57: (0, 2),   # UpdateFeatures (no feature flags: every update is refused, as Kafka refuses unknown ones)
    60: (0, 2),   # DescribeCluster (v2: fenced brokers)
    61: (0, 0),   # DescribeProducers
    65: (0, 0),   # DescribeTransactions
    66: (0, 2),   # ListTransactions (v2: transactional id pattern)
    68: (0, 1),   # ConsumerGroupHeartbeat (KIP-848; v1: client-made member ids, regex)
    69: (0, 1),   # ConsumerGroupDescribe
    71: (0, 0),   # GetTelemetrySubscriptions
    72: (0, 0),   # PushTelemetry
    74: (0, 1),   # ListConfigResources (v0: ListClientMetricsResources)
    75: (0, 0),   # DescribeTopicPartitions
    76: (1, 1),   # ShareGroupHeartbeat (KIP-932; v1 is Kafka 4.1's, the first generally available)
    77: (1, 1),   # ShareGroupDescribe
    78: (1, 1),   # ShareFetch
    79: (1, 1),   # ShareAcknowledge
    88: (0, 0),   # StreamsGroupHeartbeat (KIP-1071; v1, Kafka 4.4's topology descriptions, is not served)
    89: (0, 0),   # StreamsGroupDescribe
    90: (0, 1),   # DescribeShareGroupOffsets
    91: (0, 0),   # AlterShareGroupOffsets
    92: (0, 0),   # DeleteShareGroupOffsets
}
REJECTED = {PRODUCE: range(0, 3)}
# APIs of a KRaft metadata quorum: a cluster node (metadata in ZooKeeper) does not list them,
# as Kafka's ZooKeeper-mode brokers did not (see gateway.kafka.apis.quorum).
KRAFT_ONLY = frozenset({55})

_HEAD = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    flexible: bool  # the response header is v1 (tagged fields) unless this is ApiVersions


@dataclass(frozen=True, slots=True)
class Request:
    header: RequestHeader
    body: typing.Any  # the kio request entity; None when the version is not supported
    raw: bytes = b""  # the frame, kept only for requests with no kio body
    body_offset: int = 0


@cache
def request_class(api_key: int, version: int):
    return _entity_class(api_key, version, EntityType.request)


@cache
def response_class(api_key: int, version: int):
    return _entity_class(api_key, version, EntityType.response)


def _entity_class(api_key: int, version: int, kind: EntityType):
    private = kafka_private.ENTITIES.get(api_key, {}).get(version)
    if private is not None:  # the brokers' own API (wire.kafka_private)
        return private[0 if kind == EntityType.request else 1]
    module = load_payload_module(api_key, version, kind)
    for value in vars(module).values():
        if isinstance(value, type) and getattr(value, "__type__", None) == kind:
            return value
    raise LookupError(f"kio has no {kind.name} for api {api_key} v{version}")


@cache
def api_name(api_key: int, version: int | None = None) -> str:
    """Kafka's name of an API (``Produce``, ``Fetch``...), from kio's request class of ``version``
    (give the version of a request at hand: its class is loaded already, where the highest
    version's would be one more module imported in the middle of traffic)."""
    if api_key in kafka_private.NAMES:
        return kafka_private.NAMES[api_key]
    if version is None:
        version = ADVERTISED.get(api_key, (0, 0))[1]
    try:
        return request_class(api_key, version).__name__.removesuffix("Request")
    except Exception:  # kio knows no such API (kio.index.UnknownEntity and friends)
        return f"api-{api_key}"


def supported(api_key: int, version: int) -> bool:
    """Advertised, or one of the brokers' own APIs (parsed here; who may call it is authz's business)."""
    low, high = ADVERTISED.get(api_key) or kafka_private.VERSIONS.get(api_key, (1, 0))
    return low <= version <= high and version not in REJECTED.get(api_key, ())


@cache
def _reader(api_key: int, version: int):
    return entity_reader(request_class(api_key, version))


def parse_request(payload: bytes) -> Request:
    """Parse one request frame. An unsupported version gives ``body=None`` (answer, don't parse)."""
    if len(payload) < _HEAD.size:
        raise RequestError(f"request of {len(payload)} bytes is shorter than a request header")
    api_key, version, correlation_id, client_len = _HEAD.unpack_from(payload)
    pos = _HEAD.size
    client_id = None
    if client_len >= 0:
        if pos + client_len > len(payload):
            raise RequestError("client id runs past the end of the request")
        client_id = payload[pos:pos + client_len].decode("utf-8", "replace")
        pos += client_len
    if not supported(api_key, version):
        flexible = api_key == API_VERSIONS and version >= 3
        return Request(RequestHeader(api_key, version, correlation_id, client_id, flexible), None, payload, pos)
    cls = request_class(api_key, version)
    flexible = cls.__flexible__
    try:
        if flexible:
            pos = _skip_tagged_fields(payload, pos)
        check_request(cls, payload, pos)  # kio pre-allocates arrays from their declared count
        body, _size = _reader(api_key, version)(payload, pos)
    except RequestError:
        raise
    except Exception as exc:  # kio's native reader: any failure means malformed bytes
        raise RequestError(f"malformed {cls.__name__} v{version}: {exc}") from None
    return Request(RequestHeader(api_key, version, correlation_id, client_id, flexible), body)


def _skip_tagged_fields(buf: bytes, pos: int) -> int:
    count, pos = decode_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = decode_uvarint(buf, pos)
        size, pos = decode_uvarint(buf, pos)
        pos += size
    if pos > len(buf):
        raise RequestError("tagged fields run past the end of the request header")
    return pos


# --- Produce v0-2: listed, never served --------------------------------------------------
# kio starts at v3, so these few bytes are read and written here: enough to answer every
# partition of an old Produce with UNSUPPORTED_VERSION instead of dropping the connection.
def legacy_produce_partitions(payload: bytes, header_size: int) -> list[tuple[str, list[int]]]:
    """(topic, [partition...]) of a Produce v0-2 request body."""
    try:
        pos = header_size + 6  # acks int16, timeout int32
        (topic_count,) = struct.unpack_from(">i", payload, pos)
        pos += 4
        topics = []
        for _ in range(max(topic_count, 0)):
            (name_len,) = struct.unpack_from(">h", payload, pos)
            name = payload[pos + 2:pos + 2 + name_len].decode("utf-8", "replace")
            pos += 2 + name_len
            (part_count,) = struct.unpack_from(">i", payload, pos)
            pos += 4
            parts = []
            for _ in range(max(part_count, 0)):
                index, size = struct.unpack_from(">ii", payload, pos)
                parts.append(index)
                pos += 8 + max(size, 0)
            topics.append((name, parts))
        return topics
    except struct.error:
        raise RequestError("malformed ProduceRequest v0-2") from None


def legacy_produce_refusal(header: RequestHeader, topics: list[tuple[str, list[int]]]) -> bytes:
    """A Produce v0-2 response giving every partition UNSUPPORTED_VERSION."""
    out = [struct.pack(">ii", header.correlation_id, len(topics))]
    for name, parts in topics:
        raw = name.encode()
        out.append(struct.pack(">h", len(raw)) + raw + struct.pack(">i", len(parts)))
        for index in parts:
            out.append(struct.pack(">ihq", index, int(ErrorCode.unsupported_version), -1))
            if header.api_version >= 2:
                out.append(struct.pack(">q", -1))  # log_append_time
    if header.api_version >= 1:
        out.append(struct.pack(">i", 0))  # throttle_time_ms
    body = b"".join(out)
    return struct.pack(">i", len(body)) + body


# --- responses ------------------------------------------------------------------------------
@cache
def _fields(cls) -> tuple[tuple[str, typing.Any, bool], ...]:
    """(name, converter, required) per field of a kio entity class."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        out.append((f.name, _converter(hints[f.name]), required))
    return tuple(out)


def _converter(hint):
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin is tuple and args and dataclasses.is_dataclass(args[0]):
        item = args[0]
        return lambda v: tuple(build(item, x) if isinstance(x, dict) else x for x in v)
    if origin is tuple:
        return tuple
    if args:  # X | None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            conv = _converter(inner[0])
            return lambda v: None if v is None else conv(v)
        return lambda v: v
    if dataclasses.is_dataclass(hint):
        return lambda v: build(hint, v) if isinstance(v, dict) else v
    if hint is i32Timedelta or hint is i64Timedelta:
        return lambda v: v if isinstance(v, datetime.timedelta) else datetime.timedelta(milliseconds=v)
    if hint is uuid.UUID:
        return lambda v: v if isinstance(v, uuid.UUID) else uuid.UUID(int=v or 0)
    if hint is ErrorCode:
        return ErrorCode
    return lambda v: v


def build(cls, data: dict):
    """An instance of kio entity ``cls`` from a dict; keys this version lacks are ignored."""
    kwargs = {}
    for name, convert, required in _fields(cls):
        if name in data:
            kwargs[name] = convert(data[name])
        elif required:
            raise KeyError(f"{cls.__qualname__} v{getattr(cls, '__version__', '?')} needs field {name!r}")
    return cls(**kwargs)


@cache
def _writer(cls):
    return entity_writer(cls)


def _write_framed(out, header: RequestHeader, body) -> None:
    """Size placeholder (0), response header and body into ``out``; the caller sets the size."""
    out.write(b"\0\0\0\0")
    out.write(struct.pack(">i", header.correlation_id))
    if header.flexible and header.api_key != API_VERSIONS:
        out.write(b"\0")  # response header v1: no tagged fields
    _writer(type(body))(out, body)


def encode_response(header: RequestHeader, body) -> bytes:
    """The whole framed response (size, header, body) for a request."""
    out = io.BytesIO()
    _write_framed(out, header, body)
    data = out.getbuffer()
    struct.pack_into(">i", data, 0, len(data) - 4)
    del data
    return out.getvalue()


def respond(header: RequestHeader, data: dict) -> bytes:
    """Build the response of the request's API and version from ``data`` and encode it."""
    return encode_response(header, build(response_class(header.api_key, header.api_version), data))


class ResponseParts:
    """A framed response whose ``records`` fields are still ranges of stored bytes: encoded bytes
    and, between them, objects with ``__len__`` and ``read()`` (``core.segment.FileRange``), in
    order. The gateway sends the ranges with ``os.sendfile``; ``bytes()`` reads them in."""

    __slots__ = ("parts",)

    def __init__(self, parts: list):
        self.parts = parts

    def __len__(self) -> int:
        return sum(len(part) for part in self.parts)

    def __bytes__(self) -> bytes:
        return b"".join(part if isinstance(part, bytes) else part.read() for part in self.parts)


class _PartsWriter:
    """The writable kio encodes into: bytes are gathered, a records value that is not bytes (a
    range) is kept as it is, as its own part (kio has already written its length prefix)."""

    def __init__(self) -> None:
        self.parts: list = []
        self._out = io.BytesIO()

    def write(self, data) -> None:
        if isinstance(data, (bytes, bytearray, memoryview)):
            self._out.write(data)
        else:
            self.parts.append(self._out.getvalue())
            self.parts.append(data)
            self._out = io.BytesIO()

    def finish(self) -> list:
        self.parts.append(self._out.getvalue())
        return [part for part in self.parts if len(part)]


def respond_parts(header: RequestHeader, data: dict) -> bytes | ResponseParts:
    """:func:`respond` for a response whose records may be ranges (see :class:`ResponseParts`):
    the same bytes on the wire, with the ranges left unread; plain bytes when there is none."""
    out = _PartsWriter()
    _write_framed(out, header, build(response_class(header.api_key, header.api_version), data))
    parts = out.finish()
    size = sum(len(part) for part in parts) - 4
    first = bytearray(parts[0])
    struct.pack_into(">i", first, 0, size)
    parts[0] = bytes(first)
    if len(parts) == 1:
        return parts[0]
    return ResponseParts(parts)


# --- the client side: requests out, responses in --------------------------------------------
# Used by gateway.ctl.kafka_client (blocking admin commands) and gateway.cluster.peers (the
# brokers' own asynchronous links), so both frame and read exactly the same bytes.

def encode_request(api_key: int, version: int, correlation_id: int, client_id: bytes | None, data) -> bytes:
    """One framed request (size, header v1/v2, body); ``data`` is a dict, a kio request entity, or
    a body writer: a callable from the version to the body's bytes (wire.produce_request)."""
    if callable(data):
        request, body = None, data(version)
    else:
        request, body = build(request_class(api_key, version), data) if isinstance(data, dict) else data, None
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    if client_id is None:
        out.write(_HEAD.pack(api_key, version, correlation_id, -1))
    else:
        out.write(_HEAD.pack(api_key, version, correlation_id, len(client_id)))
        out.write(client_id)
    if (request_class(api_key, version) if request is None else request).__flexible__:
        out.write(b"\0")  # request header v2: no tagged fields
    if body is None:
        _writer(type(request))(out, request)
    else:
        out.write(body)
    frame = out.getbuffer()
    struct.pack_into(">i", frame, 0, len(frame) - 4)
    del frame
    return out.getvalue()


def response_correlation(payload) -> int:
    """The correlation id that starts every response (the frame without its size)."""
    return struct.unpack_from(">i", payload)[0]


@cache
def _response_reader(api_key: int, version: int):
    return entity_reader(response_class(api_key, version))


def preload(api_key: int, version: int) -> None:
    """Import and build one API version's codecs now: a kio module's import and its readers and
    writers cost milliseconds, which a broker would otherwise spend on its first such request."""
    request, response = request_class(api_key, version), response_class(api_key, version)
    _reader(api_key, version)
    _response_reader(api_key, version)
    _writer(request)
    _writer(response)
    _fields(request)


def decode_response(api_key: int, version: int, payload):
    """The kio response entity of a response frame (without its size) to a request of that API
    and version; response header v1 (tagged fields) for flexible versions but ApiVersions."""
    cls = response_class(api_key, version)
    pos = 4
    if cls.__flexible__ and api_key != API_VERSIONS:
        pos = _skip_tagged_fields(payload, pos)
    response, _ = _response_reader(api_key, version)(payload, pos)
    return response
