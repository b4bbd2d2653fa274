"""Quorum queues' delayed retry (RabbitMQ 4.3) in the routing model, on a clock the test moves."""
from __future__ import annotations

from routing import delayed_retry

from tests.test_routing_quorum import drain, flush, props


def _queue(make_router, **arguments):
    router = make_router()
    vhost = router.vhosts["/"]
    queue = vhost.declare_queue("qq", owner="c", durable=True,
                                arguments={"x-queue-type": "quorum", **arguments})
    now = [1000.0]
    queue.clock = lambda: now[0]
    return router, vhost, queue, now


def test_resolve_follows_rabbitmqs_precedence():
    no_policy = lambda key, kind=int: None  # noqa: E731
    assert delayed_retry.resolve({}, no_policy) is None
    assert delayed_retry.resolve({"x-delayed-retry-type": "all"}, no_policy) is None  # no minimum
    assert delayed_retry.resolve({"x-delayed-retry-type": "disabled", "x-delayed-retry-min": 5}, no_policy) is None
    assert delayed_retry.resolve({"x-delayed-retry-type": "all", "x-delayed-retry-min": 5}, no_policy) == ("all", 5, 5)
    policy = {"delayed-retry-type": "failed", "delayed-retry-min": 50, "delayed-retry-max": 900}
    by_policy = lambda key, kind=int: policy.get(key)  # noqa: E731
    args = {"x-delayed-retry-type": "all", "x-delayed-retry-min": 100, "x-delayed-retry-max": 1000}
    assert delayed_retry.resolve(args, by_policy) == ("failed", 50, 900)  # policy's type; smaller bounds


def test_a_nacked_message_waits_its_minimum_then_comes_back_first(make_router):
    router, vhost, queue, now = _queue(make_router, **{"x-delayed-retry-type": "returned",
                                                       "x-delayed-retry-min": 2000, "x-delayed-retry-max": 10000})
    for body in (b"a", b"b"):
        router.publish(vhost, "", "qq", props(), body, None, False)
    flush(router)
    offset, _, record = queue.get("ch", no_ack=False)
    assert record.value == b"a"
    queue.reject([offset], requeue=True)  # basic.nack: "returned"
    assert queue.message_count() == 1 and queue.unacked_count() == 0
    now[0] += 1.9
    router.tick()
    offset_b, _, record = queue.get("ch", no_ack=False)
    assert record.value == b"b"
    now[0] += 0.2
    router.tick()
    assert queue.message_count() == 1
    offset, redelivered, record = queue.get("ch", no_ack=False)
    assert (record.value, redelivered) == (b"a", True)
    assert queue.delivery_counts[offset] == 1


def test_failed_type_delays_rejects_only_and_grows_with_them(make_router):
    router, vhost, queue, now = _queue(make_router, **{"x-delayed-retry-type": "failed",
                                                       "x-delayed-retry-min": 1000, "x-delayed-retry-max": 2500})
    router.publish(vhost, "", "qq", props(), b"m", None, False)
    flush(router)
    offset, _, _ = queue.get("ch", no_ack=False)
    queue.reject([offset], requeue=True)  # nack: no wait
    assert queue.get("ch", no_ack=False)[0] == offset
    waits = []
    for _ in range(3):  # rejects: 1000, 2000, then the 2500 cap
        queue.reject([offset], requeue=True, failed=True)
        start = now[0]
        while queue.message_count() == 0 and now[0] - start < 10:
            now[0] += 0.1
            router.tick()
        waits.append(round((now[0] - start) * 1000))
        assert queue.get("ch", no_ack=False)[0] == offset
    assert waits == [1000, 2000, 2500]


def test_disabled_by_default(make_router):
    router, vhost, queue, now = _queue(make_router)
    router.publish(vhost, "", "qq", props(), b"m", None, False)
    flush(router)
    offset, _, _ = queue.get("ch", no_ack=False)
    queue.reject([offset], requeue=True, failed=True)
    assert drain(queue) == [b"m"]
