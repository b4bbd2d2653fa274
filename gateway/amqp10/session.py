"""One AMQP 1.0 session: its windows, its links, its unsettled deliveries both ways.

Transfer ids count frames (``next-incoming-id`` / ``next-outgoing-id``; the windows bound how
many may be sent before the peer's next flow); delivery ids count messages. This session grants
the client a large incoming window and tops it up with a flow when half is used; it sends only
while the client's incoming window is open.

Links (:mod:`gateway.amqp10.links`): a client's sender link is an :class:`IncomingLink` that
publishes through the router exactly as ``basic.publish`` does; a client's receiver link is an
:class:`OutgoingLink`, a consumer of a queue like ``basic.consume`` (its link credit is the
prefetch). Unsettled publishes are settled (disposition accepted / released / rejected) when the
router's confirm says they are durable, as 0-9-1 publisher confirms are sent. Outcomes of
consumed messages go to the queue:

======================================= ===============================================
client's outcome                        queue
======================================= ===============================================
accepted                                ack
released                                back to the queue, delivery count unchanged
rejected                                dead-lettered (or dropped), as ``basic.reject``
modified delivery-failed                back to the queue, delivery count + 1
modified undeliverable-here             dead-lettered (or dropped), as rejected
modified (neither)                      as released
======================================= ===============================================
"""
from __future__ import annotations

from collections import deque

from gateway.amqp10.errors import LinkError, SessionError, condition_of
from gateway.amqp10 import addresses
from gateway.amqp10.direct_reply import ReplyLink, is_reply_source
from gateway.amqp10.links import IncomingLink, OutgoingLink
from gateway.amqp10.management import ManagementReplies, ManagementRequests
from routing.errors import ConnectionError
from wire.amqp10_frames import (
    Accepted, Attach, Begin, Detach, Disposition, Error, Flow, Modified, Rejected, Released, Transfer, encode_delivery,
    encode_transfer,
)

INCOMING_WINDOW = 65535
HANDLE_MAX = 1023
UINT = 1 << 32
_TRANSFER_OVERHEAD = 64  # frame header + a transfer performative, at most (tags are 4 bytes here)
_ACCEPTED = Accepted()


class Session:
    def __init__(self, connection, channel: int, begin: Begin):
        self.connection = connection
        self.channel = channel
        self.vhost = connection.vhost
        self.router = connection.router
        self.next_incoming_id = begin.next_outgoing_id or 0
        self.remote_outgoing_window = begin.outgoing_window or 0
        self.incoming_window = INCOMING_WINDOW
        self.next_outgoing_id = 0
        self.remote_incoming_window = begin.incoming_window or 0
        self.next_delivery_id = 0
        self.handle_max = min(HANDLE_MAX, begin.handle_max if begin.handle_max is not None else HANDLE_MAX)
        self.links: dict[int, IncomingLink | OutgoingLink] = {}
        # delivery id -> (link, queue, offset): our deliveries the client has not settled
        self.unsettled: dict[int, tuple] = {}
        self.pending_confirms: deque = deque()  # (delivery id, Publish, routed) of unsettled publishes
        self.detaching: set[int] = set()  # handles we detached first: the client's detach ends them
        self.closing = False

    def send_begin(self) -> None:
        self.connection.send_frame(self.channel, Begin(
            remote_channel=self.channel, next_outgoing_id=self.next_outgoing_id, incoming_window=self.incoming_window,
            outgoing_window=UINT - 1, handle_max=self.handle_max))

    def send_delivery(self, handle: int, delivery_id: int, settled: bool, data: bytes) -> None:
        """One delivery's transfer frames: one frame when it fits (all but its ids made once per
        link), else a first frame encoded by hand and continuation transfers with only the handle
        and ``more``."""
        connection = self.connection
        room = connection.max_frame_size - _TRANSFER_OVERHEAD
        n = len(data)
        if n <= room:
            connection.send(encode_delivery(self.channel, handle, delivery_id, settled, data))
            self.next_outgoing_id = (self.next_outgoing_id + 1) % UINT
            self.remote_incoming_window -= 1
            return
        connection.send(encode_transfer(self.channel, handle, delivery_id, delivery_id.to_bytes(4, "big"),
                                        settled, True, data[:room]))
        frames = 1
        for start in range(room, n, room):
            self.send(Transfer(handle=handle, more=start + room < n), data[start:start + room])
            frames += 1
        self.next_outgoing_id = (self.next_outgoing_id + frames) % UINT
        self.remote_incoming_window -= frames

    def send(self, body, payload: bytes = b"") -> None:
        self.connection.send_frame(self.channel, body, payload)

    # --- frames from the client ------------------------------------------------------------
    def handle(self, body, payload: bytes) -> None:
        if isinstance(body, Transfer):
            self.transfer(body, payload)
        elif isinstance(body, Flow):
            self._flow(body)
        elif isinstance(body, Disposition):
            self._disposition(body)
        elif isinstance(body, Attach):
            self._attach(body)
        elif isinstance(body, Detach):
            self._detach(body)
        else:
            raise SessionError("amqp:not-allowed", f"unexpected {body.NAME}")

    def _attach(self, m: Attach) -> None:
        if m.handle is None or m.name is None or m.role is None:
            raise SessionError("amqp:decode-error", "attach without name, handle or role")
        if m.handle > self.handle_max:
            raise SessionError("amqp:session:handle-in-use" if m.handle in self.links else "amqp:not-allowed",
                               f"handle {m.handle} is above handle-max {self.handle_max}")
        if m.handle in self.links or m.handle in self.detaching:
            raise SessionError("amqp:session:handle-in-use", f"handle {m.handle} is in use")
        try:
            link = attach_link(self, m)
        except LinkError as exc:  # refused: an attach with no terminus, then a detach with the error
            self.send(Attach(name=m.name, handle=m.handle, role=not m.role, snd_settle_mode=m.snd_settle_mode,
                             rcv_settle_mode=m.rcv_settle_mode, source=m.source if m.role else None,
                             target=None if m.role else m.target, initial_delivery_count=None if m.role else 0))
            self.send_detach_error(m.handle, exc.condition, exc.description)
            return
        self.links[m.handle] = link
        link.attached()

    def _detach(self, m: Detach) -> None:
        link = self.links.pop(m.handle, None)
        if link is None and m.handle in self.detaching:
            self.detaching.discard(m.handle)  # the answer to our detach
            return
        if link is None:
            raise SessionError("amqp:session:unattached-handle", f"detach of handle {m.handle}, which is not attached")
        link.release()
        self.send(Detach(handle=m.handle, closed=m.closed))

    def detach(self, handle: int, condition: str, text: str) -> None:
        """Detach one link with an error (the session goes on)."""
        link = self.links.pop(handle, None)
        if link is not None:
            link.release()
        self.send_detach_error(handle, condition, text)

    def send_detach_error(self, handle: int, condition: str, text: str) -> None:
        self.detaching.add(handle)
        self.send(Detach(handle=handle, closed=True, error=Error(condition=condition, description=text)))

    def _flow(self, m: Flow) -> None:
        if m.incoming_window is None or m.next_outgoing_id is None or m.outgoing_window is None:
            raise SessionError("amqp:decode-error", "flow without its session fields")
        start = m.next_incoming_id if m.next_incoming_id is not None else 0
        self.remote_incoming_window = max(0, start + m.incoming_window - self.next_outgoing_id)
        self.remote_outgoing_window = m.outgoing_window
        if m.handle is not None:
            link = self.links.get(m.handle)
            if link is not None:
                link.flow(m)
            elif m.handle not in self.detaching:  # (on a link we detached: ignored)
                raise SessionError("amqp:session:unattached-handle", f"flow on handle {m.handle}, which is not attached")
        elif m.echo:
            self.send_flow()
        self.dispatch_all()

    def send_flow(self, link=None) -> None:
        f = Flow(next_incoming_id=self.next_incoming_id, incoming_window=self.incoming_window,
                 next_outgoing_id=self.next_outgoing_id, outgoing_window=UINT - 1)
        if link is not None:
            link.flow_fields(f)
        self.send(f)

    def transfer(self, m: Transfer, payload: bytes) -> None:
        self.next_incoming_id = (self.next_incoming_id + 1) % UINT
        self.incoming_window -= 1
        if self.incoming_window < INCOMING_WINDOW // 2:
            self.incoming_window = INCOMING_WINDOW
            self.send_flow()
        link = self.links.get(m.handle)
        if link is None:
            if m.handle in self.detaching:
                return  # sent before our detach reached the client
            raise SessionError("amqp:session:unattached-handle", f"transfer on handle {m.handle}, which is not attached")
        if not isinstance(link, IncomingLink):
            raise SessionError("amqp:not-allowed", f"transfer on handle {m.handle}, a link this broker sends on")
        link.transfer(m, payload)

    def _disposition(self, m: Disposition) -> None:
        if not m.role:  # from a sender: about our settled publishes; nothing to do
            return
        first = m.first
        last = m.last if m.last is not None else first
        if first is None or last < first or last - first > 1 << 20:
            raise SessionError("amqp:decode-error", f"disposition of deliveries {first}..{last}")
        state = m.state
        if not m.settled and state is None:
            return  # a state without settling (e.g. received): nothing to do yet
        touched: dict = {}  # queue -> offsets: one ack (or reject...) per queue for the whole range
        unsettled = self.unsettled
        for delivery_id in range(first, last + 1):
            entry = unsettled.pop(delivery_id, None)
            if entry is None:
                continue
            link, queue, offset = entry
            link.unsettled -= 1
            offsets = touched.get(queue)
            if offsets is None:
                touched[queue] = [offset]
            else:
                offsets.append(offset)
        for queue, offsets in touched.items():
            settle(queue, offsets, state)
            if not queue.deleted:
                queue.dispatch()
        self.router.settle_appends()

    # --- publishes: confirm when durable ----------------------------------------------------
    def confirm_later(self, delivery_id: int, publish, outcome) -> None:
        self.pending_confirms.append((delivery_id, publish, outcome))
        self.connection.confirms_waiting.add(self)
        self.connection.service.confirming.add(self.connection)

    def send_confirms(self) -> bool:
        """Settle the publishes that are durable now, in order; consecutive accepted ones share one
        disposition (first..last), as a multiple basic.ack does."""
        pending = self.pending_confirms
        run_first = run_last = None  # a run of accepted delivery ids not yet sent
        while pending:
            delivery_id, publish, outcome = pending[0]
            if publish is not None and not publish.durable():
                break
            pending.popleft()
            if outcome is None and not (publish is not None and publish.rejected):
                if run_first is not None and delivery_id == run_last + 1:  # (a wrap to 0 starts a new run)
                    run_last = delivery_id
                    continue
                self._accepted(run_first, run_last)
                run_first = run_last = delivery_id
                continue
            self._accepted(run_first, run_last)
            run_first = run_last = None
            if outcome is None:
                outcome = Rejected(error=Error(condition="amqp:precondition-failed",
                                               description="a queue refused the message"))
            self.send(Disposition(role=True, first=delivery_id, settled=True, state=outcome))
        self._accepted(run_first, run_last)
        return not pending

    def _accepted(self, first: int | None, last: int | None) -> None:
        if first is not None:
            self.send(Disposition(role=True, first=first, last=None if last == first else last, settled=True,
                                  state=_ACCEPTED))

    # --- deliveries to the client -----------------------------------------------------------
    def dispatch_all(self) -> None:
        for link in list(self.links.values()):
            if isinstance(link, OutgoingLink):
                link.dispatch()

    def release(self) -> None:
        """The session ends (or its connection): links go, unsettled deliveries go back to their queues."""
        self.closing = True
        for link in list(self.links.values()):
            link.release()
        self.links.clear()
        self.pending_confirms.clear()
        self.connection.confirms_waiting.discard(self)


def settle(queue, offsets: list[int], state) -> None:
    """A consumed message's outcome, carried out on its queue (see the module's table)."""
    if queue.deleted:
        return
    if state is None or isinstance(state, Accepted):
        queue.ack(offsets)  # settled without a state: the client is done with it
    elif isinstance(state, Rejected):
        queue.reject(offsets, False)
    elif isinstance(state, Modified) and state.undeliverable_here:
        queue.reject(offsets, False)
    elif isinstance(state, Modified) and state.delivery_failed:
        queue.reject(offsets, True)
    elif isinstance(state, (Released, Modified)):
        queue.requeue_uncounted(offsets)
    else:
        queue.ack(offsets)


def attach_link(session, m: Attach):
    """The link a client's attach asks for; LinkError if it cannot be had."""
    if is_reply_source(m):  # Direct Reply-To's requester (gateway.amqp10.direct_reply)
        return ReplyLink(session, m)
    terminus = m.source if m.role else m.target
    address = getattr(terminus, "address", None)
    try:
        node = None if (address is None and not m.role) else addresses.parse(address)
    except addresses.BadAddress as exc:
        raise LinkError(m.handle, "amqp:invalid-field", str(exc)) from None
    if node is not None and node.kind == "management":
        return ManagementReplies(session, m) if m.role else ManagementRequests(session, m)
    if m.role:
        try:
            return OutgoingLink(session, m, node)
        except ConnectionError as exc:  # a stream led by another broker, with no replica here
            raise LinkError(m.handle, condition_of(exc), exc.reply_text) from None
    return IncomingLink(session, m, node)
