"""A spread AMQP workload: 3 brokers in cluster mode 'spread', 300 durable queues placed
``balanced``, publishers with confirms and acking consumers each connected to a broker picked at
random, so most messages are published on one broker, stored at a second and consumed through a
third. Checked: every broker leads about a third of the queues; every confirmed message is
delivered, once, to the consumer of its queue; nothing is left behind. ``SPREAD_QUEUES`` and
``SPREAD_MESSAGES`` (per queue) make it bigger by hand.
"""
from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter

import pika
import pytest

from compat_tests.cluster.cluster import metadata, partition_view
from compat_tests.cluster.clients import amqp_connection
from compat_tests.support import wait_until
from core.names import queue_topic

QUEUES = int(os.environ.get("SPREAD_QUEUES", "300"))
PER_QUEUE = int(os.environ.get("SPREAD_MESSAGES", "10"))
PUBLISHERS, CONSUMERS = 6, 6


def _name(i: int) -> str:
    return f"wq{i:04d}"


def _declare_all(brokers, rng) -> None:
    """Each queue declared through a random broker (the declaring broker does not pick its leader)."""
    connections = {b.node_id: amqp_connection(b) for b in brokers}
    channels = {n: c.channel() for n, c in connections.items()}
    for i in range(QUEUES):
        channels[rng.choice(list(channels))].queue_declare(
            _name(i), durable=True, arguments={"x-queue-leader-locator": "balanced"})
    for connection in connections.values():
        connection.close()


class Publisher(threading.Thread):
    def __init__(self, broker, queues: list[str], label: str):
        super().__init__(name=f"publisher-{label}", daemon=True)
        self.broker, self.queues, self.label = broker, queues, label
        self.confirmed: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            connection = amqp_connection(self.broker)
            ch = connection.channel()
            ch.confirm_delivery()
            for n in range(PER_QUEUE):
                for queue in self.queues:
                    body = f"{queue}/{self.label}/{n}"
                    ch.basic_publish("", queue, body.encode(), pika.BasicProperties(delivery_mode=2), mandatory=True)
                    self.confirmed.append(body)  # returned: confirmed (an nack or return raises)
            connection.close()
        except BaseException as exc:  # reported by the test
            self.error = exc


class Consumer(threading.Thread):
    def __init__(self, broker, queues: list[str], want: int):
        super().__init__(name=f"consumer-{broker.node_id}-{queues[0]}", daemon=True)
        self.broker, self.queues, self.want = broker, queues, want
        self.seen: Counter = Counter()
        self.redelivered = 0
        self.wrong_queue: list[str] = []
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            connection = amqp_connection(self.broker)
            ch = connection.channel()
            ch.basic_qos(prefetch_count=20)

            def got(channel, method, properties, body):
                text = body.decode()
                if text.split("/", 1)[0] != method.routing_key:
                    self.wrong_queue.append(text)
                self.seen[text] += 1
                self.redelivered += method.redelivered
                channel.basic_ack(method.delivery_tag)
            for queue in self.queues:
                ch.basic_consume(queue, got)
            while not self.stopping.is_set() and sum(self.seen.values()) < self.want:
                connection.process_data_events(time_limit=0.2)
            connection.process_data_events(time_limit=1.0)  # anything more (a duplicate) comes now
            connection.close()
        except BaseException as exc:
            self.error = exc


@pytest.mark.timeout(900)
def test_300_queues_with_clients_on_random_brokers(spread):
    rng = random.Random(300)
    brokers = spread.brokers
    _declare_all(brokers, rng)

    topics = [queue_topic("/", _name(i)) for i in range(QUEUES)]

    def placed():  # the last declares' topics may still be getting their leaders
        md = metadata(spread.bootstrap())
        if md is None or any(t not in md.topics for t in topics):
            return None
        found = [partition_view(md, t)[0][0] for t in topics]
        return found if all(leader >= 0 for leader in found) else None
    leaders = Counter(wait_until(placed, timeout=60, what="every queue's topic with a leader"))
    assert set(leaders) == {b.node_id for b in brokers}, leaders
    assert all(QUEUES * 0.25 <= n <= QUEUES * 0.42 for n in leaders.values()), \
        f"queue leaders per broker {dict(leaders)}: not about a third each"

    names = [_name(i) for i in range(QUEUES)]
    consumers = [Consumer(rng.choice(brokers), names[i::CONSUMERS], PUBLISHERS * PER_QUEUE * len(names[i::CONSUMERS]))
                 for i in range(CONSUMERS)]
    publishers = [Publisher(rng.choice(brokers), names, f"p{i}") for i in range(PUBLISHERS)]
    started = time.monotonic()
    for worker in [*consumers, *publishers]:
        worker.start()
    for p in publishers:
        p.join(600)
        assert p.error is None, f"{p.name}: {p.error!r}"
    for c in consumers:
        c.join(300)
        c.stopping.set()
        assert c.error is None, f"{c.name}: {c.error!r}"
    elapsed = time.monotonic() - started

    confirmed = [body for p in publishers for body in p.confirmed]
    seen = sum((c.seen for c in consumers), Counter())
    lost = [body for body in confirmed if seen[body] == 0]
    twice = {body: n for body, n in seen.items() if n > 1}
    print(f"[spread-workload] {len(confirmed)} confirmed, {sum(seen.values())} delivered in {elapsed:.1f}s; "
          f"leaders {dict(leaders)}; publishers on {[p.broker.node_id for p in publishers]}, "
          f"consumers on {[c.broker.node_id for c in consumers]}")
    assert len(confirmed) == PUBLISHERS * PER_QUEUE * QUEUES
    assert not lost, f"{len(lost)} confirmed messages never delivered, e.g. {lost[:5]}"
    assert not twice, f"{len(twice)} messages delivered twice without a failure, e.g. {list(twice.items())[:5]}"
    assert not any(c.wrong_queue for c in consumers), [c.wrong_queue[:3] for c in consumers]
    assert sum(c.redelivered for c in consumers) == 0

    # nothing left behind: every queue empty, seen from a broker that leads a third of them
    connection = amqp_connection(rng.choice(brokers))
    ch = connection.channel()
    left = {q: ch.queue_declare(q, passive=True).method.message_count for q in names}
    connection.close()
    assert not any(left.values()), {q: n for q, n in left.items() if n}
