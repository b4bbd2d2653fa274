"""The AMQP model over a real log: vhost rules, publish/commit/deliver, acks, restart."""
from __future__ import annotations

import pytest

from routing.errors import ChannelError, ConnectionError

PROPS_PERSISTENT = b"\x10\x00\x02"  # delivery-mode present (bit 12), value 2


class Collector:
    """A consumer as a channel would be: takes up to ``prefetch`` messages."""

    def __init__(self, tag="c1", prefetch=0, priority=0, no_ack=False):
        self.tag, self.prefetch, self.priority, self.no_ack = tag, prefetch, priority, no_ack
        self.owner = self
        self.got: list[tuple[int, bytes, bool]] = []
        self.unacked = 0
        self.cancelled = False

    def has_credit(self):
        return not self.prefetch or self.unacked < self.prefetch

    def deliver(self, queue, offset, record, redelivered):
        self.got.append((offset, record.value, redelivered))
        if not self.no_ack:
            self.unacked += 1

    def cancelled_by_server(self, queue):
        self.cancelled = True




def publish(router, vhost, exchange, key, body, confirm=False):
    return router.publish(vhost, exchange, key, PROPS_PERSISTENT, body, None, confirm)


def flush(router):
    router.commit()
    router.logs.flush_dirty()
    router.log_moved()


def test_default_exchange_publish_deliver_ack(make_router):
    router = make_router()
    vhost = router.vhosts["/"]
    queue = vhost.declare_queue("jobs", owner="conn", durable=True)
    for i in range(5):
        publish(router, vhost, "", "jobs", b"m%d" % i)
    assert queue.message_count() == 0  # staged, not appended yet
    router.commit()
    assert queue.message_count() == 5  # deliverable once appended, before the fsync (as RabbitMQ)
    consumer = Collector(prefetch=2)
    queue.add_consumer(consumer)
    queue.dispatch()
    assert [v for _, v, _ in consumer.got] == [b"m0", b"m1"]
    queue.ack([0, 1])
    consumer.unacked = 0
    queue.dispatch()
    assert [v for _, v, _ in consumer.got][2:] == [b"m2", b"m3"]
    assert queue.ack_floor == 2


def test_release_redelivers_in_order_flagged(make_router):
    router = make_router()
    vhost = router.vhosts["/"]
    queue = vhost.declare_queue("q", owner="conn", durable=True)
    for i in range(3):
        publish(router, vhost, "", "q", b"%d" % i)
    flush(router)
    first = Collector()
    queue.add_consumer(first)
    queue.dispatch()
    queue.remove_consumer(first)
    queue.release(first)
    second = Collector(tag="c2")
    queue.add_consumer(second)
    queue.dispatch()
    assert second.got == [(0, b"0", True), (1, b"1", True), (2, b"2", True)]


def test_confirm_waits_for_the_fsync(make_router):
    router = make_router()
    vhost = router.vhosts["/"]
    vhost.declare_queue("q", owner="conn", durable=True)
    pub, routed = publish(router, vhost, "", "q", b"x", confirm=True)
    assert routed
    assert not pub.durable() or not pub.targets  # not appended yet
    router.commit()
    assert pub.targets and not pub.durable()
    router.logs.flush_dirty()
    assert pub.durable()


def test_rules_and_reply_codes(make_router):
    router = make_router()
    vhost = router.vhosts["/"]
    with pytest.raises(ChannelError) as err:
        vhost.declare_queue("missing", owner="c", passive=True)
    assert err.value.reply_code == 404 and "no queue 'missing' in vhost '/'" in err.value.reply_text
    with pytest.raises(ChannelError) as err:
        vhost.declare_exchange("amq.custom", "direct")
    assert err.value.reply_code == 403
    with pytest.raises(ConnectionError) as err:
        vhost.declare_exchange("x", "nonsense")
    assert err.value.reply_code == 503
    vhost.declare_exchange("x", "direct")
    with pytest.raises(ChannelError) as err:
        vhost.declare_exchange("x", "fanout")
    assert err.value.reply_code == 406
    vhost.declare_queue("excl", owner="c1", exclusive=True)
    with pytest.raises(ChannelError) as err:
        vhost.declare_queue("excl", owner="c2", exclusive=True)
    assert err.value.reply_code == 405
    vhost.declare_queue("d", owner="c", durable=True)
    with pytest.raises(ChannelError) as err:
        vhost.declare_queue("d", owner="c", durable=False)
    assert err.value.reply_code == 406
    vhost.bind_queue("d", "x", "k", {}, "c")
    with pytest.raises(ChannelError) as err:
        vhost.delete_exchange("x", if_unused=True)
    assert err.value.reply_code == 406
    with pytest.raises(ChannelError) as err:
        publish(router, vhost, "nowhere", "k", b"")
    assert err.value.reply_code == 404
    name = vhost.declare_queue("", owner="c").name
    assert name.startswith("amq.gen-")


def test_topic_fanout_and_alternate_exchange(make_router):
    router = make_router()
    vhost = router.vhosts["/"]
    vhost.declare_exchange("ae", "fanout")
    vhost.declare_exchange("t", "topic", arguments={"alternate-exchange": "ae"})
    for q in ("stars", "hashes", "unrouted"):
        vhost.declare_queue(q, owner="c")
    vhost.bind_queue("stars", "t", "a.*", {}, "c")
    vhost.bind_queue("hashes", "t", "a.#", {}, "c")
    vhost.bind_queue("unrouted", "ae", "", {}, "c")
    routes = {key: sorted(q.name for q in vhost.route("t", key, None)) for key in ("a", "a.b", "a.b.c", "b")}
    assert routes == {"a": ["hashes"], "a.b": ["hashes", "stars"], "a.b.c": ["hashes"], "b": ["unrouted"]}


def test_durable_definitions_and_ack_floor_survive_restart(make_router):
    router = make_router()
    vhost = router.vhosts["/"]
    vhost.declare_exchange("events", "topic", durable=True)
    queue = vhost.declare_queue("keep", owner="c", durable=True, arguments={"x-max-length": 100})
    vhost.declare_queue("lose", owner="c", durable=False)
    vhost.bind_queue("keep", "events", "#", {}, "c")
    for i in range(4):
        publish(router, vhost, "events", "k", b"%d" % i)
    flush(router)
    consumer = Collector()
    queue.add_consumer(consumer)
    queue.dispatch()
    queue.ack([0, 1])
    router.checkpoint()
    router.logs.shutdown()

    again = make_router()
    vhost = again.vhosts["/"]
    assert "lose" not in vhost.queues and "events" in vhost.exchanges
    queue = vhost.queues["keep"]
    assert queue.arguments == {"x-max-length": 100}
    assert [q.name for q in vhost.route("events", "any", None)] == ["keep"]
    consumer = Collector()
    queue.add_consumer(consumer)
    queue.dispatch()
    assert consumer.got == [(2, b"2", True), (3, b"3", True)]  # unacked before the restart: redelivered


def test_delete_queue_cancels_consumers_and_removes_the_topic(make_router):
    router = make_router()
    vhost = router.vhosts["/"]
    queue = vhost.declare_queue("gone", owner="c", durable=True)
    consumer = Collector()
    queue.add_consumer(consumer)
    vhost.delete_queue("gone", owner="c")
    assert consumer.cancelled and router.logs.store.get_topic("gone") is None


def test_max_length_drop_head_and_reject_publish(make_router):
    router = make_router()
    vhost = router.vhosts["/"]
    drop = vhost.declare_queue("drop", owner="c", arguments={"x-max-length": 2})
    vhost.declare_queue("refuse", owner="c", arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
    for i in range(4):
        publish(router, vhost, "", "drop", b"%d" % i)
    flush(router)
    assert drop.message_count() == 2  # the two oldest were dropped as the append went over the limit
    consumer = Collector()
    drop.add_consumer(consumer)
    drop.dispatch()
    assert [v for _, v, _ in consumer.got] == [b"2", b"3"]
    results = [publish(router, vhost, "", "refuse", b"%d" % i, confirm=True)[0] for i in range(3)]
    flush(router)
    assert [p.rejected for p in results] == [False, False, True]


def test_dead_letter_on_reject_with_x_death(make_router):
    router = make_router()
    vhost = router.vhosts["/"]
    vhost.declare_exchange("dlx", "fanout")
    dead = vhost.declare_queue("dead", owner="c")
    vhost.bind_queue("dead", "dlx", "", {}, "c")
    work = vhost.declare_queue("work", owner="c", arguments={"x-dead-letter-exchange": "dlx"})
    publish(router, vhost, "", "work", b"bad")
    flush(router)
    taker = Collector()
    work.add_consumer(taker)
    work.dispatch()
    work.reject([0], requeue=False)
    flush(router)
    from routing import mapping, message_fields
    record = dead.reader.get(0)
    assert record.value == b"bad"
    exchange, key, raw = mapping.amqp_from_record(record)
    death = message_fields.headers_table(raw)["x-death"][0]
    assert death["reason"] == "rejected" and death["queue"] == "work" and death["count"] == 1


def test_exchange_log_takes_every_publish_and_forwards_kafka_records(make_router):
    from wire.records import encode_batch, Record
    router = make_router()
    vhost = router.vhosts["/"]
    vhost.declare_exchange("events", "direct", durable=True, arguments={"x-log": True})
    queue = vhost.declare_queue("bound", owner="c")
    vhost.bind_queue("bound", "events", "k", {}, "c")
    publish(router, vhost, "events", "k", b"routed")
    publish(router, vhost, "events", "other", b"unrouted")
    flush(router)
    log = router.logs.get_log("events", 0)
    assert log.next_offset == 2 and queue.message_count() == 1
    with pytest.raises(ChannelError) as err:  # one namespace: the topic is taken
        vhost.declare_queue("events", owner="c")
    assert err.value.reply_code == 406
    log.append(encode_batch([Record(0, 1000, b"k", b"from-kafka")]))  # a Kafka producer's record
    flush(router)
    consumer = Collector()
    queue.add_consumer(consumer)
    queue.dispatch()
    assert [v for _, v, _ in consumer.got] == [b"routed", b"from-kafka"]
    assert log.next_offset == 3  # forwarding does not write the log again


def test_stream_queue_retention_and_offsets(make_router):
    router = make_router()
    vhost = router.vhosts["/"]
    queue = vhost.declare_queue("s", owner="c", durable=True, arguments={
        "x-queue-type": "stream", "x-max-age": "7D", "x-max-length-bytes": 10_000_000})
    configs = router.logs.store.get_topic("s").configs
    assert configs["retention.ms"] == str(7 * 86400_000) and configs["retention.bytes"] == "10000000"
    for i in range(3):
        publish(router, vhost, "", "s", b"%d" % i)
    flush(router)
    assert [queue.stream_start(spec) for spec in ("first", "last", "next", 1, "30m")] == [0, 2, 3, 1, 0]
    with pytest.raises(ChannelError):
        vhost.declare_queue("bad", owner="c", durable=True, arguments={"x-queue-type": "stream", "x-max-age": "7x"})


def test_a_queue_over_the_partition_budget_is_refused_with_a_clear_406(tmp_path):
    """Each queue is a partition and each partition keeps files open: past --max-partitions the
    declaration gets 406 PRECONDITION_FAILED naming the limit and the fix (it was a 541)."""
    from core.log_manager import LogManager
    from core.metadata import LocalMetadataStore
    from routing.broker import Router
    logs = LogManager(tmp_path, LocalMetadataStore(tmp_path), max_partitions=2)
    logs.startup()
    try:
        router = Router(tmp_path, logs)
        router.load()
        vhost = router.vhosts["/"]
        vhost.declare_queue("q1", owner="c", durable=True)
        vhost.declare_queue("q2", owner="c", durable=True)
        with pytest.raises(ChannelError) as refused:
            vhost.declare_queue("q3", owner="c", durable=True)
        assert refused.value.reply_code == 406
        assert "cannot declare queue 'q3'" in refused.value.reply_text and "--max-partitions" in refused.value.reply_text
        assert "q3" not in vhost.queues
    finally:
        logs.shutdown()


def test_the_tick_looks_again_at_a_queue_only_when_its_head_can_have_changed(make_router):
    router = make_router()
    vhost = router.vhosts["/"]
    queue = vhost.declare_queue("ttl", owner="conn", durable=True)
    publish(router, vhost, "", "ttl", b"keeps")
    router.commit()
    router.tick()
    settled = queue._head_settled
    assert settled is not None  # the head never expires: later ticks skip the queue...
    router.tick()
    assert queue._head_settled == settled
    expires_at_once = b"\x11\x00\x02\x010"  # delivery-mode 2, expiration "0"
    router.publish(vhost, "", "ttl", expires_at_once, b"goes", None, False)
    router.commit()
    router.tick()  # ...also when the log grows: the head is still the first message
    assert queue._head_settled == settled and queue.message_count() == 2
    consumer = Collector(prefetch=1)
    queue.add_consumer(consumer)
    queue.dispatch()  # the first message is taken: the head is the expiring one, only the cursor moved
    queue.remove_consumer(consumer)
    queue.ack([0])
    router.tick()
    assert [v for _, v, _ in consumer.got] == [b"keeps"] and queue.message_count() == 0
