"""Publisher confirms and transactions."""
from __future__ import annotations

import pika
import pytest
from pamqp import commands

from .helpers import RawAMQP, bodies, connect, consume_n, declare_ok, wait_until


@pytest.fixture
def queue(connection):
    return connection.channel().queue_declare("", exclusive=True).method.queue


def _closed_with(excinfo, code: int, text: str) -> None:
    assert (excinfo.value.reply_code, excinfo.value.reply_text) == (code, text)


def test_confirm_select_then_every_publish_is_acked(connection, queue):
    ch = connection.channel()
    ch.confirm_delivery()
    for i in range(50):
        ch.basic_publish("", queue, b"%d" % i)  # raises on nack or return
    ch.basic_publish("", "no-such-queue-anywhere", b"unroutable but not mandatory")  # acked too
    assert declare_ok(ch, queue).message_count == 50


def test_raw_confirms_cover_every_delivery_tag(amqp_broker):
    with RawAMQP(amqp_broker.host, amqp_broker.port) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(commands.Queue.Declare(queue="", exclusive=True), 1)
        q = raw.expect(commands.Queue.DeclareOk).queue
        raw.send(commands.Confirm.Select(), 1)
        raw.expect(commands.Confirm.SelectOk, channel=1)
        n = 200
        for i in range(n):
            raw.publish(1, "", q if i % 10 else "nowhere", b"m%d" % i)
        acked = set()
        while len(acked) < n:
            _, frame = raw.recv_method()
            assert isinstance(frame, commands.Basic.Ack), f"expected basic.ack, got {frame!r}"
            tag = frame.delivery_tag
            assert 1 <= tag <= n and tag not in acked, f"ack for tag {tag} (acked so far: {len(acked)})"
            if frame.multiple:
                newly = {t for t in range(1, tag + 1)} - acked
            else:
                newly = {tag}
            assert newly, f"ack {tag} multiple={frame.multiple} confirmed nothing new"
            acked |= newly
        assert acked == set(range(1, n + 1))


def test_nack_under_reject_publish_raises(connection):
    ch = connection.channel()
    q = ch.queue_declare("", exclusive=True, arguments={"x-max-length": 1, "x-overflow": "reject-publish"}).method.queue
    ch.confirm_delivery()
    ch.basic_publish("", q, b"fits")
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", q, b"does not fit")
    assert ch.is_open
    assert bodies(ch, q) == [b"fits"]


def test_confirm_and_tx_do_not_mix(connection):
    ch = connection.channel()
    ch.tx_select()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.confirm_delivery()
    _closed_with(info, 406, "PRECONDITION_FAILED - cannot switch from tx to confirm mode")
    ch = connection.channel()
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.tx_select()
    _closed_with(info, 406, "PRECONDITION_FAILED - cannot switch from confirm to tx mode")


@pytest.mark.parametrize("op", ["commit", "rollback"])
def test_tx_without_select_is_406(connection, op):
    ch = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.tx_commit() if op == "commit" else ch.tx_rollback()
    _closed_with(info, 406, "PRECONDITION_FAILED - channel is not transactional")


def test_tx_commit_publishes(connection, queue):
    tx = connection.channel()
    tx.tx_select()
    tx.basic_publish("", queue, b"1")
    tx.basic_publish("", queue, b"2")
    reader = connection.channel()
    assert declare_ok(reader, queue).message_count == 0  # not before the commit
    tx.tx_commit()
    assert bodies(reader, queue) == [b"1", b"2"]
    tx.basic_publish("", queue, b"3")  # the channel stays transactional
    assert declare_ok(reader, queue).message_count == 0
    tx.tx_commit()
    assert bodies(reader, queue) == [b"3"]


def test_tx_rollback_discards_publishes(connection, queue):
    tx = connection.channel()
    tx.tx_select()
    tx.basic_publish("", queue, b"rolled back")
    tx.tx_rollback()
    tx.basic_publish("", queue, b"committed")
    tx.tx_commit()
    assert bodies(connection.channel(), queue) == [b"committed"]


def test_tx_rollback_of_ack_leaves_message_unacked(connection, queue):
    pub = connection.channel()
    pub.confirm_delivery()
    for i in range(3):
        pub.basic_publish("", queue, b"%d" % i)
    tx = connection.channel()
    tx.tx_select()
    got = [tx.basic_get(queue) for _ in range(3)]
    tx.basic_ack(got[0][0].delivery_tag)
    tx.tx_rollback()  # that ack never happened
    tx.basic_ack(got[1][0].delivery_tag)
    tx.tx_commit()    # this one did
    tx.close()        # unacked 0 and 2 go back to the queue
    reader = connection.channel()
    wait_until(lambda: declare_ok(reader, queue).message_count == 2, what="two unacked messages back")
    back = [(m.redelivered, b) for m, _, b in (reader.basic_get(queue, auto_ack=True) for _ in range(2))]
    assert back == [(True, b"0"), (True, b"2")]


def test_tx_commit_of_ack_and_reject(connection, queue):
    pub = connection.channel()
    pub.confirm_delivery()
    for i in range(2):
        pub.basic_publish("", queue, b"%d" % i)
    tx = connection.channel()
    tx.tx_select()
    m0 = tx.basic_get(queue)[0]
    m1 = tx.basic_get(queue)[0]
    tx.basic_ack(m0.delivery_tag)
    tx.basic_reject(m1.delivery_tag, requeue=True)
    assert declare_ok(connection.channel(), queue).message_count == 0  # the reject waits for commit
    tx.tx_commit()
    reader = connection.channel()
    wait_until(lambda: declare_ok(reader, queue).message_count == 1, what="the rejected message requeued")
    method, _, body = reader.basic_get(queue, auto_ack=True)
    assert (method.redelivered, body) == (True, b"1")


def test_confirms_with_a_second_client_library_view(amqp_broker, queue, connection):
    """Messages confirmed to one connection are visible to another at once."""
    other = connect(amqp_broker)
    try:
        ch = other.channel()
        ch.confirm_delivery()
        for i in range(10):
            ch.basic_publish("", queue, b"%d" % i, pika.BasicProperties(delivery_mode=2))
    finally:
        other.close()
    got = consume_n(connection.channel(), queue, 10)
    assert [b for _, _, b in got] == [b"%d" % i for i in range(10)]
