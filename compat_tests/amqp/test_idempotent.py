"""Where RabbitMQ is idempotent and clients rely on it: unbinding and deleting what is already
gone, and the ``basic.cancel`` a queue deletion sends (to other channels' consumers, never to
the deleting channel's own). The same expectations run against RabbitMQ (``[rabbitmq]``).

Clients that trip over a difference here: aio-pika's RPC pattern (it unbinds its auto-delete
reply queue at close, after the queue is gone), aio-pika's exchange-to-exchange examples
(unbinding a chain of auto-delete exchanges) and py-amqp/kombu (``queue_delete`` on the channel
that consumes raises ``ConsumerCancelled`` if a cancel arrives).
"""
from __future__ import annotations

import asyncio

import aio_pika
import pika
import pytest
from aio_pika.patterns import RPC

from .helpers import connect, unique


@pytest.fixture
def channel(amqp_broker):
    conn = connect(amqp_broker)
    try:
        yield conn.channel()
    finally:
        if conn.is_open:
            conn.close()


def _still_open(ch) -> None:
    """The channel survived: a declare on it still answers."""
    ch.queue_declare(unique("alive"), exclusive=True)
    assert ch.is_open


def test_unbind_of_a_binding_that_never_was(channel):
    x, q = unique("x"), unique("q")
    channel.exchange_declare(x, "direct", auto_delete=True)
    channel.queue_declare(q, exclusive=True)
    channel.queue_unbind(q, x, "no-such-key")
    channel.exchange_unbind(x, "amq.direct", "no-such-key")
    _still_open(channel)


def test_unbind_when_the_queue_is_gone(channel):
    x, q = unique("x"), unique("q")
    channel.exchange_declare(x, "direct")
    channel.queue_declare(q)
    channel.queue_bind(q, x, "k")
    channel.queue_delete(q)
    channel.queue_unbind(q, x, "k")  # aio-pika's RPC.close() does exactly this
    _still_open(channel)
    channel.exchange_delete(x)


def test_unbind_when_the_exchange_is_gone(channel):
    x, q = unique("x"), unique("q")
    channel.exchange_declare(x, "direct")
    channel.queue_declare(q, exclusive=True)
    channel.queue_bind(q, x, "k")
    channel.exchange_delete(x)
    channel.queue_unbind(q, x, "k")
    _still_open(channel)


def test_exchange_unbind_when_either_end_is_gone(channel):
    src, dst = unique("src"), unique("dst")
    channel.exchange_declare(src, "fanout")
    channel.exchange_declare(dst, "fanout")
    channel.exchange_bind(dst, src, "")
    channel.exchange_delete(dst)
    channel.exchange_unbind(dst, src, "")
    channel.exchange_delete(src)
    channel.exchange_unbind(dst, src, "")
    _still_open(channel)


def test_delete_of_what_does_not_exist(channel):
    assert channel.queue_delete(unique("never")).method.message_count == 0
    channel.exchange_delete(unique("never"))
    _still_open(channel)


def test_auto_delete_chain_unbound_in_example_order(channel):
    """source -> destination -> queue, all auto-delete; unbinding the queue first deletes the
    destination exchange (its last binding went), so the second unbind finds it gone."""
    src, dst, q = unique("src"), unique("dst"), unique("q")
    channel.exchange_declare(src, "direct", auto_delete=True)
    channel.exchange_declare(dst, "direct", auto_delete=True)
    channel.queue_declare(q, exclusive=True)
    channel.exchange_bind(dst, src, "k")
    channel.queue_bind(q, dst, "k")
    channel.queue_unbind(q, dst, "k")
    channel.exchange_unbind(dst, src, "k")
    _still_open(channel)


def test_purge_of_a_missing_queue_is_still_not_found(channel):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        channel.queue_purge(unique("never"))
    assert info.value.reply_code == 404


def test_own_consumers_hear_of_a_deleted_queue_after_delete_ok(amqp_broker):
    """RabbitMQ cancels (basic.cancel) every consumer of a deleted queue, but the deleting
    channel's own consumers only after its queue.delete-ok: a client waiting for delete-ok
    (py-amqp, kombu) is not interrupted by a cancel of its own making."""
    import amqp
    q = unique("q")
    conn = amqp.Connection(f"{amqp_broker.host}:{amqp_broker.port}", userid="guest", password="guest")
    conn.connect()
    try:
        own, other = conn.channel(), conn.channel()
        own.queue_declare(q)
        events: list = []
        own_tag = own.basic_consume(q, callback=lambda m: None, on_cancel=lambda tag: events.append(("own", tag)))
        other_tag = other.basic_consume(q, callback=lambda m: None,
                                        on_cancel=lambda tag: events.append(("other", tag)))
        own.queue_delete(q)
        events.append("delete-ok")
        for _ in range(10):
            if ("own", own_tag) in events and ("other", other_tag) in events:
                break
            try:
                conn.drain_events(timeout=0.5)
            except TimeoutError:
                pass
        assert ("own", own_tag) in events and ("other", other_tag) in events, events
        assert events.index("delete-ok") < events.index(("own", own_tag)), events
    finally:
        conn.close()


def test_kombu_queue_delete_on_the_consuming_channel(amqp_broker):
    import kombu
    q = unique("kq")
    with kombu.Connection(amqp_broker.url) as conn:
        channel = conn.channel()
        queue = kombu.Queue(q, kombu.Exchange(q, "direct"), q, channel=channel)
        queue.declare()
        with kombu.Consumer(channel, [queue], callbacks=[lambda body, message: message.ack()]):
            queue.delete()  # py-amqp raised ConsumerCancelled here when the broker sent a cancel
        producer = kombu.Producer(channel)
        producer.publish({"after": True}, routing_key="nowhere")  # the channel still works


def test_aio_pika_rpc_pattern_create_call_close(amqp_broker):
    async def main():
        connection = await aio_pika.connect(amqp_broker.url)
        async with connection:
            channel = await connection.channel()
            rpc = await RPC.create(channel)

            async def multiply(*, x: int, y: int) -> int:
                return x * y
            await rpc.register(unique("multiply"), multiply, auto_delete=True)
            name = next(iter(rpc.routes))
            assert await rpc.call(name, kwargs={"x": 6, "y": 7}) == 42
            await rpc.close()  # unbinds its auto-delete reply queue, which is already gone
            assert not channel.is_closed
    asyncio.run(asyncio.wait_for(main(), 60))
