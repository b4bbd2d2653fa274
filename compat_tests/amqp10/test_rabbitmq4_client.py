"""rabbitmq-amqp-python-client (RabbitMQ 4's own AMQP 1.0 client) against the broker: the
management node, publishing with outcomes, a stream read from an offset, and one queue used by
AMQP 1.0, AMQP 0-9-1 (pika), Kafka (confluent-kafka) and the stream protocol (rstream).

Gateway only: the client refuses any broker that is not RabbitMQ >= 4.0 (the machine's RabbitMQ
is 3.10, whose AMQP 1.0 plugin has no management node and no v2 addresses).
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from rabbitmq_amqp_python_client import (
    AddressHelper, AMQPMessagingHandler, ClassicQueueSpecification, Converter, Environment, ExchangeSpecification,
    ExchangeToQueueBindingSpecification, ExchangeType, OffsetSpecification, OutcomeState, QuorumQueueSpecification,
    StreamConsumerOptions, StreamSpecification, ValidationCodeException,
)
from rabbitmq_amqp_python_client.qpid.proton import Message
from rabbitmq_amqp_python_client.qpid.proton.utils import SendException
from rstream import ConsumerOffsetSpecification, OffsetType

from compat_tests.stream.helpers import read, run

from .helpers import get_all, pika_channel, unique


@pytest.fixture
def connection(broker):
    host, port = broker.address("amqp")
    env = Environment(f"amqp://guest:guest@{host}:{port}/")
    conn = env.connection()
    conn.dial()
    yield conn
    conn.close()
    env.close()


class _Collect(AMQPMessagingHandler):
    """Accepts (or settles otherwise) ``count`` messages, then stops the consumer's run()."""

    def __init__(self, count: int, settle: str = "accept"):
        super().__init__()
        self.count, self.settle = count, settle
        self.messages: list = []
        self.offsets: list[int] = []

    def on_amqp_message(self, event) -> None:
        self.messages.append(event.message)
        self.offsets.append(self.offset)
        getattr(self.delivery_context, self.settle)(event)
        if len(self.messages) >= self.count:
            raise _Enough()


class _Enough(Exception):
    pass


def _consume(conn, address: str, count: int, **kw) -> _Collect:
    handler = _Collect(count)
    consumer = conn.consumer(address, message_handler=handler, **kw)
    try:
        consumer.run()
    except _Enough:
        pass
    finally:
        consumer.close()
    return handler


def test_management_node(connection):
    management = connection.management()
    try:
        queue = unique("mq")
        exchange = unique("mx")
        management.declare_queue(QuorumQueueSpecification(name=queue))
        management.declare_exchange(ExchangeSpecification(name=exchange, exchange_type=ExchangeType.topic))
        binding = management.bind(ExchangeToQueueBindingSpecification(source_exchange=exchange,
                                                                      destination_queue=queue, binding_key="a.#"))
        info = management.queue_info(queue)
        assert (info.name, info.queue_type.value, info.is_durable, info.message_count) == (queue, "quorum", True, 0)
        publisher = connection.publisher(AddressHelper.exchange_address(exchange, "a.b"))
        for i in range(3):
            result = publisher.publish(Message(body=Converter.string_to_bytes(f"t{i}")))
            assert result.remote_state == OutcomeState.ACCEPTED
        publisher.close()
        assert management.queue_info(queue).message_count == 3
        assert management.purge_queue(queue) == 3
        management.unbind(binding)
        publisher = connection.publisher(AddressHelper.exchange_address(exchange, "a.b"))
        with pytest.raises(SendException) as released:  # no binding left: RabbitMQ 4 releases it
            publisher.publish(Message(body=b"x"))
        assert released.value.state == OutcomeState.RELEASED
        publisher.close()
        with pytest.raises(ValidationCodeException):
            management.queue_info(unique("missing"))
        with pytest.raises(ValidationCodeException):  # a conflicting redeclaration: 409
            management.declare_queue(ClassicQueueSpecification(name=queue))
        management.delete_exchange(exchange)
        management.delete_queue(queue)
        with pytest.raises(ValidationCodeException):
            management.queue_info(queue)
    finally:
        management.close()


def test_stream_read_from_offsets(connection):
    management = connection.management()
    stream = unique("st")
    try:
        management.declare_queue(StreamSpecification(name=stream))
        publisher = connection.publisher(AddressHelper.queue_address(stream))
        for i in range(10):
            assert publisher.publish(Message(body=Converter.string_to_bytes(f"s{i}"))).remote_state \
                == OutcomeState.ACCEPTED
        publisher.close()
        first = _consume(connection, AddressHelper.queue_address(stream), 10,
                         consumer_options=StreamConsumerOptions(offset_specification=OffsetSpecification.first))
        assert [Converter.bytes_to_string(m.body) for m in first.messages] == [f"s{i}" for i in range(10)]
        assert first.offsets == list(range(10))
        from_six = _consume(connection, AddressHelper.queue_address(stream), 4,
                            consumer_options=StreamConsumerOptions(offset_specification=6))
        assert [Converter.bytes_to_string(m.body) for m in from_six.messages] == ["s6", "s7", "s8", "s9"]
        last = _consume(connection, AddressHelper.queue_address(stream), 1,
                        consumer_options=StreamConsumerOptions(offset_specification=OffsetSpecification.last))
        assert Converter.bytes_to_string(last.messages[0].body) == "s9"
    finally:
        management.delete_queue(stream)
        management.close()


def test_one_queue_four_protocols(broker, connection):
    """An AMQP 1.0 message read by pika (mapped properties), Kafka (the queue's topic) and rstream
    (the bare message byte for byte); a pika message read over AMQP 1.0."""
    management = connection.management()
    stream = unique("cross")
    try:
        management.declare_queue(StreamSpecification(name=stream))
        sent = Message(body=Converter.string_to_bytes("payload"), id="m-1", correlation_id="c-1",
                       reply_to="/queues/replies", content_type="text/plain", subject="kind",
                       application_properties={"colour": "blue", "n": 7}, durable=True, priority=3, ttl=60.0)
        encoded = bytes(sent.encode())
        publisher = connection.publisher(AddressHelper.queue_address(stream))
        assert publisher.publish(sent).remote_state == OutcomeState.ACCEPTED
        publisher.close()

        # AMQP 0-9-1 (a stream needs a prefetch and a consume)
        amqp_address = broker.address("amqp")
        pconn, channel = pika_channel(amqp_address)
        channel.basic_qos(prefetch_count=10)
        got = []
        channel.basic_consume(stream, lambda ch, method, props, body: got.append((props, body)),
                              arguments={"x-stream-offset": "first"})
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            pconn.process_data_events(time_limit=0.2)
        pconn.close()
        props, body = got[0]
        assert body == b"payload"
        assert (props.message_id, props.correlation_id, props.reply_to, props.content_type) == \
            ("m-1", "c-1", "/queues/replies", "text/plain")
        assert (props.delivery_mode, props.priority, props.expiration) == (2, 3, "60000")
        assert props.headers["colour"] == "blue" and props.headers["n"] == 7

        # Kafka: the queue is a topic of the same name
        host, port = broker.address("kafka")
        consumer = KafkaConsumer({"bootstrap.servers": f"{host}:{port}", "group.id": unique("g"),
                                  "auto.offset.reset": "earliest"})
        consumer.subscribe([stream])
        record = None
        deadline = time.monotonic() + 20
        while record is None and time.monotonic() < deadline:
            record = consumer.poll(0.5)
            if record is not None and record.error():
                record = None
        consumer.close()
        assert record is not None and record.value() == b"payload"
        headers = dict(record.headers())
        assert headers["colour"] == b"blue"

        # the stream protocol: the bare message as it was published
        (offset, raw), = run(read(broker.address("stream"), stream,
                                  ConsumerOffsetSpecification(OffsetType.FIRST), 1, decoder=bytes))
        assert offset == 0 and raw == encoded

        # the reverse: pika publishes, AMQP 1.0 reads properties and headers
        queue = unique("back")
        management.declare_queue(ClassicQueueSpecification(name=queue))
        pconn, channel = pika_channel(amqp_address)
        import pika
        channel.basic_publish("", queue, b"from-091", pika.BasicProperties(
            message_id="p-1", content_type="application/json", delivery_mode=2, headers={"h": "v", "i": 5}))
        pconn.close()
        handler = _consume(connection, AddressHelper.queue_address(queue), 1)
        m = handler.messages[0]
        assert bytes(m.body) == b"from-091"
        assert (m.id, m.content_type, m.durable) == ("p-1", "application/json", True)
        assert m.application_properties["h"] == "v" and m.application_properties["i"] == 5
        assert m.annotations["x-routing-key"] == queue
        pconn, channel = pika_channel(amqp_address)
        assert get_all(channel, queue) == []  # accepted over 1.0: gone
        pconn.close()
    finally:
        management.close()
