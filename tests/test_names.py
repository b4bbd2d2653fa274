import pytest
from hypothesis import given, strategies as st

from core.errors import InvalidTopicError
from core.metadata import MAX_TOPIC_LENGTH, check_topic_name
from core.names import PREFIX, _escape, _legal, queue_topic, topic_queue


def test_plain_names_of_the_default_vhost_are_kept():
    assert queue_topic("/", "orders") == "orders"
    assert topic_queue("orders") == ("/", "orders")


def test_other_vhosts_and_illegal_names_are_escaped():
    assert queue_topic("/", "a queue") == PREFIX + "_2f.a_20queue"
    assert queue_topic("prod", "orders.eu_1") == PREFIX + "prod.orders_2eeu__1"
    assert topic_queue(PREFIX + "prod.orders_2eeu__1") == ("prod", "orders.eu_1")
    assert queue_topic("/", PREFIX + "x") != PREFIX + "x"  # the prefix itself cannot pass through


@given(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=40))
def test_round_trip_and_legal(vhost, queue):
    escaped_length = len(PREFIX) + len(_escape(vhost)) + 1 + len(_escape(queue))
    kept = vhost == "/" and _legal(queue) and not queue.startswith(PREFIX)
    if escaped_length > MAX_TOPIC_LENGTH and not kept:
        # Names whose escape exceeds Kafka's limit are refused with a clear error, never truncated.
        with pytest.raises(InvalidTopicError, match="use a shorter queue name"):
            queue_topic(vhost, queue)
        return
    topic = queue_topic(vhost, queue)
    check_topic_name(topic)
    assert topic_queue(topic) == (vhost, queue)


def test_queue_topics_are_not_internal_but_the_brokers_own_topics_are():
    from core.names import is_internal_topic

    assert not is_internal_topic(queue_topic("/", "a queue"))  # Kafka clients (Spark's source) skip internal ones
    assert not is_internal_topic(queue_topic("prod", "orders"))
    assert not is_internal_topic("orders")
    assert all(is_internal_topic(t) for t in ("__consumer_offsets", "__transaction_state", "__amqp_state"))
