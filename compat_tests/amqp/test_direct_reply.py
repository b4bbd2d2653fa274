"""Direct Reply-To (``amq.rabbitmq.reply-to``): RPC replies straight to the requesting channel.

The requester consumes the pseudo-queue (no-ack), publishes a request whose ``reply_to`` is the
pseudo-queue and gets a reply published to the name the broker put there instead. On the
[cluster] target the RPC server connects to another broker than the requester (broker 2; the
requester is on broker 1), so every reply crosses brokers. One case mixes in AMQP 1.0 (RabbitMQ
4.2's Direct Reply-To; its [rabbitmq] case is deselected, as the installed RabbitMQ predates it):
its single-broker cases are in compat_tests/amqp10/test_direct_reply.py.
"""
from __future__ import annotations

import asyncio
import time

import aio_pika
import pika
import pytest

from proton import Delivery, Message
from proton.utils import BlockingConnection

from compat_tests.amqp10.helpers import VolatileSource

from .helpers import TIMEOUT, connect, wait_until

REPLY_TO = "amq.rabbitmq.reply-to"


def _server_broker(amqp_broker) -> dict:
    """Connection overrides for the RPC server: another broker of a cluster, else the same one."""
    if amqp_broker.target == "cluster":
        other = amqp_broker.cluster.by_id(2)
        return {"host": other.ip, "port": other.ports["amqp"]}
    return {}


def _server_url(amqp_broker) -> str:
    over = _server_broker(amqp_broker)
    if not over:
        return amqp_broker.url
    return f"amqp://guest:guest@{over['host']}:{over['port']}/"


def _request_queue(client_channel, server_conn, name: str):
    """The server's request queue, declared where requests are published (the requester's broker
    routes them) and awaited where the server reads (another broker of a cluster learns of a
    queue through the replicated definitions, a moment later): the server's channel."""
    client_channel.queue_declare(name, durable=True)
    deadline = time.monotonic() + TIMEOUT
    while True:
        channel = server_conn.channel()
        try:
            channel.queue_declare(name, passive=True)
            return channel
        except pika.exceptions.ChannelClosedByBroker:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _next_delivery(conn, ch, got: list, timeout: float = TIMEOUT):
    deadline = time.monotonic() + timeout
    while not got and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    return got.pop(0) if got else None


def test_pika_rpc_round_trip(amqp_broker, name):
    server_conn = connect(amqp_broker, **_server_broker(amqp_broker))
    client_conn = connect(amqp_broker)
    try:
        client = client_conn.channel()
        server = _request_queue(client, server_conn, name)
        replies = []
        tag = client.basic_consume(REPLY_TO, lambda ch, m, p, b: replies.append((m, p, b)), auto_ack=True)
        for i in range(3):
            client.basic_publish("", name, f"request-{i}".encode(),
                                 pika.BasicProperties(reply_to=REPLY_TO, correlation_id=str(i)))
        requests = []
        wait_until(lambda: requests.extend(_gets(server, name)) or len(requests) >= 3,
                   what="3 requests at the server")
        reply_to = {p.reply_to for _, p, _ in requests}
        assert len(reply_to) == 1, reply_to  # one name per channel
        (reply_name,) = reply_to
        assert reply_name.startswith(REPLY_TO + ".") and len(reply_name) > len(REPLY_TO) + 8, reply_name
        for method, props, body in requests:
            server.basic_publish("", props.reply_to, body.upper(),
                                 pika.BasicProperties(correlation_id=props.correlation_id, headers={"h": 1}))
            server.basic_ack(method.delivery_tag)
        got = [_next_delivery(client_conn, client, replies) for _ in range(3)]
        assert [b for _, _, b in got] == [b"REQUEST-0", b"REQUEST-1", b"REQUEST-2"]
        for i, (method, props, _) in enumerate(got):
            assert props.correlation_id == str(i) and props.headers == {"h": 1}
            assert method.consumer_tag == tag and method.routing_key == reply_name and method.exchange == ""
            assert not method.redelivered
        # the name is a queue to queue.declare while its channel is there, and so is the pseudo-queue
        ok = server.queue_declare(reply_name, passive=True).method
        assert (ok.queue, ok.message_count, ok.consumer_count) == (reply_name, 0, 1)
        ok = server.queue_declare(REPLY_TO, passive=True).method
        assert (ok.queue, ok.message_count, ok.consumer_count) == (REPLY_TO, 0, 1)
        server.queue_delete(name)
    finally:
        client_conn.close()
        server_conn.close()


def _gets(channel, queue):
    out = []
    while True:
        method, props, body = channel.basic_get(queue)
        if method is None:
            return out
        out.append((method, props, body))


def test_consume_must_be_no_ack(connection):
    ch = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_consume(REPLY_TO, lambda *a: None, auto_ack=False)
    assert info.value.reply_code == 406
    assert "reply consumer cannot acknowledge" in info.value.reply_text


def test_second_reply_consumer_refused(connection):
    ch = connection.channel()
    ch.basic_consume(REPLY_TO, lambda *a: None, auto_ack=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_consume(REPLY_TO, lambda *a: None, auto_ack=True)
    assert info.value.reply_code == 406
    assert "reply consumer already set" in info.value.reply_text


def test_request_without_reply_consumer_refused(connection, name):
    ch = connection.channel()
    ch.basic_publish("", name, b"x", pika.BasicProperties(reply_to=REPLY_TO))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(name, passive=True)  # a round trip: the close arrives first
    assert info.value.reply_code == 406
    assert "fast reply consumer does not exist" in info.value.reply_text


def test_cancelled_reply_consumer_takes_no_requests(connection, name):
    ch = connection.channel()
    tag = ch.basic_consume(REPLY_TO, lambda *a: None, auto_ack=True)
    ch.basic_cancel(tag)
    ch.basic_publish("", name, b"x", pika.BasicProperties(reply_to=REPLY_TO))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(name, passive=True)
    assert info.value.reply_code == 406


def _request_and_reply_name(client_conn, server_conn, name: str, replies: list | None = None):
    """A requester that sent one request (its replies' bodies go to ``replies``); (its channel,
    the server's channel, the reply name)."""
    client = client_conn.channel()
    server = _request_queue(client, server_conn, name)
    client.basic_consume(REPLY_TO, lambda ch, m, p, body: replies is not None and replies.append(body),
                         auto_ack=True)
    client.basic_publish("", name, b"ping", pika.BasicProperties(reply_to=REPLY_TO))
    requests = []
    wait_until(lambda: requests.extend(_gets(server, name)) or requests, what="the request")
    return client, server, requests[0][1].reply_to


def test_reply_to_vanished_requester_is_dropped(amqp_broker, name):
    client_conn = connect(amqp_broker)
    server_conn = connect(amqp_broker, **_server_broker(amqp_broker))
    try:
        _, server, reply_name = _request_and_reply_name(client_conn, server_conn, name)
        client_conn.close()  # the requester goes away
        server.confirm_delivery()
        server.basic_publish("", reply_name, b"lost")  # confirmed, and nothing else
        assert server.is_open
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            server.queue_declare(reply_name, passive=True)
        assert info.value.reply_code == 404
        server_conn.channel().queue_delete(name)
    finally:
        for c in (client_conn, server_conn):
            if c.is_open:
                c.close()


@pytest.mark.rabbitmq_min_version(4, 2)  # RabbitMQ 3 returns every mandatory reply: its names are no queue
def test_mandatory_replies_are_routed_not_returned(amqp_broker, name):
    """RabbitMQ 4.2+ routes a reply to a well-formed name (a "volatile queue"): a mandatory reply
    is not returned, whether its requester is there (delivered) or gone (dropped)."""
    client_conn = connect(amqp_broker)
    server_conn = connect(amqp_broker, **_server_broker(amqp_broker))
    try:
        replies: list[bytes] = []
        client, server, reply_name = _request_and_reply_name(client_conn, server_conn, name, replies)
        server.confirm_delivery()
        server.basic_publish("", reply_name, b"pong", mandatory=True)  # no UnroutableError
        wait_until(lambda: client_conn.process_data_events(time_limit=0.1) or replies, what="the reply")
        assert replies == [b"pong"]
        client_conn.close()
        server.basic_publish("", reply_name, b"late", mandatory=True)  # dropped, not returned
        assert server.is_open
        server.queue_delete(name)
    finally:
        for c in (client_conn, server_conn):
            if c.is_open:
                c.close()


def test_unknown_reply_name_dropped(confirm_channel):
    confirm_channel.basic_publish("", REPLY_TO + ".bm90LWEtbmFtZQ", b"x")  # confirmed, dropped
    with pytest.raises(pika.exceptions.UnroutableError):
        confirm_channel.basic_publish("", REPLY_TO + ".bm90LWEtbmFtZQ", b"x", mandatory=True)


def test_aio_pika_rpc(amqp_broker, name):
    """aio-pika's RPC pattern over Direct Reply-To: several calls in flight, matched by correlation id."""
    async def serve(ready: asyncio.Event, n: int):
        conn = await aio_pika.connect(_server_url(amqp_broker), timeout=TIMEOUT)
        async with conn:
            deadline = time.monotonic() + TIMEOUT
            while True:  # declared by the requester (see _request_queue)
                ch = await conn.channel()
                try:
                    queue = await ch.declare_queue(name, passive=True)
                    break
                except aio_pika.exceptions.ChannelClosed:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)
            ready.set()
            async with queue.iterator() as it:
                async for message in it:
                    async with message.process():
                        await ch.default_exchange.publish(
                            aio_pika.Message(b"re:" + message.body, correlation_id=message.correlation_id),
                            routing_key=message.reply_to)
                    n -= 1
                    if not n:
                        break
            await queue.delete(if_unused=False, if_empty=False)

    async def main():
        conn = await aio_pika.connect(amqp_broker.url, timeout=TIMEOUT)
        async with conn:
            ch = await conn.channel()
            await ch.declare_queue(name, durable=True)
            ready = asyncio.Event()
            server = asyncio.create_task(serve(ready, 10))
            await asyncio.wait_for(ready.wait(), TIMEOUT)
            reply_queue = await ch.get_queue(REPLY_TO, ensure=False)
            futures: dict[str, asyncio.Future] = {}

            async def on_reply(message):
                futures.pop(message.correlation_id).set_result(message.body)
            await reply_queue.consume(on_reply, no_ack=True)
            for i in range(10):
                futures[str(i)] = asyncio.get_running_loop().create_future()
            waiting = dict(futures)
            for i in range(10):
                await ch.default_exchange.publish(
                    aio_pika.Message(f"call-{i}".encode(), correlation_id=str(i), reply_to=REPLY_TO), routing_key=name)
            got = {k: await asyncio.wait_for(f, TIMEOUT) for k, f in waiting.items()}
        assert got == {str(i): f"re:call-{i}".encode() for i in range(10)}
        await asyncio.wait_for(server, TIMEOUT)

    asyncio.run(asyncio.wait_for(main(), 90))


@pytest.mark.rabbitmq_min_version(4, 2)  # a rule RabbitMQ 3 does not have
def test_a_reply_name_cannot_be_bound(connection):
    ch = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_bind(REPLY_TO + ".AAAAAAAAAAAAAAAAAAAAAAAAAAA", "amq.direct", "k")
    assert info.value.reply_code == 403
    assert "cannot bind or unbind to a volatile (direct reply-to) queue" in info.value.reply_text


def _proton(host: str, port: int) -> BlockingConnection:
    return BlockingConnection(f"amqp://{host}:{port}", user="guest", password="guest", timeout=TIMEOUT,
                              allowed_mechs="PLAIN")


@pytest.mark.rabbitmq_min_version(4, 2)
def test_amqp10_direct_reply_across_protocols(amqp_broker, name):
    """An AMQP 1.0 requester (a dynamic rabbitmq:volatile-queue source) gets replies from pika
    (the default exchange, the address's queue name as routing key) and from AMQP 1.0 senders
    (anonymous terminus, a sender attached to the address); a pika requester gets a reply from
    an AMQP 1.0 responder. On [cluster] every responder is on broker 2, the requesters on 1."""
    over = _server_broker(amqp_broker)
    server_host, server_port = over.get("host", amqp_broker.host), over.get("port", amqp_broker.port)
    requester = _proton(amqp_broker.host, amqp_broker.port)
    responder = _proton(server_host, server_port)
    client_conn = connect(amqp_broker)
    server_conn = connect(amqp_broker, **over)
    try:
        replies = requester.create_receiver(None, dynamic=True, credit=10, options=VolatileSource())
        address = replies.link.remote_source.address
        assert address.startswith("/queues/" + REPLY_TO + "."), address
        server = server_conn.channel()
        server.basic_publish("", address[len("/queues/"):], b"from pika", pika.BasicProperties(correlation_id="a"))
        anonymous = responder.create_sender(None)
        sent = anonymous.send(Message(address=address, correlation_id="b", body=b"from 1.0", inferred=True),
                              timeout=TIMEOUT)
        assert sent.remote_state == Delivery.ACCEPTED
        attached = responder.create_sender(address, name="to-the-address")
        attached.send(Message(correlation_id="c", body=b"attached", inferred=True), timeout=TIMEOUT)
        got = {}
        for _ in range(3):
            reply = replies.receive(timeout=TIMEOUT)
            got[reply.correlation_id] = bytes(reply.body)
        assert got == {"a": b"from pika", "b": b"from 1.0", "c": b"attached"}

        client = client_conn.channel()
        pika_replies = []
        client.basic_consume(REPLY_TO, lambda ch, m, p, b: pika_replies.append((p, b)), auto_ack=True)
        request_channel = _request_queue(client, server_conn, name)
        client.basic_publish("", name, b"question", pika.BasicProperties(reply_to=REPLY_TO, correlation_id="d"))
        requests = []
        wait_until(lambda: requests.extend(_gets(request_channel, name)) or requests, what="the request")
        _, props, _ = requests[0]
        anonymous.send(Message(address="/queues/" + props.reply_to, correlation_id="d", body=b"answer",
                               inferred=True), timeout=TIMEOUT)
        props, body = _next_delivery(client_conn, client, pika_replies)
        assert (props.correlation_id, body) == ("d", b"answer")
        request_channel.queue_delete(name)
    finally:
        requester.close()
        responder.close()
        client_conn.close()
        server_conn.close()
