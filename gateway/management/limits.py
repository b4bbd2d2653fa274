"""The HTTP listener's limits on a request, enforced while it is read, before any authentication:
a body larger than :data:`MAX_BODY` gets 413 and the connection is closed (a declared
``Content-Length`` is refused at once, a chunked body when it passes the limit), and a request
that is not complete :data:`READ_TIMEOUT_S` seconds after its first byte gets 408 and is closed,
so a client cannot hold a connection open with a short or trickled body.

The limits are class attributes of :class:`LimitedChannel` (tests set them on a subclass).
"""
from __future__ import annotations

import json

from twisted.web import http, server

MAX_BODY = 20_000_000  # bytes; RabbitMQ's default management.http_max_body_size is 20 MB
READ_TIMEOUT_S = 30.0  # from a request's first byte to its last
IDLE_TIMEOUT_S = 120.0  # a kept-alive connection with no request in flight


class LimitedChannel(http.HTTPChannel):
    max_body = MAX_BODY
    read_timeout = READ_TIMEOUT_S
    _read_timer = None
    _body_seen = 0
    _refused = False

    # callLater is the factory's reactor's (HTTPFactory.buildProtocol sets it), a Clock in tests
    def dataReceived(self, data):
        if self._refused:
            return
        if self._read_timer is None and not self._handlingRequest:
            self._read_timer = self.callLater(self.read_timeout, self._read_timed_out)
        super().dataReceived(data)

    def allHeadersReceived(self):
        self._body_seen = 0
        if self.length is not None and self.length > self.max_body:
            return self._refuse(413, "Payload Too Large", f"the request body is larger than {self.max_body} bytes")
        super().allHeadersReceived()

    def rawDataReceived(self, data):
        if self._refused:
            return
        if not self._handlingRequest:
            self._body_seen += len(data)
            if self._body_seen > self.max_body + 1024:  # a little room for chunked framing
                return self._refuse(413, "Payload Too Large", f"the request body is larger than {self.max_body} bytes")
        super().rawDataReceived(data)

    def allContentReceived(self):
        self._cancel_read_timer()
        super().allContentReceived()

    def lineReceived(self, line):
        if not self._refused:
            super().lineReceived(line)

    def _read_timed_out(self):
        self._read_timer = None
        if not self._handlingRequest and not self._refused:
            self._refuse(408, "Request Timeout", f"the request was not complete within {self.read_timeout:g} s")

    def _cancel_read_timer(self):
        if self._read_timer is not None:
            if self._read_timer.active():
                self._read_timer.cancel()
            self._read_timer = None

    def _refuse(self, status: int, phrase: str, reason: str) -> None:
        """Answer now, without reading the rest of the request, and close: the body is not wanted."""
        self._refused = True
        self._cancel_read_timer()
        body = json.dumps({"error": "bad_request" if status != 408 else "timeout", "reason": reason}).encode() + b"\n"
        self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                             b"connection: close\r\n\r\n%s" % (status, phrase.encode(), len(body), body))
        self.transport.loseConnection()

    def connectionLost(self, reason):
        self._cancel_read_timer()
        super().connectionLost(reason)


def limited_site(root, **kw) -> server.Site:
    site = server.Site(root, timeout=IDLE_TIMEOUT_S, **kw)
    site.protocol = LimitedChannel
    return site
