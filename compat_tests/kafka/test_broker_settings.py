"""Broker-wide Kafka settings clients meet: the group session-timeout bounds
(``group.min/max.session.timeout.ms``) and the broker keys DescribeConfigs shows."""
from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from compat_tests.conftest import unique_name
from tests.brokerproc import start_broker


# Each test starts brokers with our CLI options; in Apache Kafka these are static broker
# settings of the shared node (a JVM per setting would cost ~15 s of start-up each).
pytestmark = pytest.mark.gateway_only("starts brokers of their own with our serve options")


@pytest.fixture
def broker_with(tmp_path):
    started = []

    def start(*args):
        broker = start_broker(tmp_path / f"data{len(started)}", *args)
        started.append(broker)
        return broker
    yield start
    for broker in started:
        broker.stop()


def _join(bootstrap: str, session_ms: int):
    """Subscribe a consumer asking for ``session_ms``; returns the first error or the assignment."""
    errors, assigned = [], []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("g"), "session.timeout.ms": session_ms,
                         "heartbeat.interval.ms": min(1000, session_ms // 3), "auto.offset.reset": "earliest",
                         "error_cb": errors.append})
    topic = unique_name("t")
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: a collected client cancels its requests
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    consumer.subscribe([topic], on_assign=lambda c, parts: assigned.extend(parts))
    try:
        for _ in range(60):
            try:
                message = consumer.poll(0.25)
            except KafkaException as exc:
                errors.append(exc.args[0])
            else:
                if message is not None and message.error() is not None:  # librdkafka reports the refusal here
                    errors.append(message.error())
            if assigned or errors:
                break
    finally:
        try:
            consumer.close()
        except KafkaException:  # after a refused join librdkafka's close reports its own teardown
            pass
    return errors, assigned


def test_session_timeout_bounds_are_settings(broker_with):
    strict = broker_with()
    errors, assigned = _join("%s:%d" % strict.address("kafka"), 3000)
    assert not assigned and errors and errors[0].code() == KafkaError.INVALID_SESSION_TIMEOUT, errors
    relaxed = broker_with("--group-min-session-timeout-ms", "1000")
    errors, assigned = _join("%s:%d" % relaxed.address("kafka"), 3000)
    assert assigned and not errors, errors


def test_describe_configs_of_the_broker(broker_with):
    broker = broker_with("--group-max-session-timeout-ms", "600000", "--offsets-retention-minutes", "60",
                         "--group-share-record-lock-duration-ms", "15000")
    host, port = broker.address("kafka")
    admin = AdminClient({"bootstrap.servers": f"{host}:{port}"})
    res = ConfigResource(ResourceType.BROKER, "0")
    configs = admin.describe_configs([res])[res].result(30)
    assert configs["advertised.listeners"].value == f"PLAINTEXT://{host}:{port}"
    assert configs["group.min.session.timeout.ms"].value == "6000"
    assert configs["group.max.session.timeout.ms"].value == "600000"
    assert configs["broker.id"].value == "0" and int(configs["message.max.bytes"].value) > 0
    assert configs["offsets.retention.minutes"].value == "60"
    assert configs["group.share.record.lock.duration.ms"].value == "15000"
    assert configs["group.share.delivery.count.limit"].value == "5"
