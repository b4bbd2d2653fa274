"""AMQP 1.0 on the TLS AMQP port and with users: SASL PLAIN and EXTERNAL (client certificate),
refused logins, and the same permissions as on the 0-9-1 door (a link to a resource the user may
not touch is refused with amqp:unauthorized-access).

Gateway only, as the rest of this suite (see conftest.py).
"""
from __future__ import annotations

import pytest
from proton import ConnectionException, Delivery, Message, SSLDomain
from proton.utils import BlockingConnection, LinkDetached

from .conftest import PASSWORDS


def _connect(broker, *, tls: bool, user: str | None = None, password: str | None = None,
             client: str | None = None, mechs: str = "PLAIN") -> BlockingConnection:
    host, port = broker.address("amqp_tls" if tls else "amqp")
    domain = None
    if tls:
        domain = SSLDomain(SSLDomain.MODE_CLIENT)
        domain.set_trusted_ca_db(str(broker.certs.ca))
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
        if client is not None:
            cert, key = broker.certs.client(client)
            domain.set_credentials(str(cert), str(key), None)
    url = f"amqps://localhost:{port}" if tls else f"amqp://{host}:{port}"
    return BlockingConnection(url, ssl_domain=domain, user=user, password=password, allowed_mechs=mechs,
                              timeout=10, sasl_enabled=True)


def _declare(broker, name: str) -> None:
    import pika
    host, port = broker.address("amqp")
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        host=host, port=port, credentials=pika.PlainCredentials("alice", PASSWORDS["alice"])))
    connection.channel().queue_declare(name)
    connection.close()


def test_plain_and_external_over_tls(secure_broker):
    _declare(secure_broker, "tls10")
    conn = _connect(secure_broker, tls=True, user="alice", password=PASSWORDS["alice"])
    try:
        sender = conn.create_sender("/queues/tls10")
        assert sender.send(Message(inferred=True, body=b"over tls"), timeout=10).remote_state == Delivery.ACCEPTED
    finally:
        conn.close()
    conn = _connect(secure_broker, tls=True, client="alice", mechs="EXTERNAL")
    try:
        receiver = conn.create_receiver("/queues/tls10", credit=1)
        message = receiver.receive(timeout=10)
        assert bytes(message.body) == b"over tls"
        receiver.accept()
    finally:
        conn.close()
    assert "user=alice" in secure_broker.output()


def test_refused_logins(secure_broker):
    with pytest.raises(ConnectionException):
        _connect(secure_broker, tls=False, user="alice", password="wrong")
    with pytest.raises(ConnectionException):  # a valid certificate of no user
        _connect(secure_broker, tls=True, client="stranger", mechs="EXTERNAL")
    with pytest.raises(ConnectionException):  # EXTERNAL without a certificate is not offered
        _connect(secure_broker, tls=True, mechs="EXTERNAL")


def test_permissions_apply_to_links(secure_broker):
    _declare(secure_broker, "not-carols")
    _declare(secure_broker, "carol-q")
    conn = _connect(secure_broker, tls=False, user="carol", password=PASSWORDS["carol"])
    try:
        with pytest.raises(LinkDetached) as refused:
            conn.create_receiver("/queues/not-carols", credit=1)
        assert "amqp:unauthorized-access" in str(refused.value)
        with pytest.raises(LinkDetached) as refused:  # the default exchange is not carol's to write to
            conn.create_sender("/queues/carol-q", name="carol-sender")
        assert "amqp:unauthorized-access" in str(refused.value)
        receiver = conn.create_receiver("/queues/carol-q", name="carol-receiver", credit=1)  # hers to read
        receiver.close()
    finally:
        conn.close()
