"""A queue defined here but led by another broker of the cluster.

Every broker knows every queue (routing.definitions_follower), but a queue's messages and its
delivery state (cursor, unacked messages, delivery counts) live on one broker: the leader of its
topic, as a RabbitMQ queue lives in one process on one node. Elsewhere the queue is a
:class:`RemoteQueue`: exchanges route to it and declarations find it like any queue, but it holds
no cursor; what is published to it is handed to ``forward`` (the gateway sends it to the leader,
batched per leader), and its figures are the leader's business.
"""
from __future__ import annotations

from routing.queue import Queue


class RemoteQueue(Queue):
    remote = True

    def __init__(self, *args, leader: int = -1, **kwargs):
        super().__init__(*args, **kwargs)
        self.leader = leader  # the broker that leads the queue's topic (-1: none right now)

    def __repr__(self) -> str:
        return f"<RemoteQueue {self.name!r} vhost={self.vhost!r} leader={self.leader}>"

    # No cursor here: counts, limits and deliveries are the leader's.
    def sync_end(self) -> None:
        pass

    def message_count(self) -> int:
        return 0

    def unacked_count(self) -> int:
        return 0

    def admits(self, body_size: int, pending: int = 0) -> bool:
        return True  # the leader applies max-length and x-overflow

    def appended_limits(self) -> None:
        pass

    def expire_head(self) -> int:
        return 0

    def may_deliver(self) -> bool:
        return False

    def dispatch(self) -> int:
        return 0

    def purge(self) -> int:
        return 0

    @property
    def ack_floor(self) -> int:
        return 0

    @property
    def delivered_bound(self) -> int:
        return 0


def remote_stub(queue: Queue, leader: int = -1) -> RemoteQueue:
    """The RemoteQueue standing for ``queue`` (just declared or restored, no log attached)."""
    stub = RemoteQueue(queue.vhost, queue.name, queue.topic, None, durable=queue.durable,
                       exclusive_owner=queue.exclusive_owner, auto_delete=queue.auto_delete,
                       arguments=queue.arguments, leader=leader)
    stub.partition = queue.partition
    return stub
