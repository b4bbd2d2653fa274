"""routing.amqp10_filters: a stream receiver's filter set (RabbitMQ 4.1 property filters, 4.2 SQL
filters, the stream filter values) parsed from attach values and applied to stored records."""
from __future__ import annotations

import uuid

import pytest

from routing.amqp10_filters import FilterError, parse_filter_set
from routing.stream_message import record_from_stream
from wire.amqp10 import Described, Message, Symbol, Typed, encode_message
from wire.records import Header, Record

U = uuid.UUID("550e8400-e29b-41d4-a716-446655440000")


def record(subject=None, app=None, filter_value=None, message_id=None, priority=None, content_type=None,
           group_sequence=None) -> Record:
    props = [message_id, None, None, subject, None, None, content_type, None, None, None, None, group_sequence]
    msg = Message(header=[True, Typed(0x50, priority)] if priority is not None else None,
                  message_annotations={Symbol("x-stream-filter-value"): filter_value} if filter_value else None,
                  properties=props, application_properties=app, body_kind="data", body=[b"body"])
    key, value, headers, ts = record_from_stream(encode_message(msg), 1_700_000_000_000)
    return Record(0, ts, key, value, headers)


def props(**fields) -> dict:
    return {Symbol("f"): Described(Symbol("amqp:properties-filter"), {Symbol(k): v for k, v in fields.items()})}


def app(**entries) -> dict:
    return {Symbol("a"): Described(0x174, dict(entries))}


def sql(text) -> dict:
    return {Symbol("sql-filter"): Described(Symbol("amqp:sql-filter"), text)}


def accepts(filters: dict, rec: Record) -> bool:
    fs = parse_filter_set(filters)
    assert fs.filtering
    return fs.accepts(rec)


def test_properties_filter_all_fields_must_match():
    f = props(subject="yellow", **{"message-id": Typed(0x80, 5)})
    assert accepts(f, record(subject="yellow", message_id=Typed(0x80, 5)))
    assert not accepts(f, record(subject="yellow", message_id=Typed(0x80, 6)))
    assert not accepts(f, record(subject="red", message_id=Typed(0x80, 5)))
    assert not accepts(f, record(message_id=Typed(0x80, 5)))


def test_string_modifiers():
    assert accepts(props(subject="&p:yel"), record(subject="yellow"))
    assert not accepts(props(subject="&p:low"), record(subject="yellow"))
    assert accepts(props(subject="&s:low"), record(subject="yellow"))
    assert accepts(props(subject="&&x"), record(subject="&x"))
    assert not accepts(props(subject="&&x"), record(subject="&&x"))
    with pytest.raises(FilterError):
        parse_filter_set(props(subject="&x:y"))


def test_typed_equality():
    assert accepts(props(**{"group-sequence": Typed(0x70, 3)}), record(group_sequence=Typed(0x70, 3)))
    assert accepts(props(**{"message-id": U}), record(message_id=U))
    assert accepts(props(**{"content-type": Symbol("text/plain")}), record(content_type=Symbol("text/plain")))
    assert accepts(app(n=Typed(0x81, 2)), record(app={"n": Typed(0x71, 2)}))  # long = int by value
    assert accepts(app(n=2.0), record(app={"n": Typed(0x71, 2)}))
    assert not accepts(app(n=True), record(app={"n": Typed(0x71, 1)}))
    assert not accepts(app(n="2"), record(app={"n": Typed(0x71, 2)}))


def test_application_properties_filter():
    f = app(color="&s:ow", weight=None)
    assert accepts(f, record(app={"color": "yellow", "weight": Typed(0x71, 5)}))
    assert not accepts(f, record(app={"color": "yellow"}))  # null matches any value, not a missing key
    assert not accepts(f, record(app={"color": "red", "weight": Typed(0x71, 5)}))


def test_sql_filter():
    f = sql("p.subject = 'yellow' AND (weight > 4 OR h.priority = 9)")
    assert accepts(f, record(subject="yellow", app={"weight": Typed(0x71, 5)}))
    assert accepts(f, record(subject="yellow", priority=9))
    assert not accepts(f, record(subject="yellow", app={"weight": Typed(0x71, 4)}))
    assert not accepts(f, record(subject="red", app={"weight": Typed(0x71, 5)}))


def test_stream_filter_values():
    f = {Symbol("v"): Described(Symbol("rabbitmq:stream-filter"), ["a", "b"])}
    assert accepts(f, record(filter_value="a"))
    assert not accepts(f, record(filter_value="c"))
    assert not accepts(f, record())
    f[Symbol("u")] = Described(Symbol("rabbitmq:stream-match-unfiltered"), True)
    assert accepts(f, record())
    single = {Symbol("v"): Described(Symbol("rabbitmq:stream-filter"), "b")}
    assert accepts(single, Record(0, 0, None, b"x", (Header("x-stream-filter-value", b"b"),)))


def test_combined_with_offset_spec_and_values():
    f = {Symbol("o"): Described(Symbol("rabbitmq:stream-offset-spec"), "first"),
         Symbol("v"): Described(Symbol("rabbitmq:stream-filter"), ["a"]), **app(k="x")}
    fs = parse_filter_set(f)
    assert set(fs.in_place) == {"o", "v", "a"}
    assert fs.accepts(record(filter_value="a", app={"k": "x"}))
    assert not fs.accepts(record(filter_value="a", app={"k": "y"}))
    assert not fs.accepts(record(filter_value="b", app={"k": "x"}))


def test_offset_spec_alone_filters_nothing_and_unknown_filters_are_not_in_place():
    fs = parse_filter_set({Symbol("o"): Described(Symbol("rabbitmq:stream-offset-spec"), "first"),
                           Symbol("x"): Described(Symbol("vendor:other"), "y"), Symbol("plain"): "z"})
    assert not fs.filtering and set(fs.in_place) == {"o"}


@pytest.mark.parametrize("filters", [
    sql("FALSE FALSE"), sql("@#$"), sql(5), props(nope="x"), props(subject=Typed(0x71, 1)), props(),
    props(**{f"subject{i}": "x" for i in range(17)}), app(**{f"k{i}": "x" for i in range(17)}),
    {**sql("TRUE"), **props(subject="x")}, {**props(subject="x"), **sql("TRUE")},
    {Symbol("v"): Described(Symbol("rabbitmq:stream-filter"), Typed(0x71, 1))},
    {Symbol("u"): Described(Symbol("rabbitmq:stream-match-unfiltered"), "yes")},
    {Symbol("a"): Described(Symbol("amqp:application-properties-filter"), {Symbol("k"): "x"})},
])
def test_invalid_filters_are_refused(filters):
    with pytest.raises(FilterError):
        parse_filter_set(filters)


def test_raw_record_has_no_fields():
    raw = Record(0, 0, None, b"\xff not amqp", (Header("x-stream-raw", None),))
    assert not accepts(app(k="x"), raw)
    assert accepts(sql("k IS NULL"), raw)
