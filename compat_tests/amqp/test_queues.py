"""Queues: naming, passive/durable/exclusive/auto-delete, purge and delete, declare-ok counts,
argument equivalence, and the queue arguments (TTL, expiry, max-length and overflow,
dead-lettering with x-death, priorities, single active consumer, quorum type)."""
from __future__ import annotations

import datetime

import pika
import pytest

from .helpers import bodies, connect, consume_n, declare_ok, drain_get, wait_until

# RabbitMQ cuts a reply text longer than a short string (255 bytes) to 252 bytes plus "...".
LOCKED = ("RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{q}' in vhost '/'. It could be "
          "originally declared on another connection or the exclusive property value does not match that "
          "of the original declaration.")


def _locked(queue: str) -> str:
    text = LOCKED.format(q=queue).encode()
    return (text if len(text) <= 255 else text[:252] + b"...").decode()


@pytest.fixture
def pub(connection):
    ch = connection.channel()
    ch.confirm_delivery()
    return ch


def _closed_with(excinfo, code: int, text: str) -> None:
    assert (excinfo.value.reply_code, excinfo.value.reply_text) == (code, text)


def _gone(amqp_broker, queue: str) -> bool:
    """True once a passive declare of ``queue`` answers 404 (checked on a fresh connection)."""
    conn = connect(amqp_broker)
    try:
        conn.channel().queue_declare(queue, passive=True)
        return False
    except pika.exceptions.ChannelClosedByBroker as e:
        assert e.reply_code in (404, 405), e  # 405: still there, exclusive to another connection
        return e.reply_code == 404
    finally:
        if conn.is_open:
            conn.close()


def test_server_named_queue(channel):
    ok = channel.queue_declare("", exclusive=True).method
    assert ok.queue.startswith("amq.gen-") and len(ok.queue) > len("amq.gen-")
    assert (ok.message_count, ok.consumer_count) == (0, 0)
    other = channel.queue_declare("", exclusive=True).method.queue
    assert other != ok.queue


def test_reserved_amq_prefix_is_403(channel):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        channel.queue_declare("amq.foo")
    _closed_with(info, 403, "ACCESS_REFUSED - queue name 'amq.foo' contains reserved prefix 'amq.*'")


def test_names_outside_the_old_spec_pattern_work_as_in_rabbitmq(connection, name):
    """RabbitMQ takes any UTF-8 queue or exchange name up to 255 bytes, not only the 0-9-1 spec's
    old pattern (letters, digits, ``-_.:``): declare-ok, get-ok and return must all carry it."""
    queue, exchange = f"{name} é|{{x}}?", f"{name}.ex ü|!"
    ch = connection.channel()
    ch.confirm_delivery()
    assert ch.queue_declare(queue).method.queue == queue
    ch.exchange_declare(exchange, "direct")
    ch.basic_publish("", queue, b"to an odd name")
    method, _props, body = ch.basic_get(queue, auto_ack=True)
    assert (method.exchange, method.routing_key, body) == ("", queue, b"to an odd name")
    returned = []
    ch.add_on_return_callback(lambda _ch, m, _p, b: returned.append((m.exchange, m.routing_key, b)))
    with pytest.raises(pika.exceptions.UnroutableError):
        ch.basic_publish(exchange, "nowhere", b"back", mandatory=True)
    connection.process_data_events(time_limit=0.5)
    assert returned == [(exchange, "nowhere", b"back")]
    ch.exchange_delete(exchange)
    ch.queue_delete(queue)


def test_passive_declare(connection, name):
    ch = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(name, passive=True)
    _closed_with(info, 404, f"NOT_FOUND - no queue '{name}' in vhost '/'")
    ch = connection.channel()
    ch.queue_declare(name, arguments={"x-message-ttl": 60000})
    # passive ignores the other fields, arguments included
    assert ch.queue_declare(name, passive=True, durable=True, arguments={"x-message-ttl": 5}).method.queue == name
    ch.queue_delete(name)


def test_declare_ok_counts(connection, pub, name):
    ch = connection.channel()
    ok = ch.queue_declare(name, auto_delete=False).method
    assert (ok.queue, ok.message_count, ok.consumer_count) == (name, 0, 0)
    for i in range(3):
        pub.basic_publish("", name, b"m%d" % i)
    ok = ch.queue_declare(name).method  # an equivalent redeclaration reports the same counts
    assert (ok.message_count, ok.consumer_count) == (3, 0)
    consumer_ch = connection.channel()
    consumer_ch.basic_qos(prefetch_count=1)
    consumer_ch.basic_consume(name, lambda *a: None)
    consumer_ch.basic_consume(name, lambda *a: None)
    # prefetch is per consumer: one message out unacked with each consumer, 1 ready
    wait_until(lambda: declare_ok(ch, name).message_count == 1, what="1 ready message")
    assert declare_ok(ch, name).consumer_count == 2
    consumer_ch.close()
    wait_until(lambda: (declare_ok(ch, name).message_count, declare_ok(ch, name).consumer_count) == (3, 0),
               what="the unacked message back and no consumers")
    assert ch.queue_delete(name).method.message_count == 3


def test_durable_redeclare_mismatch_is_406(connection, name):
    connection.channel().queue_declare(name, durable=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().queue_declare(name, durable=False)
    _closed_with(info, 406, f"PRECONDITION_FAILED - inequivalent arg 'durable' for queue '{name}' in vhost '/': "
                            f"received 'false' but current is 'true'")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().queue_declare(name, durable=True, auto_delete=True)
    _closed_with(info, 406, f"PRECONDITION_FAILED - inequivalent arg 'auto_delete' for queue '{name}' in vhost "
                            f"'/': received 'true' but current is 'false'")
    connection.channel().queue_delete(name)


def test_redeclare_with_other_arguments_is_406(connection, name):
    connection.channel().queue_declare(name, arguments={"x-message-ttl": 1000})
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().queue_declare(name, arguments={"x-message-ttl": 2000})
    _closed_with(info, 406, f"PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue '{name}' in vhost "
                            f"'/': received '2000' but current is '1000'")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().queue_declare(name)
    _closed_with(info, 406, f"PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue '{name}' in vhost "
                            f"'/': received none but current is the value '1000' of type 'signedint'")
    connection.channel().queue_declare(name, arguments={"x-message-ttl": 1000})
    connection.channel().queue_delete(name)


@pytest.mark.parametrize("args,fragment", [
    ({"x-message-ttl": "abc"}, "invalid arg 'x-message-ttl'"),
    ({"x-message-ttl": -1}, "invalid arg 'x-message-ttl'"),
    ({"x-overflow": "nope"}, "invalid arg 'x-overflow'"),
    ({"x-max-priority": 300}, "invalid arg 'x-max-priority'"),
    ({"x-queue-type": "nope"}, "invalid arg 'x-queue-type'"),
], ids=["ttl-string", "ttl-negative", "overflow", "priority-300", "queue-type"])
def test_invalid_arguments_are_406(channel, name, args, fragment):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        channel.queue_declare(name, arguments=args)
    assert info.value.reply_code == 406
    assert info.value.reply_text.startswith(f"PRECONDITION_FAILED - {fragment} for queue '{name}' in vhost '/'"), \
        info.value.reply_text


def test_exclusive_queue_is_locked_to_its_connection(amqp_broker, connection, name):
    connection.channel().queue_declare(name, exclusive=True)
    other = connect(amqp_broker)
    try:
        for op in (lambda ch: ch.queue_declare(name, exclusive=True),
                   lambda ch: ch.queue_declare(name, passive=True),
                   lambda ch: ch.basic_consume(name, lambda *a: None),
                   lambda ch: ch.basic_get(name),
                   lambda ch: ch.queue_purge(name),
                   lambda ch: ch.queue_delete(name)):
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
                op(other.channel())
            _closed_with(info, 405, _locked(name))
        # publishing into it from elsewhere is allowed
        pch = other.channel()
        pch.confirm_delivery()
        pch.basic_publish("", name, b"from another connection")
    finally:
        other.close()
    assert bodies(connection.channel(), name) == [b"from another connection"]


def test_exclusive_queue_is_deleted_with_its_connection(amqp_broker, name):
    conn = connect(amqp_broker)
    conn.channel().queue_declare(name, exclusive=True)
    assert declare_ok(conn.channel(), name).queue == name
    conn.close()
    wait_until(lambda: _gone(amqp_broker, name), what=f"exclusive queue {name} deleted after its connection closed")


def test_declaring_exclusive_over_shared_queue_is_405(connection, name):
    connection.channel().queue_declare(name)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().queue_declare(name, exclusive=True)
    _closed_with(info, 405, _locked(name))
    connection.channel().queue_delete(name)


def test_auto_delete_after_last_consumer_cancels(amqp_broker, connection, pub, name):
    ch = connection.channel()
    ch.queue_declare(name, auto_delete=True)
    pub.basic_publish("", name, b"x")
    assert declare_ok(ch, name).message_count == 1  # no consumer yet: it stays
    c1, c2 = connection.channel(), connection.channel()
    t1 = c1.basic_consume(name, lambda *a: None, auto_ack=True)
    t2 = c2.basic_consume(name, lambda *a: None, auto_ack=True)
    c1.basic_cancel(t1)
    assert not _gone(amqp_broker, name)
    c2.basic_cancel(t2)
    wait_until(lambda: _gone(amqp_broker, name), what=f"auto-delete queue {name} gone after the last cancel")


def test_purge_returns_count(connection, pub, name):
    ch = connection.channel()
    ch.queue_declare(name, exclusive=True)
    for i in range(7):
        pub.basic_publish("", name, b"%d" % i)
    assert ch.queue_purge(name).method.message_count == 7
    assert ch.queue_purge(name).method.message_count == 0
    assert declare_ok(ch, name).message_count == 0
    pub.basic_publish("", name, b"after purge")
    assert bodies(ch, name) == [b"after purge"]


def test_purge_missing_is_404(channel, name):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        channel.queue_purge(name)
    _closed_with(info, 404, f"NOT_FOUND - no queue '{name}' in vhost '/'")


def test_delete_if_empty_and_if_unused(connection, pub, name):
    ch = connection.channel()
    ch.queue_declare(name)
    pub.basic_publish("", name, b"1")
    pub.basic_publish("", name, b"2")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().queue_delete(name, if_empty=True)
    _closed_with(info, 406, f"PRECONDITION_FAILED - queue '{name}' in vhost '/' not empty")
    consumer = connection.channel()
    consumer.basic_qos(prefetch_count=1)
    consumer.basic_consume(name, lambda *a: None)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().queue_delete(name, if_unused=True)
    _closed_with(info, 406, f"PRECONDITION_FAILED - queue '{name}' in vhost '/' in use")
    consumer.close()  # its unacked message goes back
    wait_until(lambda: declare_ok(connection.channel(), name).consumer_count == 0, what="no consumers")
    assert connection.channel().queue_delete(name, if_unused=True).method.message_count == 2


def test_delete_missing_queue_is_ok(channel, name):
    assert channel.queue_delete(name).method.message_count == 0


def test_message_ttl_expires_messages(connection, pub, name):
    ch = connection.channel()
    ch.queue_declare(name, exclusive=True, arguments={"x-message-ttl": 300})
    pub.basic_publish("", name, b"short-lived")
    wait_until(lambda: declare_ok(ch, name).message_count == 0, what="the message to expire (x-message-ttl 300)")
    assert bodies(ch, name) == []


def test_per_message_expiration(connection, pub, name):
    ch = connection.channel()
    ch.queue_declare(name, exclusive=True)
    pub.basic_publish("", name, b"expires", pika.BasicProperties(expiration="200"))
    pub.basic_publish("", name, b"stays")
    wait_until(lambda: declare_ok(ch, name).message_count == 1, what="the message with expiration 200 to expire")
    assert bodies(ch, name) == [b"stays"]


def test_queue_expires_when_unused(connection, pub, name):
    connection.channel().queue_declare(name, arguments={"x-expires": 300})

    def gone() -> bool:
        # A declare (even passive) or a get renews the lease; a mandatory publish does not.
        try:
            pub.basic_publish("", name, b"probe", mandatory=True)
            return False
        except pika.exceptions.UnroutableError:
            return True
    wait_until(gone, what=f"queue {name} with x-expires 300 to disappear", interval=0.05)


def test_max_length_drop_head(connection, pub, name):
    ch = connection.channel()
    ch.queue_declare(name, exclusive=True, arguments={"x-max-length": 3})
    for i in range(1, 6):
        pub.basic_publish("", name, b"%d" % i)
    assert declare_ok(ch, name).message_count == 3
    assert bodies(ch, name) == [b"3", b"4", b"5"]


def test_max_length_bytes_drop_head(connection, pub, name):
    ch = connection.channel()
    ch.queue_declare(name, exclusive=True, arguments={"x-max-length-bytes": 10})
    for body in (b"aaaa", b"bbbb", b"cccc"):
        pub.basic_publish("", name, body)
    assert bodies(ch, name) == [b"bbbb", b"cccc"]


def test_max_length_reject_publish_nacks(connection, pub, name):
    ch = connection.channel()
    ch.queue_declare(name, exclusive=True, arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
    pub.basic_publish("", name, b"1")
    pub.basic_publish("", name, b"2")
    with pytest.raises(pika.exceptions.NackError):
        pub.basic_publish("", name, b"3")
    assert declare_ok(ch, name).message_count == 2
    method, _, body = ch.basic_get(name, auto_ack=True)
    assert body == b"1"
    pub.basic_publish("", name, b"4")  # room again
    assert bodies(ch, name) == [b"2", b"4"]


def _dlx_setup(ch, name, source_args, dl_routing_key=None):
    dlx = name + "-dlx"
    ch.exchange_declare(dlx, "direct")
    dead = ch.queue_declare(name + "-dead", exclusive=True).method.queue
    ch.queue_bind(dead, dlx, dl_routing_key or name)
    args = {"x-dead-letter-exchange": dlx, **source_args}
    if dl_routing_key:
        args["x-dead-letter-routing-key"] = dl_routing_key
    ch.queue_declare(name, exclusive=True, arguments=args)
    return dlx, dead


def _check_x_death(props, queue, reason, routing_keys):
    headers = props.headers or {}
    deaths = headers.get("x-death")
    assert isinstance(deaths, list) and len(deaths) == 1, headers
    death = deaths[0]
    assert death["count"] == 1
    assert death["reason"] == reason
    assert death["queue"] == queue
    assert death["exchange"] == ""
    assert death["routing-keys"] == routing_keys
    assert isinstance(death["time"], datetime.datetime)
    assert headers.get("x-first-death-reason") == reason
    assert headers.get("x-first-death-queue") == queue
    assert headers.get("x-first-death-exchange") == ""
    return death


@pytest.mark.parametrize("dl_key", [None, "rerouted"], ids=["same-key", "dl-routing-key"])
def test_dead_letter_on_reject(connection, pub, name, dl_key):
    ch = connection.channel()
    dlx, dead = _dlx_setup(ch, name, {}, dl_key)
    pub.basic_publish("", name, b"doomed", pika.BasicProperties(headers={"keep": "me"}, message_id="m-1"))
    method, _, _ = ch.basic_get(name)
    ch.basic_reject(method.delivery_tag, requeue=False)
    (m, props, body), = consume_n(ch, dead, 1)
    assert body == b"doomed" and props.message_id == "m-1" and props.headers["keep"] == "me"
    assert m.exchange == dlx and m.routing_key == (dl_key or name)
    _check_x_death(props, name, "rejected", [name])
    assert bodies(ch, name) == []
    ch.exchange_delete(dlx)


def test_dead_letter_on_nack_counts_deaths(connection, pub, name):
    """Dead-lettered twice through the same queue: one x-death entry with count 2."""
    ch = connection.channel()
    dlx = name + "-dlx"
    ch.exchange_declare(dlx, "fanout")
    ch.queue_declare(name, exclusive=True, arguments={"x-dead-letter-exchange": dlx})
    back = ch.queue_declare(name + "-back", exclusive=True,
                            arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": name}).method.queue
    ch.queue_bind(back, dlx)
    pub.basic_publish("", name, b"bouncing")
    for round_ in (1, 2):
        method, _, _ = ch.basic_get(name)
        assert method is not None, f"round {round_}: message not back in {name}"
        ch.basic_nack(method.delivery_tag, requeue=False)
        (m2, props, _), = consume_n(ch, back, 1, auto_ack=False)
        ch.basic_nack(m2.delivery_tag, requeue=False)  # from back to name via the default exchange
        wait_until(lambda: declare_ok(ch, name).message_count == 1, what=f"round {round_}: message back")
    method, props, body = ch.basic_get(name, auto_ack=True)
    deaths = {(d["queue"], d["reason"]): d["count"] for d in props.headers["x-death"]}
    assert deaths == {(name, "rejected"): 2, (back, "rejected"): 2}
    assert props.headers["x-first-death-queue"] == name
    ch.exchange_delete(dlx)


def test_dead_letter_on_ttl_expiry(connection, pub, name):
    ch = connection.channel()
    dlx, dead = _dlx_setup(ch, name, {"x-message-ttl": 100}, "expired-key")
    pub.basic_publish("", name, b"too slow")
    (m, props, body), = consume_n(ch, dead, 1)
    assert body == b"too slow" and m.routing_key == "expired-key"
    _check_x_death(props, name, "expired", [name])
    ch.exchange_delete(dlx)


def test_dead_letter_on_per_message_expiration(connection, pub, name):
    ch = connection.channel()
    dlx, dead = _dlx_setup(ch, name, {})
    pub.basic_publish("", name, b"expiring", pika.BasicProperties(expiration="100"))
    (m, props, body), = consume_n(ch, dead, 1)
    death = _check_x_death(props, name, "expired", [name])
    assert death["original-expiration"] == "100"
    assert props.expiration is None  # removed so it does not expire again
    ch.exchange_delete(dlx)


def test_dead_letter_on_max_length(connection, pub, name):
    ch = connection.channel()
    dlx, dead = _dlx_setup(ch, name, {"x-max-length": 1})
    pub.basic_publish("", name, b"first")
    pub.basic_publish("", name, b"second")
    (m, props, body), = consume_n(ch, dead, 1)
    assert body == b"first"
    _check_x_death(props, name, "maxlen", [name])
    assert bodies(ch, name) == [b"second"]
    ch.exchange_delete(dlx)


def test_max_priority_delivers_higher_first(connection, pub, name):
    ch = connection.channel()
    ch.queue_declare(name, exclusive=True, arguments={"x-max-priority": 10})
    for label, prio in [("p1", 1), ("p5a", 5), ("p3", 3), ("none", None), ("p9", 9), ("p5b", 5),
                        ("p20", 20), ("p0", 0)]:
        pub.basic_publish("", name, label.encode(), pika.BasicProperties(priority=prio))
    got = [b.decode() for b in bodies(ch, name)]
    # above the maximum counts as the maximum; equal priorities keep publish order; none is 0
    assert got == ["p20", "p9", "p5a", "p5b", "p3", "p1", "none", "p0"]


def test_single_active_consumer(connection, pub, name):
    ch = connection.channel()
    ch.queue_declare(name, exclusive=True, arguments={"x-single-active-consumer": True})
    got = {"a": [], "b": []}
    ca, cb = connection.channel(), connection.channel()
    tag_a = ca.basic_consume(name, lambda c, m, p, b: got["a"].append(b), auto_ack=True)
    cb.basic_consume(name, lambda c, m, p, b: got["b"].append(b), auto_ack=True)
    for i in range(6):
        pub.basic_publish("", name, b"first-%d" % i)
    wait_until(lambda: connection.process_data_events(0.05) or len(got["a"]) + len(got["b"]) == 6,
               what="6 deliveries")
    assert got == {"a": [b"first-%d" % i for i in range(6)], "b": []}
    ca.basic_cancel(tag_a)
    for i in range(4):
        pub.basic_publish("", name, b"second-%d" % i)
    wait_until(lambda: connection.process_data_events(0.05) or len(got["b"]) == 4, what="4 deliveries to b")
    assert got["b"] == [b"second-%d" % i for i in range(4)] and len(got["a"]) == 6


def test_quorum_queue_type_accepted(connection, pub, name):
    ch = connection.channel()
    ok = ch.queue_declare(name, durable=True, arguments={"x-queue-type": "quorum"}).method
    assert ok.queue == name
    for i in range(3):
        pub.basic_publish("", name, b"q%d" % i, pika.BasicProperties(delivery_mode=2))
    got = consume_n(ch, name, 3, auto_ack=False)
    assert [b for _, _, b in got] == [b"q0", b"q1", b"q2"]
    for m, _, _ in got:
        ch.basic_ack(m.delivery_tag)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().queue_declare(name, durable=True)
    _closed_with(info, 406, f"PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue '{name}' in vhost "
                            f"'/': received none but current is the value 'quorum' of type 'longstr'")
    connection.channel().queue_delete(name)


@pytest.mark.parametrize("kw,prop", [({"durable": False}, "non-durable"), ({"exclusive": True}, "exclusive-owner"),
                                     ({"auto_delete": True}, "auto-delete")],
                         ids=["non-durable", "exclusive", "auto-delete"])
def test_quorum_queue_property_restrictions(channel, name, kw, prop):
    args = {"durable": True, **kw}
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        channel.queue_declare(name, arguments={"x-queue-type": "quorum"}, **args)
    _closed_with(info, 406, f"PRECONDITION_FAILED - invalid property '{prop}' for queue '{name}' in vhost '/'")


def test_drain_helper_sees_all(connection, pub, name):
    """Guard for the helpers the other tests rely on: get-empty really means empty."""
    ch = connection.channel()
    ch.queue_declare(name, exclusive=True)
    for i in range(50):
        pub.basic_publish("", name, b"%d" % i)
    assert [b for _, _, b in drain_get(ch, name)] == [b"%d" % i for i in range(50)]


def test_max_length_reject_publish_dlx(connection, pub, name):
    ch = connection.channel()
    dlx, dead = _dlx_setup(ch, name, {"x-max-length": 1, "x-overflow": "reject-publish-dlx"})
    pub.basic_publish("", name, b"kept")
    with pytest.raises(pika.exceptions.NackError):
        pub.basic_publish("", name, b"refused")
    (m, props, body), = consume_n(ch, dead, 1)
    assert body == b"refused"
    _check_x_death(props, name, "maxlen", [name])
    assert bodies(ch, name) == [b"kept"]
    ch.exchange_delete(dlx)


def test_stream_queue_offsets(connection, pub, name):
    ch = connection.channel()
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    for i in range(5):
        pub.basic_publish("", name, b"s%d" % i)
    ch.basic_qos(prefetch_count=10)

    def read(offset, n):
        got = consume_n(ch, name, n, auto_ack=False, arguments={"x-stream-offset": offset}) if n else []
        for m, _, _ in got:
            ch.basic_ack(m.delivery_tag)
        return [(b, (p.headers or {}).get("x-stream-offset")) for _, p, b in got]

    everything = [(b"s%d" % i, i) for i in range(5)]
    assert read("first", 5) == everything
    assert read("first", 5) == everything  # reading does not consume
    assert read(3, 2) == everything[3:]
    assert read("last", 1) == everything[4:]
    # "next": only what is published after the consumer starts
    seen = []
    tag = ch.basic_consume(name, lambda c, m, p, b: (seen.append(b), c.basic_ack(m.delivery_tag)),
                           arguments={"x-stream-offset": "next"})
    pub.basic_publish("", name, b"s5")
    wait_until(lambda: connection.process_data_events(0.02) or seen, what="the new stream message")
    assert seen == [b"s5"]
    ch.basic_cancel(tag)
    connection.channel().queue_delete(name)


def test_stream_queue_rules(connection, name):
    ch = connection.channel()
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_consume(name, lambda *a: None)  # no prefetch set
    assert info.value.reply_code == 406
    assert info.value.reply_text.startswith("PRECONDITION_FAILED - consumer prefetch count is not set for")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().queue_declare(name + "-x", arguments={"x-queue-type": "stream"})
    _closed_with(info, 406, f"PRECONDITION_FAILED - invalid property 'non-durable' for queue '{name}-x' in vhost '/'")
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        connection.channel().basic_get(name)
    _closed_with(info, 540, f"NOT_IMPLEMENTED - basic.get not supported by stream queues queue '{name}' in vhost '/'")
