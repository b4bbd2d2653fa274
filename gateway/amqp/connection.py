"""One AMQP 0-9-1 client connection: handshake, channels, heartbeats, errors, output batching.

Bytes go through :class:`wire.amqp.ServerCodec` (frames in) and :mod:`wire.amqp.encoding`
(frames out). The handshake is Start/StartOk (PLAIN or AMQPLAIN), Tune/TuneOk, Open/OpenOk;
then methods go to their :class:`~gateway.amqp.channel.Channel`. With OAuth 2 on, a PLAIN or
AMQPLAIN password that is a JWT logs in by the token (:meth:`AmqpConnection._token_login`),
which ``connection.update-secret`` replaces and whose expiry closes the connection.

Everything received in one ``dataReceived`` is handled before the router appends the staged
publishes as one batch per queue (:meth:`routing.broker.Router.commit`); everything to send in
one reactor turn leaves in one ``write``.

Errors: a :class:`routing.errors.ChannelError` closes the channel (Channel.Close with the
reply code and the failing method's ids), a ``ConnectionError`` or a framing error closes the
connection (Connection.Close, then the socket once the client answers or after a grace
period). A bug in a handler closes the connection with 541 INTERNAL_ERROR and is logged with its
traceback; other connections are unaffected.
"""
from __future__ import annotations

import contextlib
import logging
import time

from pamqp import commands as spec
from pamqp import decode as pamqp_decode
from twisted.internet import protocol, task

from gateway.amqp.channel import Channel
from gateway.amqp.secrets import SecretsMixin
from gateway.amqp10.connection import hand_over
from gateway.amqp10.upkeep import connection_limit_refusal
from gateway.logs import connection_ids, fields
from gateway.management import metrics
from gateway.amqp.counters import AMQP as COUNTS
from gateway.netutil import no_delay, write_through
from gateway.security.login import check_login
from gateway.security.oauth import TokenGrant
from gateway.security.tls import peer_common_name
from gateway.security.users import is_loopback
from routing.errors import (
    ACCESS_REFUSED, CHANNEL_ERROR, COMMAND_INVALID, INTERNAL_ERROR, NOT_ALLOWED, AmqpError,
    ChannelError, ConnectionError,
)
from wire.amqp10_frames import HEADER_AMQP as HEADER_AMQP10, HEADER_SASL
from wire.amqp import (
    NEED_DATA, PROTOCOL_HEADER, AmqpFrameError, Heartbeat, Message, MethodFrame, ProtocolHeader, ServerCodec,
    encode_heartbeat, encode_message, encode_method,
)

log = logging.getLogger(__name__)

FRAME_MAX = 131072
CHANNEL_MAX = 2047
HEARTBEAT_S = 60
CLOSE_GRACE_S = 3.0
HANDSHAKE_TIMEOUT_S = 10.0
# Output gathered within one reactor turn is written at its end, or as soon as it reaches this
# size: the transport's full buffer then pauses deliveries (write_blocked) well before a deep
# queue is all in memory for a client that does not read.
OUT_BATCH_BYTES = 256 << 10

CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
}


def short_text(text: str) -> str:
    """A reply text fits a short string: RabbitMQ cuts longer ones to 252 bytes and "..."."""
    data = text.encode()
    if len(data) <= 255:
        return text
    return data[:252].decode("utf-8", "ignore") + "..."


class AmqpConnection(SecretsMixin, protocol.Protocol):
    def __init__(self, service):
        self.service = service
        self.router = service.router
        self.reactor = service.reactor
        self.codec = ServerCodec(frame_max=4096)  # the spec's minimum until Tune-Ok says more
        self.frame_max = FRAME_MAX
        self.channel_max = CHANNEL_MAX
        self.heartbeat = 0
        self.channels: dict[int, Channel] = {}
        self.closing_channels: set[int] = set()
        self.state = "header"  # header, start, tune, open, opened, closing
        self.vhost = None
        self.username = None
        self.client_properties: dict = {}
        self.last_queue: str | None = None
        self.confirms_waiting: set[Channel] = set()
        self.peer = "?"
        self.conn_id = f"amqp-{next(connection_ids)}"  # in every log line about this connection
        self.loopback = False
        self.peer_host = ""
        self.certificate_user: str | None = None  # the verified client certificate's CN (TLS)
        self.token: TokenGrant | None = None  # logged in with an OAuth 2 token: its grants (update-secret swaps it)
        self._expiry_timer = None  # closes the connection when the token runs out
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._flush_call = None
        self._heartbeat_loop = None
        self._last_recv = self._last_sent = time.monotonic()
        self._close_timer = None
        self.write_blocked = False
        self.has_published = False
        self._publish_n, self._publish_s = 0, 0.0  # publishes of the current dataReceived, their time
        self.blocked_reason: str | None = None  # sent connection.blocked with this reason
        self.over_limit = False  # arrived beyond --max-connections: refused once its header names the protocol
        # The first bytes pick the protocol (0-9-1 or AMQP 1.0): until then reads go to _sniff,
        # after it the class's dataReceived, so 0-9-1 traffic pays nothing for the choice.
        self._head = b""
        self.dataReceived = self._sniff

    def _sniff(self, data: bytes) -> None:
        head = self._head + data
        if len(head) < 8 and b"AMQP".startswith(head[:4]):
            self._head = head  # wait for the whole header
            return
        del self.dataReceived
        self._head = b""
        if head[:8] in (HEADER_SASL, HEADER_AMQP10) and self.state == "header":
            hand_over(self, head)  # (an over-limit one is refused at its open, with an AMQP 1.0 close)
            return
        if self.over_limit:
            self.state = "closed"
            self.transport.abortConnection()
            return
        self.dataReceived(head)

    # --- transport -----------------------------------------------------------------------
    def connectionMade(self) -> None:
        peer = self.transport.getPeer()
        self.peer = f"{peer.host}:{peer.port}"
        self.peer_host = peer.host
        self.loopback = is_loopback(peer.host)
        self.service.connections.add(self)
        COUNTS.connections_opened += 1
        if self.service.too_many_connections():
            # Refused once its first bytes say which AMQP it speaks: an AMQP 1.0 client is told why
            # (amqp:resource-limit-exceeded at its open), a 0-9-1 one is dropped. It holds its slot
            # until then, at most the handshake time-out.
            log.warning("AMQP connection refused: the broker's connection limit is reached (--max-connections)",
                        extra=fields(peer=self.peer, conn=self.conn_id))
            self.over_limit = True
        self._close_timer = self.reactor.callLater(HANDSHAKE_TIMEOUT_S, self._handshake_timeout)
        self.transport.registerProducer(self, True)
        no_delay(self.transport)

    # Twisted producer interface: the socket buffer filled up / drained.
    def pauseProducing(self) -> None:
        self.write_blocked = True

    def resumeProducing(self) -> None:
        if self.write_blocked:
            self.write_blocked = False
            for channel in list(self.channels.values()):
                channel._dispatch_all()
            self._flush()

    def stopProducing(self) -> None:
        pass

    def connectionLost(self, reason=protocol.connectionDone) -> None:
        COUNTS.connections_closed += 1
        self.service.connections.discard(self)
        self.service.confirming.discard(self)
        self._cancel_timers()
        for channel in list(self.channels.values()):
            channel.release()
        self.channels.clear()
        if self.vhost is not None:
            with self._definitions_batch():
                self.vhost.owner_gone(self)
        self.confirms_waiting.clear()
        if self.state not in ("closed", "header"):
            log.info("AMQP connection closed", extra=fields(peer=self.peer, conn=self.conn_id, user=self.username,
                                                              reason=reason.getErrorMessage()))
        self.state = "closed"

    def _definitions_batch(self):
        """One write of the definition files for all this read's declarations (see Router)."""
        return self.router.definitions_batch() if self.router is not None else contextlib.nullcontext()

    def _cancel_timers(self) -> None:
        for timer in (self._close_timer, self._flush_call, self._expiry_timer):
            if timer is not None and timer.active():
                timer.cancel()
        self._close_timer = self._flush_call = self._expiry_timer = None
        if self._heartbeat_loop is not None and self._heartbeat_loop.running:
            self._heartbeat_loop.stop()

    # --- output ----------------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        self._out.append(data)
        self._out_bytes += len(data)
        if self._out_bytes >= OUT_BATCH_BYTES:
            # Hand a large batch to the transport now: once its buffer is full it pauses us
            # (write_blocked) and deliveries stop, instead of a whole queue piling up here.
            self._flush()
        elif self._flush_call is None:
            self._flush_call = self.reactor.callLater(0, self._flush)
            self.service.output_pending.add(self)  # after_input writes it in this pass

    def _flush(self) -> None:
        call, self._flush_call = self._flush_call, None
        self.service.output_pending.discard(self)
        if call is not None and call.active():  # called early, by send()
            call.cancel()
        self._out_bytes = 0
        if self._out and self.transport is not None and not self.transport.disconnecting:
            data = b"".join(self._out)
            self._out = []
            self._last_sent = time.monotonic()
            write_through(self.transport, data)
        else:
            self._out = []

    def send_method(self, channel: int, method) -> None:
        self.send(encode_method(channel, method))

    def send_message(self, channel: int, method, properties_raw: bytes, body: bytes) -> None:
        self.send(encode_message(channel, method, properties_raw, body, self.frame_max))

    def client_capability(self, name: str) -> bool:
        capabilities = self.client_properties.get("capabilities") or {}
        return bool(capabilities.get(name))

    # --- input -----------------------------------------------------------------------------
    def dataReceived(self, data: bytes) -> None:
        if self.state == "closed":
            return
        self._last_recv = time.monotonic()
        self.codec.receive_data(data)
        self._publish_n, self._publish_s = 0, 0.0
        try:
            with self._definitions_batch():
                while True:
                    event = self.codec.next_event()
                    if event is NEED_DATA:
                        break
                    self._event(event)
                    if self.state == "closed" or self.transport.disconnecting:
                        break
        except AmqpFrameError as exc:
            self.close_connection(exc.reply_code, exc.reply_text, exc.class_id, exc.method_id, prefixed=True)
        except ConnectionError as exc:
            self.close_connection(exc.reply_code, exc.reply_text, prefixed=True)
        except Exception:
            log.exception("AMQP connection failed on an internal error", extra=fields(peer=self.peer, conn=self.conn_id))
            self.close_connection(INTERNAL_ERROR, "internal error")
        finally:
            if self._publish_n:  # one observation per publish, each the average of this read's publishes
                metrics.AMQP_METHODS.observe_many("basic.publish", self._publish_s / self._publish_n,
                                                  self._publish_n)
            self.service.after_input()
            if self.service.alarm_reason and self.has_published and self.blocked_reason is None:
                self.alarm_changed()
            self._flush()

    def _event(self, event) -> None:
        if isinstance(event, Message):
            self.has_published = True
            channel = self._channel(event.channel, spec.Basic.Publish)
            if channel is None:
                return
            started = time.monotonic()
            try:
                channel.publish(event)
                self._publish_n += 1
                self._publish_s += time.monotonic() - started
            except ChannelError as exc:
                self._channel_error(channel, exc, spec.Basic.Publish)
            except ConnectionError as exc:
                self.close_connection(exc.reply_code, exc.reply_text, 60, 40, prefixed=True)
            return
        if isinstance(event, MethodFrame):
            if event.channel == 0:
                self._connection_method(event.method)
            else:
                self._channel_method(event.channel, event.method)
            return
        if isinstance(event, Heartbeat):
            return
        if isinstance(event, ProtocolHeader):
            if not event.ok:
                log.warning("closing AMQP connection: protocol header %r is not AMQP 0-9-1", event.received,
                            extra=fields(peer=self.peer, conn=self.conn_id))
                self.transport.write(PROTOCOL_HEADER)
                self.state = "closed"
                self.transport.loseConnection()
                return
            if not self.service.accepting:
                self.state = "closed"
                self.transport.loseConnection()
                return
            self.state = "start"
            # The TLS handshake is over once the protocol header arrives: a verified client
            # certificate can log in with EXTERNAL (its subject CN is the user name).
            self.certificate_user = peer_common_name(self.transport)
            mechanisms = "PLAIN AMQPLAIN" + (" EXTERNAL" if self.certificate_user is not None else "")
            self.send_method(0, spec.Connection.Start(
                version_major=0, version_minor=9, server_properties=self.service.server_properties(CAPABILITIES),
                mechanisms=mechanisms, locales="en_US"))

    # --- connection class ---------------------------------------------------------------
    def _connection_method(self, m) -> None:
        state = self.state
        if isinstance(m, spec.Connection.StartOk) and state == "start":
            self._start_ok(m)
        elif isinstance(m, spec.Connection.TuneOk) and state == "tune":
            self._tune_ok(m)
        elif isinstance(m, spec.Connection.Open) and state == "open":
            self._open(m)
        elif isinstance(m, spec.Connection.Close):
            self.send_method(0, spec.Connection.CloseOk())
            self._flush()
            self.state = "closed"
            self.transport.loseConnection()
        elif isinstance(m, spec.Connection.CloseOk) and state == "closing":
            self.state = "closed"
            self.transport.loseConnection()
        elif isinstance(m, spec.Connection.UpdateSecret) and state == "opened":
            self._update_secret(m)
        elif state == "closing":
            return  # after our Close, everything but Close-Ok is ignored
        elif state == "opened":
            raise ConnectionError(CHANNEL_ERROR, "unexpected method in connection state running")
        else:
            raise ConnectionError(COMMAND_INVALID, f"unexpected method {type(m).__name__} during the handshake "
                                                   f"(state {state})")

    def _start_ok(self, m: spec.Connection.StartOk) -> None:
        self.client_properties = m.client_properties or {}
        mechanism = m.mechanism
        username = password = None
        response = m.response if isinstance(m.response, bytes) else (m.response or "").encode("utf-8", "surrogateescape")
        if mechanism == "PLAIN":
            parts = response.split(b"\0")
            if len(parts) == 3:
                username, password = parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
        elif mechanism == "AMQPLAIN":
            try:
                _, table = pamqp_decode.field_table(len(response).to_bytes(4, "big") + response)
                username, password = str(table.get("LOGIN", "")), str(table.get("PASSWORD", ""))
            except Exception:
                username = None
        elif mechanism == "EXTERNAL" and self.certificate_user is not None:
            username = self.certificate_user
        else:
            self._refuse_login(f"unsupported authentication mechanism '{mechanism}'; PLAIN and AMQPLAIN are offered")
            return
        username, grant, reason = check_login(self.service.users, getattr(self.service, "oauth", None), mechanism,
                                              username, password, self.peer_host)
        if reason is not None:
            log.warning("AMQP login refused: %s", reason, extra=fields(peer=self.peer, conn=self.conn_id, user=username,
                                                                      mechanism=mechanism))
            self._refuse_login(f"Login was refused using authentication mechanism {mechanism}. "
                               f"For details see the broker logfile.")
            return
        self.username = username
        if grant is not None:
            self._token_login(grant)
        self.state = "tune"
        self.send_method(0, spec.Connection.Tune(self.service.channel_max, FRAME_MAX, HEARTBEAT_S))

    def _refuse_login(self, text: str) -> None:
        self.close_connection(ACCESS_REFUSED, text)

    def _tune_ok(self, m: spec.Connection.TuneOk) -> None:
        self.frame_max = min(m.frame_max or FRAME_MAX, FRAME_MAX)
        if self.frame_max < 4096:
            raise ConnectionError(NOT_ALLOWED, f"frame_max={m.frame_max} < 4096 min size")
        self.channel_max = min(m.channel_max or self.service.channel_max, self.service.channel_max)
        self.codec.frame_max = self.frame_max
        self.heartbeat = m.heartbeat
        self.state = "open"
        if self.heartbeat:
            self._heartbeat_loop = task.LoopingCall(self._heartbeat_tick)
            self._heartbeat_loop.clock = self.reactor
            self._heartbeat_loop.start(max(self.heartbeat / 2, 0.5), now=False)

    def _open(self, m: spec.Connection.Open) -> None:
        name = m.virtual_host or "/"
        vhost = self.router.open_vhost(name, self.username)  # 530 if it does not exist
        if self.permission(name) is None:
            log.warning("AMQP access to vhost refused", extra=fields(peer=self.peer, conn=self.conn_id, user=self.username, vhost=name))
            raise ConnectionError(NOT_ALLOWED, f"access to vhost '{name}' refused for user '{self.username}'")
        refusal = connection_limit_refusal(self.service, self.username, vhost)  # counts AMQP 1.0 ones too
        if refusal is not None:
            log.warning("AMQP connection refused: %s", refusal, extra=fields(
                peer=self.peer, conn=self.conn_id, user=self.username, vhost=name))
            raise ConnectionError(NOT_ALLOWED, f"access to vhost '{name}' refused for user '{self.username}': "
                                               f"{refusal}")
        self.vhost = vhost
        if self._close_timer is not None and self._close_timer.active():
            self._close_timer.cancel()
        self._close_timer = None
        self.state = "opened"
        if self.token is not None:
            self._schedule_expiry()  # as RabbitMQ: from connection.open on
        self.send_method(0, spec.Connection.OpenOk())
        log.info("AMQP connection opened", extra=fields(peer=self.peer, conn=self.conn_id, user=self.username,
                                                        vhost=self.vhost.name))

    def _heartbeat_tick(self) -> None:
        now = time.monotonic()
        if now - self._last_recv > 2 * self.heartbeat:
            log.warning("closing AMQP connection: missed heartbeats from client",
                        extra=fields(peer=self.peer, conn=self.conn_id, timeout_s=self.heartbeat))
            self.state = "closed"
            self.transport.abortConnection()
            return
        if now - self._last_sent >= self.heartbeat / 2:
            self.send(encode_heartbeat())

    def _handshake_timeout(self) -> None:
        self._close_timer = None
        if self.state not in ("opened", "closed"):
            log.warning("closing AMQP connection: handshake not finished in time",
                        extra=fields(peer=self.peer, conn=self.conn_id, state=self.state))
            self.state = "closed"
            self.transport.abortConnection()

    def close_connection(self, code: int, text: str, class_id: int = 0, method_id: int = 0,
                         prefixed: bool = False) -> None:
        """Send Connection.Close and wait (a little) for Close-Ok before dropping the socket."""
        if self.state in ("closing", "closed"):
            return
        if not prefixed:
            text = AmqpError(code, text).reply_text
        log.warning("closing AMQP connection", extra=fields(peer=self.peer, conn=self.conn_id, reply_code=code, reply_text=text))
        self.state = "closing"
        for channel in list(self.channels.values()):
            channel.release()
        self.send_method(0, spec.Connection.Close(code, short_text(text), class_id, method_id))
        self._flush()
        if self._close_timer is not None and self._close_timer.active():
            self._close_timer.cancel()
        self._close_timer = self.reactor.callLater(CLOSE_GRACE_S, self.transport.abortConnection)

    # --- channels ---------------------------------------------------------------------------
    def _channel(self, number: int, method_cls) -> Channel | None:
        if self.state != "opened":
            if self.state == "closing":
                return None
            raise ConnectionError(COMMAND_INVALID, f"method {method_cls.__name__} before the connection is open")
        if number in self.closing_channels:
            return None  # RabbitMQ drops what arrives on a channel it is closing
        channel = self.channels.get(number)
        if channel is None:
            raise ConnectionError(CHANNEL_ERROR, "expected 'channel.open'")
        return channel

    def _channel_method(self, number: int, m) -> None:
        if self.state == "closing":
            return
        if isinstance(m, spec.Channel.Open):
            if self.state != "opened":
                raise ConnectionError(COMMAND_INVALID, "channel.open before the connection is open")
            if number in self.channels:
                raise ConnectionError(CHANNEL_ERROR, "second 'channel.open' seen")
            if len(self.channels) >= self.channel_max:
                raise ConnectionError(NOT_ALLOWED, f"number of channels opened ({len(self.channels)}) has reached "
                                                   f"the negotiated channel_max ({self.channel_max})")
            self.closing_channels.discard(number)
            self.channels[number] = Channel(self, number)
            self.send_method(number, spec.Channel.OpenOk())
            return
        if number in self.closing_channels:
            if isinstance(m, spec.Channel.CloseOk):
                self.closing_channels.discard(number)
            elif isinstance(m, spec.Channel.Close):
                self.send_method(number, spec.Channel.CloseOk())
            return
        channel = self._channel(number, type(m))
        if channel is None:
            return
        if isinstance(m, spec.Channel.Close):
            del self.channels[number]
            channel.release()
            self.send_method(number, spec.Channel.CloseOk())
            return
        if isinstance(m, spec.Channel.CloseOk):
            return
        started = time.monotonic()
        try:
            channel.handle(m)
            metrics.timed(metrics.AMQP_METHODS, m.name.lower(), started)
        except ChannelError as exc:
            self._channel_error(channel, exc, type(m))
        except ConnectionError as exc:
            index = getattr(type(m), "index", 0)
            self.close_connection(exc.reply_code, exc.reply_text, index >> 16, index & 0xFFFF, prefixed=True)

    def check_consumer_timeouts(self, now: float, default_ms: int) -> None:
        for channel in list(self.channels.values()):
            try:
                channel.check_consumer_timeout(now, default_ms)
            except ChannelError as exc:
                log.warning("AMQP consumer timeout: closing the channel", extra=fields(
                    peer=self.peer, conn=self.conn_id, channel=channel.number, user=self.username))
                self._channel_error(channel, exc, None)

    def _channel_error(self, channel: Channel, exc: ChannelError, method_cls) -> None:
        index = getattr(method_cls, "index", 0)
        log.info("closing AMQP channel", extra=fields(peer=self.peer, conn=self.conn_id, channel=channel.number,
                                                      reply_code=exc.reply_code, reply_text=exc.reply_text))
        self.channels.pop(channel.number, None)
        self.closing_channels.add(channel.number)
        channel.release()
        self.send_method(channel.number, spec.Channel.Close(exc.reply_code, short_text(exc.reply_text), index >> 16,
                                                            index & 0xFFFF))

    def drain_input(self) -> None:
        """Read what the socket already holds (at shutdown, so that acks sent just before count)."""
        sock = getattr(self.transport, "socket", None)
        if sock is None or self.state != "opened":
            return
        sock.setblocking(False)
        for _ in range(64):
            try:
                data = sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            self.dataReceived(data)

    def alarm_changed(self) -> None:
        """Block a publishing connection while a resource alarm is on: stop reading its socket."""
        reason = self.service.alarm_reason
        if self.state != "opened":
            return
        if reason and self.blocked_reason is None and self.has_published:
            self.blocked_reason = reason
            if self.client_capability("connection.blocked"):
                self.send_method(0, spec.Connection.Blocked(reason))
            self._flush()
            self.transport.pauseProducing()
        elif not reason and self.blocked_reason is not None:
            self.blocked_reason = None
            if self.client_capability("connection.blocked"):
                self.send_method(0, spec.Connection.Unblocked())
            self._flush()
            self.transport.resumeProducing()

    # --- called by the service when logs moved ---------------------------------------------
    def send_confirms(self) -> None:
        for channel in list(self.confirms_waiting):
            if channel.send_confirms():
                self.confirms_waiting.discard(channel)


class AmqpFactory(protocol.Factory):
    def __init__(self, service):
        self.service = service

    def buildProtocol(self, addr):
        return AmqpConnection(self.service)
