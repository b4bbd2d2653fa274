"""Share partitions (routing/share.py) and share-group membership (core/groups/share_group.py).

A plain share partition is a queue nobody declared over a topic partition; a share group named
like an AMQP queue drives that queue. Records are appended with the Kafka producer's path
(LogManager), AMQP messages with the router's publish.
"""
from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from core.groups.share_group import ShareGroups
from routing.share import ACCEPT, GAP, REJECT, RELEASE
from wire.records import simple_batch


@pytest.fixture
def kafka_topic():
    """Make a one-partition topic holding ``values`` (a batch each, or one batch of all with
    ``one_batch``; appended and flushed): its log. A batch each keeps acquisitions exact (a share
    fetch's limit is soft: the batch it falls in is acquired whole)."""
    def make(router, topic: str, values: list[bytes], one_batch: bool = False):
        router.logs.create_topic(topic, 1)
        plog = router.logs.logs[(topic, 0)]
        for batch in [values] if one_batch else [[v] for v in values]:
            plog.append(simple_batch(batch))
        router.logs.flush_dirty()
        assert plog.high_watermark == len(values)
        return plog
    return make


def test_the_batch_a_limit_falls_in_is_acquired_whole(make_router, kafka_topic):
    router = make_router()
    plog = kafka_topic(router, "t", [b"a", b"b", b"c", b"d"], one_batch=True)
    router.logs.logs[("t", 0)].append(simple_batch([b"e", b"f"]))
    router.logs.flush_dirty()
    shares = router.shares
    shares.auto_offset_reset = lambda group: "earliest"
    sp = shares.get("g", "t", 0, plog)
    assert sp.acquire(shares.owner("g", "m1"), 2, 1 << 20, deadline=1e12) == [(o, 1) for o in range(4)]
    assert sp.acquire(shares.owner("g", "m2"), 1, 1 << 20, deadline=1e12) == [(4, 1), (5, 1)]


def test_acquire_accept_release_reject(make_router, kafka_topic):
    router = make_router()
    plog = kafka_topic(router, "t", [b"a", b"b", b"c", b"d"])
    shares = router.shares
    shares.auto_offset_reset = lambda group: "earliest"
    sp = shares.get("g", "t", 0, plog)
    one, two = shares.owner("g", "m1"), shares.owner("g", "m2")
    assert sp.acquire(one, 2, 1 << 20, deadline=1e12) == [(0, 1), (1, 1)]
    assert sp.acquire(two, 10, 1 << 20, deadline=1e12) == [(2, 1), (3, 1)]  # never the same record twice
    assert not sp.acknowledge(two, 0, 0, (ACCEPT,))  # not its record: INVALID_RECORD_STATE, nothing done
    assert sp.acknowledge(one, 0, 1, (ACCEPT, RELEASE))
    assert sp.acknowledge(two, 2, 3, (REJECT,))
    assert sp.acquire(two, 10, 1 << 20, deadline=1e12) == [(1, 2)]  # released: back, second delivery
    assert sp.acknowledge(two, 1, 1, (ACCEPT,))
    assert sp.acquire(one, 10, 1 << 20, deadline=1e12) == []
    assert sp.queue.ack_floor == 4


def test_a_gap_is_accepted_only_for_what_was_acquired(make_router, kafka_topic):
    router = make_router()
    plog = kafka_topic(router, "t", [b"a", b"b"])
    router.shares.auto_offset_reset = lambda group: "earliest"
    sp = router.shares.get("g", "t", 0, plog)
    owner = router.shares.owner("g", "m")
    sp.acquire(owner, 1, 1 << 20, deadline=1e12)
    assert sp.acknowledge(owner, 0, 1, (ACCEPT, GAP))  # offset 1 was never acquired: skipped
    assert sp.acquire(owner, 5, 1 << 20, deadline=1e12) == [(1, 1)]


def test_latest_is_the_default_start_as_in_kafka(make_router, kafka_topic):
    router = make_router()
    plog = kafka_topic(router, "t", [b"old"])
    sp = router.shares.get("g", "t", 0, plog)
    assert sp.acquire(router.shares.owner("g", "m"), 5, 1 << 20, deadline=1e12) == []


def test_the_delivery_count_limit_archives(make_router, kafka_topic):
    router = make_router()
    plog = kafka_topic(router, "t", [b"poison"])
    router.shares.auto_offset_reset = lambda group: "earliest"
    sp = router.shares.get("g", "t", 0, plog)
    owner = router.shares.owner("g", "m")
    counts = []
    for _ in range(6):
        got = sp.acquire(owner, 1, 1 << 20, deadline=1e12)
        if not got:
            break
        counts.append(got[0][1])
        sp.acknowledge(owner, 0, 0, (RELEASE,))
    assert counts == [1, 2, 3, 4, 5]
    assert sp.queue.ack_floor == 1  # archived


def test_expired_locks_release_and_a_leaving_member_gives_back(make_router, kafka_topic):
    router = make_router()
    now = [1000.0]
    shares = router.shares
    shares.clock = lambda: now[0]
    plog = kafka_topic(router, "t", [b"a", b"b"])
    shares.auto_offset_reset = lambda group: "earliest"
    sp = shares.get("g", "t", 0, plog)
    m1 = shares.owner("g", "m1")
    sp.acquire(m1, 1, 1 << 20, deadline=now[0] + 30)
    sp.acquire(m1, 1, 1 << 20, deadline=now[0] + 60)
    now[0] += 31
    assert shares.expire_locks() == 1
    m2 = shares.owner("g", "m2")
    assert sp.acquire(m2, 5, 1 << 20, deadline=1e12) == [(0, 2)]
    assert shares.release_member("g", "m1") == 1
    assert sp.acquire(m2, 5, 1 << 20, deadline=1e12) == [(1, 2)]


def test_plain_start_offsets_survive_a_restart(make_router, kafka_topic):
    router = make_router()
    plog = kafka_topic(router, "t", [b"a", b"b", b"c"])
    router.shares.auto_offset_reset = lambda group: "earliest"
    sp = router.shares.get("g", "t", 0, plog)
    owner = router.shares.owner("g", "m")
    sp.acquire(owner, 3, 1 << 20, deadline=1e12)
    sp.acknowledge(owner, 0, 1, (ACCEPT,))
    sp.acknowledge(owner, 2, 2, (RELEASE,))
    router.checkpoint()
    router.logs.shutdown()
    again = make_router()
    sp = again.shares.get("g", "t", 0, again.logs.logs[("t", 0)])
    assert sp.acquire(again.shares.owner("g", "m"), 5, 1 << 20, deadline=1e12) == [(2, 2)]
    assert again.shares.describe("g") == [("t", 0, 2)]


def test_a_group_named_like_a_queue_drives_that_queue(make_router):
    router = make_router()
    vhost = router.vhosts["/"]
    queue = vhost.declare_queue("orders", owner="c", durable=True, arguments={"x-queue-type": "quorum"})
    for i in range(3):
        router.publish(vhost, "", "orders", b"\x10\x00\x02", b"o%d" % i, None, False)
    router.settle_appends()
    router.logs.flush_dirty()
    sp = router.shares.get("orders", "orders", 0, queue.plog)
    assert sp.shared and sp.queue is queue
    owner = router.shares.owner("orders", "m")
    assert sp.acquire(owner, 1, 1 << 20, deadline=1e12) == [(0, 1)]
    taken = queue.get("channel", no_ack=False)  # an AMQP basic.get takes the next one, not the same
    assert taken[0] == 1
    sp.acknowledge(owner, 0, 0, (RELEASE,))
    assert queue.delivery_counts == {0: 1}  # one count for both protocols
    again = queue.get("channel", no_ack=False)
    assert again[0] == 0 and again[1]  # redelivered over AMQP
    assert queue.message_count() == 1


def test_membership_epochs_and_expiry():
    now = [0.0]
    topics = {"t": 3}
    gone = []
    groups = ShareGroups(lambda: topics, lambda g: "classic" if g == "taken" else None, lambda: now[0],
                         session_timeout_ms=lambda g: 10_000)
    groups.on_member_gone = lambda g, m: gone.append((g, m))
    a = groups.heartbeat("g", "A", 0, subscribed_topic_names=["t"])
    assert (a.error, a.member_epoch, a.assignment) == (ErrorCode.none, 1, {"t": {0, 1, 2}})
    b = groups.heartbeat("g", "B", 0, subscribed_topic_names=["t"])
    assert b.member_epoch == 2 and b.assignment == {"t": {0, 1, 2}}  # every member gets every partition
    assert groups.heartbeat("g", "A", 5).error == ErrorCode.fenced_member_epoch
    topics["t"] = 4
    a = groups.heartbeat("g", "A", 1)
    assert a.member_epoch == 3 and a.assignment == {"t": {0, 1, 2, 3}}
    assert groups.heartbeat("taken", "X", 0, subscribed_topic_names=["t"]).error == ErrorCode.group_id_not_found
    assert groups.heartbeat("g", "C", 0).error == ErrorCode.invalid_request  # no subscription on join
    now[0] = 9.0
    groups.heartbeat("g", "A", 3)
    now[0] = 11.0
    groups.tick()
    assert gone == [("g", "B")]
    assert groups.delete("g") == ErrorCode.non_empty_group
    assert groups.heartbeat("g", "A", -1).member_epoch == -1
    assert groups.delete("g") == ErrorCode.none
