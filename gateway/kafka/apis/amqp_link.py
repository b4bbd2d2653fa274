"""AmqpLink, the brokers' own API (wire.kafka_private): the consumer links of a spread cluster,
answered by the queues' leader (gateway.cluster.link_server)."""
from __future__ import annotations

from kio.schema.errors import ErrorCode
from twisted.internet import defer

from gateway.kafka.apis.registry import handles
from wire.amqp_link import LinkCodecError
from wire.kafka import respond
from wire.kafka_private import AMQP_LINK

_GONE = "no such link session here (it ended, or this broker restarted): start another"


@handles(AMQP_LINK)
def amqp_link(ctx, conn, h, req):
    server = ctx.amqp_links
    if server is None:
        return respond(h, {"error_code": ErrorCode.invalid_request,
                           "error_message": "this broker does not serve AMQP links (not a spread cluster)"})
    try:
        answer = server.handle(conn, req.session, req.opening, req.wait_ms, req.ops)
    except LinkCodecError as exc:
        return respond(h, {"error_code": ErrorCode.invalid_request, "error_message": f"malformed AmqpLink: {exc}"})
    if isinstance(answer, defer.Deferred):
        return answer.addCallback(lambda events: _answer(h, events))
    return _answer(h, answer)


def _answer(h, events: bytes | None) -> bytes:
    if events is None:
        return respond(h, {"error_code": ErrorCode.unknown_member_id, "error_message": _GONE})
    return respond(h, {"error_code": ErrorCode.none, "events": events})
