"""The leader's end of the AMQP consumer links of a spread cluster (wire.amqp_link).

Another broker's consumer of a queue led here is, here, a :class:`LinkConsumer` among the
queue's consumers: the queue's own dispatch picks it by priority, single-active-consumer order and
credit, as it does a local channel's consumer, and what it takes is held in the queue's cursor
under the link as owner, as a RabbitMQ queue process holds what it sent a channel on another node.
The deliveries are not written to a socket but gathered for the asking broker's *session* and
handed over in the answer to its poll (at the end of the loop turn, so one answer carries
everything that turn dispatched, for every link of the session).

Credit is the asking broker's business (its consumer's prefetch less what it holds, a 1.0 link's
credit, a paused channel): it sends the number of deliveries a link may have had in all, and the
link here takes messages while it has had fewer.

A session ends, and every link of it gives back what it held (flagged redelivered, counted for a
quorum queue), when a connection that carried it closes, when it has not been heard from for
:data:`SESSION_TIMEOUT_S` (the asking broker polls at least every few seconds while it has a
link), or when the asking broker starts another (it does after any failure). A settlement for a
link or session that is gone is dropped: what it settled went back to the queue already.
"""
from __future__ import annotations

import logging
import time

from twisted.internet import defer

from gateway.logs import fields
from routing.mapping import amqp_from_record
from wire import amqp_link as wl
from wire.amqp import encode_delivery

log = logging.getLogger(__name__)

SESSION_TIMEOUT_S = 30.0
SWEEP_S = 5.0
MAX_WAIT_MS = 30_000


class LinkConsumer:
    """One consumer of another broker, as the queue here sees it (routing.queue's Consumer)."""

    remote_link = True  # not counted among the queue's consumers: its own broker reports it

    def __init__(self, session: "LinkSession", link: int, queue, no_ack: bool, exclusive: bool, priority: int,
                 limit: int, frames: tuple[int, int, str] | None = None):
        self.session, self.link, self.queue = session, link, queue
        self.no_ack, self.exclusive, self.priority = no_ack, exclusive, priority
        self.owner = self  # what it took is held under it in the queue's cursor
        self.sent = 0
        self.limit = limit
        # an AMQP 0-9-1 consumer's (channel, frame-max, tag): a classic queue's deliveries go as its
        # frames, encoded here once, instead of as records its broker reads back and encodes
        self.frames = frames if frames and not queue.is_stream and not queue.counts_deliveries else None

    def has_credit(self) -> bool:
        return self.sent < self.limit and not self.session.ended

    def deliver(self, queue, offset: int, record, redelivered: bool) -> None:
        self.sent += 1
        counts = queue.delivery_counts
        count = counts.get(offset, 0) + 1 if counts else 1
        frames = self.frames
        if frames is None:
            self.session.event(wl.ev_deliver(self.link, offset, count, redelivered, record))
            return
        exchange, routing_key, properties = amqp_from_record(record)
        self.session.event(wl.ev_deliver_frames(self.link, offset, count, redelivered, encode_delivery(
            frames[0], frames[2], 0, redelivered, exchange, routing_key, properties, record.value or b"", frames[1])))

    def cancelled_by_server(self, queue) -> None:
        """The queue was deleted here: the link is over (its broker cancels its consumer)."""
        self.session.links.pop(self.link, None)
        self.session.event(wl.ev_closed(self.link, f"queue '{queue.name}' in vhost '{queue.vhost}' was deleted"))

    def __repr__(self) -> str:
        return f"<link {self.link} of session {self.session.id}>"


class LinkSession:
    def __init__(self, server: "LinkServer", session_id: str):
        self.server = server
        self.id = session_id
        self.links: dict[int, LinkConsumer] = {}
        self.getters: dict[int, LinkConsumer] = {}  # basic.get links: hold what they got, not consumers
        self.events: list[bytes] = []
        self.poll: defer.Deferred | None = None
        self.poll_timer = None
        self.flushing = None
        self.seen = time.monotonic()
        self.ended = False

    # --- events ----------------------------------------------------------------------------
    def event(self, data: bytes) -> None:
        self.events.append(data)
        if self.poll is not None and self.flushing is None:
            self.flushing = self.server.reactor.callLater(0, self.flush)

    def flush(self) -> None:
        self.flushing = None
        poll, self.poll = self.poll, None
        if poll is None:
            return
        if self.poll_timer is not None and self.poll_timer.active():
            self.poll_timer.cancel()
        self.poll_timer = None
        events, self.events = self.events, []
        poll.callback(b"".join(events))

    # --- the end -----------------------------------------------------------------------------
    def end(self, why: str) -> None:
        if self.ended:
            return
        self.ended = True
        self.server.sessions.pop(self.id, None)
        ended = self.server.ended
        ended[self.id] = None
        if len(ended) > 10_000:
            del ended[next(iter(ended))]
        held = 0
        for link in list(self.links.values()) + list(self.getters.values()):
            held += self.server.close_link(link)
        self.links.clear()
        self.getters.clear()
        self.events = []
        if self.flushing is not None and self.flushing.active():
            self.flushing.cancel()
        self.flushing = None
        if self.poll is not None:
            if self.poll_timer is not None and self.poll_timer.active():
                self.poll_timer.cancel()
            poll, self.poll = self.poll, None
            poll.callback(None)
        log.info("AMQP link session ended", extra=fields(session=self.id, reason=why, returned=held))


class LinkServer:
    """The sessions of the other brokers' consumer links, for the AmqpLink API's handler."""

    def __init__(self, reactor, router):
        self.reactor = reactor
        self.router = router  # () -> routing.broker.Router or None
        self.sessions: dict[str, LinkSession] = {}
        self.ended: dict[str, None] = {}  # the latest sessions that ended (a late request must not revive one)
        self._sweep = None

    def handle(self, conn, session_id: str, opening: bool, wait_ms: int, ops: bytes):
        """One request: its operations applied, then (a poll) its events; bytes of events, a
        Deferred of them (None if the session ends meanwhile), or None when the session is not
        here: it ended, or (not ``opening``) this broker never had it (it restarted)."""
        session = self.sessions.get(session_id)
        if session is None:
            if not opening or session_id in self.ended:
                return None
            session = self.sessions[session_id] = LinkSession(self, session_id)
            if self._sweep is None:
                self._sweep = self.reactor.callLater(SWEEP_S, self.sweep)
        if conn is not None:
            lost = getattr(conn, "on_lost", None)
            if lost is not None and session_id not in lost:
                lost[session_id] = lambda: self._conn_lost(session_id)
        session.seen = time.monotonic()
        self._apply(session, wl.read_ops(ops))
        if wait_ms < 0:
            return b""
        if session.poll is not None:  # a poll still parked (its answer was lost?): answer it empty
            old, session.poll = session.poll, None
            if session.poll_timer is not None and session.poll_timer.active():
                session.poll_timer.cancel()
            old.callback(b"")
        if session.events:
            events, session.events = session.events, []
            return b"".join(events)
        session.poll = d = defer.Deferred()
        session.poll_timer = self.reactor.callLater(min(wait_ms, MAX_WAIT_MS) / 1000, session.flush)
        return d

    def _conn_lost(self, session_id: str) -> None:
        session = self.sessions.get(session_id)
        if session is not None:
            session.end("the connection carrying it closed")

    def sweep(self) -> None:
        self._sweep = None
        now = time.monotonic()
        for session in list(self.sessions.values()):
            if now - session.seen > SESSION_TIMEOUT_S and session.poll is None:
                session.end(f"not heard from in {SESSION_TIMEOUT_S:g} s")
        if self.sessions:
            self._sweep = self.reactor.callLater(SWEEP_S, self.sweep)

    # --- operations -----------------------------------------------------------------------------
    def _apply(self, session: LinkSession, ops: list[tuple]) -> None:
        touched = set()
        for op in ops:
            kind, link_id = op[0], op[1]
            if kind == wl.SETTLE:
                link = session.links.get(link_id) or session.getters.get(link_id)
                if link is not None:
                    self._settle(link, op[2], op[3])
                    touched.add(link.queue)
            elif kind == wl.CREDIT:
                link = session.links.get(link_id)
                if link is not None:
                    link.limit = op[2]
                    touched.add(link.queue)
            elif kind == wl.OPEN:
                queue = self._open(session, *op[1:])
                if queue is not None:
                    touched.add(queue)
            elif kind == wl.GET:
                self._get(session, link_id, op[2])
            elif kind == wl.DRAIN:
                link = session.links.get(link_id)
                if link is not None and not link.queue.deleted:
                    link.queue.dispatch()  # what it can have now goes first, then the drained event
                session.event(wl.ev_drained(link_id))
            elif kind == wl.CLOSE:
                link = session.links.pop(link_id, None) or session.getters.pop(link_id, None)
                if link is not None:
                    self.close_link(link)
                    touched.add(link.queue)
        for queue in touched:
            if not queue.deleted and not queue.remote:
                queue.dispatch()

    def _find(self, vhost: str, name: str):
        router = self.router()
        vh = router.vhosts.get(vhost) if router is not None else None
        queue = vh.queues.get(name) if vh is not None else None
        if queue is None or queue.deleted:
            return None, f"no queue '{name}' in vhost '{vhost}' here"
        if queue.remote:
            return None, f"queue '{name}' in vhost '{vhost}' is led by broker {queue.leader}"
        return queue, ""

    def _open(self, session, link_id, vhost, name, no_ack, exclusive, priority, limit, frames):
        queue, why = self._find(vhost, name)
        if queue is None:
            session.event(wl.ev_closed(link_id, why))
            return None
        link = LinkConsumer(session, link_id, queue, no_ack, exclusive, priority, limit, frames)
        if limit < 0:  # a basic.get link: nothing is dispatched to it
            session.getters[link_id] = link
            return None
        session.links[link_id] = link
        queue.add_consumer(link)
        return queue

    def _get(self, session, link_id: int, no_ack: bool) -> None:
        link = session.getters.get(link_id)
        if link is None or link.queue.deleted:
            session.event(wl.ev_empty(link_id))
            return
        taken = link.queue.get(link, no_ack)
        if taken is None:
            session.event(wl.ev_empty(link_id))
        else:
            offset, redelivered, record = taken
            link.deliver(link.queue, offset, record, redelivered)

    @staticmethod
    def _settle(link: LinkConsumer, how: int, offsets: list[int]) -> None:
        queue = link.queue
        if queue.deleted or queue.remote:
            return
        held = queue.cursor.unacked.get  # (the cursor's owner_of, without a call per message)
        mine = [o for o in offsets if held(o) is link]  # a stale settlement touches nothing
        if not mine:
            return
        if how == wl.ACK:
            queue.ack(mine)
        elif how == wl.REQUEUE:
            queue.reject(mine, True)
        elif how == wl.REQUEUE_FAILED:
            queue.reject(mine, True, failed=True)
        elif how == wl.REJECT:
            queue.reject(mine, False)
        elif how == wl.RELEASE:
            queue.requeue_uncounted(mine)

    @staticmethod
    def close_link(link: LinkConsumer) -> int:
        """The link is over: off the queue's consumers, and what it held back to the queue."""
        queue = link.queue
        if queue.deleted or queue.remote:
            return 0
        queue.remove_consumer(link, auto_delete=False)
        returned = queue.release(link)
        if returned:
            queue.dispatch()
        return len(returned)


