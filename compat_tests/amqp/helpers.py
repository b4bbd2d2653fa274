"""Shared helpers of the AMQP suites: connecting real clients, waiting, and a raw AMQP socket.

Nothing here imports the broker: the suites talk to it only over sockets. :class:`RawAMQP` is
a tiny hand-written client (protocol header, start-ok PLAIN, tune-ok, open) built on ``pamqp``
frames, for the tests that must send what no well-behaved client would.
"""
from __future__ import annotations

import json
import socket
import struct
import time
import uuid

import pika
import requests
from pamqp import commands, frame as pframe
from pamqp.body import ContentBody
from pamqp.header import ContentHeader
from pamqp.heartbeat import Heartbeat

from compat_tests.support import wait_until  # noqa: F401 (the suites import it from here)

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_END = 0xCE
TIMEOUT = 10.0  # default seconds for one awaited event


def unique(prefix: str = "t") -> str:
    """A name unique to this run: the brokers are shared by a module (and RabbitMQ by the run)."""
    clean = "".join(c if c.isalnum() or c in "._-" else "-" for c in prefix)[:60]
    return f"{clean}-{uuid.uuid4().hex[:8]}"




def set_policy(amqp_broker, name: str, pattern: str, definition: dict, priority: int = 0,
               operator: bool = False):
    """A queue policy (``operator``: an operator policy) set with the broker's own tool
    (rabbitmqctl, or our management API); returns the undo. A policy reaches the queues a moment
    later on RabbitMQ and on another broker of a cluster than the queue's leader: this waits."""
    kind = "operator_policy" if operator else "policy"
    if amqp_broker.target == "rabbitmq":
        node = amqp_broker.node
        node.ctl(f"set_{kind}", "--apply-to", "queues", "--priority", str(priority), name, pattern,
                 json.dumps(definition))
        time.sleep(1)
        return lambda: node.ctl(f"clear_{kind}", name)
    url = f"{amqp_broker.process.http_url}/api/{'operator-policies' if operator else 'policies'}/%2F/{name}"
    body = {"pattern": pattern, "definition": definition, "apply-to": "queues", "priority": priority}
    r = requests.put(url, json=body, auth=("guest", "guest"), timeout=10)
    assert r.status_code in (201, 204), r.text
    if amqp_broker.target == "cluster":
        time.sleep(1)
    return lambda: requests.delete(url, auth=("guest", "guest"), timeout=10)


def dead_letter_target(channel) -> tuple[str, str]:
    """A fanout exchange and the queue bound to it: (exchange, queue), for dead letters."""
    exchange, queue = unique("dlx"), unique("dlq")
    channel.exchange_declare(exchange, "fanout")
    channel.queue_declare(queue)
    channel.queue_bind(queue, exchange)
    return exchange, queue


# ----------------------------------------------------------------------------- pika

def parameters(broker, **overrides) -> pika.ConnectionParameters:
    """pika parameters for ``broker`` with short timeouts (a hung broker fails fast)."""
    kw = dict(host=broker.host, port=broker.port, virtual_host="/",
              credentials=pika.PlainCredentials("guest", "guest"),
              connection_attempts=1, socket_timeout=5, stack_timeout=10,
              blocked_connection_timeout=30)
    kw.update(overrides)
    return pika.ConnectionParameters(**kw)


def connect(broker, **overrides) -> pika.BlockingConnection:
    return pika.BlockingConnection(parameters(broker, **overrides))


def drain_get(channel, queue: str, limit: int = 100_000) -> list[tuple]:
    """``basic.get`` (auto-ack) until get-empty; returns ``[(method, properties, body), ...]``."""
    got = []
    while len(got) < limit:
        method, props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return got
        got.append((method, props, body))
    return got


def bodies(channel, queue: str) -> list[bytes]:
    return [b for _, _, b in drain_get(channel, queue)]


def consume_n(channel, queue: str, n: int, timeout: float = TIMEOUT, auto_ack: bool = True,
              **consume_kw) -> list[tuple]:
    """Consume exactly ``n`` deliveries with pika's consumer generator, failing after ``timeout``.

    The generator's consumer is cancelled afterwards: deliveries pika buffered beyond the ``n``th
    are rejected with requeue (so they come back redelivered); the ``n`` returned, if not
    auto-acked, stay unacked on the channel. Use a prefetch to keep the rest in the queue.
    """
    got = []
    deadline = time.monotonic() + timeout
    for method, props, body in channel.consume(queue, auto_ack=auto_ack, inactivity_timeout=0.1,
                                               **consume_kw):
        if method is not None:
            got.append((method, props, body))
            if len(got) == n:
                break
        if time.monotonic() > deadline:
            channel.cancel()
            raise AssertionError(f"got {len(got)} of {n} deliveries from {queue!r} within {timeout}s: "
                                 f"{[b[:40] for _, _, b in got]}")
    channel.cancel()
    return got


def no_delivery(channel, queue: str, wait: float = 0.5) -> list:
    """Deliveries that arrive at a consumer on ``queue`` within ``wait`` seconds (expected none)."""
    got = []
    deadline = time.monotonic() + wait
    for method, props, body in channel.consume(queue, auto_ack=True, inactivity_timeout=0.05):
        if method is not None:
            got.append(body)
        if time.monotonic() > deadline:
            break
    channel.cancel()
    return got


def declare_ok(channel, queue: str):
    """queue.declare-ok (passive) of ``queue``: ``.message_count``, ``.consumer_count``."""
    return channel.queue_declare(queue, passive=True).method


# ----------------------------------------------------------------------------- raw sockets

class ConnectionClosedByPeer(AssertionError):
    """The server closed the socket while the test still expected a frame."""


class RawAMQP:
    """A raw AMQP 0-9-1 client over a socket, frame by frame (``pamqp`` marshalling).

    ``recv()`` returns ``(channel, frame)`` where frame is a pamqp method/header/body/heartbeat
    object; :meth:`handshake` does the four-step connection opening.
    """

    def __init__(self, host: str, port: int, timeout: float = 5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.buf = b""
        self.tune: commands.Connection.Tune | None = None
        self.frame_max = 131072
        self.server_properties: dict = {}

    # -- low level
    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, value, channel: int = 0) -> None:
        self.sock.sendall(pframe.marshal(value, channel))

    def _fill(self, n: int, deadline: float) -> bool:
        while len(self.buf) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no complete frame within the timeout (have {self.buf[:40]!r})")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                return False
            self.buf += chunk
        return True

    def recv_bytes(self, n: int, timeout: float | None = None) -> bytes:
        """Exactly ``n`` raw bytes (or fewer if the peer closed)."""
        deadline = time.monotonic() + (timeout or self.timeout)
        self._fill(n, deadline)
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def recv(self, timeout: float | None = None):
        """The next frame as ``(channel, frame)``; raises :class:`ConnectionClosedByPeer` on EOF."""
        deadline = time.monotonic() + (timeout or self.timeout)
        if not self._fill(7, deadline):
            raise ConnectionClosedByPeer(f"server closed the connection (pending bytes {self.buf!r})")
        frame_type, channel, size = struct.unpack(">BHI", self.buf[:7])
        if not self._fill(7 + size + 1, deadline):
            raise ConnectionClosedByPeer("server closed the connection in the middle of a frame")
        raw, self.buf = self.buf[:8 + size], self.buf[8 + size:]
        assert raw[-1] == FRAME_END, f"server sent a frame with end octet {raw[-1]:#x}"
        _, channel, value = pframe.unmarshal(raw)
        return channel, value

    def recv_method(self, timeout: float | None = None, skip_heartbeats: bool = True):
        """The next non-heartbeat frame."""
        while True:
            channel, value = self.recv(timeout)
            if not (skip_heartbeats and isinstance(value, Heartbeat)):
                return channel, value

    def expect(self, cls, channel: int | None = None, timeout: float | None = None):
        ch, value = self.recv_method(timeout)
        if not isinstance(value, cls):
            detail = repr(value)
            if isinstance(value, (commands.Connection.Close, commands.Channel.Close)):
                detail = f"{type(value).__name__}({value.reply_code}, {value.reply_text!r})"
            raise AssertionError(f"expected {cls.__name__}, got {detail} on channel {ch}")
        if channel is not None:
            assert ch == channel, f"expected {cls.__name__} on channel {channel}, got it on {ch}"
        return value

    def closed_by_peer(self, timeout: float | None = None) -> bool:
        """Read (discarding frames) until EOF; True if the server closed within ``timeout``."""
        deadline = time.monotonic() + (timeout or self.timeout)
        try:
            while True:
                if not self._fill(len(self.buf) + 1, deadline):
                    return True
                self.buf = b""
        except TimeoutError:
            return False

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # -- protocol steps
    def handshake(self, user: str = "guest", password: str = "guest", vhost: str = "/",
                  channel_max: int | None = None, frame_max: int | None = None, heartbeat: int = 0,
                  open_vhost: bool = True) -> None:
        self.send_bytes(PROTOCOL_HEADER)
        start = self.expect(commands.Connection.Start, channel=0)
        self.server_properties = start.server_properties
        assert "PLAIN" in str(start.mechanisms), f"server mechanisms {start.mechanisms!r} lack PLAIN"
        self.send(commands.Connection.StartOk(
            client_properties={"product": "compat-tests raw client",
                               "capabilities": {"authentication_failure_close": True}},
            mechanism="PLAIN", response=f"\0{user}\0{password}", locale="en_US"))
        self.tune = self.expect(commands.Connection.Tune, channel=0)
        self.frame_max = self.tune.frame_max if frame_max is None else frame_max
        self.send(commands.Connection.TuneOk(
            channel_max=self.tune.channel_max if channel_max is None else channel_max,
            frame_max=self.frame_max, heartbeat=heartbeat))
        if open_vhost:
            self.send(commands.Connection.Open(virtual_host=vhost))
            self.expect(commands.Connection.OpenOk, channel=0)

    def open_channel(self, channel: int) -> None:
        self.send(commands.Channel.Open(), channel)
        self.expect(commands.Channel.OpenOk, channel=channel)

    def publish(self, channel: int, exchange: str, routing_key: str, body: bytes,
                properties: commands.Basic.Properties | None = None, frame_max: int | None = None) -> None:
        """basic.publish + content header + body frames, in one write."""
        frame_max = frame_max or self.frame_max
        chunk = frame_max - 8
        out = [pframe.marshal(commands.Basic.Publish(exchange=exchange, routing_key=routing_key), channel),
               pframe.marshal(ContentHeader(body_size=len(body),
                                            properties=properties or commands.Basic.Properties()), channel)]
        for i in range(0, len(body), chunk):
            out.append(pframe.marshal(ContentBody(body[i:i + chunk]), channel))
        self.send_bytes(b"".join(out))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def method_frame(channel: int, class_id: int, method_id: int, args: bytes = b"", end: int = FRAME_END) -> bytes:
    """A method frame built by hand (for ids pamqp does not know, or a wrong end octet)."""
    payload = struct.pack(">HH", class_id, method_id) + args
    return struct.pack(">BHI", 1, channel, len(payload)) + payload + bytes([end])


def header_frame(channel: int, body_size: int, class_id: int = 60) -> bytes:
    """A content header frame with no properties."""
    payload = struct.pack(">HHQH", class_id, 0, body_size, 0)
    return struct.pack(">BHI", 2, channel, len(payload)) + payload + bytes([FRAME_END])


def body_frame(channel: int, data: bytes) -> bytes:
    return struct.pack(">BHI", 3, channel, len(data)) + data + bytes([FRAME_END])

