"""The management API's queues with the figures of queues led by other brokers (cluster mode
'spread'): asked of their leaders (gateway.cluster.amqp_queue_ops), so a Deferred of the view.

A queue without a leader right now shows what this broker knows (0 messages, its consumers)
rather than making the listing wait. ``disable_stats=true`` (RabbitMQ's parameter for cheap
listings) asks nobody.
"""
from __future__ import annotations

from twisted.internet import defer

from gateway.management import views


def _asks(broker, q) -> bool:
    return q.remote and q.ops is not None and views.leader_of(broker, q) >= 0


def queue(broker, q):
    if not _asks(broker, q):
        return views.queue(broker, q)
    return q.ops.figures(q, wait=False).addCallback(lambda f: views.queue(broker, q, f))


def queues(broker, vhost: str | None, request):
    found = [q for v in views._vhosts(broker, vhost) for q in sorted(v.queues.values(), key=views._by_name)]
    stats = not request.args.get(b"disable_stats", [b"false"])[-1].lower() == b"true"
    remote = [q for q in found if stats and _asks(broker, q)]
    if not remote:
        return [views.queue(broker, q) for q in found]

    def shown(figures) -> list[dict]:
        by_queue = {id(q): f for q, f in zip(remote, figures)}
        return [views.queue(broker, q, by_queue.get(id(q))) for q in found]
    return defer.gatherResults([q.ops.figures(q, wait=False) for q in remote]).addCallback(shown)


def vhosts(broker, name: str | None, request):
    """The vhosts (one, or all) with their queues' message totals, figures asked as above."""
    found = sorted(views._vhosts(broker, name), key=views._by_name)

    def shown(rows: list[dict]) -> list[dict]:
        return [views.vhost(broker, v, [r for r in rows if r["vhost"] == v.name]) for v in found]
    rows = queues(broker, name, request)
    return rows.addCallback(shown) if isinstance(rows, defer.Deferred) else shown(rows)
