"""One Kafka client connection: frames in, handlers, responses out in request order.

Kafka clients pipeline requests and match responses by order as much as by correlation
id, so a response that is ready early (a metadata answer behind a parked produce) waits for
the ones before it. Each response goes out in one ``write``. A framing or parse error
closes this connection with a log line and nothing else.

Identity: a connection is anonymous (principal ``User:ANONYMOUS``) until it authenticates
with SASL (SaslHandshake + SaslAuthenticate, :mod:`gateway.kafka.apis.session`); on a TLS
listener a verified client certificate names it first (its subject CN), SASL then wins. With
``require_auth`` only ApiVersions and the SASL requests are served before that. A SASL session
with a lifetime (an OAUTHBEARER token's, KIP-368) that has run out without a re-authentication
ends the connection at its next other request, as Kafka does.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections import deque

from twisted.internet import defer, protocol

from gateway.kafka import authz, quotas
from gateway.kafka.apis import dispatch
from gateway.logs import connection_ids, fields
from gateway.netutil import no_delay, write_parts, write_through
from gateway.management import metrics
from gateway.security.tls import is_tls, peer_common_name
from wire.errors import FrameError
from wire.framing import FrameDecoder
from wire.kafka import RequestError, ResponseParts, api_name, parse_request

log = logging.getLogger(__name__)

_PENDING = object()
ANONYMOUS = "ANONYMOUS"
PRE_AUTH_APIS = (17, 18, 36)  # SaslHandshake, ApiVersions, SaslAuthenticate
FAILED_AUTH_CLOSE_DELAY_S = 0.1
SEND_LIMIT = 4 << 20  # bytes per send() call on a Kafka connection (see connectionMade)
# Requests of one connection being handled at once (answers owed, e.g. long-poll fetches or
# produces waiting for replicas); the next wait in _waiting. Clients pipeline at most 5 per
# connection by default (idempotent producers must), so this only stops a runaway client.
MAX_IN_FLIGHT = 64


class _ListenerView:
    """The shared KafkaContext as one listener's connections see it: the same state, except the
    address advertised in Metadata and FindCoordinator (a client that came in over TLS must be
    sent back to the TLS port)."""

    def __init__(self, ctx, advertised):
        object.__setattr__(self, "_ctx", ctx)
        object.__setattr__(self, "advertised", advertised)

    def __getattr__(self, name):
        return getattr(self._ctx, name)

    def __setattr__(self, name, value):
        setattr(self._ctx, name, value)


class KafkaConnection(protocol.Protocol):
    def __init__(self, ctx, require_auth: bool = False):
        self.ctx = ctx
        self.decoder = FrameDecoder(ctx.max_request_bytes)
        self._slots: deque[list] = deque()  # [response bytes | _PENDING], in request order
        self._waiting: deque[bytes] = deque()  # whole requests read but not yet handled (held back)
        self._write_paused = False
        self._reading_held = False  # reading stopped because MAX_IN_FLIGHT answers are owed
        self._handling = False  # inside _handle_waiting (answers filled meanwhile must not re-enter it)
        self.on_lost: dict = {}  # key -> called when the connection closes (AMQP link sessions it carried)
        self.principal: str | None = None  # the user name once authenticated (SASL or certificate)
        self.sasl_mechanism: str | None = None  # chosen by SaslHandshake
        self.sasl_state = None  # a ScramServer while a SCRAM exchange runs
        self.sasl_done = False
        # fires once the last Produce that waited for a transaction coordinator has appended:
        # later Produce requests of this connection append after it (apis.produce)
        self.txn_gate = None
        self.reauthenticating = False  # a second SaslHandshake after a login (KIP-368)
        self.session_deadline: float | None = None  # Unix time the SASL session ends (OAUTHBEARER)
        self.require_auth = require_auth
        self.tls = False
        self.zero_copy = False  # set in connectionMade
        self.close_after_response = False  # a failed authentication: answer, then close
        self._certificate_checked = False
        self.peer = "?"
        self.conn_id = f"kafka-{next(connection_ids)}"  # in every log line about this connection
        self.peer_host = ""

    def connectionMade(self) -> None:
        self.last_request = time.monotonic()  # the idle sweep (--kafka-idle-ms) closes it long after
        self.ctx.connections.add(self)
        peer = self.transport.getPeer()
        self.peer = f"{peer.host}:{peer.port}"
        self.peer_host = peer.host
        self.tls = is_tls(self.transport)
        if self.ctx.too_many_connections():
            self.drop("the broker's connection limit is reached (--max-connections)")
            return
        # Back-pressure: while the client does not read its responses (the socket's send buffer
        # is full), stop reading its requests, so a slow consumer cannot make the broker buffer
        # fetch responses without bound.
        self.transport.registerProducer(self, True)
        # Twisted hands the socket at most SEND_LIMIT (128 KiB) per writable event; a 1 MiB fetch
        # response then takes eight trips through the reactor. Offer the kernel more per send().
        self.transport.SEND_LIMIT = SEND_LIMIT
        no_delay(self.transport)
        # Fetch answers' records go from the segment files to the socket (os.sendfile) on a plain
        # TCP connection; through TLS they must pass the encryption in Python.
        self.zero_copy = not self.tls and getattr(self.transport, "socket", None) is not None

    def connectionLost(self, reason=None) -> None:
        self.ctx.connections.discard(self)
        lost, self.on_lost = self.on_lost, {}
        for callback in lost.values():
            callback()

    # Twisted producer interface, driven by the transport's write buffer.
    def pauseProducing(self) -> None:
        self._write_paused = True
        self.transport.pauseProducing()

    def resumeProducing(self) -> None:
        self._write_paused = self._reading_held = False
        self.transport.resumeProducing()
        self._handle_waiting()

    def stopProducing(self) -> None:
        pass

    @property
    def principal_name(self) -> str:
        """Kafka's principal name: the user, or ANONYMOUS."""
        return self.principal or ANONYMOUS

    def _check_certificate(self) -> None:
        # The handshake is over once application data arrives, so the peer certificate is known.
        self._certificate_checked = True
        name = peer_common_name(self.transport) if self.tls else None
        if name is not None and self.principal is None:
            self.principal = name
            log.info("Kafka client authenticated by certificate", extra=fields(peer=self.peer, conn=self.conn_id, user=name))

    def dataReceived(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
        except FrameError as exc:
            self.drop(f"bad request framing: {exc}")
            return
        self._waiting.extend(frames)
        self._handle_waiting()

    def _handle_waiting(self) -> None:
        # One socket read can hold hundreds of pipelined requests. While the client is not
        # reading (the send buffer is full) or too many answers are owed, the rest wait here,
        # so a client that never reads cannot make the broker build fetch responses without
        # bound; reading from the socket stops too (pauseProducing), which bounds this queue.
        if self._handling:
            return
        waiting = self._waiting
        self._handling = True
        try:
            while waiting and not self._write_paused and len(self._slots) < MAX_IN_FLIGHT:
                if self.transport.disconnecting:
                    waiting.clear()
                    return
                self.requestReceived(waiting.popleft())
        finally:
            self._handling = False
        # Held back by the in-flight cap: stop reading until answers go out (by the write
        # buffer: the transport is paused already and resumes through resumeProducing).
        if not self._write_paused and self.transport is not None:
            if waiting and not self._reading_held:
                self._reading_held = True
                self.transport.pauseProducing()
            elif not waiting and self._reading_held:
                self._reading_held = False
                self.transport.resumeProducing()

    def idle_for(self, now: float) -> float:
        """Seconds since the last whole request, or 0 while a response is owed (a long-poll fetch)."""
        return 0.0 if self._slots or self._waiting else now - self.last_request

    def requestReceived(self, payload: bytes) -> None:
        self.last_request = time.monotonic()
        if not self.ctx.accepting:
            self.drop("the broker is shutting down")
            return
        try:
            request = parse_request(payload)
        except RequestError as exc:
            self.drop(str(exc))
            return
        if not self._certificate_checked:
            self._check_certificate()
        deadline = self.session_deadline
        if deadline is not None and request.header.api_key not in PRE_AUTH_APIS and time.time() > deadline:
            self.drop("the SASL session has expired (its token's lifetime) and the client did not re-authenticate",
                      api_key=request.header.api_key)
            return
        if self.require_auth and self.principal is None and request.header.api_key not in PRE_AUTH_APIS:
            self.drop("authentication required: the client sent a request before authenticating",
                      api_key=request.header.api_key)
            return
        post = None
        authorizer = getattr(self.ctx, "authorizer", None)
        if authorizer is not None and request.body is not None:
            verdict = authz.authorize(authorizer, self, request)
            if verdict.refuse:
                self.drop(verdict.refuse, api_key=request.header.api_key)
                return
            if verdict.answered:
                if verdict.answer is not None:
                    slot = [_PENDING]
                    self._slots.append(slot)
                    self._fill(slot, verdict.answer)
                return
            if verdict.body is not request.body:
                request = dataclasses.replace(request, body=verdict.body)
            post = verdict.post
        started = time.monotonic()
        try:
            result = authz.apply_post(request.header, dispatch(self.ctx, self, request), post)
        except RequestError as exc:  # a body read lazily by its handler (Produce v0-2) was malformed
            self.drop(str(exc), api_key=request.header.api_key, api_version=request.header.api_version)
            return
        except Exception:
            h = request.header
            log.exception("Kafka request failed", extra=fields(peer=self.peer, conn=self.conn_id, api_key=h.api_key,
                                                                api_version=h.api_version,
                                                                correlation_id=h.correlation_id))
            self.drop("internal error handling the request")
            return
        if result is None:  # no response (acks=0 produce)
            return
        throttle = quotas.request_throttle_ms(self.ctx, self, request, time.monotonic() - started)
        if throttle:  # over its request_percentage: the answer says so and comes that much later
            h = request.header
            result = defer.maybeDeferred(lambda: result).addCallback(
                lambda data: quotas.hold(self.ctx, authz.with_throttle(h, data, throttle), throttle))
        slot = [_PENDING]
        self._slots.append(slot)
        name = api_name(request.header.api_key, request.header.api_version)
        if isinstance(result, defer.Deferred):
            result.addCallbacks(lambda data: self._fill(slot, data, name, started), lambda f: self._failed(f, request))
        else:
            self._fill(slot, result, name, started)

    def _fill(self, slot: list, data: bytes, api: str | None = None, started: float = 0.0) -> None:
        if api is not None:
            metrics.timed(metrics.KAFKA_REQUESTS, api, started)
        if isinstance(data, ResponseParts) and (not self._slots or slot is not self._slots[0]):
            data = bytes(data)  # it waits behind an earlier answer: its file ranges must be read now
        slot[0] = data
        while self._slots and self._slots[0][0] is not _PENDING:
            out = self._slots.popleft()[0]
            if out is not None and self.transport is not None and not self.transport.disconnected:
                if isinstance(out, ResponseParts):
                    write_parts(self.transport, out.parts)
                else:  # straight to the socket when it can take it: a zero-copy answer behind it need not be copied
                    write_through(self.transport, out)
        if self._waiting and len(self._slots) < MAX_IN_FLIGHT:
            self._handle_waiting()
        if self.close_after_response and not self._slots and self.transport is not None:
            # Kafka's connection.failed.authentication.delay.ms (100): the client reads the
            # answer before it sees the close (kafka-python otherwise reports only a disconnect).
            self.close_after_response = False
            self.ctx.reactor.callLater(FAILED_AUTH_CLOSE_DELAY_S, self._close)

    def _failed(self, failure, request) -> None:
        h = request.header
        log.error("Kafka request failed: %s", failure.getErrorMessage(),
                  exc_info=(failure.type, failure.value, failure.getTracebackObject()),
                  extra=fields(peer=self.peer, conn=self.conn_id, api_key=h.api_key, api_version=h.api_version))
        self.drop("internal error handling the request")

    def drop(self, reason: str, **extra) -> None:
        log.warning("closing Kafka connection: %s", reason, extra=fields(peer=self.peer, conn=self.conn_id, **extra))
        self._close()

    def _close(self) -> None:
        # A registered producer would hold a TLS connection open (TLS shuts down only after it leaves).
        self.transport.unregisterProducer()
        self.transport.loseConnection()


class KafkaFactory(protocol.Factory):
    noisy = False

    def __init__(self, ctx, advertised=None, require_auth: bool = False):
        self.ctx = ctx if advertised is None else _ListenerView(ctx, advertised)
        self.require_auth = require_auth

    def buildProtocol(self, addr):
        return KafkaConnection(self.ctx, self.require_auth)
