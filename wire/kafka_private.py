"""Private inter-broker APIs: requests only the brokers of one cluster send each other.

Kafka's protocol has no call for what an AMQP queue's leader alone knows (its ready and unacked
messages, its consumers) nor for purging it, nor for a stream's single active consumer, so the
brokers' links (gateway.cluster.peers) carry APIs of their own, framed and read as every Kafka
API is (kio entities, header v1 / v0). Their keys lie far above Kafka's (which stay below 100)
and are never advertised in ApiVersions: clients do not see them, and a broker answers them only
to a principal allowed CLUSTER_ACTION, as it does replica fetches.

AmqpQueue (v0): ``op`` 0 asks a broker for its figures of one queue (the leader: ready and
unacked messages; every broker: the consumers connected to it); ``op`` 1 purges the queue at its
leader (the ready count is what was purged).

StreamConsumer (v0): single-active-consumer groups of the stream protocol, decided by each
stream's leader (gateway.stream.sac). ``op`` 0 (join) and 1 (leave) go from the broker holding
a consumer to the leader; 2 (activate) and 3 (deactivate) from the leader to that broker.

AmqpLink (v0): the consumer links of a spread cluster (wire.amqp_link): a broker holding
consumers of queues led by another sends it operations and polls; polls are answered with the
deliveries and other events for those consumers (gateway.cluster.amqp_links, link_server).

ManagementView (v0): a broker's own AMQP connections, channels or consumers (``op`` 0, 1, 2), or
its node object (4: memory, disk, alarms), as its management API shows them, for the management
API of another broker, which shows the whole cluster's as RabbitMQ's does; ``op`` 3 closes one of
its connections by name (gateway.management.cluster_clients).

AmqpReply (v0): a Direct Reply-To reply (or, without properties, the question whether its
requester is there) for the broker holding the requester's channel (routing.direct_reply).
"""
# no "from __future__ import annotations": kio reads the field types themselves

from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i64

AMQP_QUEUE = 10000
FIGURES, PURGE = 0, 1


@dataclass(frozen=True, slots=True, kw_only=True)
class AmqpQueueRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(AMQP_QUEUE)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    vhost: str = field(metadata={"kafka_type": "string"})
    queue: str = field(metadata={"kafka_type": "string"})
    op: i8 = field(metadata={"kafka_type": "int8"})


@dataclass(frozen=True, slots=True, kw_only=True)
class AmqpQueueResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(AMQP_QUEUE)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    leads: bool = field(metadata={"kafka_type": "bool"}, default=False)
    """Whether the answering broker leads the queue (only then are the message counts its own)."""
    message_count: i32 = field(metadata={"kafka_type": "int32"}, default=i32(0))
    unacked_count: i32 = field(metadata={"kafka_type": "int32"}, default=i32(0))
    consumer_count: i32 = field(metadata={"kafka_type": "int32"}, default=i32(0))


STREAM_CONSUMER = 10001
JOIN, LEAVE, ACTIVATE, DEACTIVATE = 0, 1, 2, 3


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamConsumerRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(STREAM_CONSUMER)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    op: i8 = field(metadata={"kafka_type": "int8"})
    vhost: str = field(metadata={"kafka_type": "string"})
    stream: str = field(metadata={"kafka_type": "string"})
    name: str = field(metadata={"kafka_type": "string"})
    """The group: the consumers' ``name`` subscription property."""
    broker: i32 = field(metadata={"kafka_type": "int32"})
    """Join, leave: the broker holding the consumer; activate, deactivate: the deciding leader."""
    member: i64 = field(metadata={"kafka_type": "int64"})
    """The consumer's id at the broker holding it."""
    partition: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-1))
    """A super stream's partition index (-1: a plain stream)."""
    active: bool = field(metadata={"kafka_type": "bool"}, default=False)
    """Join: the consumer is active now (a leader rebuilding the groups keeps it so)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamConsumerResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(STREAM_CONSUMER)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)


AMQP_REPLY = 10002


@dataclass(frozen=True, slots=True, kw_only=True)
class AmqpReplyRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(AMQP_REPLY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    vhost: str = field(metadata={"kafka_type": "string"})
    name: str = field(metadata={"kafka_type": "string"})
    """The Direct Reply-To name (routing.direct_reply): the reply's routing key."""
    properties: bytes | None = field(metadata={"kafka_type": "bytes"})
    """The reply's AMQP property section; null asks only whether the requester is still there."""
    body: bytes = field(metadata={"kafka_type": "bytes"})


@dataclass(frozen=True, slots=True, kw_only=True)
class AmqpReplyResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(AMQP_REPLY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    delivered: bool = field(metadata={"kafka_type": "bool"}, default=False)
    """Whether the requester's channel is there (and, with properties, was handed the reply)."""


AMQP_LINK = 10003


@dataclass(frozen=True, slots=True, kw_only=True)
class AmqpLinkRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(AMQP_LINK)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    session: str = field(metadata={"kafka_type": "string"})
    """The asking broker's link session (a new one after any failure: the old one's holdings go back)."""
    opening: bool = field(metadata={"kafka_type": "bool"})
    """The session may start with this request (false once the asker had an answer: a session
    the leader no longer has is then an error, not a new empty one)."""
    wait_ms: i32 = field(metadata={"kafka_type": "int32"})
    """-1: operations only, answered at once; else a poll, answered with events or after this long."""
    ops: bytes = field(metadata={"kafka_type": "bytes"})


@dataclass(frozen=True, slots=True, kw_only=True)
class AmqpLinkResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(AMQP_LINK)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    events: bytes = field(metadata={"kafka_type": "bytes"}, default=b"")


MANAGEMENT_VIEW = 10004
CONNECTIONS, CHANNELS, CONSUMERS, CLOSE_CONNECTION, NODE = 0, 1, 2, 3, 4


@dataclass(frozen=True, slots=True, kw_only=True)
class ManagementViewRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(MANAGEMENT_VIEW)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    op: i8 = field(metadata={"kafka_type": "int8"})
    name: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """CLOSE_CONNECTION: the connection's name in the management API."""
    reason: str | None = field(metadata={"kafka_type": "string"}, default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class ManagementViewResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(MANAGEMENT_VIEW)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    body: bytes = field(metadata={"kafka_type": "bytes"}, default=b"[]")
    """The broker's own connections, channels, consumers or node, as its management API shows them (JSON)."""


# api key -> version -> (request class, response class)
ENTITIES = {AMQP_QUEUE: {0: (AmqpQueueRequest, AmqpQueueResponse)},
            STREAM_CONSUMER: {0: (StreamConsumerRequest, StreamConsumerResponse)},
            AMQP_REPLY: {0: (AmqpReplyRequest, AmqpReplyResponse)},
            AMQP_LINK: {0: (AmqpLinkRequest, AmqpLinkResponse)},
            MANAGEMENT_VIEW: {0: (ManagementViewRequest, ManagementViewResponse)}}
VERSIONS = {key: (min(v), max(v)) for key, v in ENTITIES.items()}
NAMES = {AMQP_QUEUE: "AmqpQueue", STREAM_CONSUMER: "StreamConsumer", AMQP_REPLY: "AmqpReply",
         AMQP_LINK: "AmqpLink", MANAGEMENT_VIEW: "ManagementView"}
