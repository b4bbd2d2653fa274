"""wire.amqp_link: the bytes of the brokers' AMQP consumer links read back as written, and
bytes that are not well formed give LinkCodecError (the handler answers INVALID_REQUEST), never
another exception."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire import amqp_link as wl
from wire.amqp import delivery_tag_at, encode_delivery, with_delivery_tag
from wire.records import Header, Record


def test_operations_read_back_in_order():
    ops = b"".join([
        wl.op_open(7, "/", "orders", no_ack=False, exclusive=True, priority=-3, limit=250),
        wl.op_open(8, "vh", "q\u00e9", no_ack=True, exclusive=False, priority=0, limit=-1),
        wl.op_open(9, "/", "jobs", no_ack=False, exclusive=False, priority=2, limit=10,
                   frames=(5, 131072, "ctag-\u00e9")),
        wl.op_credit(7, 1_000_000),
        wl.op_settle(7, wl.ACK, [5, 3, 4, 9, 10, 12]),
        wl.op_get(8, True),
        wl.op_drain(7),
        wl.op_close(8),
    ])
    assert wl.read_ops(ops) == [
        (wl.OPEN, 7, "/", "orders", False, True, -3, 250, None),
        (wl.OPEN, 8, "vh", "q\u00e9", True, False, 0, -1, None),
        (wl.OPEN, 9, "/", "jobs", False, False, 2, 10, (5, 131072, "ctag-\u00e9")),
        (wl.CREDIT, 7, 1_000_000),
        (wl.SETTLE, 7, wl.ACK, [3, 4, 5, 9, 10, 12]),
        (wl.GET, 8, True),
        (wl.DRAIN, 7),
        (wl.CLOSE, 8),
    ]


def test_settled_offsets_travel_as_ranges():
    many = wl.op_settle(1, wl.REQUEUE, range(1000, 3000))
    assert len(many) < 40  # one range, not 2,000 offsets
    assert wl.read_ops(many) == [(wl.SETTLE, 1, wl.REQUEUE, list(range(1000, 3000)))]


def test_events_read_back_with_their_records():
    a = Record(41, 1_700_000_000_123, b"rk", b"body", (Header("amqp.p", b"\x20\x00"), Header("x", None)), 0)
    b = Record(42, 5, None, None, (), 0)
    events = b"".join([
        wl.ev_deliver(3, 41, 1, False, a),
        wl.ev_deliver(3, 42, 4, True, b),
        wl.ev_empty(9),
        wl.ev_drained(3),
        wl.ev_closed(3, "queue 'q' in vhost '/' was deleted"),
    ])
    assert wl.read_events(events) == [
        (wl.DELIVER, 3, 41, 1, False, a),
        (wl.DELIVER, 3, 42, 4, True, b),
        (wl.EMPTY, 9),
        (wl.DRAINED, 3),
        (wl.CLOSED, 3, "queue 'q' in vhost '/' was deleted"),
    ]


def test_encoded_deliveries_read_back_and_take_their_tag():
    """A leader's DELIVER_FRAMES carries the frames a consumer gets, tag zero; its broker fills in
    the tag and has byte for byte what it would have encoded itself."""
    frames = encode_delivery(5, "ctag-\u00e9", 0, True, "ex", "rk", b"\x10\x00\x01", b"x" * 300, 200)
    events = wl.ev_deliver_frames(9, 77, 2, True, frames) + wl.ev_drained(9)
    assert wl.read_events(events) == [(wl.DELIVER_FRAMES, 9, 77, 2, True, frames), (wl.DRAINED, 9)]
    at = delivery_tag_at("ctag-\u00e9")
    assert with_delivery_tag(frames, at, 12_345) == encode_delivery(5, "ctag-\u00e9", 12_345, True, "ex", "rk",
                                                                    b"\x10\x00\x01", b"x" * 300, 200)
    for cut in range(1, len(events) - 5):
        with pytest.raises(wl.LinkCodecError):
            wl.read_events(events[:cut])


@pytest.mark.parametrize("bad", [
    b"\x09\x00\x00\x00\x01",  # no such operation
    wl.op_open(1, "/", "q", False, False, 0, 10)[:-1],  # the queue name cut short
    wl.op_open(1, "/", "q", False, False, 0, 10, (1, 4096, "t"))[:-1],  # the consumer tag cut short
    wl.op_settle(1, wl.ACK, [1, 2, 3])[:-4],  # a range cut short
    b"\x03\x00\x00\x00\x01\x01\x00\x00\x00\x01" + (9).to_bytes(8, "big", signed=True) + (2).to_bytes(8, "big"),  # last < first
])
def test_malformed_operations_are_refused(bad):
    with pytest.raises(wl.LinkCodecError):
        wl.read_ops(bad)


def test_malformed_events_are_refused():
    whole = wl.ev_deliver(1, 1, 1, False, Record(1, 1, b"k", b"v", (Header("h", b"1"),), 0))
    for cut in range(1, len(whole)):
        with pytest.raises(wl.LinkCodecError):
            wl.read_events(whole[:cut])
    with pytest.raises(wl.LinkCodecError):
        wl.read_events(b"\x07\x00\x00\x00\x01")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_anything_else(data):
    for read in (wl.read_ops, wl.read_events):
        try:
            read(data)
        except wl.LinkCodecError:
            pass
