"""The Kafka listener: length-framed requests over TCP.

The framing lives in ``wire.framing``; this protocol only moves bytes. Until the Kafka APIs
are implemented every request is logged (api key, version, correlation id) and the
connection is closed, which clients report as a broken connection rather than hanging.
"""
from __future__ import annotations

import logging
import struct

from twisted.internet import protocol

from gateway.logs import fields
from wire.errors import FrameError
from wire.framing import FrameDecoder

log = logging.getLogger(__name__)

_REQUEST_HEADER = struct.Struct(">hhi")  # api_key, api_version, correlation_id


class KafkaConnection(protocol.Protocol):
    def __init__(self) -> None:
        self.decoder = FrameDecoder()

    def dataReceived(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
        except FrameError as exc:
            self.drop(f"bad request framing: {exc}")
            return
        for payload in frames:
            self.requestReceived(payload)
            if self.transport.disconnecting:
                return

    def requestReceived(self, payload: bytes) -> None:
        if len(payload) < _REQUEST_HEADER.size:
            self.drop(f"request of {len(payload)} bytes is shorter than a request header")
            return
        api_key, api_version, correlation_id = _REQUEST_HEADER.unpack_from(payload)
        self.drop("Kafka API not implemented", api_key=api_key, api_version=api_version,
                  correlation_id=correlation_id)

    def drop(self, reason: str, **extra) -> None:
        peer = self.transport.getPeer()
        log.warning("closing Kafka connection: %s", reason,
                    extra=fields(peer=f"{peer.host}:{peer.port}", **extra))
        self.transport.loseConnection()


class KafkaFactory(protocol.Factory):
    protocol = KafkaConnection
