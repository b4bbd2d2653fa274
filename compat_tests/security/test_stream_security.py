"""The stream listener's security: TLS (with and without a client certificate), users,
passwords and per-vhost permissions shared with the AMQP side."""
from __future__ import annotations

import asyncio
import ssl

import pytest
from rstream import Consumer, ConsumerOffsetSpecification, OffsetType, Producer, SlasMechanism
from rstream.exceptions import AccessRefused, AuthenticationFailure

from .conftest import PASSWORDS


def tls_context(certs, client: str | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs.ca))
    context.check_hostname = False
    if client is not None:
        cert, key = certs.client(client)
        context.load_cert_chain(str(cert), str(key))
    return context


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def args(broker, user: str, tls: bool = True, client_cert: str | None = None, **kw) -> dict:
    host, port = broker.address("stream_tls" if tls else "stream")
    out = {"host": host, "port": port, "username": user, "password": PASSWORDS.get(user, ""), **kw}
    if tls:
        out["ssl_context"] = tls_context(broker.certs, client_cert)
    return out


def test_tls_plain_login_publish_and_consume(secure_broker):
    async def scenario():
        async with Producer(**args(secure_broker, "alice")) as producer:
            await producer.create_stream("tls-stream")
            await producer.send_wait("tls-stream", b"over tls")
        got = []
        done = asyncio.Event()

        async def on_message(message, context):
            got.append(message)
            done.set()

        async with Consumer(**args(secure_broker, "alice")) as consumer:
            await consumer.start()
            await consumer.subscribe("tls-stream", on_message,
                                     offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
            await asyncio.wait_for(done.wait(), 20)
        return got

    assert run(scenario()) == [b"over tls"]


def test_external_login_with_a_client_certificate(secure_broker):
    async def scenario():
        async with Producer(**args(secure_broker, "alice", client_cert="alice",
                                   sasl_configuration_mechanism=SlasMechanism.MechanismExternal)) as producer:
            await producer.create_stream("external-stream", exists_ok=True)
    run(scenario())


def test_wrong_password_and_permissions(secure_broker):
    async def wrong_password():
        async with Producer(**{**args(secure_broker, "alice"), "password": "nope"}) as producer:
            await producer.create_stream("x")

    with pytest.raises(AuthenticationFailure):
        run(wrong_password())

    async def carol(stream: str):
        async with Producer(**args(secure_broker, "carol")) as producer:
            await producer.create_stream(stream, exists_ok=True)

    run(carol("carol-stream"))  # her prefix: allowed
    with pytest.raises(AccessRefused):
        run(carol("alices-stream"))  # configure permission refused: ACCESS_REFUSED
