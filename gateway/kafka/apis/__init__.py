"""Kafka API handlers, one module per group of APIs, registered by api key.

A handler takes ``(ctx, conn, header, body)`` and returns the encoded response, a Deferred
that fires with it, or None when no response is owed (acks=0). Handlers turn core's
exceptions into Kafka error codes; nothing else in the broker knows those codes.
"""
from __future__ import annotations

import logging

from gateway.cluster import coordination
from gateway.kafka.apis import acls, reassign, scram_admin  # noqa: F401 (their @handles fill the table)
from gateway.kafka.apis import admin, fetch, groups, metadata, offsets, produce, session, txn  # noqa: F401
from gateway.kafka.apis import consumer_groups, share_groups, share_offsets, streams_groups  # noqa: F401
from gateway.kafka.apis import client_quotas, elections, log_dirs, telemetry, topic_partitions  # noqa: F401
from gateway.kafka.apis import amqp_link, amqp_queue, amqp_reply, configs, quorum, stream_consumer  # noqa: F401
from gateway.kafka.apis import management_view  # noqa: F401
from gateway.kafka.apis.registry import HANDLERS
from gateway.logs import fields
from wire.kafka import API_VERSIONS, PRODUCE, REJECTED, legacy_produce_partitions, legacy_produce_refusal

log = logging.getLogger(__name__)


def dispatch(ctx, conn, request):
    h = request.header
    if request.body is None:
        if h.api_key == API_VERSIONS:
            return session.api_versions_unsupported(h)
        if h.api_key == PRODUCE and h.api_version in REJECTED[PRODUCE]:
            log.warning("Produce v%d refused: this broker stores record batches v2 only (Produce v3+)", h.api_version,
                        extra=fields(peer=conn.peer, conn=conn.conn_id, client_id=h.client_id))
            topics = legacy_produce_partitions(request.raw, request.body_offset)
            acks = int.from_bytes(request.raw[request.body_offset:request.body_offset + 2], "big", signed=True)
            return None if acks == 0 else legacy_produce_refusal(h, topics)
        conn.drop("unsupported API or version (see ApiVersions)", api_key=h.api_key, api_version=h.api_version,
                  correlation_id=h.correlation_id)
        return None
    if ctx.cluster is not None:
        answer = coordination.misdirected(ctx, h, request.body)  # a group request for another broker
        if answer is not None:
            return answer
    return HANDLERS[h.api_key](ctx, conn, h, request.body)


