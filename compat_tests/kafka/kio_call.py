"""One Kafka request over a real socket, encoded with ``kio`` from Kafka's own message schemas.

For the few APIs no Python client sends yet (telemetry, the share-group offset admin APIs): the
request and response are Kafka's definitions, the broker is the real process.
"""
from __future__ import annotations

import io
import socket
import struct

from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_reader, entity_writer


def kio_call(address, api_key: int, request, response_cls, correlation_id: int = 1, api_version: int = 0,
             header_tags: bool = True):
    """Send ``request`` (a kio request entity of ``api_version``) and read one ``response_cls``.
    ``header_tags`` False: the response header has no tagged fields (ApiVersions, whatever its version)."""
    with KioConnection(address) as connection:
        return connection.call(api_key, request, response_cls, correlation_id, api_version, header_tags)


class KioConnection:
    """Several requests over one connection (state a broker keeps per connection)."""

    def __init__(self, address):
        self.socket = socket.create_connection(address, timeout=10)

    def __enter__(self) -> "KioConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.socket.close()

    def call(self, api_key: int, request, response_cls, correlation_id: int = 1, api_version: int = 0,
             header_tags: bool = True):
        out = io.BytesIO()
        entity_writer(RequestHeader)(out, RequestHeader(request_api_key=api_key, request_api_version=api_version,
                                                        correlation_id=correlation_id, client_id="kio-test"))
        entity_writer(type(request))(out, request)
        body = out.getvalue()
        self.socket.sendall(struct.pack(">i", len(body)) + body)
        head = _read(self.socket, 4)
        data = _read(self.socket, struct.unpack(">i", head)[0])
        assert struct.unpack_from(">i", data)[0] == correlation_id
        response, _ = entity_reader(response_cls)(data, 5 if header_tags else 4)  # correlation id, empty header tags
        return response


def _read(s, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        assert chunk, "connection closed"
        buf += chunk
    return buf
