"""One Kafka client connection: frames in, handlers, responses out in request order.

Kafka clients pipeline requests and match responses by order as much as by correlation
id, so a response that is ready early (a metadata answer behind a parked produce) waits for
the ones before it. Each response goes out in one ``write``. A framing or parse error
closes this connection with a log line and nothing else.
"""
from __future__ import annotations

import logging
from collections import deque

from twisted.internet import defer, protocol

from gateway.kafka.apis import dispatch
from gateway.logs import fields
from wire.errors import FrameError
from wire.framing import FrameDecoder
from wire.kafka import RequestError, parse_request

log = logging.getLogger(__name__)

_PENDING = object()


class KafkaConnection(protocol.Protocol):
    def __init__(self, ctx):
        self.ctx = ctx
        self.decoder = FrameDecoder(ctx.max_request_bytes)
        self._slots: deque[list] = deque()  # [response bytes | _PENDING], in request order
        self.principal: str | None = None
        self.peer = "?"
        self.peer_host = ""

    def connectionMade(self) -> None:
        peer = self.transport.getPeer()
        self.peer = f"{peer.host}:{peer.port}"
        self.peer_host = peer.host

    def dataReceived(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
        except FrameError as exc:
            self.drop(f"bad request framing: {exc}")
            return
        for payload in frames:
            if self.transport.disconnecting:
                return
            self.requestReceived(payload)

    def requestReceived(self, payload: bytes) -> None:
        if not self.ctx.accepting:
            self.drop("the broker is shutting down")
            return
        try:
            request = parse_request(payload)
        except RequestError as exc:
            self.drop(str(exc))
            return
        try:
            result = dispatch(self.ctx, self, request)
        except Exception:
            h = request.header
            log.exception("Kafka request failed", extra=fields(peer=self.peer, api_key=h.api_key,
                                                                api_version=h.api_version,
                                                                correlation_id=h.correlation_id))
            self.drop("internal error handling the request")
            return
        if result is None:  # no response (acks=0 produce)
            return
        slot = [_PENDING]
        self._slots.append(slot)
        if isinstance(result, defer.Deferred):
            result.addCallbacks(lambda data: self._fill(slot, data), lambda f: self._failed(f, request))
        else:
            self._fill(slot, result)

    def _fill(self, slot: list, data: bytes) -> None:
        slot[0] = data
        while self._slots and self._slots[0][0] is not _PENDING:
            out = self._slots.popleft()[0]
            if out is not None and self.transport is not None and not self.transport.disconnected:
                self.transport.write(out)

    def _failed(self, failure, request) -> None:
        h = request.header
        log.error("Kafka request failed: %s", failure.getErrorMessage(),
                  exc_info=(failure.type, failure.value, failure.getTracebackObject()),
                  extra=fields(peer=self.peer, api_key=h.api_key, api_version=h.api_version))
        self.drop("internal error handling the request")

    def drop(self, reason: str, **extra) -> None:
        log.warning("closing Kafka connection: %s", reason, extra=fields(peer=self.peer, **extra))
        self.transport.loseConnection()


class KafkaFactory(protocol.Factory):
    noisy = False

    def __init__(self, ctx):
        self.ctx = ctx

    def buildProtocol(self, addr):
        return KafkaConnection(self.ctx)
