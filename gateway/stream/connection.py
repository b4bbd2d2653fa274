"""The RabbitMQ stream protocol front door (port 5552): one Twisted protocol per connection.

The handshake is RabbitMQ's: PeerProperties, SaslHandshake (PLAIN, and EXTERNAL on a TLS
connection with a client certificate), SaslAuthenticate (users, passwords and OAuth 2 tokens as
on the AMQP listener), Tune (frame-max, heartbeat), Open (vhost, with its permissions). Then
streams, publishers and subscriptions (:mod:`gateway.stream.subscriptions`) work over the
AMQP model's stream queues (:mod:`routing.streams`); publishes go through the router's group
commit and are confirmed once durable, like AMQP publisher confirms.

A malformed frame, an unknown command or a frame above the negotiated size closes the
connection with a Close frame naming the problem (the protocol's own response codes).
"""
from __future__ import annotations

import logging
import time

from twisted.internet import protocol, task

from core.errors import InvalidConfigError
from gateway.logs import connection_ids, fields
from gateway.netutil import no_delay
from gateway.security.login import check_login
from gateway.security.tls import peer_common_name
from gateway.stream.handlers import StreamCommands
from routing.errors import ACCESS_REFUSED as AMQP_ACCESS_REFUSED
from routing.errors import NOT_FOUND as AMQP_NOT_FOUND
from routing.errors import ChannelError, ConnectionError
from wire import stream_codec as sc

log = logging.getLogger(__name__)

FRAME_MAX = 1_048_576
# Until Open succeeds a peer that has not shown it may use the broker gets no more than this per
# frame (RabbitMQ's stream.initial_frame_max): room for a JWT as the PLAIN password, not for
# making the broker buffer a megabyte per unauthenticated connection.
PRE_OPEN_FRAME_MAX = 8192
HEARTBEAT_S = 60
HANDSHAKE_TIMEOUT_S = 10.0
WRITE_PAUSE_BYTES = 4 << 20  # stop sending chunks while this much waits in the transport


def response_code(exc: Exception) -> int:
    """An AMQP-model error as the stream protocol's response code (an invalid stream argument, too,
    is PRECONDITION_FAILED, as RabbitMQ answers a Create it cannot validate)."""
    code = getattr(exc, "reply_code", None) or getattr(exc, "code", None)
    if code == AMQP_NOT_FOUND:
        return sc.STREAM_DOES_NOT_EXIST
    if code == AMQP_ACCESS_REFUSED:
        return sc.ACCESS_REFUSED
    return sc.PRECONDITION_FAILED


class StreamConnection(protocol.Protocol, StreamCommands):
    def __init__(self, service, listener: str = "stream"):
        self.service = service
        self.listener = listener  # "stream" or "stream_tls": what clients are told to connect to
        self.reactor = service.reactor
        self.buffer = sc.FrameBuffer(PRE_OPEN_FRAME_MAX)
        self.state = "peer-properties"
        self.peer = self.peer_host = ""
        self.conn_id = next(connection_ids)
        self.username: str | None = None
        self.token = None
        self.vhost = None
        self.client_properties: dict[str, str] = {}
        self.publishers: dict[int, tuple] = {}  # id -> (queue, reference or None)
        self.subscriptions: dict = {}  # id -> Subscription
        self.pending: list[tuple] = []  # (publisher id, publishing id, Publish, queue) in publish order
        self.deliver_version = 1
        self.frame_max = FRAME_MAX
        self.heartbeat = HEARTBEAT_S
        self.closing = False
        self.last_input = time.monotonic()
        self._heartbeats = None
        self._handshake_timer = None
        self._correlation = 0
        self.certificate_user: str | None = None

    # --- transport --------------------------------------------------------------------------
    def connectionMade(self) -> None:
        peer = self.transport.getPeer()
        self.peer, self.peer_host = f"{peer.host}:{peer.port}", peer.host
        no_delay(self.transport)
        self.service.connections.add(self)
        self.transport.registerProducer(self, True)
        self._handshake_timer = self.reactor.callLater(HANDSHAKE_TIMEOUT_S, self._handshake_expired)

    def connectionLost(self, reason=protocol.connectionDone) -> None:
        self.service.connections.discard(self)
        self.service.confirming.discard(self)
        for timer in (self._handshake_timer,):
            if timer is not None and timer.active():
                timer.cancel()
        if self._heartbeats is not None and self._heartbeats.running:
            self._heartbeats.stop()
        for sub in list(self.subscriptions.values()):
            self.drop_subscription(sub)
        self.subscriptions.clear()

    # IPushProducer: the transport says when its buffer is full and when it drained
    def pauseProducing(self) -> None:
        self._paused = True

    def resumeProducing(self) -> None:
        self._paused = False
        self.pull_all()

    def stopProducing(self) -> None:
        pass

    _paused = False

    def writable(self) -> bool:
        return not self._paused and not self.closing

    def write(self, data: bytes) -> None:
        if not self.closing:
            self.transport.write(data)

    def dataReceived(self, data: bytes) -> None:
        self.last_input = time.monotonic()
        if self.closing:
            return
        self.buffer.push(data)
        while not self.closing:
            try:
                frame = self.buffer.pop()  # one at a time: Open changes the frame-max for the next
            except sc.StreamFrameError as exc:
                self.fail(exc.code, str(exc))
                return
            if frame is None:
                break
            key, version, body = frame
            try:
                request = sc.decode_request(key, version, body)
            except sc.StreamFrameError as exc:
                self.fail(exc.code, f"command {key & 0x7FFF}: {exc}")
                return
            try:
                self.handle(request)
            except (ChannelError, ConnectionError, InvalidConfigError) as exc:
                if request.correlation_id is not None and not request.response:
                    self.write(sc.error_response(request.command, request.correlation_id, response_code(exc)))
                    log.info("stream request refused: %s", exc, extra=fields(conn=self.conn_id, peer=self.peer))
                else:
                    self.fail(response_code(exc), str(exc))
            except Exception:
                log.exception("stream command failed", extra=fields(conn=self.conn_id, command=request.command))
                self.fail(sc.INTERNAL_ERROR, "internal error")
                return
        self.service.after_input()

    # --- handshake --------------------------------------------------------------------------
    def handle(self, request: sc.Request) -> None:
        command = request.command
        if request.response:
            self.on_response(request)
            return
        if command == sc.HEARTBEAT:
            return
        if command == sc.CLOSE:
            self.write(sc.response(sc.CLOSE, request.correlation_id))
            self.closing = True
            self.transport.loseConnection()
            return
        if self.state != "open":
            self.handshake(request)
            return
        handler = self.handlers.get(command)
        if handler is None:
            self.fail(sc.UNKNOWN_FRAME, f"command {command} is not one a client sends")
            return
        handler(self, request)

    def handshake(self, request: sc.Request) -> None:
        command, cid = request.command, request.correlation_id
        if command == sc.PEER_PROPERTIES and self.state == "peer-properties":
            self.client_properties = dict(request.properties)
            self.state = "sasl"
            self.write(sc.encode_peer_properties(cid, self.service.server_properties()))
        elif command == sc.SASL_HANDSHAKE and self.state in ("sasl", "peer-properties"):
            self.certificate_user = peer_common_name(self.transport)  # the TLS handshake is done by now
            mechanisms = ["PLAIN"] + (["EXTERNAL"] if self.certificate_user else [])
            self.state = "sasl"
            self.write(sc.encode_sasl_handshake(cid, mechanisms))
        elif command == sc.SASL_AUTHENTICATE and self.state == "sasl":
            self._authenticate(request)
        elif command == sc.TUNE and self.state == "tune":
            self.frame_max = min(request.frame_max or FRAME_MAX, FRAME_MAX)
            self.buffer.max_size = min(self.frame_max, PRE_OPEN_FRAME_MAX)  # the tuned size once open
            self.heartbeat = min(request.heartbeat, HEARTBEAT_S) if request.heartbeat else 0
            self.state = "tuned"
            if self.heartbeat:
                self._heartbeats = task.LoopingCall(self._heartbeat_tick)
                self._heartbeats.clock = self.reactor
                self._heartbeats.start(self.heartbeat, now=False)
        elif command == sc.OPEN and self.state == "tuned":
            self._open(request)
        else:
            self.fail(sc.UNKNOWN_FRAME, f"command {command} is not expected before the connection is open "
                                        f"(state {self.state})")

    def _authenticate(self, request: sc.Request) -> None:
        mechanism, data, cid = request.mechanism, request.data, request.correlation_id
        users, oauth = self.service.users, self.service.oauth
        username = password = None
        if mechanism == "PLAIN":
            parts = data.split(b"\x00")
            if len(parts) == 3:
                username, password = parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
        elif mechanism == "EXTERNAL" and self.certificate_user:
            username = self.certificate_user
        else:
            self.write(sc.encode_sasl_authenticate(cid, sc.SASL_MECHANISM_NOT_SUPPORTED))
            return
        username, grant, reason = check_login(users, oauth, mechanism, username, password, self.peer_host)
        if grant is not None:
            self.token = grant
        if reason is not None:
            log.warning("stream login refused: %s", reason, extra=fields(peer=self.peer, conn=self.conn_id,
                                                                        user=username, mechanism=mechanism))
            self.write(sc.encode_sasl_authenticate(cid, sc.AUTHENTICATION_FAILURE))
            self.closing = True
            self.transport.loseConnection()
            return
        self.username = username
        self.state = "tune"
        self.write(sc.encode_sasl_authenticate(cid, sc.OK))
        self.write(sc.encode_tune(FRAME_MAX, HEARTBEAT_S))

    def _open(self, request: sc.Request) -> None:
        name = request.vhost or "/"
        vhost = self.service.router.vhosts.get(name)
        if vhost is None or self.permission(name) is None:
            log.warning("stream access to vhost refused", extra=fields(peer=self.peer, user=self.username, vhost=name))
            self.write(sc.encode_open(request.correlation_id, sc.VIRTUAL_HOST_ACCESS_FAILURE, {}))
            self.closing = True
            self.transport.loseConnection()
            return
        self.vhost = vhost
        self.state = "open"
        self.buffer.max_size = self.frame_max
        if self._handshake_timer is not None and self._handshake_timer.active():
            self._handshake_timer.cancel()
        host, port = self.service.advertised(self.listener)
        self.write(sc.encode_open(request.correlation_id, sc.OK,
                                  {"advertised_host": host, "advertised_port": str(port)}))
        log.info("stream connection open", extra=fields(peer=self.peer, conn=self.conn_id, user=self.username,
                                                        vhost=name))

    def permission(self, vhost: str):
        if self.token is not None:
            return self.token.permission(vhost)
        return self.service.users.permission(self.username, vhost)

    def _handshake_expired(self) -> None:
        if self.state != "open" and not self.closing:
            log.info("stream handshake timed out", extra=fields(peer=self.peer, conn=self.conn_id, state=self.state))
            self.closing = True
            self.transport.loseConnection()

    def _heartbeat_tick(self) -> None:
        if time.monotonic() - self.last_input > 2 * self.heartbeat:
            log.info("stream client missed heartbeats", extra=fields(peer=self.peer, conn=self.conn_id))
            self.closing = True
            self.transport.abortConnection()
            return
        self.transport.write(sc.encode_heartbeat())

    # --- closing ----------------------------------------------------------------------------
    def fail(self, code: int, reason: str) -> None:
        """Close the connection for a protocol error: a Close frame with the code, then hang up."""
        if self.closing:
            return
        log.warning("stream connection closed: %s", reason, extra=fields(peer=self.peer, conn=self.conn_id, code=code))
        self.write(sc.encode_close(self.next_correlation(), code, reason))
        self.closing = True
        self.reactor.callLater(1.0, self.transport.loseConnection)

    def close_connection(self, code: int, reason: str) -> None:
        self.fail(code, reason)

    def next_correlation(self) -> int:
        self._correlation = (self._correlation + 1) & 0xFFFFFFFF
        return self._correlation


class StreamFactory(protocol.Factory):
    def __init__(self, service, listener: str = "stream"):
        self.service = service
        self.listener = listener

    def buildProtocol(self, addr):
        return StreamConnection(self.service, self.listener)
