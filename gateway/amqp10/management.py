"""The ``/management`` node: HTTP-over-AMQP requests on a link pair, as RabbitMQ 4 defines it.

The client attaches a sender and a receiver to ``/management``. A request is a message whose
``to`` is a path, ``subject`` an HTTP method, ``message-id`` an id and body an amqp-value; the
response goes back on the receiver link with ``correlation-id`` = that id, ``subject`` the
status code as text and the answer as an amqp-value body.

==================================== ======== =============================================
path                                 method   does
==================================== ======== =============================================
/queues/:queue                       PUT      declare (body: durable, exclusive, auto_delete,
                                              arguments): 200 and the queue's info
/queues/:queue                       GET      the queue's info (404 when missing)
/queues/:queue                       DELETE   delete: 200, message_count
/queues/:queue/messages              DELETE   purge: 200, message_count
/exchanges/:exchange                 PUT      declare (body: type, durable, auto_delete,
                                              internal, arguments): 204
/exchanges/:exchange                 DELETE   delete: 204
/bindings                            POST     bind (body: source, binding_key, arguments,
                                              destination_queue or destination_exchange): 204
/bindings/src=..;dstq=..;key=..      DELETE   unbind (``dste=`` for an exchange): 204
==================================== ======== =============================================

Errors: 404 for a missing resource, 409 for a conflicting declaration (RabbitMQ's
precondition-failed), 403 for a refused permission, 400 for a request that does not parse.
Everything goes through the same vhost calls and permission checks as the 0-9-1 door.
"""
from __future__ import annotations

from collections import deque
from urllib.parse import unquote

from twisted.internet import defer

from gateway.amqp import permissions
from gateway.amqp10 import direct_reply
from gateway.amqp10.links import IncomingLink, plain
from gateway.management.views import node_name
from routing.errors import AmqpError
from routing.direct_reply import is_reply_name
from wire.amqp10 import AMQP10Error, Array, Message, decode_message, encode_message
from wire.amqp10_frames import Attach, Transfer

_STATUS = {403: 403, 404: 404, 405: 409, 406: 409}


class ManagementRequests(IncomingLink):
    """The client's sender on /management: each message is a request."""

    def __init__(self, session, m: Attach):
        super().__init__(session, m, None)

    def message(self, delivery_id: int, settled: bool, data: bytes) -> None:
        try:
            # any order: the Python client's proton sends a null amqp-value body before the properties
            msg = decode_message(data, any_order=True)
        except AMQP10Error:
            msg = None
        props = (msg.properties or []) + [None] * 13 if msg is not None else [None] * 13
        message_id, path, method = props[0], props[2], props[3]
        body = msg.body[0] if msg is not None and msg.body_kind == "value" and msg.body else None
        try:
            if msg is None or not isinstance(path, str) or not isinstance(method, str):
                raise _Fail(400, "a request needs to (a path), subject (a method) and an amqp-value body")
            answer = self._request(method, path, plain(body))
        except (_Fail, AmqpError) as exc:
            answer = _failure(exc)
        if isinstance(answer, defer.Deferred):  # a queue led by another broker: once its leader said
            answer.addErrback(lambda failure: _failure(failure.value)).addCallback(
                lambda result: self._reply(message_id, *result))
        else:
            self._reply(message_id, *answer)
        self._outcome(delivery_id, settled, None, None)

    def _reply(self, message_id, status: int, answer) -> None:
        if self.session.closing:  # an answer from another broker came after the session ended
            return
        reply = Message(properties=[None, None, None, str(status), None, message_id],
                        body_kind="value", body=[answer])
        replies = next((link for link in self.session.links.values() if isinstance(link, ManagementReplies)), None)
        if replies is not None:
            replies.push(encode_message(reply))

    def _request(self, method: str, path: str, body):
        session = self.session
        vhost = session.vhost
        owner = session.connection
        parts = path[1:].split("/") if path.startswith("/") else []
        names = [unquote(p) for p in parts[1:]]
        head = parts[0] if parts else ""
        if head == "queues" and len(names) == 1:
            name = names[0]
            if method == "GET" and is_reply_name(name):  # is the requester there? (RabbitMQ 4.2)
                return direct_reply.requester_status(session, name)
            if method == "GET":
                session.router.settle_appends()
                return self._info(vhost.queue(name, owner), wait=False)
            if method == "PUT":
                body = body if isinstance(body, dict) else {}
                arguments = body.get("arguments") or {}
                permissions.check(session, "queue", name or permissions.SERVER_NAMED, "configure")
                queue = vhost.declare_queue(name, owner=owner, durable=bool(body.get("durable", True)),
                                            exclusive=bool(body.get("exclusive", False)),
                                            auto_delete=bool(body.get("auto_delete", False)), arguments=arguments)
                # led elsewhere: answered once its leader serves it, as 0-9-1's declare-ok, so
                # that a publish right after the answer is taken
                return self._info(queue, wait=True)
            if method == "DELETE":
                permissions.check(session, "queue", name, "configure")
                session.router.settle_appends()
                if name not in vhost.queues:
                    return 200, {"message_count": 0}
                queue = vhost.queue(name, owner)
                if _remote(queue):  # the count is the leader's; the deletion is made here as any
                    def delete(figures):
                        vhost.delete_queue(name, owner=owner)
                        return 200, {"message_count": figures.ready}
                    return queue.ops.figures(queue, wait=False).addCallback(delete)
                return 200, {"message_count": vhost.delete_queue(name, owner=owner)}
        if head == "queues" and len(names) == 2 and names[1] == "messages" and method == "DELETE":
            permissions.check(session, "queue", names[0], "read")
            session.router.settle_appends()
            queue = vhost.queue(names[0], owner)
            if _remote(queue):  # purged by its leader
                return queue.ops.purge(queue).addCallback(lambda count: (200, {"message_count": count}))
            return 200, {"message_count": vhost.purge_queue(names[0], owner)}
        if head == "exchanges" and len(names) == 1:
            name = names[0]
            if method == "PUT":
                body = body if isinstance(body, dict) else {}
                permissions.check(session, "exchange", name, "configure")
                vhost.declare_exchange(name, str(body.get("type", "direct")), durable=bool(body.get("durable", True)),
                                       auto_delete=bool(body.get("auto_delete", False)),
                                       internal=bool(body.get("internal", False)),
                                       arguments=body.get("arguments") or {})
                return 204, None
            if method == "DELETE":
                permissions.check(session, "exchange", name, "configure")
                if name in vhost.exchanges:
                    vhost.delete_exchange(name)
                return 204, None
        if head == "bindings" and not names and method == "POST" and isinstance(body, dict):
            source, key = str(body.get("source", "")), str(body.get("binding_key", ""))
            arguments = body.get("arguments") or {}
            if body.get("destination_queue") is not None:
                self._bind(source, "queue", str(body["destination_queue"]), key, arguments, True)
            else:
                self._bind(source, "exchange", str(body.get("destination_exchange", "")), key, arguments, True)
            return 204, None
        if head == "bindings" and len(parts) == 2 and method == "DELETE":
            fields = dict(item.split("=", 1) for item in parts[1].split(";") if "=" in item)
            source, key = unquote(fields.get("src", "")), unquote(fields.get("key", ""))
            if "dste" in fields:
                self._bind(source, "exchange", unquote(fields["dste"]), key, {}, False)
            else:  # (the Python client names an exchange destination dstq too: a queue first, else the exchange)
                destination = unquote(fields.get("dstq", ""))
                kind = "queue" if destination in vhost.queues or destination not in vhost.exchanges else "exchange"
                self._bind(source, kind, destination, key, {}, False)
            return 204, None
        raise _Fail(400, f"{method} {path} is not a management request this broker knows")

    def _info(self, queue, wait: bool):
        node = self.session.connection.service.node_name
        if _remote(queue):
            return queue.ops.figures(queue, wait=wait).addCallback(
                lambda f: (200, _queue_info(queue, node_name(f.leader if f.led else queue.leader), f.ready,
                                             f.consumers)))
        return 200, _queue_info(queue, node, queue.message_count(), queue.consumer_count())

    def _bind(self, source: str, kind: str, destination: str, key: str, arguments: dict, bind: bool) -> None:
        session = self.session
        vhost = session.vhost
        permissions.check(session, kind, destination, "write")
        permissions.check(session, "exchange", source, "read")
        if kind == "queue":
            (vhost.bind_queue if bind else vhost.unbind_queue)(destination, source, key, arguments, session.connection)
        else:
            (vhost.bind_exchange if bind else vhost.unbind_exchange)(destination, source, key, arguments)


class ManagementReplies:
    """The client's receiver on /management: responses wait here for link credit."""

    no_ack = True

    def __init__(self, session, m: Attach):
        self.session = session
        self.attach = m
        self.handle = m.handle
        self.credit = 0
        self.delivery_count = 0
        self.drain = False
        self.unsettled = 0
        self._waiting: deque[bytes] = deque()

    def attached(self) -> None:
        m = self.attach
        self.session.send(Attach(name=m.name, handle=m.handle, role=False, snd_settle_mode=1, rcv_settle_mode=0,
                                 source=m.source, target=m.target, initial_delivery_count=0))

    def flow_fields(self, f) -> None:
        f.handle, f.delivery_count, f.link_credit = self.handle, self.delivery_count, self.credit

    def flow(self, m) -> None:
        if m.link_credit is not None:
            count = m.delivery_count if m.delivery_count is not None else self.delivery_count
            self.credit = max(0, count + m.link_credit - self.delivery_count)
        self._send()
        if m.echo:
            self.session.send_flow(self)

    def push(self, data: bytes) -> None:
        self._waiting.append(data)
        self._send()

    def _send(self) -> None:
        session = self.session
        while self._waiting and self.credit > 0:
            data = self._waiting.popleft()
            delivery_id = session.next_delivery_id
            session.next_delivery_id += 1
            self.credit -= 1
            self.delivery_count += 1
            session.send(Transfer(handle=self.handle, delivery_id=delivery_id, delivery_tag=delivery_id.to_bytes(4, "big"),
                                  message_format=0, settled=True), data)
            session.next_outgoing_id += 1
            session.remote_incoming_window -= 1

    def dispatch(self) -> None:
        self._send()

    def release(self) -> None:
        self._waiting.clear()


class _Fail(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.status = status
        self.text = text


def _remote(queue) -> bool:
    return queue.remote and queue.ops is not None


def _failure(exc) -> tuple[int, str]:
    """A request's error as (status, text): RabbitMQ's codes, or 404 when a queue's leader did
    not answer (0-9-1 hears 404 NOT_FOUND then too)."""
    if isinstance(exc, _Fail):
        return exc.status, exc.text
    if isinstance(exc, AmqpError):
        return _STATUS.get(exc.reply_code, 400), exc.reply_text
    return 404, str(exc)


def _queue_info(queue, leader: str, messages: int, consumers: int) -> dict:
    return {"name": queue.name, "vhost": queue.vhost, "durable": queue.durable, "auto_delete": queue.auto_delete,
            "exclusive": queue.exclusive_owner is not None, "type": queue.args.queue_type,
            "arguments": {k: v for k, v in (queue.arguments or {}).items() if isinstance(v, (str, int, float, bool))},
            # replicas is an AMQP array of strings, as RabbitMQ 4's (the Java client casts it to String[])
            "leader": leader, "replicas": Array(0xa1, [leader]),
            "message_count": messages, "consumer_count": consumers}
