"""The HTTP listener's request limits (gateway/management/limits.py), in memory with a fake
clock: an oversized declared or chunked body gets 413 at once, a request not complete within
the read timeout gets 408, and both close the connection without waiting for the rest."""
from __future__ import annotations

from twisted.internet.testing import StringTransport
from twisted.internet.task import Clock
from twisted.web import resource

from gateway.management.limits import LimitedChannel, limited_site


class Echo(resource.Resource):
    isLeaf = True

    def render(self, request):
        return b"got %d" % len(request.content.read())


def _connect(max_body=1000, read_timeout=5.0):
    clock = Clock()
    site = limited_site(Echo(), reactor=clock)
    site.protocol = type("Small", (LimitedChannel,), {"max_body": max_body, "read_timeout": read_timeout})
    proto = site.buildProtocol(None)
    transport = StringTransport()
    proto.makeConnection(transport)
    return clock, proto, transport


def test_a_huge_content_length_is_refused_before_the_body():
    _, proto, transport = _connect()
    proto.dataReceived(b"PUT /api/users/x HTTP/1.1\r\nHost: a\r\nContent-Length: 1000000000000\r\n\r\n{}")
    assert transport.value().startswith(b"HTTP/1.1 413 ")
    assert transport.disconnecting


def test_a_chunked_body_past_the_limit_is_refused():
    _, proto, transport = _connect()
    proto.dataReceived(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
    for _ in range(5):
        proto.dataReceived(b"200\r\n" + b"x" * 512 + b"\r\n")
    assert transport.value().startswith(b"HTTP/1.1 413 ") and transport.disconnecting


def test_a_slow_body_times_out_and_a_byte_at_a_time_does_not_keep_it_alive():
    clock, proto, transport = _connect()
    proto.dataReceived(b"PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n")
    for _ in range(4):
        clock.advance(1)
        proto.dataReceived(b"x")  # trickled: each byte would reset an idle timeout
    assert transport.value() == b""
    clock.advance(1.5)
    assert transport.value().startswith(b"HTTP/1.1 408 ") and transport.disconnecting


def test_a_request_within_the_limits_is_served_and_the_timer_rearms():
    clock, proto, transport = _connect()
    for _ in range(2):
        proto.dataReceived(b"PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc")
        assert b"got 3" in transport.value() and not transport.disconnecting
        transport.clear()
        clock.advance(10)  # idle between requests is not the read timeout
        assert transport.value() == b""


def test_a_headers_only_trickle_times_out():
    clock, proto, transport = _connect()
    proto.dataReceived(b"GET / HTTP/1.1\r\n")
    clock.advance(6)
    assert transport.value().startswith(b"HTTP/1.1 408 ")
