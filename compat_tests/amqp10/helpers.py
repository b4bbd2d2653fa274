"""Shared pieces of the AMQP 1.0 suite: proton connections, pika beside them, raw sockets."""
from __future__ import annotations

import socket
import uuid

import pika
from proton import Data, Link, Message, Terminus
from proton.reactor import ReceiverOption
from proton.utils import BlockingConnection


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def proton(address: tuple[str, int], user: str = "guest", password: str = "guest", **kw) -> BlockingConnection:
    host, port = address
    return BlockingConnection(f"amqp://{host}:{port}", user=user, password=password, timeout=10,
                              allowed_mechs="PLAIN", **kw)


def pika_channel(address: tuple[str, int]):
    host, port = address
    connection = pika.BlockingConnection(pika.ConnectionParameters(host=host, port=port, heartbeat=0))
    return connection, connection.channel()


def get_all(channel, queue: str) -> list:
    """Every message pika's basic.get finds in ``queue`` now (acknowledged)."""
    out = []
    while True:
        method, props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append((props, body))


def message(body, **kw) -> Message:
    return Message(body=body, **kw)


def raw_socket(address: tuple[str, int]) -> socket.socket:
    sock = socket.create_connection(address, timeout=10)
    return sock


def read_until_closed(sock: socket.socket, limit: int = 1 << 20) -> bytes:
    data = b""
    try:
        while len(data) < limit:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    return data


class VolatileSource(ReceiverOption):
    """The requester's receiver as RabbitMQ 4.2 asks for it (settled, link-detach, the capability)."""

    def __init__(self, capability: bool = True, settled: bool = True):
        self.capability, self.settled = capability, settled

    def apply(self, link) -> None:
        if self.settled:
            link.snd_settle_mode = Link.SND_SETTLED
        link.source.expiry_policy = Terminus.EXPIRE_WITH_LINK
        if self.capability:
            caps = link.source.capabilities
            caps.put_array(False, Data.SYMBOL)
            caps.enter()
            caps.put_symbol("rabbitmq:volatile-queue")
            caps.exit()
