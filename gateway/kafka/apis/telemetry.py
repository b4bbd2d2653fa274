"""GetTelemetrySubscriptions and PushTelemetry (KIP-714) with no metrics subscribed.

This broker collects no client metrics, so every client is told so the way Kafka tells a client
no subscription matches: an empty ``requested_metrics`` (push nothing), Kafka's default push
interval (5 min, after which the client asks again) and its other defaults. A client that sends
the zero id is given a new instance id; the subscription id is derived from the (empty) metric
set, the interval and the instance id, as Kafka derives it, so it is stable per client.

Pacing and errors are Kafka's (its ClientMetricsManager): a client instance is known to the
connection that first named it and forgotten when that connection closes. On it, a second
GetTelemetrySubscriptions within the push interval of its last get or push is answered
THROTTLING_QUOTA_EXCEEDED; the first push after a get is accepted, a later one within the
interval is throttled unless it is the ``terminating`` one; after that every push is
INVALID_REQUEST. A push is checked for its subscription id (UNKNOWN_SUBSCRIPTION_ID; the client
then asks again), compression type (UNSUPPORTED_COMPRESSION_TYPE) and size (TELEMETRY_TOO_LARGE
past 1 MiB); a zero instance id is INVALID_REQUEST.
"""
from __future__ import annotations

import uuid

from crc32c import crc32c
from kio.schema.errors import ErrorCode

from gateway.kafka.apis.registry import handles
from wire.kafka import respond

PUSH_INTERVAL_MS = 300_000  # Kafka's interval.ms default for a client metrics subscription
TELEMETRY_MAX_BYTES = 1024 * 1024  # Kafka's telemetry.max.bytes default
ZSTD, LZ4, GZIP, SNAPPY = 4, 3, 1, 2
ACCEPTED_COMPRESSION = [ZSTD, LZ4, GZIP, SNAPPY]  # Kafka's order of preference
METRICS: list[str] = []  # subscribed metric prefixes: none
COMPRESSION_IDS = range(5)  # none, gzip, snappy, lz4, zstd: the types a push may be compressed with


class Instance:
    """A client instance's pacing, as Kafka's ClientMetricsInstance keeps it."""

    def __init__(self):
        self.last_get_ms: int | None = None  # None: never (Kafka's 0 on a wall clock)
        self.last_push_ms: int | None = None
        self.terminating = False

    def may_get(self, now_ms: int) -> bool:
        last = max((t for t in (self.last_get_ms, self.last_push_ms) if t is not None), default=None)
        if last is not None and now_ms - last < PUSH_INTERVAL_MS:
            return False
        self.last_get_ms = now_ms
        return True

    def may_push(self, now_ms: int) -> bool:
        # the push right after a get is taken early: clients jitter their interval
        after_get = self.last_get_ms is not None and (self.last_push_ms is None or self.last_get_ms > self.last_push_ms)
        if not after_get and self.last_push_ms is not None and now_ms - self.last_push_ms < PUSH_INTERVAL_MS:
            return False
        self.last_push_ms = now_ms
        return True


def _instance(conn, instance: uuid.UUID) -> Instance:
    """This connection's state of ``instance`` (it goes with the connection, as in Kafka)."""
    known = getattr(conn, "telemetry_instances", None)
    if known is None:
        known = conn.telemetry_instances = {}
    return known.setdefault(instance, Instance())


def _now_ms(ctx) -> int:
    return int(ctx.reactor.seconds() * 1000)


def subscription_id(instance: uuid.UUID) -> int:
    """An int32 from the metric set and interval (CRC-32C), mixed with the instance id."""
    digest = crc32c(f"{sorted(METRICS)}{PUSH_INTERVAL_MS}".encode())
    high, low = instance.int >> 64, instance.int & (2**64 - 1)
    folded = high ^ low
    value = (digest ^ (folded >> 32) ^ folded) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


@handles(71)
def get_telemetry_subscriptions(ctx, conn, h, req):
    instance = req.client_instance_id
    if instance is None or instance.int == 0:
        instance = uuid.uuid4()
    if not _instance(conn, instance).may_get(_now_ms(ctx)):
        return respond(h, {"throttle_time": 0, "error_code": ErrorCode.throttling_quota_exceeded,
                           "client_instance_id": uuid.UUID(int=0), "subscription_id": 0,
                           "accepted_compression_types": [], "push_interval": 0, "telemetry_max_bytes": 0,
                           "delta_temporality": False, "requested_metrics": []})
    return respond(h, {"throttle_time": 0, "error_code": ErrorCode.none, "client_instance_id": instance,
                       "subscription_id": subscription_id(instance), "accepted_compression_types": ACCEPTED_COMPRESSION,
                       "push_interval": PUSH_INTERVAL_MS, "telemetry_max_bytes": TELEMETRY_MAX_BYTES,
                       "delta_temporality": True, "requested_metrics": METRICS})


@handles(72)
def push_telemetry(ctx, conn, h, req):
    instance = req.client_instance_id
    if instance is None or instance.int in (0, 1):  # Kafka's reserved ids
        return respond(h, {"throttle_time": 0, "error_code": ErrorCode.invalid_request})
    state = _instance(conn, instance)
    if state.terminating:
        error = ErrorCode.invalid_request  # nothing after the terminating push
    elif not state.may_push(_now_ms(ctx)) and not req.terminating:
        error = ErrorCode.throttling_quota_exceeded
    elif req.subscription_id != subscription_id(instance):
        error = ErrorCode.unknown_subscription_id
    elif req.compression_type not in COMPRESSION_IDS:
        error = ErrorCode.unsupported_compression_type
    elif req.metrics is not None and len(req.metrics) > TELEMETRY_MAX_BYTES:
        error = ErrorCode.telemetry_too_large
    else:
        error = ErrorCode.none  # nothing is subscribed, so whatever was pushed is dropped
    state.terminating = req.terminating  # whatever the answer, as Kafka records it
    return respond(h, {"throttle_time": 0, "error_code": error})
