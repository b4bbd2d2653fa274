"""RabbitMQ's Java AMQP 1.0 client (``com.rabbitmq.client:amqp-client`` 1.x from Maven Central, the
client of RabbitMQ 4; not ``com.rabbitmq:amqp-client``, which speaks 0-9-1), driven by
compat_tests/java/RabbitAmqp10Client.java: queue, exchange and binding through its Management API,
publishing with outcomes, a consumer with credit settling each way, a stream read from an offset,
and its Requester and Responder (Direct Reply-To over AMQP 1.0, the Requester's default with 4.2).

Gateway only: the client needs RabbitMQ 4 (its v2 addresses and the /management node), which
Debian's RabbitMQ 3.10 does not have. One run of the Java program (a few seconds); each test checks
one stage of its JSON-lines report, with RabbitMQ 4's answers as the expectations.
"""
from __future__ import annotations


import pytest

from compat_tests import tools
from compat_tests.java_steps import assert_completed, run_steps, stage

from .helpers import unique

AMQP10_CLIENT = "com.rabbitmq.client:amqp-client:1.5.0"
JAVA_TIMEOUT = 60


@pytest.fixture(scope="module")
def run(broker):
    classpath = tools.maven_classpath("rabbitmq-amqp10-client", [AMQP10_CLIENT])
    argv, main = tools.compile_java("RabbitAmqp10Client.java", classpath, helpers=("JsonLines.java",))
    host, port = broker.address("amqp")
    return run_steps(argv + [main, host, str(port), unique("java10")], JAVA_TIMEOUT, broker=broker)


def test_program_completed(run):
    assert_completed(run)


def test_connected_to_a_rabbitmq_4(run):
    connected = stage(run, "connected")
    assert connected["product"] == "RabbitMQ" and connected["version"].startswith("4.")


def test_topology_through_the_management_api(run):
    topology = stage(run, "topology")
    assert topology["declared_name"].endswith("-orders") and topology["type"] == "QUORUM"
    assert topology["durable"] is True and (topology["messages"], topology["consumers"]) == (0, 0)


def test_publish_outcomes(run):
    publish = stage(run, "publish")
    assert publish["statuses"] == {"ACCEPTED": 10}
    assert publish["unroutable"] == "RELEASED"  # RabbitMQ 4: no queue took it
    assert publish["queue_messages"] == 10


def test_consume_with_credit_and_each_settlement(run):
    consume = stage(run, "consume")
    assert consume["discarded"] == ["order-1", "order-4", "order-7"]
    assert consume["requeued"] == ["order-2", "order-5", "order-8"]
    assert consume["accepted"] == sorted(f"order-{i}" for i in (0, 2, 3, 5, 6, 8, 9))
    assert consume["requeued_delivery_count"] == 0  # released: the delivery count is unchanged
    assert (consume["unsettled"], consume["queue_messages"]) == (0, 0)


def test_stream_read_from_an_offset(run):
    stream = stage(run, "stream")
    assert stream["from_offset_2"] == ["entry-2@2", "entry-3@3", "entry-4@4"]
    assert stream["from_first"] == [f"entry-{i}@{i}" for i in range(5)]


def test_requester_and_responder(run):
    """The Java client's RPC: its Requester attaches a dynamic rabbitmq:volatile-queue receiver
    (Direct Reply-To), its Responder replies to the request's reply-to and asks the management
    node whether the requester is still there (GET /queues/<reply name>)."""
    rpc = stage(run, "rpc")
    assert rpc["replies"] == ["re:q0", "re:q1", "re:q2"]
    assert rpc["requester_alive"] == [True, True, True]
    [reply_to] = rpc["reply_to"]  # one address for the requester's requests, made by the broker
    assert reply_to.startswith("/queues/amq.rabbitmq.reply-to.")
