"""Exchanges: declaration rules and errors, and exactly which queues each routing rule reaches
(direct, fanout, topic, headers, default, exchange-to-exchange, alternate, internal).

Routing checks publish with confirms (so every copy is enqueued when the publish returns) and
then drain each queue with basic.get: the set of messages per queue is exact.
"""
from __future__ import annotations

import pika
import pytest

from .helpers import bodies, unique

SYSTEM_EXCHANGES = [("amq.direct", "direct"), ("amq.fanout", "fanout"), ("amq.topic", "topic"),
                    ("amq.headers", "headers"), ("amq.match", "headers")]


@pytest.fixture
def pub(connection):
    """A publishing channel in confirm mode."""
    ch = connection.channel()
    ch.confirm_delivery()
    return ch


def _closed_with(excinfo, code: int, text: str) -> None:
    assert (excinfo.value.reply_code, excinfo.value.reply_text) == (code, text)


def _queues(channel, n: int) -> list[str]:
    return [channel.queue_declare("", exclusive=True).method.queue for _ in range(n)]


@pytest.mark.parametrize("kind", ["direct", "fanout", "topic", "headers"])
def test_declare_each_type_and_redeclare_equal(channel, name, kind):
    channel.exchange_declare(name, kind)
    channel.exchange_declare(name, kind)  # same attributes: fine
    channel.exchange_declare(name, passive=True)
    channel.exchange_delete(name)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        channel.exchange_declare(name, passive=True)
    _closed_with(info, 404, f"NOT_FOUND - no exchange '{name}' in vhost '/'")


def test_passive_declare_missing_is_404(channel, name):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        channel.exchange_declare(name, passive=True)
    _closed_with(info, 404, f"NOT_FOUND - no exchange '{name}' in vhost '/'")


def test_redeclare_with_other_type_is_406(connection, name):
    connection.channel().exchange_declare(name, "direct")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().exchange_declare(name, "fanout")
    _closed_with(info, 406, f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{name}' in vhost "
                            f"'/': received 'fanout' but current is 'direct'")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().exchange_declare(name, "direct", durable=True)
    _closed_with(info, 406, f"PRECONDITION_FAILED - inequivalent arg 'durable' for exchange '{name}' in vhost "
                            f"'/': received 'true' but current is 'false'")
    connection.channel().exchange_delete(name)


def test_unknown_exchange_type_is_503_connection_error(connection, name):
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        connection.channel().exchange_declare(name, "no-such-type")
    _closed_with(info, 503, "COMMAND_INVALID - unknown exchange type 'no-such-type'")


def test_delete_if_unused_on_bound_exchange_is_406(connection, name):
    ch = connection.channel()
    ch.exchange_declare(name, "direct")
    (q,) = _queues(ch, 1)
    ch.queue_bind(q, name, "k")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().exchange_delete(name, if_unused=True)
    _closed_with(info, 406, f"PRECONDITION_FAILED - exchange '{name}' in vhost '/' in use")
    ch = connection.channel()
    ch.queue_unbind(q, name, "k")
    ch.exchange_delete(name, if_unused=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        ch.exchange_declare(name, passive=True)


def test_delete_missing_exchange_is_ok(channel, name):
    channel.exchange_delete(name)
    assert channel.is_open


def test_delete_exchange_removes_its_bindings(connection, pub, name):
    ch = connection.channel()
    ch.exchange_declare(name, "fanout")
    (q,) = _queues(ch, 1)
    ch.queue_bind(q, name)
    ch.exchange_delete(name)
    ch.exchange_declare(name, "fanout")  # same name again: no bindings
    pub.basic_publish(name, "", b"lost")
    assert bodies(ch, q) == []
    ch.exchange_delete(name)


@pytest.mark.parametrize("xname,kind", SYSTEM_EXCHANGES)
def test_system_exchanges_exist(connection, pub, xname, kind):
    ch = connection.channel()
    ch.exchange_declare(xname, passive=True)
    ch.exchange_declare(xname, kind, durable=True)  # equivalent redeclaration is allowed
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().exchange_delete(xname)
    _closed_with(info, 403, f"ACCESS_REFUSED - deletion of system exchange '{xname}' in vhost '/' not allowed")


def test_reserved_amq_prefix_is_403(channel):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        channel.exchange_declare("amq.foo", "direct")
    _closed_with(info, 403, "ACCESS_REFUSED - exchange name 'amq.foo' contains reserved prefix 'amq.*'")


@pytest.mark.parametrize("op", ["bind", "declare", "delete"])
def test_default_exchange_is_off_limits(connection, op):
    ch = connection.channel()
    (q,) = _queues(ch, 1)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        if op == "bind":
            ch.queue_bind(q, "", "k")
        elif op == "declare":
            ch.exchange_declare("", "direct")
        else:
            ch.exchange_delete("")
    _closed_with(info, 403, "ACCESS_REFUSED - operation not permitted on the default exchange")


def test_default_exchange_routes_by_queue_name(connection, pub):
    ch = connection.channel()
    q1, q2 = _queues(ch, 2)
    pub.basic_publish("", q1, b"one")
    pub.basic_publish("", q2, b"two")
    pub.basic_publish("", unique("nobody"), b"dropped")
    assert bodies(ch, q1) == [b"one"] and bodies(ch, q2) == [b"two"]


def test_direct_exchange(connection, pub, name):
    ch = connection.channel()
    ch.exchange_declare(name, "direct")
    qa, qb, qc = _queues(ch, 3)
    ch.queue_bind(qa, name, "red")
    ch.queue_bind(qb, name, "red")
    ch.queue_bind(qb, name, "green")
    ch.queue_bind(qc, name, "")
    for key in ("red", "green", "blue", "", "Red"):
        pub.basic_publish(name, key, key.encode() or b"<empty>")
    assert bodies(ch, qa) == [b"red"]
    assert bodies(ch, qb) == [b"red", b"green"]
    assert bodies(ch, qc) == [b"<empty>"]
    ch.queue_unbind(qb, name, "red")
    pub.basic_publish(name, "red", b"red again")
    assert bodies(ch, qa) == [b"red again"] and bodies(ch, qb) == []
    ch.exchange_delete(name)


def test_fanout_exchange(connection, pub, name):
    ch = connection.channel()
    ch.exchange_declare(name, "fanout")
    queues = _queues(ch, 3)
    for q, key in zip(queues, ("a", "b", "")):
        ch.queue_bind(q, name, key)  # the key is ignored
    pub.basic_publish(name, "whatever", b"to all")
    assert [bodies(ch, q) for q in queues] == [[b"to all"]] * 3
    ch.exchange_delete(name)


TOPIC_BINDINGS = {
    "one-word-middle": "stock.*.nyse",
    "hash-suffix": "stock.#",
    "hash-prefix": "#.nyse",
    "two-words": "*.*",
    "everything": "#",
    "exact": "stock.usd.nyse",
    "one-word": "*",
    "hash-middle": "a.#.z",
}
TOPIC_KEYS = ["stock.usd.nyse", "stock.eur.lse", "stock.nyse", "stock", "nyse", "bond.nyse", "a.b",
              "stock.usd.gbp.nyse", "a.z", "a.b.c.z", "a.b.c", "STOCK.usd.nyse", ""]
TOPIC_EXPECTED = {
    "one-word-middle": ["stock.usd.nyse"],
    "hash-suffix": ["stock.usd.nyse", "stock.eur.lse", "stock.nyse", "stock", "stock.usd.gbp.nyse"],
    "hash-prefix": ["stock.usd.nyse", "stock.nyse", "nyse", "bond.nyse", "stock.usd.gbp.nyse",
                    "STOCK.usd.nyse"],
    "two-words": ["stock.nyse", "bond.nyse", "a.b", "a.z"],
    "everything": TOPIC_KEYS,
    "exact": ["stock.usd.nyse"],
    "one-word": ["stock", "nyse"],
    "hash-middle": ["a.z", "a.b.c.z"],
}


def test_topic_patterns(connection, pub, name):
    ch = connection.channel()
    ch.exchange_declare(name, "topic")
    queues = {label: q for label, q in zip(TOPIC_BINDINGS, _queues(ch, len(TOPIC_BINDINGS)))}
    for label, pattern in TOPIC_BINDINGS.items():
        ch.queue_bind(queues[label], name, pattern)
    for key in TOPIC_KEYS:
        pub.basic_publish(name, key, key.encode())
    got = {label: [b.decode() for b in bodies(ch, q)] for label, q in queues.items()}
    assert got == TOPIC_EXPECTED
    ch.exchange_delete(name)


HEADER_BINDINGS = {
    "all": {"x-match": "all", "format": "pdf", "type": "report"},
    "any": {"x-match": "any", "format": "pdf", "type": "log"},
    "default-all": {"format": "pdf", "type": "report"},
    "int": {"x-match": "all", "n": 42},
    "empty-all": {"x-match": "all"},
}
HEADER_MESSAGES = {
    "pdf-report": {"format": "pdf", "type": "report"},
    "pdf-log": {"format": "pdf", "type": "log"},
    "zip-log": {"format": "zip", "type": "log"},
    "zip": {"format": "zip"},
    "pdf-report-extra": {"format": "pdf", "type": "report", "extra": 1},
    "none": None,
    "n42": {"n": 42},
    "n43": {"n": 43},
}
HEADER_EXPECTED = {
    "all": ["pdf-report", "pdf-report-extra"],
    "any": ["pdf-report", "pdf-log", "zip-log", "pdf-report-extra"],
    "default-all": ["pdf-report", "pdf-report-extra"],
    "int": ["n42"],
    "empty-all": list(HEADER_MESSAGES),
}


@pytest.mark.parametrize("exchange", ["own", "amq.match", "amq.headers"])
def test_headers_exchange_x_match(connection, pub, name, exchange):
    ch = connection.channel()
    if exchange == "own":
        ch.exchange_declare(name, "headers")
        exchange = name
    queues = {label: q for label, q in zip(HEADER_BINDINGS, _queues(ch, len(HEADER_BINDINGS)))}
    for label, args in HEADER_BINDINGS.items():
        ch.queue_bind(queues[label], exchange, "ignored", arguments=args)
    for label, headers in HEADER_MESSAGES.items():
        pub.basic_publish(exchange, "", label.encode(), pika.BasicProperties(headers=headers))
    got = {label: [b.decode() for b in bodies(ch, q)] for label, q in queues.items()}
    assert got == HEADER_EXPECTED
    if exchange == name:
        ch.exchange_delete(name)


def test_headers_bind_with_bad_x_match_is_406(connection):
    ch = connection.channel()
    (q,) = _queues(ch, 1)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_bind(q, "amq.headers", "", arguments={"x-match": "some"})
    assert info.value.reply_code == 406
    assert info.value.reply_text.startswith("PRECONDITION_FAILED - Invalid x-match field value")


def test_exchange_to_exchange_bindings(connection, pub, name):
    ch = connection.channel()
    src, dst = name + "-src", name + "-dst"
    ch.exchange_declare(src, "topic")
    ch.exchange_declare(dst, "fanout")
    q_src, q_dst = _queues(ch, 2)
    ch.queue_bind(q_src, src, "a.*")
    ch.queue_bind(q_dst, dst)
    ch.exchange_bind(destination=dst, source=src, routing_key="a.#")
    for key in ("a.b", "a.b.c", "b"):
        pub.basic_publish(src, key, key.encode())
    pub.basic_publish(dst, "x", b"direct to dst")
    assert bodies(ch, q_src) == [b"a.b"]
    assert bodies(ch, q_dst) == [b"a.b", b"a.b.c", b"direct to dst"]
    ch.exchange_unbind(destination=dst, source=src, routing_key="a.#")
    pub.basic_publish(src, "a.b", b"after unbind")
    assert bodies(ch, q_src) == [b"after unbind"] and bodies(ch, q_dst) == []
    ch.exchange_delete(src)
    ch.exchange_delete(dst)


def test_exchange_binding_cycle_delivers_once(connection, pub, name):
    ch = connection.channel()
    a, b = name + "-a", name + "-b"
    ch.exchange_declare(a, "fanout")
    ch.exchange_declare(b, "fanout")
    ch.exchange_bind(destination=b, source=a)
    ch.exchange_bind(destination=a, source=b)
    qa, qb = _queues(ch, 2)
    ch.queue_bind(qa, a)
    ch.queue_bind(qb, b)
    pub.basic_publish(a, "", b"once")
    assert bodies(ch, qa) == [b"once"] and bodies(ch, qb) == [b"once"]
    ch.exchange_delete(a)
    ch.exchange_delete(b)


def test_exchange_bind_missing_source_is_404(connection, name):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().exchange_bind(destination="amq.fanout", source=name, routing_key="k")
    _closed_with(info, 404, f"NOT_FOUND - no exchange '{name}' in vhost '/'")


def test_alternate_exchange_gets_unroutable(connection, pub, name):
    ch = connection.channel()
    ae, main = name + "-ae", name + "-main"
    ch.exchange_declare(ae, "fanout")
    ch.exchange_declare(main, "direct", arguments={"alternate-exchange": ae})
    q_main, q_ae = _queues(ch, 2)
    ch.queue_bind(q_main, main, "k")
    ch.queue_bind(q_ae, ae)
    pub.basic_publish(main, "k", b"routed")
    pub.basic_publish(main, "other", b"unroutable", mandatory=True)  # the AE routes it: no return
    assert bodies(ch, q_main) == [b"routed"]
    assert bodies(ch, q_ae) == [b"unroutable"]
    ch.exchange_delete(main)
    ch.exchange_delete(ae)


def test_internal_exchange_refuses_publish_but_routes_from_exchanges(connection, pub, name):
    ch = connection.channel()
    internal, front = name + "-internal", name + "-front"
    ch.exchange_declare(internal, "fanout", internal=True)
    ch.exchange_declare(front, "fanout")
    ch.exchange_bind(destination=internal, source=front)
    (q,) = _queues(ch, 1)
    ch.queue_bind(q, internal)
    pub.basic_publish(front, "", b"via front")
    assert bodies(ch, q) == [b"via front"]
    bad = connection.channel()
    bad.basic_publish(internal, "", b"direct")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        bad.queue_declare("", exclusive=True)  # the next synchronous call sees the close
    _closed_with(info, 403, f"ACCESS_REFUSED - cannot publish to internal exchange '{internal}' in vhost '/'")
    ch.exchange_delete(front)
    ch.exchange_delete(internal)


def test_publish_to_missing_exchange_is_404(connection, name):
    ch = connection.channel()
    ch.basic_publish(name, "k", b"x")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare("", exclusive=True)
    _closed_with(info, 404, f"NOT_FOUND - no exchange '{name}' in vhost '/'")


def test_auto_delete_exchange_goes_with_its_last_binding(connection, name):
    ch = connection.channel()
    ch.exchange_declare(name, "direct", auto_delete=True)
    q1, q2 = _queues(ch, 2)
    ch.queue_bind(q1, name, "k")
    ch.queue_bind(q2, name, "k")
    ch.queue_unbind(q1, name, "k")
    ch.exchange_declare(name, passive=True)  # one binding left
    ch.queue_unbind(q2, name, "k")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_declare(name, passive=True)
    assert info.value.reply_code == 404


def test_passive_declare_ignores_type(channel):
    channel.exchange_declare("amq.direct", "fanout", passive=True)  # only existence is checked
    assert channel.is_open


def test_queue_reached_by_several_bindings_gets_one_copy(connection, pub, name):
    ch = connection.channel()
    topic, fan = name + "-topic", name + "-fan"
    ch.exchange_declare(topic, "topic")
    ch.exchange_declare(fan, "fanout")
    ch.exchange_bind(destination=fan, source=topic, routing_key="#")
    (q,) = _queues(ch, 1)
    ch.queue_bind(q, topic, "a.*")
    ch.queue_bind(q, topic, "*.b")
    ch.queue_bind(q, topic, "#")
    ch.queue_bind(q, fan)
    pub.basic_publish(topic, "a.b", b"once")
    pub.basic_publish(topic, "c", b"also once")
    assert bodies(ch, q) == [b"once", b"also once"]
    ch.exchange_delete(topic)
    ch.exchange_delete(fan)
