"""ManagementView, the brokers' own API (wire.kafka_private): this broker's AMQP connections,
channels or consumers for another broker's management API, or the close of one of its
connections (gateway.management.cluster_clients says what is answered)."""
from __future__ import annotations

from kio.schema.errors import ErrorCode

from gateway.kafka.apis.registry import handles
from wire.kafka import respond
from wire.kafka_private import MANAGEMENT_VIEW


@handles(MANAGEMENT_VIEW)
def management_view(ctx, conn, h, req):
    if ctx.management_view is None:
        return respond(h, {"error_code": ErrorCode.unsupported_version, "error_message": "no management view here"})
    try:
        body = ctx.management_view(req.op, req.name, req.reason)
    except LookupError as exc:
        return respond(h, {"error_code": ErrorCode.resource_not_found, "error_message": str(exc)})
    except ValueError as exc:
        return respond(h, {"error_code": ErrorCode.invalid_request, "error_message": str(exc)})
    return respond(h, {"error_code": ErrorCode.none, "body": body})
