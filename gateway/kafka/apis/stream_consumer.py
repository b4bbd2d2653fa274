"""StreamConsumer, the brokers' own API (wire.kafka_private): single-active-consumer groups of the
stream protocol, decided at each stream's leader. The work is gateway.stream.sac's; this only
answers. A broker without the stream protocol in a spread cluster coordinates nothing."""
from __future__ import annotations

from kio.schema.errors import ErrorCode

from gateway.kafka.apis.registry import handles
from wire.kafka import respond
from wire.kafka_private import STREAM_CONSUMER


@handles(STREAM_CONSUMER)
def stream_consumer(ctx, conn, h, req):
    consumers = ctx.stream_consumers
    if consumers is None:
        return respond(h, {"error_code": ErrorCode.not_coordinator,
                           "error_message": "this broker serves no stream consumers (not a spread cluster)"})
    code, message = consumers.handle(req)
    return respond(h, {"error_code": code, "error_message": message})
