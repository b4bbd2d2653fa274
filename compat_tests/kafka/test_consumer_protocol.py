"""KIP-848 (group.protocol=consumer) with confluent-kafka (librdkafka) over real sockets.

The broker runs with a 1 s consumer-group heartbeat interval so reconciliation takes seconds.
"""
from __future__ import annotations

import threading
import time
from collections import Counter

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.conftest import unique_name
from compat_tests.kafka.helpers import wait_until

COMMON = {"socket.timeout.ms": 15000, "reconnect.backoff.max.ms": 1000}


# our broker's group heartbeat at 1 s keeps these tests short; the Kafka node keeps Kafka's 5 s
GATEWAY_ARGS = ("--group-consumer-heartbeat-interval-ms", "1000")


def admin(bootstrap) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **COMMON})


def create_topic(bootstrap, name, partitions):
    a = admin(bootstrap)
    a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(30)
    wait_until(lambda: len(a.list_topics(name, timeout=10).topics[name].partitions) == partitions, 15, name)


def produce(bootstrap, topic, start, count, partitions=6):
    p = Producer({"bootstrap.servers": bootstrap, **COMMON})
    for i in range(start, start + count):
        p.produce(topic, value=f"m-{i}".encode(), partition=i % partitions)
    assert p.flush(30) == 0


def consumer(bootstrap, group, **conf) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, **COMMON, **conf})


class Member:
    """A consumer in its own thread that records every value and commits synchronously after each batch."""

    def __init__(self, bootstrap, group, topics, name, **conf):
        self.c = consumer(bootstrap, group, **{"client.id": name, **conf})
        self.owned: set[int] = set()  # kept by the (incremental) rebalance callbacks, in the consuming thread
        self.c.subscribe(topics, on_assign=lambda c, ps: self.owned.update(tp.partition for tp in ps),
                         on_revoke=lambda c, ps: self.owned.difference_update(tp.partition for tp in ps),
                         on_lost=lambda c, ps: self.owned.difference_update(tp.partition for tp in ps))
        self.seen: list[bytes] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            while not self.stop.is_set():
                msgs = self.c.consume(num_messages=100, timeout=0.2)
                good = [m for m in msgs if m.error() is None]
                self.errors += [str(m.error()) for m in msgs if m.error() is not None]
                if good:
                    with self.lock:
                        self.seen += [m.value() for m in good]
                    try:
                        self.c.commit(asynchronous=False)
                    except KafkaException as exc:  # a commit racing a revocation: retried with the next batch
                        if exc.args[0].code() not in (KafkaError.STALE_MEMBER_EPOCH, KafkaError._NO_OFFSET):
                            raise
        except Exception as exc:
            self.errors.append(repr(exc))
        finally:
            self.c.close()

    def assignment(self) -> set[int]:
        return set(self.owned) if self.thread.is_alive() else set()

    def close(self):
        self.stop.set()
        self.thread.join(30)


def all_values(members):
    return Counter(v for m in members for v in m.seen)


def test_two_split_third_joins_one_leaves_and_offsets_resume(bootstrap):
    topic, group = unique_name("kip848"), unique_name("g848")
    create_topic(bootstrap, topic, 6)
    produce(bootstrap, topic, 0, 600)
    a, b = Member(bootstrap, group, [topic], "a"), Member(bootstrap, group, [topic], "b")
    members = [a, b]
    try:
        wait_until(lambda: sorted(len(m.assignment()) for m in members) == [3, 3]
                   and a.assignment() | b.assignment() == set(range(6)), 30, "a 3/3 split")
        wait_until(lambda: len(all_values(members)) == 600, 30, "600 records")

        # a third member joins while records keep coming: 2/2/2, incrementally
        c = Member(bootstrap, group, [topic], "c")
        members.append(c)
        produce(bootstrap, topic, 600, 300)
        wait_until(lambda: sorted(len(m.assignment()) for m in members) == [2, 2, 2], 45, "a 2/2/2 split")
        produce(bootstrap, topic, 900, 300)
        wait_until(lambda: len(all_values(members)) == 1200, 45, "1200 records")
        owned = [m.assignment() for m in members]
        assert set().union(*owned) == set(range(6)) and sum(map(len, owned)) == 6, owned

        # the group as ConsumerGroupDescribe shows it
        a_client = admin(bootstrap)  # kept referenced until its future is done
        desc = a_client.describe_consumer_groups([group], request_timeout=15)[group].result(30)
        assert desc.type.name == "CONSUMER" and desc.state.name == "STABLE"
        assert sorted(m.client_id for m in desc.members) == ["a", "b", "c"]
        assert sorted(tp.partition for m in desc.members for tp in m.assignment.topic_partitions) == list(range(6))

        # one leaves: the other two take its partitions
        c.close()
        members.remove(c)
        wait_until(lambda: sorted(len(m.assignment()) for m in members) == [3, 3], 45, "3/3 after a leave")
        produce(bootstrap, topic, 1200, 300)
        wait_until(lambda: len(all_values(members + [c])) == 1500, 45, "1500 records")
        seen = all_values(members + [c])
        assert set(seen) == {f"m-{i}".encode() for i in range(1500)}
        # committed after every batch, so only records in flight at a revocation may come twice
        assert sum(seen.values()) - 1500 <= 100, Counter(seen.values())
        for m in members + [c]:
            assert not m.errors, m.errors
    finally:
        for m in members:
            m.close()

    # committed offsets survive: a restarted consumer resumes after them
    produce(bootstrap, topic, 1500, 60)
    d = consumer(bootstrap, group)
    try:
        d.subscribe([topic])
        got = []
        deadline = time.monotonic() + 45
        while len(got) < 60 and time.monotonic() < deadline:
            got += [m.value() for m in d.consume(100, 0.5) if m.error() is None]
        assert sorted(got) == sorted(f"m-{i}".encode() for i in range(1500, 1560))
        committed = d.committed([TopicPartition(topic, p) for p in range(6)], timeout=15)
        assert sum(tp.offset for tp in committed) == 1500
    finally:
        d.close()


def test_regex_subscription_picks_up_a_topic_created_later(bootstrap):
    prefix = unique_name("orders")
    first = f"{prefix}-eu"
    create_topic(bootstrap, first, 2)
    produce(bootstrap, first, 0, 10, 2)
    c = consumer(bootstrap, unique_name("g-regex"))
    try:
        c.subscribe([f"^{prefix}-.*"])
        got = set()
        deadline = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < deadline:
            got |= {(m.topic(), m.value()) for m in c.consume(100, 0.5) if m.error() is None}
        assert len(got) == 10
        later = f"{prefix}-us"
        create_topic(bootstrap, later, 3)
        produce(bootstrap, later, 100, 9, 3)
        deadline = time.monotonic() + 45
        while len(got) < 19 and time.monotonic() < deadline:
            got |= {(m.topic(), m.value()) for m in c.consume(100, 0.5) if m.error() is None}
        assert {v for t, v in got if t == later} == {f"m-{i}".encode() for i in range(100, 109)}
        assert {tp.topic for tp in c.assignment()} == {first, later}
    finally:
        c.close()


def classic_member(bootstrap, group, topics, name) -> "Member":
    """A member speaking the classic protocol (JoinGroup/SyncGroup, librdkafka's eager range assignor)."""
    return Member(bootstrap, group, topics, name, **{"group.protocol": "classic", "partition.assignment.strategy": "range"})


def group_type(bootstrap, group) -> str:
    a_client = admin(bootstrap)  # kept referenced until its future is done
    listed = a_client.list_consumer_groups(request_timeout=15).result(30)
    [g] = [g for g in listed.valid if g.group_id == group]
    return g.type.name


def test_a_classic_group_upgrades_online_and_back(bootstrap):
    """KIP-848 online migration: a consumer-protocol member joins a live classic group, which
    becomes a consumer group keeping its classic members; when it leaves, the group is classic
    again. Records keep flowing; none is lost."""
    topic, group = unique_name("migrate"), unique_name("g-migrate")
    create_topic(bootstrap, topic, 6)
    produce(bootstrap, topic, 0, 300)
    old = [classic_member(bootstrap, group, [topic], "classic-a"), classic_member(bootstrap, group, [topic], "classic-b")]
    members = list(old)
    try:
        wait_until(lambda: sorted(len(m.assignment()) for m in old) == [3, 3], 45, "a classic 3/3 split")
        wait_until(lambda: len(all_values(members)) == 300, 30, "300 records")
        assert group_type(bootstrap, group) == "CLASSIC"

        new = Member(bootstrap, group, [topic], "modern")  # group.protocol=consumer
        members.append(new)
        produce(bootstrap, topic, 300, 300)
        wait_until(lambda: sorted(len(m.assignment()) for m in members) == [2, 2, 2], 60, "a 2/2/2 split, online")
        assert group_type(bootstrap, group) == "CONSUMER"
        wait_until(lambda: len(all_values(members)) == 600, 45, "600 records")

        new.close()
        wait_until(lambda: group_type(bootstrap, group) == "CLASSIC", 45, "downgraded after the last modern member left")
        wait_until(lambda: sorted(len(m.assignment()) for m in old) == [3, 3], 60, "classic 3/3 again")
        produce(bootstrap, topic, 600, 300)
        wait_until(lambda: len(all_values(members)) == 900, 45, "900 records")
        seen = all_values(members)
        assert set(seen) == {f"m-{i}".encode() for i in range(900)}
        assert sum(seen.values()) - 900 <= 300, Counter(seen.values())  # only in-flight records at a revocation
        for m in members:
            assert not m.errors, (m.c, m.errors)
    finally:
        for m in members:
            m.close()


def test_a_rebalance_storm_loses_nothing(bootstrap):
    """Members join and leave every second while records keep coming: nothing is lost, and what
    comes twice is only what was in flight (consumed, not yet committed) at a revocation."""
    topic, group = unique_name("storm"), unique_name("g-storm")
    create_topic(bootstrap, topic, 6)
    steady = [Member(bootstrap, group, [topic], "steady-0"), Member(bootstrap, group, [topic], "steady-1")]
    gone: list[Member] = []
    total, sent = 2400, 0
    try:
        for second in range(12):  # 200 records a second; a member comes or goes each second
            produce(bootstrap, topic, sent, 200)
            sent += 200
            if second % 2 == 0:
                gone.append(Member(bootstrap, group, [topic], f"visitor-{second}"))
            else:
                gone[-1].close()
            time.sleep(1)
        assert sent == total
        everyone = steady + gone
        wait_until(lambda: set(all_values(everyone)) == {f"m-{i}".encode() for i in range(total)}, 60,
                   "every record after the storm")
        seen = all_values(everyone)
        assert sum(seen.values()) - total <= 600, Counter(seen.values())  # at most what six revocations had in flight
        for m in everyone:
            assert not m.errors, (m.c, m.errors)
    finally:
        for m in steady + gone:
            m.close()
