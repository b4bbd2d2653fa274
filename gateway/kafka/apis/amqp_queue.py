"""AmqpQueue, the brokers' own API (wire.kafka_private): one AMQP queue's figures, or its purge,
asked by another broker of a spread cluster (gateway.cluster.amqp_queue_ops).

Every broker answers with the consumers connected to it; the queue's leader also with its ready
and unacked messages (``leads``), and only the leader purges (NOT_LEADER_OR_FOLLOWER elsewhere,
the asker tries again once it knows the new leader).
"""
from __future__ import annotations

from kio.schema.errors import ErrorCode

from gateway.kafka.apis.registry import handles
from wire.kafka import respond
from wire.kafka_private import AMQP_QUEUE, PURGE


@handles(AMQP_QUEUE)
def amqp_queue(ctx, conn, h, req):
    router = ctx.router()
    vhost = router.vhosts.get(req.vhost) if router is not None else None
    queue = vhost.queues.get(req.queue) if vhost is not None else None
    if queue is None or queue.deleted:
        return respond(h, {"error_code": ErrorCode.unknown_topic_or_partition,
                           "error_message": f"no queue '{req.queue}' in vhost '{req.vhost}' here"})
    leads = not queue.remote
    if req.op == PURGE and not leads:
        return respond(h, {"error_code": ErrorCode.not_leader_or_follower,
                           "error_message": f"queue '{req.queue}' is led by broker {queue.leader}"})
    if leads:
        router.settle_appends()  # what was published before counts (as channel.handle does)
    purged = queue.purge() if req.op == PURGE else None
    ready = 0 if not leads else purged if purged is not None else queue.message_count()
    return respond(h, {"error_code": ErrorCode.none, "leads": leads, "message_count": ready,
                       "unacked_count": queue.unacked_count() if leads and not queue.is_stream else 0,
                       "consumer_count": queue.consumer_count()})
