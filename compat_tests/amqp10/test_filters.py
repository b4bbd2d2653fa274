"""AMQP 1.0 filter expressions on streams: RabbitMQ 4.1's property filters (properties and
application properties), 4.2's SQL filters, and the stream filter values, evaluated by the broker
so that only matching messages are delivered, from the requested offset.

Gateway only: these are RabbitMQ 4.1/4.2 features. Debian's RabbitMQ 3.10 (the differential
target) has no filter expressions, and rabbitmq-amqp-python-client refuses any broker before 4.0.
"""
from __future__ import annotations

import pika
import pytest
from proton import Described, symbol, ulong
from proton.reactor import Filter
from proton.utils import LinkDetached
from rabbitmq_amqp_python_client import (
    AddressHelper, AMQPMessagingHandler, Converter, Environment, MessageProperties, OffsetSpecification,
    OutcomeState, StreamConsumerOptions, StreamFilterOptions, StreamSpecification,
)
from rabbitmq_amqp_python_client.qpid.proton import Message

from .helpers import pika_channel, proton, unique

# (subject, colour, weight, filter value) of the messages the stream holds, in order
MESSAGES = [("apple", "red", 1, "fruit"), ("banana", "yellow", 5, "fruit"), ("carrot", "orange", 3, "veg"),
            ("lemon", "yellow", 2, "fruit"), ("leek", "green", 7, None), ("pepper", "yellow", 9, "veg"),
            ("banana", "yellow", 8, "fruit")]


class _Collect(AMQPMessagingHandler):
    def __init__(self, count: int):
        super().__init__()
        self.count = count
        self.bodies: list[str] = []
        self.offsets: list[int] = []

    def on_amqp_message(self, event) -> None:
        self.bodies.append(Converter.bytes_to_string(event.message.body))
        self.offsets.append(self.offset)
        self.delivery_context.accept(event)
        if len(self.bodies) >= self.count:
            raise _Enough()


class _Enough(Exception):
    pass


@pytest.fixture(scope="module")
def env(broker):
    host, port = broker.address("amqp")
    environment = Environment(f"amqp://guest:guest@{host}:{port}/")
    connection = environment.connection()
    connection.dial()
    yield broker, connection
    connection.close()
    environment.close()


@pytest.fixture(scope="module")
def stream(env):
    """A stream with the mixed messages above (body ``<offset>:<subject>``)."""
    _, connection = env
    name = unique("filtered")
    management = connection.management()
    management.declare_queue(StreamSpecification(name=name))
    publisher = connection.publisher(AddressHelper.queue_address(name))
    for i, (subject, colour, weight, value) in enumerate(MESSAGES):
        msg = Message(body=Converter.string_to_bytes(f"{i}:{subject}"), subject=subject,
                      application_properties={"colour": colour, "weight": weight})
        if value is not None:
            msg.annotations = {"x-stream-filter-value": value}
        assert publisher.publish(msg).remote_state == OutcomeState.ACCEPTED
    publisher.close()
    yield name
    management.delete_queue(name)
    management.close()


def _consume(connection, stream: str, count: int, offset=OffsetSpecification.first, **filters) -> _Collect:
    """The first ``count`` messages delivered: in stream order, so a message the filter should have
    left out shows up among them (each case's last match is at or near the stream's end)."""
    handler = _Collect(count)
    options = StreamConsumerOptions(offset_specification=offset, filter_options=StreamFilterOptions(**filters))
    consumer = connection.consumer(AddressHelper.queue_address(stream), message_handler=handler,
                                   consumer_options=options)
    try:
        consumer.run()
    except _Enough:
        pass
    finally:
        consumer.close()
    return handler


def test_properties_filter(env, stream):
    _, connection = env
    got = _consume(connection, stream, 2, message_properties=MessageProperties(subject="banana"))
    assert got.bodies == ["1:banana", "6:banana"] and got.offsets == [1, 6]
    prefix = _consume(connection, stream, 2, message_properties=MessageProperties(subject="&p:le"))
    assert prefix.bodies == ["3:lemon", "4:leek"]


def test_application_properties_filter_from_an_offset(env, stream):
    _, connection = env
    got = _consume(connection, stream, 3, offset=2, application_properties={"colour": "yellow"})
    assert got.bodies == ["3:lemon", "5:pepper", "6:banana"]


def test_sql_filter(env, stream):
    _, connection = env
    got = _consume(connection, stream, 4, sql="colour = 'yellow' AND weight > 2 OR p.subject LIKE 'c%'")
    assert got.bodies == ["1:banana", "2:carrot", "5:pepper", "6:banana"]


def test_filter_values_with_a_property_filter(env, stream):
    """The stream filter values combined with an application-properties filter: both must pass."""
    _, connection = env
    got = _consume(connection, stream, 3, values=["fruit"], application_properties={"colour": "yellow"})
    assert got.bodies == ["1:banana", "3:lemon", "6:banana"]
    unfiltered = _consume(connection, stream, 3, values=["veg"], match_unfiltered=True)
    assert unfiltered.bodies == ["2:carrot", "4:leek", "5:pepper"]


def test_proton_sees_the_filters_in_place_and_credit_counts_matches(env, stream):
    """python-qpid-proton: the attach echoes the filters in place (not an unknown one), and one
    credit brings the next matching message, however many others lie between."""
    broker, _ = env
    conn = proton(broker.address("amqp"))
    try:
        filters = {symbol("offset"): _described("rabbitmq:stream-offset-spec", "first"),
                   symbol("sql-filter"): _described("amqp:sql-filter", "weight IN (7, 8)"),
                   symbol("other"): _described("vendor:unknown", "x")}
        receiver = conn.create_receiver(f"/queues/{stream}", credit=0, options=Filter(filters))
        remote = receiver.link.remote_source.filter
        remote.rewind()
        remote.next()
        echoed = remote.get_dict()
        assert set(echoed) == {"offset", "sql-filter"}
        receiver.flow(1)
        first = receiver.receive(timeout=10)
        receiver.accept()
        receiver.flow(1)
        second = receiver.receive(timeout=10)
        receiver.accept()
        assert [bytes(first.body), bytes(second.body)] == [b"4:leek", b"6:banana"]
    finally:
        conn.close()


def test_bad_sql_is_refused(env, stream):
    """An expression that does not parse refuses the link (amqp:invalid-field, with the reason);
    RabbitMQ 4.2 instead attaches and leaves the filter out of the echoed source."""
    broker, _ = env
    conn = proton(broker.address("amqp"))
    try:
        with pytest.raises(LinkDetached) as detached:
            conn.create_receiver(f"/queues/{stream}", credit=1, options=Filter(
                {symbol("sql-filter"): _described("amqp:sql-filter", "colour = 'red' AND")}))
        assert "amqp:invalid-field" in str(detached.value) and "SQL" in str(detached.value)
    finally:
        conn.close()
    host, port = broker.address("amqp")
    environment = Environment(f"amqp://guest:guest@{host}:{port}/")
    connection = environment.connection()  # its own: a refused consumer leaves the client's connection unusable
    connection.dial()
    try:
        options = StreamConsumerOptions(offset_specification=OffsetSpecification.first,
                                        filter_options=StreamFilterOptions(sql="colour LIKE 'a' ESCAPE 'xy'"))
        with pytest.raises(Exception, match="invalid-field"):
            connection.consumer(AddressHelper.queue_address(stream), message_handler=_Collect(1),
                                consumer_options=options).close()
    finally:
        try:
            connection.close()
        finally:
            environment.close()


def test_a_rare_match_behind_many_others(env):
    """3,000 messages that fail the filter (published over AMQP 0-9-1 with pika) before one that
    passes: the broker reads past them in bounded steps (it pauses its filtering every 1,000 and
    goes on the next turn) and delivers the one; an application property filter reads 0-9-1
    headers."""
    broker, _ = env
    name = unique("rare")
    pconn, channel = pika_channel(broker.address("amqp"))
    try:
        channel.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
        channel.confirm_delivery()
        for i in range(3000):
            channel.basic_publish("", name, b"other %d" % i, pika.BasicProperties(headers={"kind": "other"}))
        channel.basic_publish("", name, b"wanted", pika.BasicProperties(headers={"kind": "wanted"}))
        conn = proton(broker.address("amqp"))
        try:
            receiver = conn.create_receiver(f"/queues/{name}", credit=0, options=Filter(
                {symbol("offset"): _described("rabbitmq:stream-offset-spec", "first"),
                 symbol("props"): Described(ulong(0x174), {"kind": "wanted"})}))
            receiver.flow(5)
            got = receiver.receive(timeout=20)
            receiver.accept()
            assert bytes(got.body) == b"wanted" and got.annotations["x-stream-offset"] == 3000
        finally:
            conn.close()
        channel.queue_delete(name)
    finally:
        pconn.close()


def _described(descriptor: str, value) -> Described:
    return Described(symbol(descriptor), value)
