"""kombu's worker patterns against both targets: ConsumerMixin (a consumer loop with a
producer on the same connection, ConsumerProducerMixin) and the event-loop Hub that celery's
worker drives (kombu.asynchronous)."""
from __future__ import annotations

import threading
import time

import kombu
from kombu.asynchronous import Hub
from kombu.mixins import ConsumerProducerMixin

from .helpers import wait_until
from .test_kombu_celery import _kombu_url


class Doubler(ConsumerProducerMixin):
    """Reads numbers from one queue, publishes their doubles to another (an RPC-style worker)."""

    def __init__(self, connection, source: kombu.Queue, target: kombu.Queue):
        self.connection = connection
        self.source, self.target = source, target
        self.handled = 0

    def get_consumers(self, Consumer, channel):
        return [Consumer(queues=[self.source], callbacks=[self.on_message], accept=["json"], prefetch_count=10)]

    def on_message(self, body, message):
        self.producer.publish({"n": body["n"] * 2}, exchange="", routing_key=self.target.name,
                              serializer="json", declare=[self.target], retry=False)
        message.ack()
        self.handled += 1


def test_consumer_producer_mixin_worker(amqp_broker, name):
    source = kombu.Queue(name + "-in", durable=False, auto_delete=False)
    target = kombu.Queue(name + "-out", durable=False, auto_delete=False)
    with kombu.Connection(_kombu_url(amqp_broker), connect_timeout=5) as conn:
        worker = Doubler(conn.clone(), source, target)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        try:
            with conn.Producer() as producer:
                for i in range(20):
                    producer.publish({"n": i}, exchange="", routing_key=source.name, serializer="json",
                                     declare=[source], retry=False)
            wait_until(lambda: worker.handled == 20, what="the worker handled 20 messages")
            got = []
            simple = conn.SimpleQueue(target.name, queue_opts={"durable": False, "auto_delete": False})
            for _ in range(20):
                message = simple.get(block=True, timeout=5)
                got.append(message.payload["n"])
                message.ack()
            simple.close()
            assert sorted(got) == [2 * i for i in range(20)]
        finally:
            worker.should_stop = True
            thread.join(10)
            with conn.channel() as channel:
                for queue in (source, target):
                    queue(channel).delete()


def test_hub_event_loop_consumer(amqp_broker, name):
    """The consumer registered on a kombu Hub, as celery's worker does: the hub polls the socket
    and the connection's callbacks run from the loop, no blocking drain_events."""
    queue = kombu.Queue(name, durable=False, auto_delete=True)
    received = []
    hub = Hub()
    with kombu.Connection(_kombu_url(amqp_broker), connect_timeout=5) as conn:
        conn.ensure_connection()
        with conn.Producer() as producer:
            for i in range(10):
                producer.publish({"i": i}, exchange="", routing_key=name, serializer="json", declare=[queue],
                                 retry=False)

        def on_message(body, message):
            received.append(body["i"])
            message.ack()

        consumer = kombu.Consumer(conn, queues=[queue], callbacks=[on_message], accept=["json"])
        consumer.consume()
        conn.transport.register_with_event_loop(conn.connection, hub)
        deadline = time.monotonic() + 10
        loop = hub.create_loop()
        while len(received) < 10 and time.monotonic() < deadline:
            next(loop)
        consumer.cancel()
        hub.close()
    assert received == list(range(10))
