"""Channels: multiplexing, channel errors that close one channel only, qos and flow, and the
connection errors for channels used out of order (raw socket)."""
from __future__ import annotations

import pika
import pytest
from pamqp import commands

from .helpers import TIMEOUT, RawAMQP, bodies, connect, unique, wait_until


def test_many_channels_multiplexed(connection):
    channels = [connection.channel() for _ in range(64)]
    assert len({c.channel_number for c in channels}) == 64
    queues = [c.queue_declare("", exclusive=True).method.queue for c in channels]
    # publish from every channel to every other channel's queue, interleaved
    for i, ch in enumerate(channels):
        for j in (i, (i + 1) % 64, (i + 7) % 64):
            ch.basic_publish("", queues[j], f"{i}->{j}".encode())
    for i, ch in enumerate(channels):
        # each channel sees its own publishes in order; other channels' arrive on a confirm-free
        # path, so wait for the full count
        expected = sorted(f"{k}->{i}".encode() for k in (i, (i - 1) % 64, (i - 7) % 64))
        got = []
        wait_until(lambda: got.extend(bodies(ch, queues[i])) or len(got) >= 3,
                   what=f"3 messages in the queue of channel {ch.channel_number} (got {got})")
        assert sorted(got) == expected, f"channel {ch.channel_number}"
    assert all(c.is_open for c in channels)


def test_select_connection_many_channels(amqp_broker):
    """pika's asynchronous SelectConnection: 20 channels opened and used concurrently."""
    params = pika.ConnectionParameters(host=amqp_broker.host, port=amqp_broker.port,
                                       connection_attempts=1, socket_timeout=5)
    result = {"got": {}, "error": None}
    n = 20

    def on_open(conn):
        for i in range(n):
            conn.channel(on_open_callback=lambda ch, i=i: on_channel(conn, ch, i))

    def on_channel(conn, ch, i):
        def on_declared(frame):
            q = frame.method.queue
            ch.basic_consume(q, lambda c, m, p, b: on_message(conn, c, m, b, i), auto_ack=False)
            for k in range(5):
                ch.basic_publish("", q, f"{i}:{k}".encode())
        ch.queue_declare("", exclusive=True, callback=on_declared)

    def on_message(conn, ch, method, body, i):
        ch.basic_ack(method.delivery_tag)
        result["got"].setdefault(i, []).append(body.decode())
        if sum(map(len, result["got"].values())) == n * 5:
            conn.close()

    def on_open_error(conn, err):
        result["error"] = err
        conn.ioloop.stop()

    conn = pika.SelectConnection(params, on_open_callback=on_open, on_open_error_callback=on_open_error,
                                 on_close_callback=lambda c, reason: c.ioloop.stop())
    timer = conn.ioloop.call_later(TIMEOUT, lambda: (result.update(error="timeout"), conn.close()))
    conn.ioloop.start()
    conn.ioloop.remove_timeout(timer)
    assert result["error"] is None, result["error"]
    assert {i: v for i, v in result["got"].items()} == {i: [f"{i}:{k}" for k in range(5)] for i in range(n)}


def test_channel_error_closes_only_that_channel(connection):
    good = connection.channel()
    bad = connection.channel()
    q = good.queue_declare("", exclusive=True).method.queue
    missing = unique("missing")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        bad.queue_declare(missing, passive=True)
    assert info.value.reply_code == 404
    assert info.value.reply_text == f"NOT_FOUND - no queue '{missing}' in vhost '/'"
    assert bad.is_closed and good.is_open and connection.is_open
    good.basic_publish("", q, b"after the error")
    assert bodies(good, q) == [b"after the error"]
    again = connection.channel()  # a new channel (pika may reuse the number) works
    assert again.queue_declare(q, passive=True).method.message_count == 0


def test_using_a_closed_channel_number_again(amqp_broker):
    with RawAMQP(amqp_broker.host, amqp_broker.port) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(commands.Channel.Close(reply_code=200, reply_text="done", class_id=0, method_id=0), 1)
        raw.expect(commands.Channel.CloseOk, channel=1)
        raw.open_channel(1)
        raw.send(commands.Queue.Declare(queue="", exclusive=True), 1)
        assert raw.expect(commands.Queue.DeclareOk, channel=1).queue.startswith("amq.gen-")


def test_basic_qos_ok(channel):
    channel.basic_qos(prefetch_count=10)
    channel.basic_qos(prefetch_count=0)
    channel.basic_qos(prefetch_count=5, global_qos=True)
    assert channel.is_open


def test_channel_flow_active_is_acknowledged(channel):
    assert channel.flow(True) is True
    assert channel.is_open


def test_channel_flow_inactive_is_540_not_implemented(connection):
    """RabbitMQ does not implement channel.flow(active=false): a connection error 540."""
    ch = connection.channel()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        ch.flow(False)
    assert info.value.reply_code == 540
    assert info.value.reply_text == "NOT_IMPLEMENTED - active=false"


@pytest.mark.parametrize("case", ["unopened", "second-open", "channel-method-on-0"])
def test_channel_misuse_is_504_channel_error(amqp_broker, case):
    with RawAMQP(amqp_broker.host, amqp_broker.port) as raw:
        raw.handshake()
        if case == "unopened":
            raw.send(commands.Queue.Declare(queue="x"), 5)
            text = "CHANNEL_ERROR - expected 'channel.open'"
        elif case == "second-open":
            raw.open_channel(1)
            raw.send(commands.Channel.Open(), 1)
            text = "CHANNEL_ERROR - second 'channel.open' seen"
        else:
            raw.send(commands.Queue.Declare(queue="x"), 0)
            text = "CHANNEL_ERROR - unexpected method in connection state running"
        close = raw.expect(commands.Connection.Close, channel=0)
        assert (close.reply_code, close.reply_text) == (504, text)


def test_channel_close_by_client_keeps_connection(amqp_broker):
    conn = connect(amqp_broker)
    try:
        chans = [conn.channel() for _ in range(5)]
        for c in chans[::2]:
            c.close()
        assert conn.is_open
        for c in chans[1::2]:
            q = c.queue_declare("", exclusive=True).method.queue
            c.basic_publish("", q, b"x")
            assert bodies(c, q) == [b"x"]
    finally:
        conn.close()
