"""GetTelemetrySubscriptions and PushTelemetry (KIP-714) with no metrics subscribed.

This broker collects no client metrics, so every client is told so the way Kafka tells a client
no subscription matches: an empty ``requested_metrics`` (push nothing), Kafka's default push
interval (5 min, after which the client asks again) and its other defaults. A client that sends
the zero id is given a new instance id; the subscription id is derived from the (empty) metric
set, the interval and the instance id, as Kafka derives it, so it is stable per client. A push
(a client may still send one, e.g. its last with ``terminating``) is answered NONE when its
subscription id is the one handed out, UNKNOWN_SUBSCRIPTION_ID otherwise (the client then asks
again), INVALID_REQUEST for a zero instance id, TELEMETRY_TOO_LARGE past 1 MiB.
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
    return respond(h, {"throttle_time": 0, "error_code": ErrorCode.none, "client_instance_id": instance,
                       "subscription_id": subscription_id(instance), "accepted_compression_types": ACCEPTED_COMPRESSION,
                       "push_interval": PUSH_INTERVAL_MS, "telemetry_max_bytes": TELEMETRY_MAX_BYTES,
                       "delta_temporality": True, "requested_metrics": METRICS})


@handles(72)
def push_telemetry(ctx, conn, h, req):
    instance = req.client_instance_id
    if instance is None or instance.int == 0:
        error = ErrorCode.invalid_request
    elif req.subscription_id != subscription_id(instance):
        error = ErrorCode.unknown_subscription_id
    elif req.metrics is not None and len(req.metrics) > TELEMETRY_MAX_BYTES:
        error = ErrorCode.telemetry_too_large
    else:
        error = ErrorCode.none  # nothing is subscribed, so whatever was pushed is dropped
    return respond(h, {"throttle_time": 0, "error_code": error})
