"""AMQP 1.0 with python-qpid-proton: publish with outcomes, consume with credit, each settlement,
dead-lettering, multi-frame messages.

``[gateway]`` and ``[rabbitmq]`` (3.10's ``rabbitmq_amqp1_0`` plugin) run the cases both brokers
support, with the addresses both know: ``/amq/queue/:q`` and ``/exchange/:x/:key``. Queues are
declared with pika beside the proton connection, on both.
"""
from __future__ import annotations

import time

import pytest
from proton import Delivery, Message, Timeout
from proton.reactor import AtMostOnce
from proton.utils import LinkDetached, SendException

from .helpers import get_all, pika_channel, proton, unique


def _body(receiver, timeout: float) -> bytes:
    message = receiver.receive(timeout=timeout)
    return bytes(message.body)  # (proton's memoryview dies with its message)


def _queue(target, **arguments) -> str:
    name = unique("q")
    connection, channel = pika_channel(target.amqp)
    channel.queue_declare(name, durable=True, arguments=arguments or None)
    connection.close()
    return name


def test_publish_accepted_and_read_by_pika(target):
    name = _queue(target)
    conn = proton(target.amqp)
    try:
        sender = conn.create_sender(f"/amq/queue/{name}")
        for i in range(5):
            delivery = sender.send(Message(inferred=True, body=f"m{i}".encode(), durable=True), timeout=10)
            assert delivery.remote_state == Delivery.ACCEPTED
        presettled = conn.create_sender(f"/amq/queue/{name}", name="presettled", options=AtMostOnce())
        presettled.send(Message(inferred=True, body=b"fire-and-forget"), timeout=10)
    finally:
        conn.close()
    connection, channel = pika_channel(target.amqp)
    try:
        deadline = time.monotonic() + 5
        got = []
        while len(got) < 6 and time.monotonic() < deadline:
            got += get_all(channel, name)
        assert [body for _, body in got] == [b"m0", b"m1", b"m2", b"m3", b"m4", b"fire-and-forget"]
        assert got[0][0].delivery_mode == 2
    finally:
        connection.close()


def test_one_link_publishes_messages_of_changing_shapes(target):
    # the broker reuses a link's last conversion when the sections before the body repeat: each
    # change of properties, body encoding (short/long data section) or sections must still show
    name = _queue(target)
    shapes = [dict(body=b"a", durable=True), dict(body=b"b" * 300, durable=True),
              dict(body=b"c", durable=True, subject="s", properties={"k": "v"}),
              dict(body=b"d" * 300, durable=True, subject="s", properties={"k": "v"}),
              dict(body=b"e", durable=True), dict(body=b"f", durable=False, content_type="text/plain")]
    conn = proton(target.amqp)
    try:
        sender = conn.create_sender(f"/amq/queue/{name}")
        for shape in shapes:
            delivery = sender.send(Message(inferred=True, **shape), timeout=10)
            assert delivery.remote_state == Delivery.ACCEPTED
    finally:
        conn.close()
    connection, channel = pika_channel(target.amqp)
    try:
        deadline = time.monotonic() + 5
        got = []
        while len(got) < len(shapes) and time.monotonic() < deadline:
            got += get_all(channel, name)
        assert [body for _, body in got] == [shape["body"] for shape in shapes]
        assert [p.delivery_mode for p, _ in got][:5] == [2, 2, 2, 2, 2] and got[5][0].delivery_mode != 2
        apps = [p.headers or None for p, _ in got]  # (application properties: 3.10 and 4 map them apart)
        assert apps[2] == apps[3] != apps[0] == apps[1] == apps[4]
        assert got[5][0].content_type == "text/plain" and got[4][0].content_type is None
    finally:
        connection.close()


def test_consume_with_credit_and_accept(target):
    name = _queue(target)
    connection, channel = pika_channel(target.amqp)
    for i in range(6):
        channel.basic_publish("", name, f"n{i}".encode())
    connection.close()
    conn = proton(target.amqp)
    try:
        receiver = conn.create_receiver(f"/amq/queue/{name}", credit=2)
        bodies = []
        for _ in range(6):
            bodies.append(_body(receiver, 10))
            receiver.accept()
        assert bodies == [f"n{i}".encode() for i in range(6)]
        with pytest.raises(Timeout):
            receiver.receive(timeout=0.5)
    finally:
        conn.close()
    connection, channel = pika_channel(target.amqp)
    try:
        assert get_all(channel, name) == []  # accepted: acknowledged, gone
    finally:
        connection.close()


def test_release_requeues_and_unsettled_come_back_on_close(target):
    name = _queue(target)
    connection, channel = pika_channel(target.amqp)
    channel.basic_publish("", name, b"again")
    connection.close()
    conn = proton(target.amqp)
    try:
        receiver = conn.create_receiver(f"/amq/queue/{name}", credit=1)
        assert _body(receiver, 10) == b"again"
        receiver.release(delivered=False)
        assert _body(receiver, 10) == b"again"  # released: delivered again
        # left unsettled: back in the queue when the connection goes
    finally:
        conn.close()
    connection, channel = pika_channel(target.amqp)
    try:
        deadline = time.monotonic() + 5
        got = []
        while not got and time.monotonic() < deadline:
            got = get_all(channel, name)
        assert [body for _, body in got] == [b"again"]
    finally:
        connection.close()


def test_reject_dead_letters(target):
    dlq = _queue(target)
    name = _queue(target, **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    connection, channel = pika_channel(target.amqp)
    channel.basic_publish("", name, b"poison")
    connection.close()
    conn = proton(target.amqp)
    try:
        receiver = conn.create_receiver(f"/amq/queue/{name}", credit=1)
        assert _body(receiver, 10) == b"poison"
        receiver.reject()
        dead = conn.create_receiver(f"/amq/queue/{dlq}", name="dead", credit=1)
        assert _body(dead, 10) == b"poison"
        dead.accept()
    finally:
        conn.close()


def test_large_message_over_several_frames(target):
    name = _queue(target)
    body = bytes(range(256)) * 4096  # 1 MiB: several frames either way at 128 KiB max-frame-size
    conn = proton(target.amqp)
    try:
        sender = conn.create_sender(f"/amq/queue/{name}")
        assert sender.send(Message(inferred=True, body=body), timeout=20).remote_state == Delivery.ACCEPTED
        receiver = conn.create_receiver(f"/amq/queue/{name}", name="large-in", credit=1)
        got = receiver.receive(timeout=20)
        receiver.accept()
        assert bytes(got.body) == body
    finally:
        conn.close()


def test_exchange_target_routes_by_key(target):
    name = _queue(target)
    exchange = unique("x")
    connection, channel = pika_channel(target.amqp)
    channel.exchange_declare(exchange, "direct")
    channel.queue_bind(name, exchange, "k1")
    connection.close()
    conn = proton(target.amqp)
    try:
        sender = conn.create_sender(f"/exchange/{exchange}/k1")
        assert sender.send(Message(inferred=True, body=b"routed"), timeout=10).remote_state == Delivery.ACCEPTED
        receiver = conn.create_receiver(f"/amq/queue/{name}", name="routed-in", credit=1)
        assert _body(receiver, 10) == b"routed"
        receiver.accept()
    finally:
        conn.close()


# --- RabbitMQ 4 behaviour: ours only (3.10's plugin has neither v2 addresses nor these outcomes) ---

def _qq(broker) -> str:
    name = unique("qq")
    connection, channel = pika_channel(broker.address("amqp"))
    channel.queue_declare(name, durable=True, arguments={"x-queue-type": "quorum"})
    connection.close()
    return name


def test_v2_addresses_and_unroutable_is_released(broker):
    """Gateway only: RabbitMQ 3.10 does not know /queues/:q or /exchanges/:x/:key (4.0 does)."""
    address = broker.address("amqp")
    name = unique("q v2/%")  # a name that needs percent-encoding
    exchange = unique("ex")
    connection, channel = pika_channel(address)
    channel.queue_declare(name, durable=True)
    channel.exchange_declare(exchange, "direct")
    channel.queue_bind(name, exchange, "key/1")
    connection.close()
    quoted = name.replace("%", "%25").replace("/", "%2F").replace(" ", "%20")
    conn = proton(address)
    try:
        to_queue = conn.create_sender(f"/queues/{quoted}")
        assert to_queue.send(Message(inferred=True, body=b"a"), timeout=10).remote_state == Delivery.ACCEPTED
        to_key = conn.create_sender(f"/exchanges/{exchange}/key%2F1")
        assert to_key.send(Message(inferred=True, body=b"b"), timeout=10).remote_state == Delivery.ACCEPTED
        by_subject = conn.create_sender(f"/exchanges/{exchange}")
        assert by_subject.send(Message(inferred=True, body=b"c", subject="key/1"), timeout=10).remote_state == Delivery.ACCEPTED
        anonymous = conn.create_sender(None)
        assert anonymous.send(Message(inferred=True, body=b"d", address=f"/queues/{quoted}"), timeout=10).remote_state \
            == Delivery.ACCEPTED
        with pytest.raises(SendException) as unroutable:
            by_subject.send(Message(inferred=True, body=b"nowhere", subject="no-such-key"), timeout=10)
        assert unroutable.value.state == Delivery.RELEASED  # RabbitMQ 4: unroutable -> released
        with pytest.raises(SendException) as missing:
            anonymous.send(Message(inferred=True, body=b"e", address="/exchanges/no-such-exchange/k"), timeout=10)
        assert missing.value.state == Delivery.REJECTED
        receiver = conn.create_receiver(f"/queues/{quoted}", name="v2-in", credit=10)
        bodies = []
        for _ in range(4):
            bodies.append(_body(receiver, 10))
            receiver.accept()
        assert bodies == [b"a", b"b", b"c", b"d"]
        with pytest.raises(LinkDetached) as detached:
            conn.create_receiver("/queues/no-such-queue", credit=1)
        assert "amqp:not-found" in str(detached.value)
    finally:
        conn.close()


def test_quorum_outcomes_and_delivery_count(broker):
    """Gateway only: RabbitMQ 4's mapping of modified/released onto a quorum queue's delivery
    count (3.10's plugin returns every modified message uncounted)."""
    address = broker.address("amqp")
    dlq = unique("dlq")
    name = unique("qq")
    connection, channel = pika_channel(address)
    channel.queue_declare(dlq, durable=True)
    channel.queue_declare(name, durable=True, arguments={"x-queue-type": "quorum", "x-dead-letter-exchange": "",
                                                         "x-dead-letter-routing-key": dlq})
    channel.basic_publish("", name, b"counted")
    connection.close()
    conn = proton(address)
    try:
        receiver = conn.create_receiver(f"/queues/{name}", credit=1)
        first = receiver.receive(timeout=10)
        assert bytes(first.body) == b"counted" and not first.delivery_count
        receiver.release(delivered=False)  # released: not counted
        again = receiver.receive(timeout=10)
        assert not again.delivery_count
        receiver.fetcher.unsettled[0].local.failed = True
        receiver.settle(Delivery.MODIFIED)  # modified, delivery-failed: counted
        third = receiver.receive(timeout=10)
        assert third.delivery_count == 1
        receiver.fetcher.unsettled[0].local.undeliverable = True
        receiver.settle(Delivery.MODIFIED)  # modified, undeliverable-here: dead-lettered
        dead = conn.create_receiver(f"/queues/{dlq}", name="dead", credit=1)
        assert _body(dead, 10) == b"counted"
        dead.accept()
        with pytest.raises(Timeout):
            receiver.receive(timeout=0.5)
    finally:
        conn.close()


def test_presettled_consumer_and_drain(broker):
    """Gateway only (v2 addresses): a pre-settled receiver consumes like auto-ack; a drain uses up the credit."""
    address = broker.address("amqp")
    name = _qq(broker)
    connection, channel = pika_channel(address)
    for i in range(3):
        channel.basic_publish("", name, f"p{i}".encode())
    connection.close()
    conn = proton(address)
    try:
        receiver = conn.create_receiver(f"/queues/{name}", credit=10, options=AtMostOnce())
        assert [_body(receiver, 10) for _ in range(3)] == [b"p0", b"p1", b"p2"]
        link = receiver.link
        link.drain(5)
        conn.wait(lambda: link.credit == 0, timeout=10, msg="the drain used the credit up")
    finally:
        conn.close()
    connection, channel = pika_channel(address)
    try:
        assert get_all(channel, name) == []
    finally:
        connection.close()


def test_idle_time_out_heartbeats(broker):
    """Gateway only (RabbitMQ 3.10 sends them too; the check is that ours does): a client with a
    1 s idle time-out stays connected over 3 s of silence, kept alive by the broker's empty frames."""
    address = broker.address("amqp")
    name = _qq(broker)
    conn = proton(address, heartbeat=1)
    try:
        with pytest.raises(Timeout):
            conn.wait(lambda: False, timeout=3)  # 3 s of I/O with nothing sent by the client's code
        sender = conn.create_sender(f"/queues/{name}")
        assert sender.send(Message(inferred=True, body=b"alive"), timeout=10).remote_state == Delivery.ACCEPTED
    finally:
        conn.close()


def test_no_credit_for_publishers_while_an_alarm_is_on(tmp_path):
    """Gateway only: a resource alarm holds AMQP 1.0 publishers by withholding link credit (as it
    blocks 0-9-1 publishers); a disk-free limit above any disk turns the alarm on from the start."""
    from tests.brokerproc import start_broker
    process = start_broker(tmp_path / "data", "--disk-free-limit-mb", str(1 << 40))
    try:
        time.sleep(1.0)  # the alarm check runs on the AMQP tick
        address = process.address("amqp")
        conn = proton(address)
        try:
            sender = conn.create_sender("/exchanges/amq.fanout")
            with pytest.raises(Timeout):
                sender.send(Message(inferred=True, body=b"held"), timeout=2)
            assert sender.link.credit <= 0  # none granted (proton counts the held message below 0)
        finally:
            conn.close()
    finally:
        assert process.stop() == 0
