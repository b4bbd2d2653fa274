"""Replies a channel owes once another broker has answered (cluster mode 'spread'): declare-ok,
purge-ok and delete-ok of a queue led elsewhere (gateway.cluster.amqp_queue_ops asks its leader).
Mixed into gateway.amqp.channel.Channel."""
from __future__ import annotations

from pamqp import commands as spec

from routing.errors import NOT_FOUND, PRECONDITION_FAILED, ChannelError


class RemoteReplies:
    def _later(self, d, m, answer) -> None:
        """Reply to ``m`` once Deferred ``d`` fired: ``answer(result)`` (it may raise a ChannelError),
        or close the channel if ``d`` failed; nothing if the channel closed meanwhile."""
        def done(result):
            if self.closing or self.connection.channels.get(self.number) is not self:
                return
            try:
                answer(result)
            except ChannelError as exc:
                self.connection._channel_error(self, exc, type(m))

        def failed(failure):
            if not self.closing and self.connection.channels.get(self.number) is self:
                # RabbitMQ's answer when a queue's node is away: 404
                self.connection._channel_error(self, ChannelError(NOT_FOUND, failure.getErrorMessage()), type(m))
        d.addCallbacks(done, failed)

    def _delete_remote(self, m: spec.Queue.Delete, name: str, figures) -> None:
        """queue.delete of a queue led elsewhere, once its figures are known: the conditions are
        checked against them (consumers on every broker, the leader's ready messages), then the
        queue is deleted here as any (the leader drops its own when the deletion reaches it)."""
        if m.if_unused and figures.consumers:
            raise ChannelError(PRECONDITION_FAILED, f"queue '{name}' in vhost '{self.vhost.name}' in use")
        if m.if_empty and figures.ready:
            raise ChannelError(PRECONDITION_FAILED, f"queue '{name}' in vhost '{self.vhost.name}' not empty")
        self._held_cancels = []
        try:
            self.vhost.delete_queue(name, owner=self.connection)
            if not m.nowait:
                self.reply(spec.Queue.DeleteOk(figures.ready))
        finally:
            held, self._held_cancels = self._held_cancels, None
        for tag in held:
            self.reply(spec.Basic.Cancel(tag, nowait=True))
