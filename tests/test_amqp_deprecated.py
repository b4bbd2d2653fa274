"""RabbitMQ's deprecated features behind their permit settings (routing.deprecated): permitted by
default here; each one turned off behaves as RabbitMQ 4.3 with the feature denied. Against this
broker only: Debian's RabbitMQ 3.10 predates deprecated-feature settings."""
from __future__ import annotations

import pika
import pytest

from tests.brokerproc import start_broker

DENY_ALL = {"GATEWAY_DEPRECATED_FEATURES_PERMIT_TRANSIENT_NONEXCL_QUEUES": "false",
            "GATEWAY_DEPRECATED_FEATURES_PERMIT_GLOBAL_QOS": "false",
            "GATEWAY_DEPRECATED_FEATURES_PERMIT_QUEUE_MASTER_LOCATOR": "false"}


@pytest.fixture(scope="module")
def brokers(tmp_path_factory):
    base = tmp_path_factory.mktemp("deprecated")
    default = start_broker(base / "default")
    denied = start_broker(base / "denied", env=DENY_ALL)
    yield default, denied
    for broker in (default, denied):
        broker.stop()


def _connect(broker) -> pika.BlockingConnection:
    host, port = broker.address("amqp")
    return pika.BlockingConnection(pika.ConnectionParameters(host, port, connection_attempts=1, socket_timeout=5))


def _refused(broker, declare) -> pika.exceptions.ConnectionClosedByBroker:
    connection = _connect(broker)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        declare(connection.channel())
    return info.value


def test_transient_non_exclusive_queue(brokers):
    default, denied = brokers
    with _connect(default) as connection:
        assert connection.channel().queue_declare("transient-q", durable=False).method.queue == "transient-q"
    error = _refused(denied, lambda ch: ch.queue_declare("transient-q", durable=False))
    assert error.reply_code == 541
    assert error.reply_text.startswith("INTERNAL_ERROR - Feature `transient_nonexcl_queues` is deprecated.\n"
                                       "By default, this feature is not permitted anymore.")
    with _connect(denied) as connection:  # durable, or exclusive: still fine
        ch = connection.channel()
        ch.queue_declare("durable-q", durable=True)
        ch.queue_declare("exclusive-q", exclusive=True)
        ch.queue_declare("", exclusive=True)
        ch.queue_declare("durable-q", passive=True)
        ch.queue_delete("durable-q")
        # x-queue-mode has no deprecated-feature setting: RabbitMQ 4.3 still takes it
        ch.queue_declare("lazy-q", durable=True, arguments={"x-queue-mode": "lazy"})
        ch.queue_delete("lazy-q")


def test_queue_master_locator(brokers):
    default, denied = brokers
    args = {"x-queue-master-locator": "min-masters"}
    with _connect(default) as connection:
        connection.channel().queue_declare("located", durable=True, arguments=args)
    error = _refused(denied, lambda ch: ch.queue_declare("located", durable=True, arguments=args))
    assert error.reply_code == 541
    assert error.reply_text.startswith("INTERNAL_ERROR - Feature `queue_master_locator` is deprecated.")
    with _connect(denied) as connection:  # the leader locator is the one to use instead
        connection.channel().queue_declare("located-2", durable=True,
                                           arguments={"x-queue-leader-locator": "balanced"})


def _deliveries_with_global_qos(broker, queue: str) -> int:
    """How many of 10 messages a consumer gets unacked under basic.qos(prefetch 2, global) plus a
    per-consumer prefetch of 5: 2 when the global limit counts, 5 when it is taken as per-consumer
    (the later per-consumer qos replaces it)."""
    with _connect(broker) as connection:
        ch = connection.channel()
        ch.queue_declare(queue, durable=True)
        for i in range(10):
            ch.basic_publish("", queue, str(i).encode())
        ch.basic_qos(prefetch_count=2, global_qos=True)
        ch.basic_qos(prefetch_count=5)
        got = []
        ch.basic_consume(queue, lambda c, m, p, b: got.append(b))
        connection.process_data_events(time_limit=1.0)
        ch.close()
        connection.channel().queue_delete(queue)
        return len(got)


def test_global_qos(brokers):
    default, denied = brokers
    assert _deliveries_with_global_qos(default, "qos-q") == 2
    assert _deliveries_with_global_qos(denied, "qos-q") == 5

