"""The brokers' own links to each other: an asynchronous Kafka protocol client in the reactor.

DESIGN.md wave 3: one inter-broker layer, on Kafka's protocol. A forwarded publish is a Produce
to the queue's leader, a remote consumer is a share-group member there (ShareFetch,
ShareAcknowledge). :class:`PeerClient` is one TCP connection to one broker: length-framed,
pipelined (many requests in flight, answers matched by correlation id), ApiVersions first,
each call at the highest version both sides know up to :data:`CAPS`. :class:`PeerClients` is
the pool by node id. The typed wrappers (Produce, share groups) are in
``gateway.cluster.peer_apis``.

Failures are errbacks, never hangs: a call has a timeout (:class:`PeerTimeout`), a dropped
connection fails every call in flight (:class:`PeerUnavailable`, naming the broker), and the
next call reconnects after a backoff that grows while the broker stays away.

A broker answers one connection's requests in order (gateway.kafka.connection), so a ShareFetch
parked for ``max_wait`` holds back the answers behind it: give long polls their own ``lane``.
"""
from __future__ import annotations

import logging
import struct
from typing import Callable

from twisted.internet import defer, protocol
from twisted.python.failure import Failure

from gateway.cluster.peer_apis import PeerApis
from gateway.netutil import write_through
from wire import kafka_private
from wire.kafka import (ADVERTISED, API_VERSIONS, api_name, decode_response, encode_request, preload,
                        response_correlation)

log = logging.getLogger(__name__)

PRODUCE = 0
# api key -> the highest version this module's callers fill in (fields of later versions would be
# left at their defaults): Produce, Fetch (12: topics by name), ListOffsets, OffsetFetch (8: groups,
# topics by name), Metadata, FindCoordinator, DescribeGroups (5: v6 describes classic groups only),
# ListGroups, AddPartitionsToTxn (the brokers' form), share groups.
CAPS = {0: 9, 1: 12, 2: 7, 3: 12, 9: 8, 10: 4, 15: 5, 16: 5, 24: 5, 76: 1, 77: 1, 78: 1, 79: 1}
DEFAULT_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 5.0
BACKOFF_S = (0.05, 2.0)  # first and longest wait before reconnecting to a broker that went away
MAX_FRAME = 128 * 1024 * 1024  # a larger size prefix means the stream is garbage, not a response

_SIZE = struct.Struct(">i")


class PeerUnavailable(RuntimeError):
    """The broker cannot answer: not reachable, the connection dropped, or no common version."""


class PeerTimeout(PeerUnavailable):
    """No answer within the call's timeout (the connection is kept: the answer may still come)."""


class PeerProtocolError(PeerUnavailable):
    """The broker's answer could not be read."""


class _Pending:
    __slots__ = ("api_key", "version", "deferred", "timer")

    def __init__(self, api_key: int, version: int, deferred: defer.Deferred, timer):
        self.api_key, self.version, self.deferred, self.timer = api_key, version, deferred, timer


class _PeerProtocol(protocol.Protocol):
    """Kafka framing over one connection: 4-byte big-endian size, then the frame."""

    def __init__(self, client: "PeerClient"):
        self.client = client
        self._buf = bytearray()

    def connectionMade(self) -> None:
        try:
            self.transport.setTcpNoDelay(True)  # small requests must not wait for Nagle
        except Exception:  # not a TCP transport (tests over other transports)
            pass
        self.client._connected(self)

    def dataReceived(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        pos, end = 0, len(buf)
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 4 or size > MAX_FRAME:
                self.client._drop(self, f"unreadable answer: a response frame of {size} bytes")
                return
            if end - pos - 4 < size:
                break
            frame = bytes(buf[pos + 4:pos + 4 + size])
            pos += 4 + size
            if self.client._proto is not self:
                return  # dropped while an earlier answer was handled: the rest belongs to no call
            self.client._frame(frame)
        del buf[:pos]

    def connectionLost(self, reason: Failure = protocol.connectionDone) -> None:
        self._buf = bytearray()
        self.client._lost(self, reason)


class _Factory(protocol.ClientFactory):
    def __init__(self, client: "PeerClient"):
        self.client = client

    def buildProtocol(self, addr):
        return _PeerProtocol(self.client)

    def clientConnectionFailed(self, connector, reason: Failure) -> None:
        self.client._connect_failed(reason)


class PeerClient:
    """One connection to one broker; :meth:`call` sends a request and returns a Deferred of the
    decoded kio response entity (``None`` for Produce with acks=0, which has no response)."""

    def __init__(self, reactor, host: str, port: int, *, name: str | None = None, client_id: str = "gateway-peer",
                 timeout: float = DEFAULT_TIMEOUT_S, connect_timeout: float = CONNECT_TIMEOUT_S,
                 backoff: tuple[float, float] = BACKOFF_S):
        self.reactor = reactor
        self.host, self.port = host, port
        self.name = name or f"broker at {host}:{port}"
        self.client_id = client_id.encode()
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.backoff = backoff
        self.versions: dict[int, tuple[int, int]] = {}  # the broker's ApiVersions answer
        self._proto: _PeerProtocol | None = None  # connected (ApiVersions may still be on its way)
        self._ready = False  # connected and versions known: calls go straight out
        self._connecting = False
        self._connector = None
        self._retry = None  # the DelayedCall of a reconnection after a backoff
        self._delay = 0.0  # the backoff before the next attempt (0: connect now)
        self._waiting: list[tuple] = []  # calls made before the connection was ready
        self._held: list[bytes] | None = None  # frames gathered while the waiting calls are sent
        self._pending: dict[int, _Pending] = {}  # correlation id -> call in flight
        self._correlation = 0
        self._closed = False

    def __repr__(self) -> str:
        return f"<PeerClient {self.name}>"

    @property
    def connected(self) -> bool:
        return self._ready

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    # --- calls ----------------------------------------------------------------------------
    def call(self, api_key: int, data, version: int | None = None, timeout: float | None = None) -> defer.Deferred:
        """Send one request (a dict of fields, or a kio entity when ``version`` is given); the
        Deferred fires with the response entity or fails with a :class:`PeerUnavailable`.
        ``version`` None: the highest version both sides know, capped by :data:`CAPS`."""
        d = defer.Deferred()
        timeout = self.timeout if timeout is None else timeout
        if self._closed:
            d.errback(PeerUnavailable(f"{self.name}: the client is closed ({api_name(api_key)} not sent)"))
        elif self._ready and self._held is None:
            self._send(api_key, data, version, d, timeout)
        else:
            # the timeout runs from now: a call waiting for a broker that does not come back fails too
            timer = self.reactor.callLater(timeout, self._waiting_timeout, d, api_key, timeout)
            self._waiting.append((api_key, data, version, d, timer))  # the timer's time is the deadline
            self._connect()
        return d

    def version(self, api_key: int) -> int:
        """The version a call of this API is sent at (the broker's versions must be known)."""
        low, high = self.versions.get(api_key, (0, -1))
        chosen = min(high, CAPS.get(api_key, high))
        if chosen < low:
            raise PeerUnavailable(f"{self.name} offers {api_name(api_key)} (API {api_key}) only in versions "
                                  f"{low}-{high}, none of which this broker speaks (up to {CAPS.get(api_key)})")
        return chosen

    def _send(self, api_key: int, data, version: int | None, d: defer.Deferred, timeout: float) -> None:
        """Encode and write one call; it is in ``_pending`` until its answer or its timeout."""
        try:
            if version is None:
                version = self.version(api_key)
            self._correlation = correlation = (self._correlation + 1) & 0x7FFFFFFF
            frame = encode_request(api_key, version, correlation, self.client_id, data)
        except Exception as exc:  # bad fields, no common version: this call fails, nothing is sent
            if not isinstance(exc, PeerUnavailable):
                exc = PeerProtocolError(f"{self.name}: cannot encode {api_name(api_key)} v{version}: {exc!r}")
            d.errback(exc)
            return
        if api_key == PRODUCE and _acks(data) == 0:
            self._write(frame)
            d.callback(None)  # acks=0: the broker sends nothing back, so the call is done once written
            return
        timer = self.reactor.callLater(timeout, self._timed_out, correlation, timeout)
        self._pending[correlation] = _Pending(api_key, version, d, timer)
        self._write(frame)

    def _write(self, frame: bytes) -> None:
        # Straight to the socket when nothing is queued ahead (gateway.netutil.write_through):
        # Twisted's own write waits for the next loop turn and costs two epoll_ctl calls per
        # request, and the callers already send one request per peer and loop turn (a leader's
        # forwarded publishes, a link session's operations). The calls that waited for the
        # connection go out together (see _versions).
        if self._held is not None:
            self._held.append(frame)
        else:
            write_through(self._proto.transport, frame)

    def _frame(self, payload: bytes) -> None:
        correlation = response_correlation(payload)
        pending = self._pending.pop(correlation, None)
        if pending is None:
            return  # the answer to a call that timed out
        pending.timer.cancel()
        try:
            response = decode_response(pending.api_key, pending.version, payload)
        except Exception as exc:
            pending.deferred.errback(PeerProtocolError(
                f"{self.name}: unreadable {api_name(pending.api_key)} v{pending.version} response: {exc!r}"))
            return
        pending.deferred.callback(response)

    def _timed_out(self, correlation: int, timeout: float) -> None:
        pending = self._pending.pop(correlation, None)
        if pending is not None:
            pending.deferred.errback(PeerTimeout(
                f"{self.name}: no answer to {api_name(pending.api_key)} within {timeout:g} s"))

    def _waiting_timeout(self, d: defer.Deferred, api_key: int, timeout: float) -> None:
        self._waiting = [w for w in self._waiting if w[3] is not d]
        d.errback(PeerTimeout(f"{self.name}: not connected within {timeout:g} s; {api_name(api_key)} not sent"))

    # --- the connection ---------------------------------------------------------------------
    def _connect(self) -> None:
        if self._connecting or self._proto is not None or self._retry is not None or self._closed:
            return
        if self._delay:
            self._retry = self.reactor.callLater(self._delay, self._attempt)
        else:
            self._attempt()

    def _attempt(self) -> None:
        self._retry = None
        if self._closed or self._proto is not None:
            return
        self._connecting = True
        self._connector = self.reactor.connectTCP(self.host, self.port, _Factory(self), timeout=self.connect_timeout)

    def _connected(self, proto: _PeerProtocol) -> None:
        self._connecting = False
        if self._closed:
            proto.transport.abortConnection()
            return
        self._proto = proto
        d = defer.Deferred()
        # ApiVersions v0: every broker answers it, whatever it supports
        self._send(API_VERSIONS, {}, 0, d, self.connect_timeout)
        d.addCallbacks(self._versions, self._versions_failed, callbackArgs=(proto,), errbackArgs=(proto,))

    def _versions(self, answer, proto: _PeerProtocol) -> None:
        if proto is not self._proto:
            return
        if answer.error_code:
            self._drop(proto, f"ApiVersions answered error {int(answer.error_code)}")
            return
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        self._ready = True
        self._delay = 0.0
        # What waited goes out in one write, in the order it was called; calls made meanwhile by
        # callbacks (an acks=0 Produce is done once written) wait too, and go after it.
        self._held = []
        try:
            while self._waiting and self._proto is proto:  # after a drop, new calls wait for the next one
                waiting, self._waiting = self._waiting, []
                for api_key, data, version, d, timer in waiting:
                    left = max(timer.getTime() - self.reactor.seconds(), 0.001)  # of the call's own timeout
                    timer.cancel()
                    if self._proto is proto:
                        self._send(api_key, data, version, d, left)
                    else:  # a callback closed or dropped the connection meanwhile
                        d.errback(PeerUnavailable(f"{self.name}: the connection went away before "
                                                  f"{api_name(api_key)} was sent"))
        finally:
            frames, self._held = self._held, None
            if frames:
                proto.transport.writeSequence(frames)

    def _versions_failed(self, failure: Failure, proto: _PeerProtocol) -> None:
        if proto is self._proto:
            self._drop(proto, f"ApiVersions failed: {failure.getErrorMessage()}")

    def _drop(self, proto: _PeerProtocol, why: str) -> None:
        """Close a connection that cannot be trusted any more; its calls fail with ``why``."""
        log.warning("%s: dropping the connection: %s", self.name, why)
        self._lost(proto, Failure(PeerProtocolError(why)))
        proto.transport.abortConnection()

    def _connect_failed(self, reason: Failure) -> None:
        self._connecting = False
        self._connector = None
        self._backoff()
        self._fail_all(f"cannot connect to {self.name}: {reason.getErrorMessage()}")

    def _lost(self, proto: _PeerProtocol, reason: Failure) -> None:
        if proto is not self._proto:
            return  # already handled (a drop, then the transport's own connectionLost)
        self._proto = None
        self._ready = False
        self._connector = None
        self._backoff()
        self._fail_all(f"connection to {self.name} lost: {reason.getErrorMessage()}")

    def _backoff(self) -> None:
        first, longest = self.backoff
        self._delay = min(longest, self._delay * 2) if self._delay else first

    def _fail_all(self, why: str) -> None:
        pending, self._pending = self._pending, {}
        waiting, self._waiting = self._waiting, []
        for p in pending.values():
            p.timer.cancel()
            p.deferred.errback(PeerUnavailable(f"{why} ({api_name(p.api_key)} in flight)"))
        for api_key, _data, _version, d, timer in waiting:
            timer.cancel()
            d.errback(PeerUnavailable(f"{why} ({api_name(api_key)} not sent)"))

    def close(self) -> None:
        """Drop the connection; calls in flight or waiting fail, later calls fail at once."""
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self._connector is not None and self._connecting:
            self._connector.stopConnecting()
        proto = self._proto
        if proto is not None:
            self._lost(proto, Failure(PeerUnavailable("closed")))
            proto.transport.loseConnection()
        self._fail_all(f"{self.name}: the client was closed")


def _acks(data) -> int:
    return data.get("acks", -1) if isinstance(data, dict) else data.acks


class PeerClients(PeerApis):
    """The links of this broker to the others, by node id (and lane: several connections to one
    broker when some calls may wait long, see the module's doc)."""

    def __init__(self, reactor, address_of: Callable[[int], tuple[str, int] | None], client_id: str = "gateway-peer",
                 **options):
        self.reactor = reactor
        self.address_of = address_of
        self.client_id = client_id
        self.options = options  # timeout, connect_timeout, backoff for every PeerClient
        self.clients: dict[tuple[int, str], PeerClient] = {}
        self.closed = False
        # the calls brokers make to each other all the time: their codecs ready before the first
        for key, (_, high) in (*((k, ADVERTISED[k]) for k in CAPS), *kafka_private.VERSIONS.items()):
            preload(key, min(high, CAPS.get(key, high)))

    def client(self, node_id: int, lane: str = "main") -> PeerClient:
        """The connection to ``node_id`` (made, or remade if the broker's address changed)."""
        if self.closed:
            raise PeerUnavailable(f"broker {node_id}: this broker's peer links are closed (it is stopping)")
        address = self.address_of(node_id)
        if address is None:
            raise PeerUnavailable(f"broker {node_id} is not in the cluster (no address known)")
        key = (node_id, lane)
        client = self.clients.get(key)
        if client is not None and (client.host, client.port) == tuple(address):
            return client
        if client is not None:
            client.close()
        host, port = address
        client = self.clients[key] = PeerClient(self.reactor, host, port, name=f"broker {node_id} at {host}:{port}",
                                                client_id=self.client_id, **self.options)
        return client

    def call(self, node_id: int, api_key: int, data, version: int | None = None, timeout: float | None = None,
             lane: str = "main") -> defer.Deferred:
        try:
            client = self.client(node_id, lane)
        except PeerUnavailable as exc:
            return defer.fail(exc)
        return client.call(api_key, data, version, timeout)

    def close_lane(self, lane: str) -> None:
        """Close every connection of ``lane`` (its user is done: a share session that ended)."""
        for key in [k for k in self.clients if k[1] == lane]:
            client = self.clients.pop(key, None)  # a close's failed calls may have closed the lane already
            if client is not None:
                client.close()

    def forget(self, node_id: int) -> None:
        """The broker left the cluster: close its connections (their calls fail)."""
        for key in [k for k in self.clients if k[0] == node_id]:
            client = self.clients.pop(key, None)
            if client is not None:
                client.close()

    def close(self) -> None:
        self.closed = True
        clients, self.clients = self.clients, {}
        for client in clients.values():
            client.close()
