"""A broker that leaves a spread cluster for good: its non-durable AMQP definitions go with it.

RabbitMQ deletes a node's transient queues when the node goes down. Three brokers in cluster mode
'spread' with ``--departed-broker-after-ms 3000``; broker 3 declares non-durable and durable
queues and exchanges, then is killed and never started again. Once it has been gone that long,
the two others no longer know its non-durable queue, exchange and bindings (a publish routed to
them is unroutable, the names can be declared again) and its queue's topic is deleted; its
durable queue, and the non-durable queue of a broker still there, stay.
"""
from __future__ import annotations

import pika
import pytest
import requests

from compat_tests.cluster.clients import amqp_connection, amqp_knows
from compat_tests.cluster.cluster import make_cluster, metadata, running
from compat_tests.support import wait_until
from core.names import queue_topic

AFTER_MS = 3000


@pytest.fixture
def spread_departing(zk_connect, tmp_path, request):
    yield from running(make_cluster(tmp_path, zk_connect, n=3, extra_args=(
        "--amqp-cluster-mode", "spread", "--departed-broker-after-ms", str(AFTER_MS))), request)


def _listed_queues(broker) -> set[str]:
    answer = requests.get(f"http://{broker.ip}:{broker.ports['http']}/api/queues/%2F?disable_stats=true",
                          auth=("guest", "guest"), timeout=10)
    answer.raise_for_status()
    return {q["name"] for q in answer.json()}


def _knows_exchange(broker, name: str) -> bool:
    return amqp_knows(broker, lambda ch: ch.exchange_declare(name, passive=True))


def test_the_non_durable_definitions_of_a_broker_gone_for_good_are_removed(spread_departing):
    b1, b2, b3 = spread_departing.brokers
    c1 = amqp_connection(b1)
    ch1 = c1.channel()
    ch1.queue_declare("kept-1", durable=False)  # a broker that stays: its non-durable queue stays too
    wait_until(lambda: "kept-1" in _listed_queues(b3), 30, "broker 3 knowing kept-1")
    c3 = amqp_connection(b3)
    ch3 = c3.channel()
    ch3.exchange_declare("fan-3", "fanout", durable=False)
    ch3.queue_declare("temp-3", durable=False)  # client-local: led by broker 3
    ch3.queue_declare("durable-3", durable=True)
    ch3.queue_bind("temp-3", "fan-3")
    ch3.queue_bind("kept-1", "fan-3")  # a binding of a queue that stays, to an exchange that goes
    for other in (b1, b2):
        wait_until(lambda: {"temp-3", "durable-3", "kept-1"} <= _listed_queues(other), 30,
                   f"broker {other.node_id} knowing broker 3's queues")
    topic = queue_topic("/", "temp-3")
    wait_until(lambda: topic in (metadata(spread_departing.bootstrap()) or object()).topics, 30,
               "the topic of temp-3")

    b3.kill()  # and never started again
    for other in (b1, b2):
        wait_until(lambda: "temp-3" not in _listed_queues(other), 60,
                   f"broker {other.node_id} forgetting broker 3's non-durable queue")
        assert {"durable-3", "kept-1"} <= _listed_queues(other)
        assert not _knows_exchange(other, "fan-3")
    wait_until(lambda: topic not in (metadata(spread_departing.bootstrap()) or object()).topics, 30,
               "the topic of temp-3 deleted")

    # the names are free again, and a publish to the exchange's name no longer reaches kept-1
    ch1.exchange_declare("fan-3", "direct", durable=False)
    ch1.queue_declare("temp-3", durable=False)
    ch1.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError):
        ch1.basic_publish("fan-3", "", b"nobody", mandatory=True)
    assert ch1.queue_declare("kept-1", passive=True).method.message_count == 0
    c1.close()
