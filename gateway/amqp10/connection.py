"""One AMQP 1.0 client connection: SASL, open/close, idle time-out, sessions, output batching.

The AMQP port answers both protocols: :class:`gateway.amqp.connection.AmqpConnection` reads the
first 8 bytes and, for an AMQP 1.0 header (``AMQP 3 1 0 0`` SASL, ``AMQP 0 1 0 0`` plain), hands
the transport to an :class:`Amqp10Connection` once (:func:`hand_over`); after that the 0-9-1 door
is not on this connection's path.

Bytes go through :class:`wire.amqp10_frames.FrameReader`; frames on a channel go to its
:class:`~gateway.amqp10.session.Session`. Logins: SASL PLAIN (a JWT password logs in by the token
when OAuth 2 is on, as on the 0-9-1 door), ANONYMOUS (as the ``guest`` user, where guest may log
in from the peer's address, as RabbitMQ 4's ``anonymous_login_user``), EXTERNAL (a verified TLS
client certificate's CN). A plain ``AMQP 0 1 0 0`` header without SASL is ANONYMOUS.

Errors close with an AMQP error condition: a malformed frame ``amqp:decode-error``, a frame over
max-frame-size ``amqp:frame-size-too-small``, a bug ``amqp:internal-error`` (logged with its
traceback). A :class:`~gateway.amqp10.errors.LinkError` detaches one link, a ``SessionError``
ends one session.
"""
from __future__ import annotations

import logging
import time

from twisted.internet import task

from gateway.amqp.counters import AMQP as COUNTS
from gateway.amqp10.errors import ConnError, LinkError, SessionError, condition_of
from gateway.amqp10.links import plain
from gateway.amqp10.session import Session
from gateway.amqp10.upkeep import check_consumer_timeouts, connection_limit_refusal
from gateway.logs import connection_ids, fields
from gateway.netutil import no_delay, write_through
from gateway.security.login import check_login
from gateway.security.tls import peer_common_name
from gateway.security.users import is_loopback
from routing.errors import AmqpError
from wire.amqp10 import Symbol
from wire.amqp10_frames import (
    HEADER_AMQP, HEADER_SASL, NEED_DATA, SASL_FRAME, Begin, Close, End, Error, Frame, FrameError, FrameReader,
    Heartbeat, Open, ProtocolHeader, SaslInit, SaslMechanisms, SaslOutcome, Transfer, encode_frame, encode_heartbeat,
)

log = logging.getLogger(__name__)

MAX_FRAME_SIZE = 131072  # RabbitMQ 4's default
CHANNEL_MAX = 2047
IDLE_TIME_OUT_MS = 60_000
CLOSE_GRACE_S = 3.0
HANDSHAKE_TIMEOUT_S = 10.0
OUT_BATCH_BYTES = 256 << 10
# The version the rabbitmq-amqp clients check before they use a feature (4.0: the address
# scheme and the management node; 4.1: property filter expressions; 4.2: SQL filter expressions).
RABBITMQ_VERSION = "4.2.0"


def hand_over(old, head: bytes) -> "Amqp10Connection":
    """Replace the 0-9-1 protocol object ``old`` on its transport by an AMQP 1.0 connection:
    the transport keeps calling ``old``'s methods, which now are the new connection's (one
    rebinding, so no per-read cost), and ``old`` leaves the 0-9-1 bookkeeping."""
    new = Amqp10Connection(old.service, old.transport, old.peer, old.peer_host, old.conn_id)
    new.over_limit = old.over_limit
    old.service.connections.discard(old)
    old._cancel_timers()
    old.state = "closed"
    for name in ("dataReceived", "connectionLost", "pauseProducing", "resumeProducing", "stopProducing"):
        setattr(old, name, getattr(new, name))
    old.service.amqp10_connections.add(new)
    new.dataReceived(head)
    return new


class Amqp10Connection:
    def __init__(self, service, transport, peer: str, peer_host: str, conn_id: str):
        self.service = service
        self.router = service.router
        self.reactor = service.reactor
        self.transport = transport
        self.peer, self.peer_host = peer, peer_host
        self.conn_id = conn_id.replace("amqp-", "amqp10-") if conn_id else f"amqp10-{next(connection_ids)}"
        self.loopback = is_loopback(peer_host)
        self.reader = FrameReader()
        self.state = "header"  # header, sasl, amqp-header, open, opened, closing, closed
        self.username: str | None = None
        self.token = None
        self.vhost = None
        self.max_frame_size = 512
        self.channel_max = CHANNEL_MAX
        self.sessions: dict[int, Session] = {}
        self._ending: set[int] = set()  # channels whose session we ended: waiting for the client's end
        self.confirms_waiting: set = set()  # sessions with publishes waiting to be settled
        self.write_blocked = False
        self.over_limit = False  # arrived beyond --max-connections: refused at the open
        self.unsettled_seen: dict = {}  # for the consumer timeout (gateway.amqp10.upkeep)
        self.opened_at: float | None = None  # time.time() of the open: the management API's connected_at
        self.client_properties: dict = {}  # the client's open properties, as the management API shows them
        self.certificate_user = peer_common_name(transport)
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._flush_call = None
        self._heartbeat = None
        self._idle_s = 0.0
        self._last_recv = self._last_sent = time.monotonic()
        self._close_timer = self.reactor.callLater(HANDSHAKE_TIMEOUT_S, self._handshake_timeout)
        no_delay(transport)

    # --- what the 0-9-1 service's loops ask of a connection --------------------------------
    @property
    def channels(self) -> dict:  # none: the management views count channels of 0-9-1 connections
        return {}

    def permission(self, vhost: str):
        if self.token is not None:
            return self.token.permission(vhost)
        return self.service.users.permission(self.username, vhost)

    def send_confirms(self) -> None:
        for session in list(self.confirms_waiting):
            if session.send_confirms():
                self.confirms_waiting.discard(session)

    # --- transport ---------------------------------------------------------------------------
    def pauseProducing(self) -> None:
        self.write_blocked = True

    def resumeProducing(self) -> None:
        if self.write_blocked:
            self.write_blocked = False
            for session in list(self.sessions.values()):
                session.dispatch_all()
            self._flush()

    def stopProducing(self) -> None:
        pass

    def connectionLost(self, reason=None) -> None:
        COUNTS.connections_closed += 1  # (counted as opened by the 0-9-1 door that took the socket)
        self.service.amqp10_connections.discard(self)
        self.service.confirming.discard(self)
        self._cancel_timers()
        for session in list(self.sessions.values()):
            session.release()
        self.sessions.clear()
        self.confirms_waiting.clear()
        if self.state not in ("closed", "header"):
            log.info("AMQP 1.0 connection closed", extra=fields(
                peer=self.peer, conn=self.conn_id, user=self.username,
                reason=reason.getErrorMessage() if reason is not None else "closed"))
        self.state = "closed"

    def _cancel_timers(self) -> None:
        for timer in (self._close_timer, self._flush_call):
            if timer is not None and timer.active():
                timer.cancel()
        self._close_timer = self._flush_call = None
        if self._heartbeat is not None and self._heartbeat.running:
            self._heartbeat.stop()

    # --- output ------------------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        self._out.append(data)
        self._out_bytes += len(data)
        if self._out_bytes >= OUT_BATCH_BYTES:
            self._flush()
        elif self._flush_call is None:
            self._flush_call = self.reactor.callLater(0, self._flush)
            self.service.output_pending.add(self)

    def send_frame(self, channel: int, body, payload: bytes = b"") -> None:
        self.send(encode_frame(channel, body, payload))

    def _flush(self) -> None:
        call, self._flush_call = self._flush_call, None
        self.service.output_pending.discard(self)
        if call is not None and call.active():
            call.cancel()
        self._out_bytes = 0
        if self._out and not self.transport.disconnecting:
            data = b"".join(self._out)
            self._out = []
            self._last_sent = time.monotonic()
            write_through(self.transport, data)
        else:
            self._out = []

    # --- input -------------------------------------------------------------------------------
    def dataReceived(self, data: bytes) -> None:
        if self.state in ("closed", "closing"):
            return
        self._last_recv = time.monotonic()
        self.reader.receive_data(data)
        reader, sessions = self.reader, self.sessions
        try:
            with self.router.definitions_batch():
                while self.state not in ("closed", "closing"):
                    event = reader.next_event()
                    if event is NEED_DATA:
                        break
                    # a transfer on an open session (one per message) goes straight to it
                    if type(event) is Frame and type(event.body) is Transfer and self.state == "opened":
                        session = sessions.get(event.channel)
                        if session is not None:
                            try:
                                session.transfer(event.body, event.payload)
                            except (LinkError, SessionError, AmqpError) as exc:
                                self._session_failed(session, exc)
                            continue
                    self._event(event)
        except FrameError as exc:
            self.close(exc.condition, str(exc))
        except ConnError as exc:
            self.close(exc.condition, exc.description)
        except Exception:
            log.exception("AMQP 1.0 connection failed on an internal error", extra=fields(peer=self.peer,
                                                                                          conn=self.conn_id))
            self.close("amqp:internal-error", "internal error")
        finally:
            self.service.after_input()
            self._flush()

    def _event(self, event) -> None:
        if isinstance(event, Frame):
            if event.type == SASL_FRAME:
                self._sasl(event.body)
            elif self.state == "opened" or (self.state == "open" and isinstance(event.body, Open)):
                self._frame(event)
            else:
                raise ConnError("amqp:not-allowed", f"{event.body.NAME} before the connection is open")
        elif isinstance(event, Heartbeat):
            return
        elif isinstance(event, ProtocolHeader):
            self._header(event.data)

    def _header(self, data: bytes) -> None:
        if not self.service.accepting:
            self._drop()
            return
        if data == HEADER_SASL and self.state == "header":
            self.state = "sasl"
            mechanisms = ["PLAIN", "ANONYMOUS"] + (["EXTERNAL"] if self.certificate_user is not None else [])
            self.send(HEADER_SASL + encode_frame(0, SaslMechanisms(mechanisms), type_=SASL_FRAME))
            return
        if data == HEADER_AMQP and self.state in ("header", "amqp-header"):
            if self.state == "header" and not self._login("ANONYMOUS", None, None):
                self.send(HEADER_SASL)  # a plain header is an anonymous login: say SASL is needed
                self._drop()
                return
            self.state = "open"
            self.send(HEADER_AMQP)
            return
        log.warning("closing AMQP 1.0 connection: unexpected protocol header %r", data,
                    extra=fields(peer=self.peer, conn=self.conn_id))
        self.send(HEADER_SASL if self.state == "header" else HEADER_AMQP)
        self._drop()

    def _drop(self) -> None:
        self._flush()
        self.state = "closed"
        self.transport.loseConnection()

    # --- SASL --------------------------------------------------------------------------------
    def _sasl(self, frame) -> None:
        if self.state != "sasl" or not isinstance(frame, SaslInit):
            raise ConnError("amqp:not-allowed", f"unexpected SASL frame {frame.NAME}")
        mechanism = str(frame.mechanism or "")
        username = password = None
        response = frame.initial_response or b""
        if mechanism == "PLAIN":
            parts = bytes(response).split(b"\0")
            if len(parts) == 3:
                username, password = parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
        elif mechanism == "EXTERNAL" and self.certificate_user is not None:
            username = self.certificate_user
        elif mechanism != "ANONYMOUS":
            mechanism = ""
        ok = bool(mechanism) and self._login(mechanism, username, password)
        self.send(encode_frame(0, SaslOutcome(code=0 if ok else 1), type_=SASL_FRAME))
        if ok:
            self.state = "amqp-header"
            self.reader.expect_header = True
        else:
            self._drop()

    def _login(self, mechanism: str, username: str | None, password: str | None) -> bool:
        users = self.service.users
        if mechanism == "ANONYMOUS":  # RabbitMQ 4: the anonymous login user is guest, with guest's limits
            users.maybe_reload()
            if users.get("guest") is None or users.loopback_refused("guest", self.peer_host):
                log.warning("AMQP 1.0 login refused: ANONYMOUS needs the guest user from this address",
                            extra=fields(peer=self.peer, conn=self.conn_id))
                return False
            self.username = "guest"
            return True
        username, grant, reason = check_login(users, getattr(self.service, "oauth", None), mechanism, username,
                                              password, self.peer_host)
        if reason is not None:
            log.warning("AMQP 1.0 login refused: %s", reason, extra=fields(peer=self.peer, conn=self.conn_id,
                                                                          user=username, mechanism=mechanism))
            return False
        self.username = username
        self.token = grant
        return True

    # --- AMQP frames -------------------------------------------------------------------------
    def _frame(self, frame: Frame) -> None:
        body = frame.body
        if isinstance(body, Open):
            if self.state != "open":
                raise ConnError("amqp:illegal-state", "a second open")
            self._open(body)
            return
        if isinstance(body, Close):
            self.send_frame(0, Close())
            self._drop()
            return
        if isinstance(body, Begin):
            self._begin(frame.channel, body)
            return
        session = self.sessions.get(frame.channel)
        if session is None:
            if frame.channel in self._ending:  # we ended it with an error: ignored until the client's end
                if isinstance(body, End):
                    self._ending.discard(frame.channel)
                return
            raise ConnError("amqp:not-found", f"{body.NAME} on channel {frame.channel}, which has no session")
        if isinstance(body, End):
            del self.sessions[frame.channel]
            session.release()
            self.send_frame(frame.channel, End())
            return
        try:
            session.handle(body, frame.payload)
        except (LinkError, SessionError, AmqpError) as exc:
            self._session_failed(session, exc)

    def _session_failed(self, session: Session, exc: Exception) -> None:
        """A link's error detaches only that link, a session's ends only that session."""
        if isinstance(exc, LinkError):
            session.detach(exc.handle, exc.condition, exc.description)
        elif isinstance(exc, SessionError):
            self.end_session(session, exc.condition, exc.description)
        else:  # a routing error outside a link's scope
            self.end_session(session, condition_of(exc), exc.reply_text)

    def _open(self, m) -> None:
        hostname = m.hostname or ""
        name = hostname[6:] if hostname.startswith("vhost:") else "/"
        try:
            vhost = self.router.open_vhost(name, self.username)
        except AmqpError:
            raise ConnError("amqp:not-found", f"vhost {name} not found") from None
        if self.permission(name) is None:
            raise ConnError("amqp:unauthorized-access", f"access to vhost '{name}' refused for user '{self.username}'")
        refusal = "the broker's connection limit is reached (--max-connections)" if self.over_limit else \
            connection_limit_refusal(self.service, self.username, vhost)
        if refusal is not None:
            log.warning("AMQP 1.0 connection refused: %s", refusal, extra=fields(
                peer=self.peer, conn=self.conn_id, user=self.username, vhost=name))
            raise ConnError("amqp:resource-limit-exceeded",
                            f"access to vhost '{name}' refused for user '{self.username}': {refusal}")
        self.vhost = vhost
        self.opened_at = time.time()
        self.client_properties = plain(m.properties or {})  # (Typed values unwrapped for the API's JSON)
        self.max_frame_size = max(512, min(m.max_frame_size or MAX_FRAME_SIZE, MAX_FRAME_SIZE))
        self.reader.max_frame_size = self.max_frame_size
        self.channel_max = min(CHANNEL_MAX if m.channel_max is None else m.channel_max, self.service.channel_max)
        if self._close_timer is not None and self._close_timer.active():
            self._close_timer.cancel()
        self._close_timer = None
        self.state = "opened"
        self.send_frame(0, Open(
            container_id=f"gateway-{self.service.cluster_name}", max_frame_size=self.max_frame_size,
            channel_max=self.channel_max, idle_time_out=IDLE_TIME_OUT_MS,
            offered_capabilities=["LINK_PAIR_V1_0", "ANONYMOUS-RELAY"],
            properties={Symbol("product"): "RabbitMQ", Symbol("version"): RABBITMQ_VERSION,
                        Symbol("platform"): "Python/Twisted", Symbol("cluster_name"): self.service.cluster_name,
                        Symbol("node"): self.service.node_name,  # RabbitMQ 4's Java client requires it
                        Symbol("information"): "gateway: one log, Kafka, AMQP 0-9-1 and 1.0, streams"}))
        peer_idle = m.idle_time_out or 0
        self._idle_s = IDLE_TIME_OUT_MS / 1000
        period = min(self._idle_s, peer_idle / 2000 if peer_idle else self._idle_s) / 2
        self._heartbeat = task.LoopingCall(self._heartbeat_tick, peer_idle / 2000 if peer_idle else 0)
        self._heartbeat.clock = self.reactor
        self._heartbeat.start(max(period, 0.25), now=False)
        log.info("AMQP 1.0 connection opened", extra=fields(peer=self.peer, conn=self.conn_id, user=self.username,
                                                            vhost=name))

    def _begin(self, channel: int, m) -> None:
        if m.remote_channel is not None:
            raise ConnError("amqp:not-allowed", "begin with a remote-channel: this broker does not begin sessions")
        if channel in self.sessions or channel in self._ending:
            raise ConnError("amqp:illegal-state", f"channel {channel} already has a session")
        if channel > self.channel_max:
            raise ConnError("amqp:connection:framing-error", f"channel {channel} is above channel-max "
                                                             f"{self.channel_max}")
        session = Session(self, channel, m)
        self.sessions[channel] = session
        session.send_begin()

    def end_session(self, session: Session, condition: str, text: str) -> None:
        log.info("ending AMQP 1.0 session", extra=fields(peer=self.peer, conn=self.conn_id, channel=session.channel,
                                                        condition=condition, text=text))
        self.sessions.pop(session.channel, None)
        self._ending.add(session.channel)
        session.release()
        self.send_frame(session.channel, End(error=Error(condition=condition, description=text)))

    def _heartbeat_tick(self, every_s: float) -> None:
        now = time.monotonic()
        if now - self._last_recv > 2 * self._idle_s:
            log.warning("closing AMQP 1.0 connection: idle time-out", extra=fields(peer=self.peer, conn=self.conn_id))
            self.close("amqp:resource-limit-exceeded", "local-idle-timeout expired")
            return
        if every_s and now - self._last_sent >= every_s:
            self.send(encode_heartbeat())
            self._flush()

    def _handshake_timeout(self) -> None:
        self._close_timer = None
        if self.state not in ("opened", "closed", "closing"):
            log.warning("closing AMQP 1.0 connection: handshake not finished in time",
                        extra=fields(peer=self.peer, conn=self.conn_id, state=self.state))
            self.state = "closed"
            self.transport.abortConnection()

    def close(self, condition: str, text: str) -> None:
        """Close with an error, then drop the socket after a grace period (the client's close ends it sooner)."""
        if self.state in ("closing", "closed"):
            return
        log.warning("closing AMQP 1.0 connection", extra=fields(peer=self.peer, conn=self.conn_id,
                                                               condition=condition, text=text))
        if self.state in ("header", "sasl", "amqp-header"):
            self._drop()
            return
        if self.state == "open":  # close must follow an open of ours
            self.send_frame(0, Open(container_id=f"gateway-{self.service.cluster_name}"))
        self.state = "closing"
        for session in list(self.sessions.values()):
            session.release()
        self.sessions.clear()
        self.send_frame(0, Close(error=Error(condition=condition, description=text[:1000])))
        self._flush()
        if self._close_timer is not None and self._close_timer.active():
            self._close_timer.cancel()
        self._close_timer = self.reactor.callLater(CLOSE_GRACE_S, self.transport.abortConnection)

    # --- called by the service --------------------------------------------------------------
    def check_consumer_timeouts(self, now: float, default_ms: int) -> None:
        if self.state == "opened" and check_consumer_timeouts(self, now, default_ms):
            self._flush()

    def alarm_changed(self) -> None:
        """A resource alarm cleared: links that were refused credit get it (see IncomingLink.grant)."""
        if self.service.alarm_reason:
            return
        for session in list(self.sessions.values()):
            for link in list(session.links.values()):
                if getattr(link, "blocked", False):
                    link.grant()
        self._flush()

    def drain_input(self) -> None:
        pass

    def close_connection(self, code: int, text: str, *_args, **_kwargs) -> None:
        self.close("amqp:connection:forced", text)
