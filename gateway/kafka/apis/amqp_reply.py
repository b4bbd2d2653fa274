"""AmqpReply, the brokers' own API (wire.kafka_private): a Direct Reply-To reply published on
another broker of a spread cluster, for the requester's channel here (routing.direct_reply), or
the question whether that channel is still here (properties null: queue.declare of the name)."""
from __future__ import annotations

from kio.schema.errors import ErrorCode

from gateway.kafka.apis.registry import handles
from wire.kafka import respond
from wire.kafka_private import AMQP_REPLY


@handles(AMQP_REPLY)
def amqp_reply(ctx, conn, h, req):
    router = ctx.router()
    if router is None:
        return respond(h, {"error_code": ErrorCode.none, "delivered": False})
    replies = router.direct_replies
    if req.properties is None:
        delivered = replies.alive(req.name)
    else:
        delivered = replies.deliver("", req.name, req.properties, req.body)
    return respond(h, {"error_code": ErrorCode.none, "delivered": delivered})
