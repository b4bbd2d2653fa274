"""Quorum queues in the routing model: RabbitMQ 4's two priority levels with their 2:1 rule, and
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


def test_weighted_lanes_follow_rabbit_fifo_q():
    lanes = PriorityLanes(weighted=True)
    for offset in range(3):
        lanes.push(0, offset, False)
    for offset in range(3, 9):
        lanes.push(1, offset, False)
    order = [lanes.pop()[0] for _ in range(9)]
    assert order == [3, 4, 0, 5, 6, 1, 7, 8, 2]  # two high, then the older normal one
    assert lanes.pop() is None
    lanes = PriorityLanes(weighted=True)
    for offset in range(3):
        lanes.push(1, offset, False)
    lanes.push(0, 3, False)
    assert [lanes.pop()[0] for _ in range(4)] == [0, 1, 2, 3]  # high published first stays first


def test_strict_lanes_and_drop_lowest():
    lanes = PriorityLanes()
    for offset, level in enumerate([1, 5, 0, 5, 1]):
        lanes.push(level, offset, False)
    assert lanes.pop_lowest() == (2, False)
    assert [lanes.pop()[0] for _ in range(4)] == [1, 3, 0, 4]


def test_quorum_queue_delivers_high_two_to_one(make_router):
    router = make_router()
    vhost = router.vhosts["/"]
    queue = vhost.declare_queue("qq", owner="c", durable=True, arguments={"x-queue-type": "quorum"})
    for i in range(3):
        router.publish(vhost, "", "qq", props(), b"n%d" % i, None, False)
    for i in range(6):
        router.publish(vhost, "", "qq", props(9 if i % 2 else 5), b"h%d" % i, None, False)
    flush(router)
    assert queue.message_count() == 9
    assert drain(queue) == [b"h0", b"h1", b"n0", b"h2", b"h3", b"n1", b"h4", b"h5", b"n2"]


def test_quorum_queue_stays_fifo_for_priorities_up_to_4(make_router):
    router = make_router()
    vhost = router.vhosts["/"]
    queue = vhost.declare_queue("qq", owner="c", durable=True, arguments={"x-queue-type": "quorum"})
    for i, priority in enumerate([None, 4, 0, 3]):
        router.publish(vhost, "", "qq", props(priority), b"%d" % i, None, False)
    flush(router)
    assert not queue.stage.active and drain(queue) == [b"0", b"1", b"2", b"3"]


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


def test_the_fair_turn_counts_deliveries_made_before_the_first_high_message(make_router):
    router = make_router()
    vhost = router.vhosts["/"]
    queue = vhost.declare_queue("qq", owner="c", durable=True, arguments={"x-queue-type": "quorum"})
    router.publish(vhost, "", "qq", props(), b"n0", None, False)
    flush(router)
    assert drain(queue) == [b"n0"]  # one dequeue: rabbit_fifo_q's counter is at 1
    for body, priority in ((b"n1", None), (b"n2", None), (b"h0", 5), (b"h1", 5), (b"h2", 5)):
        router.publish(vhost, "", "qq", props(priority), body, None, False)
    flush(router)
    assert drain(queue) == [b"h0", b"n1", b"h1", b"h2", b"n2"]


def test_a_saved_definition_loads_even_where_a_declaration_is_refused():
    from routing.queue import Queue
    queue = Queue("/", "old", "old", None, durable=True, exclusive_owner=None, auto_delete=False,
                  arguments={"x-dead-letter-strategy": "at-least-once"})
    assert queue.args.dead_letter_strategy is None and queue.dead_letter_strategy() == dead_letter.AT_MOST_ONCE
