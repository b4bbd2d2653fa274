"""AMQP clients against the user store, AMQPS and vhost permissions: pika and aio-pika over TLS
with PLAIN and EXTERNAL (client certificate), refused logins (403 at connection), vhost access
(530) and the configure/write/read rules of RabbitMQ's access control, each with a negative
test. Gateway-only (see conftest)."""
from __future__ import annotations

import asyncio
import ssl
import uuid

import pika
import pytest

from .conftest import PASSWORDS, users_cli


def _ssl_context(broker, client: str | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(broker.certs.ca))
    if client is not None:
        cert, key = broker.certs.client(client)
        context.load_cert_chain(str(cert), str(key))
    return context


def params(broker, user: str | None = "alice", password: str | None = None, tls: bool = False,
           client_cert: str | None = None, external: bool = False, **kw) -> pika.ConnectionParameters:
    host, port = broker.address("amqp_tls" if tls else "amqp")
    credentials = pika.credentials.ExternalCredentials() if external else \
        pika.PlainCredentials(user, PASSWORDS.get(user, "") if password is None else password)
    ssl_options = pika.SSLOptions(_ssl_context(broker, client_cert), "localhost") if tls else None
    return pika.ConnectionParameters(host=host, port=port, credentials=credentials, ssl_options=ssl_options,
                                     connection_attempts=1, socket_timeout=5, stack_timeout=10, **kw)


def connect(broker, **kw) -> pika.BlockingConnection:
    return pika.BlockingConnection(params(broker, **kw))


def _name(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def _round_trip(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    queue = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", queue, b"hello")
    method, _, body = None, None, None
    for _ in range(50):
        method, _, body = ch.basic_get(queue, auto_ack=True)
        if method is not None:
            break
        conn.sleep(0.05)
    assert body == b"hello"


# --- authentication ----------------------------------------------------------------------

def test_plain_login_over_plain_tcp(secure_broker):
    with connect(secure_broker) as conn:
        _round_trip(conn)


def test_plain_login_over_tls(secure_broker):
    with connect(secure_broker, tls=True) as conn:
        _round_trip(conn)


def test_external_login_with_client_certificate(secure_broker):
    """EXTERNAL: the verified certificate's CN (alice) is the user; no password is sent."""
    with connect(secure_broker, tls=True, client_cert="alice", external=True) as conn:
        _round_trip(conn)
    assert "user=alice" in secure_broker.output()


def test_external_is_not_offered_without_a_client_certificate(secure_broker):
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        connect(secure_broker, tls=True, external=True)


def test_external_for_a_certificate_of_an_unknown_user_is_refused(secure_broker):
    """The certificate is valid but its CN ("stranger") is no user: 403, as RabbitMQ's EXTERNAL."""
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        connect(secure_broker, tls=True, client_cert="stranger", external=True)
    assert "(403)" in str(info.value) and "ACCESS_REFUSED" in str(info.value)
    assert "user 'stranger' does not exist" in secure_broker.output()


def test_untrusted_client_certificate_fails_the_handshake(secure_broker):
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        connect(secure_broker, tls=True, client_cert="mallory", external=True)


def test_wrong_password_is_refused_with_403(secure_broker):
    for tls in (False, True):
        with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
            connect(secure_broker, password="wrong", tls=tls)
        assert "(403)" in str(info.value) and "ACCESS_REFUSED" in str(info.value)


def test_unknown_user_is_refused_with_403(secure_broker):
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        connect(secure_broker, user="nosuchuser", password="x")
    assert "(403)" in str(info.value) and "ACCESS_REFUSED" in str(info.value)


def test_user_without_vhost_permissions_gets_530(secure_broker):
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
        connect(secure_broker, user="nobody")
    assert "(530)" in str(info.value) and "access to vhost '/' refused for user 'nobody'" in str(info.value)


def test_password_change_and_delete_with_the_cli_apply_to_the_running_broker(secure_broker):
    name = _name("gina-")
    assert users_cli(secure_broker.data_dir, "add", name, "--password", "pw1").returncode == 0
    assert users_cli(secure_broker.data_dir, "set-permissions", name, ".*", ".*", ".*").returncode == 0
    with connect(secure_broker, user=name, password="pw1") as conn:
        _round_trip(conn)
    assert users_cli(secure_broker.data_dir, "passwd", name, "--password", "pw2").returncode == 0
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        connect(secure_broker, user=name, password="pw1")
    connect(secure_broker, user=name, password="pw2").close()
    assert users_cli(secure_broker.data_dir, "delete", name).returncode == 0
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        connect(secure_broker, user=name, password="pw2")


def test_aio_pika_over_tls_plain_and_external(secure_broker):
    import aio_pika
    host, port = secure_broker.address("amqp_tls")

    async def main():
        plain = await aio_pika.connect(host=host, port=port, login="alice", password=PASSWORDS["alice"], ssl=True,
                                       ssl_context=_ssl_context(secure_broker), timeout=10)
        async with plain:
            channel = await plain.channel()
            queue = await channel.declare_queue(exclusive=True)
            await channel.default_exchange.publish(aio_pika.Message(b"over tls"), routing_key=queue.name)
            message = await queue.get(timeout=5, fail=False)
            for _ in range(50):
                if message is not None:
                    break
                await asyncio.sleep(0.05)
                message = await queue.get(timeout=5, fail=False)
            assert message is not None and message.body == b"over tls"
            await message.ack()
        external = await aio_pika.connect(f"amqps://{host}:{port}/?auth=external",
                                          ssl_context=_ssl_context(secure_broker, "alice"), timeout=10)
        async with external:
            await (await external.channel()).declare_queue(exclusive=True)
        with pytest.raises(aio_pika.exceptions.ProbableAuthenticationError):
            await aio_pika.connect(host=host, port=port, login="alice", password="wrong", ssl=True,
                                   ssl_context=_ssl_context(secure_broker), timeout=10)

    asyncio.run(main())


# --- authorization: carol may configure, write and read only names starting "carol-" ----------

@pytest.fixture
def guest_channel(secure_broker):
    conn = connect(secure_broker, user="alice")
    yield conn.channel()
    conn.close()


@pytest.fixture
def carol(secure_broker):
    conn = connect(secure_broker, user="carol")
    yield conn
    if conn.is_open:
        conn.close()


def _refused(info, permission: str, kind: str, name: str) -> None:
    text = str(info.value)
    assert "403" in text and "ACCESS_REFUSED" in text, text
    assert f"{permission} access to {kind} '{name}' in vhost '/' refused for user 'carol'" in text, text


def test_configure_queue_declare(carol):
    ch = carol.channel()
    ch.queue_declare(_name("carol-"), auto_delete=True)
    name = _name("other-")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        carol.channel().queue_declare(name)
    _refused(info, "configure", "queue", name)


def test_passive_declare_needs_no_permission(carol, guest_channel):
    name = _name("other-")
    guest_channel.queue_declare(name, auto_delete=True)
    carol.channel().queue_declare(name, passive=True)
    guest_channel.queue_delete(name)


def test_server_named_queue_needs_configure_on_amq_gen(carol):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        carol.channel().queue_declare("", exclusive=True)
    assert "configure access to queue 'amq.gen-" in str(info.value)


def test_configure_exchange_declare_and_delete(carol, guest_channel):
    ch = carol.channel()
    mine = _name("carol-")
    ch.exchange_declare(mine, "fanout", auto_delete=True)
    ch.exchange_delete(mine)
    other = _name("other-")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        carol.channel().exchange_declare(other, "fanout")
    _refused(info, "configure", "exchange", other)
    guest_channel.exchange_declare(other, "fanout")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        carol.channel().exchange_delete(other)
    _refused(info, "configure", "exchange", other)
    guest_channel.exchange_delete(other)


def test_configure_queue_delete(carol, guest_channel):
    other = _name("other-")
    guest_channel.queue_declare(other)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        carol.channel().queue_delete(other)
    _refused(info, "configure", "queue", other)
    guest_channel.queue_delete(other)


def test_queue_bind_needs_write_on_queue_and_read_on_exchange(carol, guest_channel):
    ch = carol.channel()
    queue, exchange = _name("carol-"), _name("carol-")
    ch.queue_declare(queue, auto_delete=True)
    ch.exchange_declare(exchange, "direct", auto_delete=True)
    ch.queue_bind(queue, exchange, "k")
    ch.queue_unbind(queue, exchange, "k")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        carol.channel().queue_bind(queue, "amq.direct", "k")
    _refused(info, "read", "exchange", "amq.direct")
    other = _name("other-")
    guest_channel.queue_declare(other, auto_delete=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        carol.channel().queue_bind(other, exchange, "k")
    _refused(info, "write", "queue", other)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        carol.channel().queue_unbind(queue, "amq.direct", "k")
    _refused(info, "read", "exchange", "amq.direct")
    guest_channel.queue_delete(other)


def test_exchange_bind_needs_write_on_destination_and_read_on_source(carol):
    ch = carol.channel()
    a, b = _name("carol-"), _name("carol-")
    ch.exchange_declare(a, "fanout", auto_delete=True)
    ch.exchange_declare(b, "fanout", auto_delete=True)
    ch.exchange_bind(destination=a, source=b)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        carol.channel().exchange_bind(destination="amq.fanout", source=b)
    _refused(info, "write", "exchange", "amq.fanout")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        carol.channel().exchange_bind(destination=a, source="amq.fanout")
    _refused(info, "read", "exchange", "amq.fanout")


def test_publish_needs_write_on_exchange(carol):
    ch = carol.channel()
    exchange = _name("carol-")
    ch.exchange_declare(exchange, "fanout", auto_delete=True)
    ch.confirm_delivery()
    ch.basic_publish(exchange, "", b"ok")
    ch = carol.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_publish("", "carol-anything", b"no")  # the default exchange is amq.default
        ch.queue_declare(_name("carol-"), auto_delete=True)  # the next round trip sees the close
    _refused(info, "write", "exchange", "amq.default")


def test_get_consume_and_purge_need_read_on_queue(carol, guest_channel):
    mine = _name("carol-")
    carol.channel().queue_declare(mine, auto_delete=True)
    ch = carol.channel()
    ch.basic_get(mine)
    ch.queue_purge(mine)
    other = _name("other-")
    guest_channel.queue_declare(other)
    for action in (lambda c: c.basic_get(other), lambda c: c.basic_consume(other, lambda *a: None),
                   lambda c: c.queue_purge(other)):
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            action(carol.channel())
        _refused(info, "read", "queue", other)
    guest_channel.queue_delete(other)


def test_dead_letter_exchange_needs_write_on_it(carol):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        carol.channel().queue_declare(_name("carol-"), arguments={"x-dead-letter-exchange": "amq.fanout"})
    _refused(info, "write", "exchange", "amq.fanout")
    dlx = _name("carol-")
    ch = carol.channel()
    ch.exchange_declare(dlx, "fanout", auto_delete=True)
    ch.queue_declare(_name("carol-"), auto_delete=True, arguments={"x-dead-letter-exchange": dlx})


def test_alternate_exchange_needs_write_on_it(carol):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        carol.channel().exchange_declare(_name("carol-"), "direct", arguments={"alternate-exchange": "amq.fanout"})
    _refused(info, "write", "exchange", "amq.fanout")


def test_cleared_permissions_take_effect_on_the_next_operation(secure_broker):
    name = _name("hank-")
    assert users_cli(secure_broker.data_dir, "add", name, "--password", "pw").returncode == 0
    assert users_cli(secure_broker.data_dir, "set-permissions", name, ".*", ".*", ".*").returncode == 0
    with connect(secure_broker, user=name, password="pw") as conn:
        conn.channel().queue_declare(_name("h-"), auto_delete=True)
        assert users_cli(secure_broker.data_dir, "set-permissions", name, "", ".*", ".*").returncode == 0
        conn.sleep(1.5)  # the broker notices the new file within a second
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            conn.channel().queue_declare(_name("h-"))
        assert "403" in str(info.value) and "configure access" in str(info.value)
    users_cli(secure_broker.data_dir, "delete", name)


def test_required_client_certificate(certs, tmp_path):
    """--tls-client-auth required: no TLS session without a certificate the CA signed."""
    import signal
    from tests.brokerproc import start_broker
    from .conftest import SecureBroker, tls_args
    assert users_cli(tmp_path / "data", "add", "alice", "--password", PASSWORDS["alice"]).returncode == 0
    assert users_cli(tmp_path / "data", "set-permissions", "alice", ".*", ".*", ".*").returncode == 0
    process = start_broker(tmp_path / "data", *tls_args(certs), "--tls-client-auth", "required")
    try:
        broker = SecureBroker(process, certs)
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            connect(broker, tls=True)
        with connect(broker, tls=True, client_cert="alice") as conn:
            _round_trip(conn)
        with connect(broker, tls=True, client_cert="alice", external=True) as conn:
            _round_trip(conn)
        with connect(broker) as conn:  # the plain listener is not affected
            _round_trip(conn)
    finally:
        process.stop(signal.SIGTERM)
