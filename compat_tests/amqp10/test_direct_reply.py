"""Direct Reply-To over AMQP 1.0 (RabbitMQ 4.2's RPC pattern), and across AMQP 1.0 and 0-9-1.

The requester attaches a receiver with a dynamic source carrying the ``rabbitmq:volatile-queue``
capability (rabbitmq-amqp-python-client's DirectReplyTo consumer, or proton with that source),
and gets ``/queues/amq.rabbitmq.reply-to.<suffix>`` as the source address; its requests carry
that address as ``reply-to``. Responders reply over AMQP 1.0 (``to`` through the anonymous
terminus, or a sender attached to the address) or over 0-9-1 (pika, the default exchange, the
``reply_to`` the broker translated to ``amq.rabbitmq.reply-to.<suffix>``); a pika requester
(``amq.rabbitmq.reply-to``) gets replies from an AMQP 1.0 responder.

Gateway only: Debian's RabbitMQ 3.10 has no AMQP 1.0 Direct Reply-To (RabbitMQ 4.2 brought it),
and rabbitmq-amqp-python-client refuses the DirectReplyTo consumer below 4.2.
"""
from __future__ import annotations

import base64
import time
from urllib.parse import quote

import pika
import pytest
import requests
from proton import Delivery, Message, Timeout
from proton.utils import LinkDetached, SendException
from rabbitmq_amqp_python_client import (
    AddressHelper, AMQPMessagingHandler, ConsumerOptions, ConsumerSettleStrategy, Environment, OutcomeState,
    ValidationCodeException,
)
from rabbitmq_amqp_python_client.qpid.proton import Message as ClientMessage

from .helpers import VolatileSource, pika_channel, proton, unique

TIMEOUT = 10
PREFIX = "/queues/amq.rabbitmq.reply-to."


class _Replies(AMQPMessagingHandler):
    """Keeps ``count`` replies (pre-settled: nothing to settle), then stops the consumer's run()."""

    def __init__(self, count: int):
        super().__init__()
        self.count = count
        self.messages: list = []

    def on_amqp_message(self, event) -> None:
        self.messages.append(event.message)
        if len(self.messages) >= self.count:
            raise _Enough()


class _Enough(Exception):
    pass


@pytest.fixture
def client(broker):
    host, port = broker.address("amqp")
    env = Environment(f"amqp://guest:guest@{host}:{port}/")
    conn = env.connection()
    conn.dial()
    yield conn
    conn.close()
    env.close()


def _request_queue(address) -> str:
    name = unique("rpc")
    connection, channel = pika_channel(address)
    channel.queue_declare(name, durable=True)
    connection.close()
    return name


def _run(consumer, handler: _Replies, seconds: float = TIMEOUT) -> list:
    """Run the client's consumer until it has its replies (or ``seconds`` pass)."""
    timer = consumer._receiver.container.schedule(seconds, _Stop())
    try:
        consumer.run()
    except (_Enough, _Timeout):
        pass
    finally:
        timer.cancel()
    return handler.messages


class _Timeout(Exception):
    pass


class _Stop:
    def on_timer_task(self, _event) -> None:
        raise _Timeout()


def _reply_consumer(client, handler):
    consumer = client.consumer(None, message_handler=handler,
                               consumer_options=ConsumerOptions(ConsumerSettleStrategy.DirectReplyTo))
    assert consumer.address.startswith(PREFIX)
    return consumer


def test_client_requester_proton_responder_anonymous_terminus(broker, client):
    """rabbitmq-amqp-python-client's DirectReplyTo consumer gets replies a responder sends through
    the anonymous terminus (``to`` = the reply address), unsettled (accepted at once) and settled."""
    queue = _request_queue(broker.address("amqp"))
    handler = _Replies(2)
    consumer = _reply_consumer(client, handler)
    reply_to = consumer.address
    publisher = client.publisher(AddressHelper.queue_address(queue))
    for i in range(2):
        result = publisher.publish(ClientMessage(body=f"req{i}".encode(), id=f"id-{i}", reply_to=reply_to))
        assert result.remote_state == OutcomeState.ACCEPTED
    responder = proton(broker.address("amqp"))
    try:
        requests = responder.create_receiver(f"/queues/{queue}", credit=2)
        anonymous = responder.create_sender(None)
        for i in range(2):
            request = requests.receive(timeout=TIMEOUT)
            requests.accept()
            assert request.reply_to == reply_to and request.id == f"id-{i}"
            reply = Message(address=request.reply_to, correlation_id=request.id,
                            body=b"re:" + bytes(request.body))
            delivery = anonymous.send(reply, timeout=TIMEOUT)
            assert delivery.remote_state == Delivery.ACCEPTED
        replies = _run(consumer, handler)
        assert [(m.correlation_id, bytes(m.body)) for m in replies] == [("id-0", b"re:req0"), ("id-1", b"re:req1")]
    finally:
        responder.close()
        consumer.close()
        publisher.close()


def test_proton_requester_sender_attached_to_reply_address(broker):
    """proton with a dynamic volatile-queue source; the responder attaches a sender to the reply
    address. Once the requester's link detaches, that attach is refused (amqp:not-found, as
    RabbitMQ refuses it) and a reply through the anonymous terminus is accepted and dropped."""
    queue = _request_queue(broker.address("amqp"))
    requester = proton(broker.address("amqp"))
    responder = proton(broker.address("amqp"))
    try:
        replies = requester.create_receiver(None, dynamic=True, credit=5, options=VolatileSource())
        reply_to = replies.link.remote_source.address
        assert reply_to.startswith(PREFIX)
        assert replies.link.remote_source.dynamic
        _http_api_lists_the_reply_link(broker)
        requester.create_sender(f"/queues/{queue}").send(Message(id="r1", reply_to=reply_to, body=b"ping"),
                                                         timeout=TIMEOUT)
        requests = responder.create_receiver(f"/queues/{queue}", credit=1)
        request = requests.receive(timeout=TIMEOUT)
        requests.accept()
        sender = responder.create_sender(request.reply_to)
        assert sender.send(Message(correlation_id=request.id, body=b"pong"), timeout=TIMEOUT).remote_state \
            == Delivery.ACCEPTED
        reply = replies.receive(timeout=TIMEOUT)
        assert (reply.correlation_id, bytes(reply.body)) == ("r1", b"pong")
        assert reply.address is None or not reply.address.startswith(PREFIX)  # nothing rewritten into 'to'
        sender.close()
        replies.close()
        with pytest.raises(LinkDetached) as refused:
            responder.create_sender(reply_to, name="late")
        assert "amqp:not-found" in str(refused.value)
        late = responder.create_sender(None, name="late-anonymous")
        assert late.send(Message(address=reply_to, body=b"late"), timeout=TIMEOUT).remote_state == Delivery.ACCEPTED
    finally:
        requester.close()
        responder.close()


def _http_api_lists_the_reply_link(broker) -> None:
    """The HTTP API's views of AMQP 1.0 links take a reply link in (settled, of no queue)."""
    def get(path: str):
        response = requests.get(f"{broker.http_url}/api/{path}", auth=("guest", "guest"), timeout=10)
        assert response.status_code == 200, (path, response.status_code, response.text)
        return response.json()
    links = []
    for c in get("connections"):
        if c["protocol"] == "AMQP 1-0":
            for session in get(f"connections/{quote(c['name'], safe='')}/sessions"):
                links += session["outgoing_links"]
    assert any(link["snd_settle_mode"] == "settled" and link["queue_name"] is None for link in links), links
    get("consumers")
    assert requests.get(f"{broker.http_url}/metrics", timeout=10).status_code == 200


def test_requester_connection_closed_then_replies_dropped(broker):
    """Closing the requester's connection (not its link) retires the address too."""
    requester = proton(broker.address("amqp"))
    replies = requester.create_receiver(None, dynamic=True, credit=1, options=VolatileSource())
    reply_to = replies.link.remote_source.address
    responder = proton(broker.address("amqp"))
    try:
        sender = responder.create_sender(reply_to, name="while-there")  # the requester is there: attached
        sender.close()
        requester.close()
        deadline = time.monotonic() + TIMEOUT
        while True:  # the broker sees the close a moment later
            try:
                responder.create_sender(reply_to, name=unique("after")).close()
            except LinkDetached as exc:
                assert "amqp:not-found" in str(exc)
                break
            assert time.monotonic() < deadline, "the reply address outlived its connection"
            time.sleep(0.1)
    finally:
        responder.close()


def test_replies_without_credit_are_dropped_not_kept(broker):
    """No buffer: a reply that finds no link credit is dropped (RabbitMQ's caveat), and credit
    granted later does not bring it back; the next reply, with credit, arrives."""
    requester = proton(broker.address("amqp"))
    responder = proton(broker.address("amqp"))
    try:
        replies = requester.create_receiver(None, dynamic=True, credit=0, options=VolatileSource())
        reply_to = replies.link.remote_source.address
        sender = responder.create_sender(None)
        assert sender.send(Message(address=reply_to, body=b"lost"), timeout=TIMEOUT).remote_state \
            == Delivery.ACCEPTED
        with pytest.raises(Timeout):
            replies.receive(timeout=1)  # (grants one credit first)
        sender.send(Message(address=reply_to, body=b"kept"), timeout=TIMEOUT)
        assert bytes(replies.receive(timeout=TIMEOUT).body) == b"kept"
    finally:
        requester.close()
        responder.close()


def test_refused_dynamic_sources(broker):
    """RabbitMQ 4.2 serves a dynamic source only as the settled volatile queue: without the
    capability, or asking for unsettled replies, the attach is refused (amqp:not-implemented)."""
    conn = proton(broker.address("amqp"))
    try:
        for option in (VolatileSource(capability=False), VolatileSource(settled=False)):
            with pytest.raises(LinkDetached) as refused:
                conn.create_receiver(None, dynamic=True, credit=1, options=option, name=unique("dyn"))
            assert "amqp:not-implemented" in str(refused.value)
        # well-formed addresses never handed out: this broker's (node -1), another broker's (0)
        for node in (b"\xff\xff\xff\xff", b"\0\0\0\0"):
            never = PREFIX + base64.urlsafe_b64encode(node + bytes(16)).decode().rstrip("=")
            with pytest.raises(LinkDetached) as refused:
                conn.create_sender(never, name=unique("never"))
            assert "amqp:not-found" in str(refused.value)
        anonymous = conn.create_sender(None, name="anon")
        # a name that does not decode is no requester of this cluster: unroutable, released
        with pytest.raises(SendException) as released:
            anonymous.send(Message(address=PREFIX + "garbage", body=b"x"), timeout=TIMEOUT)
        assert released.value.state == Delivery.RELEASED
    finally:
        conn.close()


def test_client_requester_pika_responder(broker, client):
    """An AMQP 1.0 request read by pika carries reply_to ``amq.rabbitmq.reply-to.<suffix>`` (as
    RabbitMQ 4.2 translates ``/queues/<name>``); pika's reply to the default exchange with that
    routing key reaches the AMQP 1.0 requester."""
    address = broker.address("amqp")
    queue = _request_queue(address)
    handler = _Replies(1)
    consumer = _reply_consumer(client, handler)
    publisher = client.publisher(AddressHelper.queue_address(queue))
    assert publisher.publish(ClientMessage(body=b"2+2", id="calc-1", reply_to=consumer.address)).remote_state \
        == OutcomeState.ACCEPTED
    connection, channel = pika_channel(address)
    try:
        method, props, body = None, None, None
        deadline = time.monotonic() + TIMEOUT
        while method is None and time.monotonic() < deadline:
            method, props, body = channel.basic_get(queue, auto_ack=True)
        assert body == b"2+2"
        assert props.reply_to == consumer.address[len("/queues/"):]
        channel.basic_publish("", props.reply_to, b"4", pika.BasicProperties(correlation_id=props.message_id))
        replies = _run(consumer, handler)
        assert [(m.correlation_id, bytes(m.body)) for m in replies] == [("calc-1", b"4")]
    finally:
        connection.close()
        consumer.close()
        publisher.close()


def test_pika_requester_proton_responder(broker):
    """pika's ``amq.rabbitmq.reply-to`` requester: the AMQP 1.0 responder reads reply-to as
    ``/queues/amq.rabbitmq.reply-to.<suffix>`` and its reply through the anonymous terminus
    reaches pika's reply consumer."""
    address = broker.address("amqp")
    queue = _request_queue(address)
    connection, channel = pika_channel(address)
    got: list = []
    channel.basic_consume("amq.rabbitmq.reply-to", lambda _ch, _m, props, body: got.append((props, body)),
                          auto_ack=True)
    channel.basic_publish("", queue, b"hello", pika.BasicProperties(reply_to="amq.rabbitmq.reply-to",
                                                                   message_id="p-1"))
    responder = proton(address)
    try:
        requests = responder.create_receiver(f"/queues/{queue}", credit=1)
        request = requests.receive(timeout=TIMEOUT)
        requests.accept()
        assert request.reply_to.startswith(PREFIX)
        sender = responder.create_sender(None)
        assert sender.send(Message(address=request.reply_to, correlation_id=request.id, body=b"world", inferred=True),
                           timeout=TIMEOUT).remote_state == Delivery.ACCEPTED
        deadline = time.monotonic() + TIMEOUT
        while not got and time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.1)
        assert [(p.correlation_id, b) for p, b in got] == [("p-1", b"world")]
    finally:
        responder.close()
        connection.close()


def test_responder_asks_whether_the_requester_is_there(broker, client):
    """The management node's GET /queues/<reply name> (the "is the requester alive?" check of
    RabbitMQ's Java responder): found while the requester's link is attached, 404 after."""
    handler = _Replies(1)
    consumer = _reply_consumer(client, handler)
    name = consumer.address[len("/queues/"):]
    management = client.management()
    try:
        info = management.queue_info(name)
        assert (info.name, info.is_durable, info.is_auto_delete, info.message_count, info.consumer_count) \
            == (name, False, True, 0, 1)
        consumer.close()
        with pytest.raises(ValidationCodeException):
            management.queue_info(name)
        with pytest.raises(ValidationCodeException):  # a name of no requester at all
            management.queue_info("amq.rabbitmq.reply-to.garbage")
    finally:
        management.close()
