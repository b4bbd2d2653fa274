"""The brokers' own Kafka client, inside the reactor: the inter-broker layer's requests.

Forwarded AMQP publishes (Produce), remote consumers (ShareFetch, ShareAcknowledge) and the
AMQP state records a broker sends to the state topic's leader are requests to other brokers on
the hot path: they must neither block the reactor nor take a thread each. A :class:`PeerClient`
keeps one connection to one broker with any number of requests in flight (Kafka answers them in
order on a connection; each is matched by its correlation id), asks ApiVersions first and speaks
each API at the highest version both sides know, capped where this client's callers fill the
fields of a known version. :class:`PeerClients` keeps one per broker.

Failures are plain: a call not answered within its time-out, or pending when the connection
drops, fails with :class:`PeerUnavailable` naming the broker and the API; the next call
connects again, no sooner than ``RECONNECT_S`` after a failed attempt (calls before that fail at
once), so a dead broker costs nothing but the callers' retries.
"""
from __future__ import annotations

import logging
import struct
import time
from typing import Callable

from twisted.internet import defer, protocol

from gateway.ctl.kafka_client import API_VERSIONS, decode_response, encode_request, response_correlation

log = logging.getLogger(__name__)

# api key -> the highest version the callers fill the fields of
CAPS = {0: 9, 78: 1, 79: 1}
TIMEOUT_S = 30.0
RECONNECT_S = 0.5
_SIZE = struct.Struct(">i")


class PeerUnavailable(RuntimeError):
    """A broker could not be reached, or did not answer in time; the message says which and for what."""


class _Wire(protocol.Protocol):
    def __init__(self, client: "PeerClient"):
        self.client = client
        self._buffer = bytearray()

    def connectionMade(self) -> None:
        self.transport.setTcpNoDelay(True)
        self.client._connected(self)

    def dataReceived(self, data: bytes) -> None:
        buf = self._buffer
        buf += data
        while len(buf) >= 4:
            (size,) = _SIZE.unpack_from(buf)
            if len(buf) < 4 + size:
                return
            payload = bytes(buf[4:4 + size])
            del buf[:4 + size]
            self.client._answered(payload)

    def connectionLost(self, reason=protocol.connectionDone) -> None:
        self.client._lost(self, reason.getErrorMessage())


class PeerClient:
    def __init__(self, reactor, node_id: int, address_of: Callable[[int], tuple[str, int] | None],
                 client_id: str = "gateway-peer", timeout: float = TIMEOUT_S):
        self.reactor = reactor
        self.node_id = node_id
        self.address_of = address_of
        self.client_id = client_id.encode()
        self.timeout = timeout
        self.wire: _Wire | None = None
        self.versions: dict[int, tuple[int, int]] | None = None  # from ApiVersions, once connected
        self._connecting = False
        self._failed_at = 0.0
        self._correlation = 0
        self._pending: dict[int, tuple[defer.Deferred, int, int, object]] = {}  # correlation -> (d, api, version, timer)
        self._waiting: list[tuple[int, dict, int | None, defer.Deferred]] = []  # calls made before the versions came

    # --- calls ----------------------------------------------------------------------------------
    def call(self, api_key: int, data: dict, version: int | None = None) -> defer.Deferred:
        """Send one request (fields as a dict); a Deferred of the decoded response entity."""
        d = defer.Deferred()
        if self.versions is not None and self.wire is not None:
            self._send(api_key, data, version, d)
            return d
        if not self._connecting and time.monotonic() - self._failed_at < RECONNECT_S:
            d.errback(PeerUnavailable(f"broker {self.node_id} is unreachable (connecting again shortly)"))
            return d
        self._waiting.append((api_key, data, version, d))
        self._connect()
        return d

    def _send(self, api_key: int, data: dict, version: int | None, d: defer.Deferred) -> None:
        if version is None:
            low, high = self.versions.get(api_key, (0, -1))
            version = min(high, CAPS.get(api_key, high))
            if version < low:
                d.errback(PeerUnavailable(f"broker {self.node_id} offers API {api_key} in no version this "
                                          f"broker speaks"))
                return
        self._correlation += 1
        correlation = self._correlation
        try:
            framed = encode_request(api_key, version, correlation, self.client_id, data)
        except Exception as exc:  # a caller's bug: say so on its Deferred, not in the reactor
            d.errback(exc)
            return
        timer = self.reactor.callLater(self.timeout, self._timed_out, correlation)
        self._pending[correlation] = (d, api_key, version, timer)
        self.wire.transport.write(framed)

    def _answered(self, payload: bytes) -> None:
        correlation = response_correlation(payload)
        entry = self._pending.pop(correlation, None)
        if entry is None:
            return  # timed out already
        d, api_key, version, timer = entry
        if timer is not None and timer.active():
            timer.cancel()
        try:
            response = decode_response(api_key, version, payload)
        except Exception as exc:
            d.errback(PeerUnavailable(f"broker {self.node_id} sent an unreadable answer to API {api_key}: {exc}"))
            return
        d.callback(response)

    def _timed_out(self, correlation: int) -> None:
        entry = self._pending.pop(correlation, None)
        if entry is not None:
            entry[0].errback(PeerUnavailable(f"broker {self.node_id} did not answer API {entry[1]} within "
                                             f"{self.timeout:g} s"))
            if self.wire is not None:  # answers come in order: a lost one means the connection is stuck
                self.wire.transport.loseConnection()

    # --- the connection -------------------------------------------------------------------------------
    def _connect(self) -> None:
        if self._connecting:
            return
        address = self.address_of(self.node_id)
        if address is None:
            self._fail_waiting(f"broker {self.node_id} is not registered")
            return
        self._connecting = True
        creator = protocol.ClientCreator(self.reactor, _Wire, self)
        creator.connectTCP(address[0], address[1], timeout=self.timeout).addErrback(self._not_connected, address)

    def _not_connected(self, failure, address) -> None:
        self._connecting = False
        self._failed_at = time.monotonic()
        self._fail_waiting(f"cannot connect to broker {self.node_id} at {address[0]}:{address[1]}: "
                           f"{failure.getErrorMessage()}")

    def _connected(self, wire: _Wire) -> None:
        self.wire = wire
        d = defer.Deferred()
        self._send(API_VERSIONS, {}, 0, d)
        d.addCallbacks(self._versions, lambda failure: None)  # a loss fails the waiting calls (_lost)

    def _versions(self, answer) -> None:
        self._connecting = False
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        waiting, self._waiting = self._waiting, []
        for api_key, data, version, d in waiting:
            self._send(api_key, data, version, d)

    def _lost(self, wire: _Wire, why: str) -> None:
        if wire is not self.wire:
            return
        self.wire, self.versions = None, None
        self._connecting = False
        self._failed_at = time.monotonic()
        pending, self._pending = self._pending, {}
        for d, api_key, _, timer in pending.values():
            if timer is not None and timer.active():
                timer.cancel()
            d.errback(PeerUnavailable(f"connection to broker {self.node_id} lost during API {api_key}: {why}"))
        self._fail_waiting(f"connection to broker {self.node_id} lost: {why}")

    def _fail_waiting(self, why: str) -> None:
        waiting, self._waiting = self._waiting, []
        for _, _, _, d in waiting:
            d.errback(PeerUnavailable(why))

    def close(self) -> None:
        if self.wire is not None:
            self.wire.transport.loseConnection()


class PeerClients:
    """One :class:`PeerClient` per broker, made on first use."""

    def __init__(self, reactor, address_of: Callable[[int], tuple[str, int] | None], client_id: str = "gateway-peer"):
        self.reactor = reactor
        self.address_of = address_of
        self.client_id = client_id
        self.clients: dict[int, PeerClient] = {}

    def call(self, node_id: int, api_key: int, data: dict, version: int | None = None) -> defer.Deferred:
        client = self.clients.get(node_id)
        if client is None:
            client = self.clients[node_id] = PeerClient(self.reactor, node_id, self.address_of, self.client_id)
        return client.call(api_key, data, version)

    def forget(self, node_id: int) -> None:
        client = self.clients.pop(node_id, None)
        if client is not None:
            client.close()

    def close(self) -> None:
        for node_id in list(self.clients):
            self.forget(node_id)
