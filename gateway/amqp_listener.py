"""The AMQP 0-9-1 listener: checks the protocol header a client opens with.

A client that sends any other header gets the header we speak and a closed connection, as
the AMQP 0-9-1 specification asks. The protocol itself is not implemented yet: a correct
header is logged and the connection closed.
"""
from __future__ import annotations

import logging

from twisted.internet import protocol

from gateway.logs import fields

log = logging.getLogger(__name__)

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"


class AmqpConnection(protocol.Protocol):
    def __init__(self) -> None:
        self._header = b""

    def dataReceived(self, data: bytes) -> None:
        if self.transport.disconnecting:
            return
        self._header += data
        if len(self._header) < len(PROTOCOL_HEADER) and PROTOCOL_HEADER.startswith(self._header):
            return
        peer = self.transport.getPeer()
        where = fields(peer=f"{peer.host}:{peer.port}")
        if self._header[:len(PROTOCOL_HEADER)] != PROTOCOL_HEADER:
            log.warning("closing AMQP connection: protocol header %r is not AMQP 0-9-1",
                        self._header[:len(PROTOCOL_HEADER)], extra=where)
            self.transport.write(PROTOCOL_HEADER)
        else:
            log.warning("closing AMQP connection: AMQP 0-9-1 not implemented yet", extra=where)
        self.transport.loseConnection()


class AmqpFactory(protocol.Factory):
    protocol = AmqpConnection
