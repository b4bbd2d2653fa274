"""aio-pika: robust connections, confirms, async-iterator consumers, acks, and a robust
connection that comes back (consumer restored) after the broker restarts."""
from __future__ import annotations

import asyncio

import aio_pika
import pytest
from pamqp import commands

from .helpers import TIMEOUT

AIO_TIMEOUT = 60.0


def _run(coro, timeout: float = AIO_TIMEOUT):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def test_aio_pika_publish_confirm_consume_iterator(amqp_broker, name):
    async def main():
        conn = await aio_pika.connect_robust(amqp_broker.url, timeout=TIMEOUT)
        async with conn:
            ch = await conn.channel(publisher_confirms=True)
            await ch.set_qos(prefetch_count=5)
            x = await ch.declare_exchange(name, aio_pika.ExchangeType.TOPIC, auto_delete=True)
            q = await ch.declare_queue(name, exclusive=True)
            await q.bind(x, "orders.#")
            for i in range(20):
                confirmation = await x.publish(
                    aio_pika.Message(f"order-{i}".encode(), headers={"i": i}, message_id=str(i),
                                     delivery_mode=aio_pika.DeliveryMode.PERSISTENT, content_type="text/plain"),
                    routing_key=f"orders.eu.{i}")
                assert isinstance(confirmation, commands.Basic.Ack), confirmation
            got = []
            async with q.iterator() as it:
                async for message in it:
                    async with message.process():
                        got.append((message.body, message.headers["i"], message.message_id,
                                    message.delivery_mode, message.routing_key, message.redelivered))
                    if len(got) == 20:
                        break
            assert [g[0] for g in got] == [f"order-{i}".encode() for i in range(20)]
            assert all(g[1] == int(g[2]) and g[3] == aio_pika.DeliveryMode.PERSISTENT for g in got)
            assert got[3][4] == "orders.eu.3" and not any(g[5] for g in got)
            declared = await ch.declare_queue(name, passive=True)
            assert declared.declaration_result.message_count == 0
    _run(main())


def test_aio_pika_unroutable_mandatory_raises(amqp_broker, name):
    async def main():
        conn = await aio_pika.connect(amqp_broker.url, timeout=TIMEOUT)
        async with conn:
            ch = await conn.channel(publisher_confirms=True, on_return_raises=True)
            x = await ch.declare_exchange(name, aio_pika.ExchangeType.DIRECT, auto_delete=True)
            with pytest.raises(aio_pika.exceptions.DeliveryError) as info:
                await x.publish(aio_pika.Message(b"nobody"), routing_key="none", mandatory=True)
            assert info.value.message.body == b"nobody"
            await x.delete()
    _run(main())


def test_aio_pika_reject_requeue_and_nack(amqp_broker, name):
    async def main():
        conn = await aio_pika.connect(amqp_broker.url, timeout=TIMEOUT)
        async with conn:
            ch = await conn.channel()
            q = await ch.declare_queue(name, exclusive=True)
            for body in (b"a", b"b"):
                await ch.default_exchange.publish(aio_pika.Message(body), routing_key=name)
            first = await q.get(timeout=TIMEOUT)
            await first.reject(requeue=True)
            again = await q.get(timeout=TIMEOUT)
            assert (again.body, again.redelivered) == (b"a", True)
            await again.ack()
            second = await q.get(timeout=TIMEOUT)
            await second.nack(requeue=False)
            assert await q.get(fail=False) is None
    _run(main())


@pytest.mark.restarts_broker
def test_aio_pika_robust_connection_survives_restart(amqp_broker, name):
    async def main():
        loop = asyncio.get_running_loop()
        conn = await aio_pika.connect_robust(amqp_broker.url, timeout=TIMEOUT, reconnect_interval=0.3)
        reconnected = asyncio.Event()
        conn.reconnect_callbacks.add(lambda *_: reconnected.set())
        try:
            ch = await conn.channel(publisher_confirms=True)
            await ch.set_qos(prefetch_count=10)
            q = await ch.declare_queue(name, durable=True)
            received = []
            arrived = asyncio.Event()

            async def on_message(message: aio_pika.abc.AbstractIncomingMessage):
                async with message.process():
                    received.append(message.body)
                    arrived.set()

            await q.consume(on_message)

            async def publish_and_wait(bodies):
                for body in bodies:
                    await ch.default_exchange.publish(
                        aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT), routing_key=name)
                while not set(bodies) <= set(received):
                    arrived.clear()
                    await asyncio.wait_for(arrived.wait(), TIMEOUT)

            await publish_and_wait([b"before-%d" % i for i in range(5)])
            await loop.run_in_executor(None, amqp_broker.restart)
            await asyncio.wait_for(reconnected.wait(), 30)
            # the channel and the consumer were restored on the new connection
            await publish_and_wait([b"after-%d" % i for i in range(5)])
            # and a message from an unrelated connection reaches the restored consumer
            other = await aio_pika.connect(amqp_broker.url, timeout=TIMEOUT)
            async with other:
                och = await other.channel()
                await och.default_exchange.publish(aio_pika.Message(b"from-other"), routing_key=name)
            while b"from-other" not in received:
                arrived.clear()
                await asyncio.wait_for(arrived.wait(), TIMEOUT)
            assert received.count(b"after-0") == 1 and len(received) == 11, received
            await q.delete(if_unused=False, if_empty=False)
        finally:
            await conn.close()
    _run(main())
