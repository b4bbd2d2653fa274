"""Policies and operator policies configure queues, as RabbitMQ recommends: message-ttl,
max-length, overflow and dead-lettering set by a policy apply to the queues its pattern finds;
where a queue's own argument sets the same limit, the lower holds; an operator policy caps them;
the queue's own dead-letter exchange wins over the policy's. The same expectations run against
RabbitMQ (``[rabbitmq]``) and a spread cluster.
"""
from __future__ import annotations

import subprocess
import time

import pytest
import requests

from .helpers import dead_letter_target, set_policy, unique, wait_until


def _count(channel, queue: str) -> int:
    return channel.queue_declare(queue, passive=True).method.message_count


def _publish(channel, queue: str, n: int) -> None:
    for i in range(n):
        channel.basic_publish("", queue, f"m{i}".encode())


def test_message_ttl_from_a_policy(amqp_broker, confirm_channel):
    q = unique("pttl")
    undo = set_policy(amqp_broker, f"ttl-{q}", f"^{q}$", {"message-ttl": 100})
    try:
        confirm_channel.queue_declare(q)
        _publish(confirm_channel, q, 2)
        assert wait_until(lambda: _count(confirm_channel, q) == 0, timeout=5)
        assert confirm_channel.basic_get(q, auto_ack=True)[0] is None
    finally:
        undo()


def test_a_policy_set_later_applies_to_the_queue(amqp_broker, confirm_channel):
    q = unique("plate")
    confirm_channel.queue_declare(q)
    undo = set_policy(amqp_broker, f"len-{q}", f"^{q}$", {"max-length": 2})
    try:
        _publish(confirm_channel, q, 5)
        assert _count(confirm_channel, q) == 2
        assert [confirm_channel.basic_get(q, auto_ack=True)[2] for _ in range(2)] == [b"m3", b"m4"]  # drop-head
    finally:
        undo()


@pytest.mark.parametrize("argument,policy", [(5, 2), (2, 5)])
def test_the_lower_of_argument_and_policy_max_length_holds(amqp_broker, confirm_channel, argument, policy):
    q = unique("pmin")
    undo = set_policy(amqp_broker, f"len-{q}", f"^{q}$", {"max-length": policy})
    try:
        confirm_channel.queue_declare(q, arguments={"x-max-length": argument})
        _publish(confirm_channel, q, 6)
        assert _count(confirm_channel, q) == 2
    finally:
        undo()


def test_an_operator_policy_caps_the_queue_argument(amqp_broker, confirm_channel):
    q = unique("pop")
    undo = set_policy(amqp_broker, f"cap-{q}", f"^{q}$", {"max-length": 1}, operator=True)
    try:
        confirm_channel.queue_declare(q, arguments={"x-max-length": 3})
        _publish(confirm_channel, q, 4)
        assert _count(confirm_channel, q) == 1
    finally:
        undo()


def test_overflow_reject_publish_from_a_policy(amqp_broker, confirm_channel):
    import pika.exceptions
    q = unique("prej")
    undo = set_policy(amqp_broker, f"rej-{q}", f"^{q}$", {"max-length": 1, "overflow": "reject-publish"})
    try:
        confirm_channel.queue_declare(q)
        confirm_channel.basic_publish("", q, b"kept")
        with pytest.raises(pika.exceptions.NackError):
            confirm_channel.basic_publish("", q, b"refused")
        assert confirm_channel.basic_get(q, auto_ack=True)[2] == b"kept"
    finally:
        undo()


def test_dead_letter_exchange_from_a_policy(amqp_broker, confirm_channel):
    dlx, dlq = dead_letter_target(confirm_channel)
    q = unique("pdlx")
    undo = set_policy(amqp_broker, f"dl-{q}", f"^{q}$", {"dead-letter-exchange": dlx, "message-ttl": 50})
    try:
        confirm_channel.queue_declare(q)
        confirm_channel.basic_publish("", q, b"late")
        assert wait_until(lambda: _count(confirm_channel, dlq) == 1, timeout=5)
        method, props, body = confirm_channel.basic_get(dlq, auto_ack=True)
        assert body == b"late" and props.headers["x-death"][0]["reason"] == "expired"
    finally:
        undo()


def test_the_queue_argument_wins_over_the_policy_dead_letter_exchange(amqp_broker, confirm_channel):
    own, own_q = dead_letter_target(confirm_channel)
    other, other_q = dead_letter_target(confirm_channel)
    q = unique("pown")
    undo = set_policy(amqp_broker, f"dl-{q}", f"^{q}$", {"dead-letter-exchange": other})
    try:
        confirm_channel.queue_declare(q, arguments={"x-dead-letter-exchange": own, "x-message-ttl": 50})
        confirm_channel.basic_publish("", q, b"late")
        assert wait_until(lambda: _count(confirm_channel, own_q) == 1, timeout=5)
        time.sleep(0.3)
        assert _count(confirm_channel, other_q) == 0
    finally:
        undo()


def test_a_policy_with_a_bad_value_is_refused(amqp_broker):
    name = unique("bad")
    if amqp_broker.target == "rabbitmq":
        with pytest.raises(subprocess.CalledProcessError):
            amqp_broker.node.ctl("set_policy", "--apply-to", "queues", name, "^x$", '{"message-ttl": "soon"}')
        return
    url = f"{amqp_broker.process.http_url}/api/policies/%2F/{name}"
    r = requests.put(url, json={"pattern": "^x$", "definition": {"message-ttl": "soon"}, "apply-to": "queues"},
                     auth=("guest", "guest"), timeout=10)
    assert r.status_code == 400 and "message-ttl" in r.text, (r.status_code, r.text)
    assert requests.get(url, auth=("guest", "guest"), timeout=10).status_code == 404


def test_the_queue_listing_names_the_policy_that_applies(amqp_broker, confirm_channel):
    q = unique("pname")
    confirm_channel.queue_declare(q)
    undo_low = set_policy(amqp_broker, f"a-{q}", f"^{q}", {"max-length": 9})
    undo_high = set_policy(amqp_broker, f"b-{q}", f"^{q}$", {"max-length": 7}, priority=3)
    try:
        if amqp_broker.target == "rabbitmq":
            out = amqp_broker.node.ctl("list_queues", "name", "policy", "--no-table-headers", "--quiet").stdout
            rows = dict(line.split("\t")[:2] for line in out.splitlines() if "\t" in line)
            assert rows[q].strip() == f"b-{q}"
            return
        r = requests.get(f"{amqp_broker.process.http_url}/api/queues/%2F/{q}", auth=("guest", "guest"), timeout=10)
        doc = r.json()
        assert doc["policy"] == f"b-{q}" and doc["effective_policy_definition"] == {"max-length": 7}, doc
    finally:
        undo_high()
        undo_low()
