"""Kafka's offsets.retention.minutes against confluent-kafka, on a broker started with
``--offsets-retention-minutes 1 --offsets-retention-check-interval-ms 1000`` (about 65 s):
offsets of a group that emptied and standalone commits are gone a minute later, those of a
group with a live member stay."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.conftest import unique_name
from tests.brokerproc import start_broker

RETENTION_S = 60
# A one-minute offsets.retention.minutes is a static broker setting in Apache Kafka: the shared
# Kafka node cannot take it without expiring every other module's offsets, and a JVM of its own
# would add a ~15 s start to each run for one test.
pytestmark = pytest.mark.gateway_only("starts a broker of its own with our --offsets-retention-* options")


@pytest.fixture
def broker(tmp_path):
    broker = start_broker(tmp_path / "data", "--offsets-retention-minutes", "1",
                          "--offsets-retention-check-interval-ms", "1000", "--group-initial-rebalance-delay-ms", "0")
    yield broker
    broker.stop()


def _subscribed(bootstrap: str, group: str, topic: str) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000})
    assigned = []
    consumer.subscribe([topic], on_assign=lambda c, parts: assigned.extend(parts))
    deadline = time.monotonic() + 20
    while not assigned and time.monotonic() < deadline:
        consumer.poll(0.1)
    assert assigned, f"{group} got no assignment"
    return consumer


def test_offsets_expire_a_retention_after_the_group_empties(broker):
    bootstrap = "%s:%d" % broker.address("kafka")
    topic = unique_name("t")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    tp = TopicPartition(topic, 0)
    solo, left, live = unique_name("solo"), unique_name("left"), unique_name("live")

    standalone = Consumer({"bootstrap.servers": bootstrap, "group.id": solo, "enable.auto.commit": False})
    standalone.assign([tp])
    standalone.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
    leaving = _subscribed(bootstrap, left, topic)
    leaving.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
    leaving.close()  # LeaveGroup: the group is Empty from now
    emptied = time.monotonic()
    staying = _subscribed(bootstrap, live, topic)
    staying.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)

    def committed(group: str) -> int:
        fetcher = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        try:
            return fetcher.committed([tp], timeout=10)[0].offset
        finally:
            fetcher.close()

    assert (committed(solo), committed(left), committed(live)) == (5, 3, 4)
    while committed(left) != OFFSET_INVALID or committed(solo) != OFFSET_INVALID:
        assert time.monotonic() - emptied < RETENTION_S + 8, "offsets did not expire"
        staying.poll(0.5)  # the live member stays in its group
    assert time.monotonic() - emptied >= RETENTION_S - 1  # not before
    assert committed(live) == 4
    assert left not in {g.group_id for g in admin.list_consumer_groups().result(10).valid}
    staying.close()
