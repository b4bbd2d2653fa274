"""Quorum queues in the routing model: RabbitMQ 4.3's 32 strict priority levels, and
at-least-once dead-lettering (held in the source until the copy is durable, retried, restored)."""
from __future__ import annotations

import pytest

from routing import dead_letter
from routing.errors import ChannelError
from routing.priorities import PriorityLanes

ALO = {"x-queue-type": "quorum", "x-dead-letter-exchange": "dlx", "x-dead-letter-strategy": "at-least-once",
       "x-overflow": "reject-publish"}


def props(priority: int | None = None) -> bytes:
    """A property section: persistent, with a priority if given (flags bits 12 and 11)."""
    if priority is None:
        return b"\x10\x00\x02"
    return b"\x18\x00\x02" + bytes([priority])




def flush(router):
    router.settle_appends()
    router.logs.flush_dirty()
    router.log_moved()


def drain(queue):
    got = []
    while (taken := queue.get("ch", no_ack=True)) is not None:
        got.append(taken[2].value)
    return got


def test_strict_lanes_and_drop_lowest():
    lanes = PriorityLanes()
    for offset, level in enumerate([1, 5, 0, 5, 1]):
        lanes.push(level, offset, False)
    assert lanes.pop_lowest() == (2, False)
    assert [lanes.pop()[0] for _ in range(4)] == [1, 3, 0, 4]


def test_quorum_queue_serves_32_levels_strictly(make_router):
    router = make_router()
    vhost = router.vhosts["/"]
    queue = vhost.declare_queue("qq", owner="c", durable=True, arguments={"x-queue-type": "quorum"})
    published = [(b"none", None), (b"p0", 0), (b"p4", 4), (b"p31", 31), (b"p255", 255), (b"p5", 5), (b"p3", 3),
                 (b"p30", 30), (b"none2", None), (b"p31b", 31)]
    for body, priority in published:
        router.publish(vhost, "", "qq", props(priority), body, None, False)
    flush(router)
    assert queue.message_count() == 10
    # 255 is clamped to 31 and keeps its place among the 31s; no priority is level 4
    assert drain(queue) == [b"p31", b"p255", b"p31b", b"p30", b"p5", b"none", b"p4", b"none2", b"p3", b"p0"]


def test_quorum_queue_stays_fifo_without_priorities(make_router):
    router = make_router()
    vhost = router.vhosts["/"]
    queue = vhost.declare_queue("qq", owner="c", durable=True, arguments={"x-queue-type": "quorum"})
    for i, priority in enumerate([None, 4, None, 4]):
        router.publish(vhost, "", "qq", props(priority), b"%d" % i, None, False)
    flush(router)
    assert not queue.stage.active and drain(queue) == [b"0", b"1", b"2", b"3"]


def test_a_low_priority_turns_the_lanes_on(make_router):
    router = make_router()
    vhost = router.vhosts["/"]
    queue = vhost.declare_queue("qq", owner="c", durable=True, arguments={"x-queue-type": "quorum"})
    for body, priority in ((b"low", 1), (b"none", None)):
        router.publish(vhost, "", "qq", props(priority), body, None, False)
    flush(router)
    assert queue.stage.active and drain(queue) == [b"none", b"low"]


def test_a_requeued_message_comes_back_first_and_keeps_its_priority_across_a_restart(make_router):
    router = make_router()
    vhost = router.vhosts["/"]
    queue = vhost.declare_queue("qq", owner="c", durable=True, arguments={"x-queue-type": "quorum"})
    router.publish(vhost, "", "qq", props(), b"normal", None, False)
    router.publish(vhost, "", "qq", props(7), b"high", None, False)
    flush(router)
    offset, _, record = queue.get("ch", no_ack=False)
    assert record.value == b"high"
    queue.reject([offset], requeue=True)
    offset, redelivered, record = queue.get("ch", no_ack=False)
    assert (record.value, redelivered) == (b"high", True)  # returned messages go first, as in rabbit_fifo
    router.checkpoint()
    router.logs.shutdown()
    queue = make_router().vhosts["/"].queues["qq"]
    assert queue.stage.active  # saved with the ack floor: the lanes order the backlog at once
    assert drain(queue) == [b"high", b"normal"]


def test_quorum_queues_refuse_x_max_priority_and_classic_ones_the_strategy(make_router):
    vhost = make_router().vhosts["/"]
    with pytest.raises(ChannelError, match="of queue type rabbit_quorum_queue"):
        vhost.declare_queue("q1", owner="c", durable=True, arguments={"x-queue-type": "quorum", "x-max-priority": 5})
    with pytest.raises(ChannelError, match="of queue type rabbit_classic_queue"):
        vhost.declare_queue("q2", owner="c", arguments={"x-dead-letter-strategy": "at-least-once"})
    with pytest.raises(ChannelError, match="invalid_dlx_strategy"):
        vhost.declare_queue("q3", owner="c", durable=True, arguments={**ALO, "x-dead-letter-strategy": "maybe"})


def _rejected_with_no_route(router):
    vhost = router.vhosts["/"]
    vhost.declare_exchange("dlx", "fanout", durable=True)
    source = vhost.declare_queue("src", owner="c", durable=True, arguments=ALO)
    router.publish(vhost, "", "src", props(), b"precious", None, False)
    flush(router)
    offset, _, _ = source.get("ch", no_ack=False)
    source.reject([offset], requeue=False)
    flush(router)
    return vhost, source


def test_at_least_once_holds_a_dead_letter_until_a_route_appears(make_router):
    router = make_router()
    vhost, source = _rejected_with_no_route(router)
    assert source.dead_letter_strategy() == dead_letter.AT_LEAST_ONCE
    assert source.held.reasons == {0: "rejected"} and source.message_count() == 0 and source.ack_floor == 0
    assert source.get("ch", no_ack=True) is None  # held: not delivered to consumers again
    target = vhost.declare_queue("dlq", owner="c", durable=True)
    vhost.bind_queue("dlq", "dlx", "", {}, "c")
    source.held.retry_at = 0
    router.tick()
    router.commit()
    assert source.held.reasons  # appended to the target, not yet fsync'd: still held
    router.logs.flush_dirty()
    router.log_moved()
    assert not source.held and source.ack_floor == 1
    assert drain(target) == [b"precious"]


def test_held_dead_letters_survive_a_restart(make_router):
    router = make_router()
    _rejected_with_no_route(router)
    router.checkpoint()
    assert router.state.read("ack-floors", {})["src"]["dead-lettering"] == {"0": "rejected"}
    router.logs.shutdown()
    router = make_router()
    vhost = router.vhosts["/"]
    source = vhost.queues["src"]
    assert source.held.reasons == {0: "rejected"} and source.message_count() == 0
    assert source.get("ch", no_ack=True) is None
    target = vhost.declare_queue("dlq", owner="c", durable=True)
    vhost.bind_queue("dlq", "dlx", "", {}, "c")
    router.tick()  # a restored queue retries at once
    flush(router)
    assert not source.held and drain(target) == [b"precious"]


def test_without_reject_publish_it_is_at_most_once(make_router):
    router = make_router()
    vhost = router.vhosts["/"]
    vhost.declare_exchange("dlx", "fanout")
    source = vhost.declare_queue("src", owner="c", durable=True,
                                 arguments={k: v for k, v in ALO.items() if k != "x-overflow"})
    assert source.dead_letter_strategy() == dead_letter.AT_MOST_ONCE
    router.publish(vhost, "", "src", props(), b"lost", None, False)
    flush(router)
    offset, _, _ = source.get("ch", no_ack=False)
    source.reject([offset], requeue=False)
    assert not source.held and source.ack_floor == 1  # dropped: no route, as RabbitMQ's at-most-once


def test_returned_messages_go_before_every_level(make_router):
    router = make_router()
    vhost = router.vhosts["/"]
    queue = vhost.declare_queue("qq", owner="c", durable=True, arguments={"x-queue-type": "quorum"})
    for body, priority in ((b"low", 0), (b"mid", None), (b"top", 31)):
        router.publish(vhost, "", "qq", props(priority), body, None, False)
    flush(router)
    taken = [queue.get("ch", no_ack=False) for _ in range(3)]
    assert [t[2].value for t in taken] == [b"top", b"mid", b"low"]
    queue.reject([taken[2][0]], requeue=True)  # both come back before every level
    queue.reject([taken[1][0]], requeue=True)
    router.publish(vhost, "", "qq", props(31), b"top2", None, False)
    flush(router)
    assert drain(queue) == [b"low", b"mid", b"top2"]


def test_a_saved_definition_loads_even_where_a_declaration_is_refused():
    from routing.queue import Queue
    queue = Queue("/", "old", "old", None, durable=True, exclusive_owner=None, auto_delete=False,
                  arguments={"x-dead-letter-strategy": "at-least-once"})
    assert queue.args.dead_letter_strategy is None and queue.dead_letter_strategy() == dead_letter.AT_MOST_ONCE
