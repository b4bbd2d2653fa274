"""A share group in cluster mode survives the failover of its partition's leader.

The share partition lives with the topic partition's leader; its start offset is written to the
share group's coordinator (gateway/cluster/share_state.py). Kill the leader after half the
records were accepted: the new leader reads the start offset back, so the share consumer gets
the other half (none lost), and of the accepted half at most what was accepted after the last
write comes again.
"""
from __future__ import annotations

import time

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from kio.schema.describe_share_group_offsets.v1 import request as rq, response as rs

from compat_tests.cluster.cluster import create_topic, metadata, partition_view
from compat_tests.kafka.helpers import wait_until
from compat_tests.kafka.kio_call import kio_call

COMMON = {"socket.timeout.ms": 15000, "reconnect.backoff.max.ms": 1000, "topic.metadata.refresh.interval.ms": 1000}


def _consumer(bootstrap: str, group: str, topic: str) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit",
                       **COMMON})
    c.subscribe([topic])
    return c


def _take(c: ShareConsumer, want: int, seen: list[bytes], timeout: float, accept=lambda value: True,
          counts: dict | None = None) -> None:
    """Poll until ``want`` more records were accepted, accepting those ``accept`` says (releasing
    the others); ``counts`` gets each record's latest delivery count."""
    goal, deadline = len(seen) + want, time.monotonic() + timeout
    while len(seen) < goal and time.monotonic() < deadline:
        for m in c.poll(0.5):
            if m.error() is not None:
                continue  # a leader change surfaces as a transient error
            if counts is not None:
                counts[m.value()] = m.delivery_count()
            if accept(m.value()):
                seen.append(m.value())
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            else:
                c.acknowledge(m, AcknowledgeType.RELEASE)
        try:
            c.commit_sync(15)
        except Exception:  # noqa: BLE001 (acks to a dead leader fail; those records come again)
            pass


def _stored_start(cluster, group: str, topic: str) -> int | None:
    """The start offset DescribeShareGroupOffsets reports from the group's coordinator."""
    request = rq.DescribeShareGroupOffsetsRequest(groups=(rq.DescribeShareGroupOffsetsRequestGroup(
        group_id=group, topics=(rq.DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=(0,)),)),))
    for broker in cluster.live():
        host, port = broker.bootstrap.rsplit(":", 1)
        [g] = kio_call((host, int(port)), 90, request, rs.DescribeShareGroupOffsetsResponse, api_version=1).groups
        if g.error_code == 0:
            starts = [p.start_offset for t in g.topics for p in t.partitions]
            return starts[0] if starts else None
    return None


def test_share_group_position_survives_the_leaders_failover(cluster):
    topic, group = "shared-failover", "sg-failover"
    create_topic(cluster.bootstrap(), topic, 1, 3)
    md = cluster.wait_isr_full(topic)
    leader = partition_view(md, topic)[0][0]
    c = _consumer(cluster.bootstrap(), group, topic)
    seen: list[bytes] = []
    try:
        _take(c, 0, seen, 5)  # joins and opens its share session at the log end (latest: Kafka's default)
        deadline, probes = time.monotonic() + 20, 0
        while time.monotonic() < deadline and not seen:
            probes += 1
            p = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all", **COMMON})
            p.produce(topic, value=b"probe")
            assert p.flush(30) == 0
            _take(c, 1, seen, 3)
        assert seen, "the share consumer got nothing"
        seen.clear()
        p = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all", **COMMON})
        for i in range(200):
            p.produce(topic, value=b"r-%03d" % i)
        assert p.flush(30) == 0
        # the first half accepted, of the second the even ones (archived above the start offset),
        # the odd ones released (each delivered at least once): the start offset (100 and the probes)
        # tells the next leader where the group is, the log end (latest) would skip the second half;
        # the snapshot's delivery counts and archived ranges say what the second half went through
        _take(c, 150, seen, 60, accept=lambda value: value < b"r-100" or int(value[2:]) % 2 == 0)
        first = set(seen)
        assert first == {b"r-%03d" % i for i in range(100)} | {b"r-%03d" % i for i in range(100, 200, 2)}
        c.close()  # nothing held: what is left is in the share partition, not with the member
        # the share group's coordinator holds the start offset: past the probes, the first half and r-100
        wait_until(lambda: _stored_start(cluster, group, topic) == probes + 101, 30,
                   "the start offset at the coordinator")
        time.sleep(1)  # the last snapshot (written every quarter second) reaches the coordinator
        cluster.by_id(leader).kill()
        wait_until(lambda: (m := metadata(cluster.bootstrap(), 2)) is not None
                   and partition_view(m, topic)[0][0] not in (leader, -1), 30, "a new leader")
        c = _consumer(cluster.bootstrap(), group, topic)
        everything = {b"r-%03d" % i for i in range(200)}
        after: dict[bytes, int] = {}
        deadline = time.monotonic() + 60
        while not everything <= set(seen) and time.monotonic() < deadline:
            _take(c, 1, seen, 2, counts=after)
        got = [v for v in seen if v != b"probe"]
        assert set(got) == everything, f"lost: {sorted(everything - set(got))[:10]}"
        archived = {b"r-%03d" % i for i in range(100, 200, 2)}
        assert not archived & set(after), f"archived records delivered again: {sorted(archived & set(after))[:10]}"
        released = {b"r-%03d" % i for i in range(101, 200, 2)}
        assert all(after[v] >= 2 for v in released), \
            f"delivery counts started afresh: {sorted((v, n) for v, n in after.items() if n < 2)[:10]}"
    finally:
        c.close()
