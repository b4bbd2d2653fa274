"""OAuth 2 (JWT access tokens) with real clients: pika logs in with a token as its password,
works within the token's scopes and is refused outside them, refreshes the token with
connection.update-secret and is closed by the broker when the token runs out; tokens that are
expired, for another audience, from another issuer or signed by an unknown key are refused;
confluent-kafka authenticates with SASL OAUTHBEARER (an oauth_cb) and the Kafka ACLs apply to the
token's principal; the HTTP API takes ``Authorization: Bearer``. The tests are their own identity
provider: they make the signing keys, publish them as a JWKS file and sign the tokens.
Gateway-only (see conftest)."""
from __future__ import annotations

import json
import signal
import time
import uuid

import jwt
import pika
import pytest
import requests
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType, \
    ResourceType
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from tests.brokerproc import start_broker

from .conftest import users_cli

ISSUER = "https://idp.example.test/realms/gateway"
TIMEOUT = 15
ADMIN_PASSWORD = "admin-pw"
# What an application token grants: everything named oa-* on the default vhost.
APP_SCOPES = "rabbitmq.configure:%2F/oa-* rabbitmq.write:%2F/oa-* rabbitmq.read:%2F/oa-* openid profile"


class IdentityProvider:
    """Signing keys (RSA "rsa-1" and EC "ec-1" are published; "rogue" is not) and tokens."""

    def __init__(self, directory):
        self.keys = {"rsa-1": rsa.generate_private_key(public_exponent=65537, key_size=2048),
                     "ec-1": ec.generate_private_key(ec.SECP256R1()),
                     "rogue": rsa.generate_private_key(public_exponent=65537, key_size=2048)}
        published = []
        for kid in ("rsa-1", "ec-1"):
            public = self.keys[kid].public_key()
            jwk = json.loads((RSAAlgorithm if kid.startswith("rsa") else ECAlgorithm).to_jwk(public))
            jwk.update(kid=kid, use="sig")
            published.append(jwk)
        self.jwks = directory / "jwks.json"
        self.jwks.write_text(json.dumps({"keys": published}))

    def token(self, sub: str = "app-1", scope: str = APP_SCOPES, lifetime_s: float = 600, aud="rabbitmq",
              iss: str = ISSUER, kid: str = "rsa-1", signing_kid: str | None = None, **claims) -> str:
        now = time.time()
        payload = {"sub": sub, "aud": aud, "iss": iss, "iat": int(now), "exp": int(now + lifetime_s),
                   "scope": scope, **claims}
        key = self.keys[signing_kid or kid]
        alg = "ES256" if (signing_kid or kid).startswith("ec") else "RS256"
        return jwt.encode(payload, key, alg, headers={"kid": kid})


@pytest.fixture(scope="module")
def idp(tmp_path_factory) -> IdentityProvider:
    return IdentityProvider(tmp_path_factory.mktemp("idp"))


@pytest.fixture(scope="module")
def oauth_broker(tmp_path_factory, idp):
    data_dir = tmp_path_factory.mktemp("oauth") / "data"
    assert users_cli(data_dir, "add", "admin", "--password", ADMIN_PASSWORD).returncode == 0
    assert users_cli(data_dir, "set-tags", "admin", "administrator").returncode == 0
    assert users_cli(data_dir, "set-permissions", "admin", ".*", ".*", ".*").returncode == 0
    # no clock skew allowance, so that the expiry test need not wait for it
    process = start_broker(data_dir, "--oauth-jwks", str(idp.jwks), "--oauth-issuer", ISSUER,
                           "--oauth-clock-skew-s", "0", "--authorizer", "acl", "--super-users", "User:admin")
    try:
        yield process
    finally:
        if process.proc.poll() is None:
            process.stop(signal.SIGTERM)


def _name(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


# --- AMQP -------------------------------------------------------------------------------------

def amqp(broker, token: str, user: str = "", **kw) -> pika.BlockingConnection:
    host, port = broker.address("amqp")
    return pika.BlockingConnection(pika.ConnectionParameters(
        host=host, port=port, credentials=pika.PlainCredentials(user, token), connection_attempts=1,
        socket_timeout=5, stack_timeout=10, **kw))


def _get(conn: pika.BlockingConnection, ch, queue: str) -> bytes | None:
    for _ in range(50):
        method, _, body = ch.basic_get(queue, auto_ack=True)
        if method is not None:
            return body
        conn.sleep(0.05)
    return None


def test_pika_works_within_the_token_scopes(oauth_broker, idp):
    exchange, queue = _name("oa-x-"), _name("oa-q-")
    with amqp(oauth_broker, idp.token()) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.exchange_declare(exchange, "direct")
        ch.queue_declare(queue)
        ch.queue_bind(queue, exchange, "k")
        ch.basic_publish(exchange, "k", b"by token")
        assert _get(conn, ch, queue) == b"by token"
        ch.queue_delete(queue)
    assert "AMQP connection opened" in oauth_broker.output()


def test_an_es256_token_logs_in_too(oauth_broker, idp):
    with amqp(oauth_broker, idp.token(kid="ec-1")) as conn:
        conn.channel().queue_declare(_name("oa-ec-"), exclusive=True)


@pytest.mark.parametrize("action", ["publish", "declare", "consume"])
def test_pika_is_refused_outside_the_token_scopes(oauth_broker, idp, action):
    with amqp(oauth_broker, idp.token(sub="app-2")) as conn:
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            if action == "publish":  # amq.topic exists, but the token grants no write on it
                ch.confirm_delivery()
                ch.basic_publish("amq.topic", "k", b"x")
            elif action == "declare":
                ch.queue_declare(_name("other-"))
            else:
                ch.basic_consume("not-oa-queue", lambda *a: None)
        assert info.value.reply_code == 403
        assert info.value.reply_text.startswith("ACCESS_REFUSED - ")
        assert "for user 'app-2'" in info.value.reply_text


def test_a_vhost_no_scope_names_is_not_open(oauth_broker, idp):
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
        amqp(oauth_broker, idp.token(sub="app-8", scope="rabbitmq.read:elsewhere/*"))
    assert "(530) \"NOT_ALLOWED - access to vhost '/' refused for user 'app-8'\"" in str(info.value)


@pytest.mark.parametrize("case", ["expired", "wrong-audience", "wrong-issuer", "unknown-key", "wrong-signature",
                                  "no-exp"])
def test_bad_tokens_are_refused_at_login(oauth_broker, idp, case):
    token = {"expired": lambda: idp.token(lifetime_s=-120),
             "wrong-audience": lambda: idp.token(aud="another-service"),
             "wrong-issuer": lambda: idp.token(iss="https://evil.example.test"),
             "unknown-key": lambda: idp.token(kid="rogue"),
             "wrong-signature": lambda: idp.token(kid="rsa-1", signing_kid="rogue"),
             "no-exp": lambda: jwt.encode({"sub": "app-1", "aud": "rabbitmq", "iss": ISSUER, "scope": APP_SCOPES},
                                          idp.keys["rsa-1"], "RS256", headers={"kid": "rsa-1"})}[case]()
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        amqp(oauth_broker, token)
    assert "ACCESS_REFUSED" in str(info.value)  # 403, like a wrong password
    assert "OAuth 2 token refused" in oauth_broker.output()


def test_password_users_still_log_in(oauth_broker):
    with amqp(oauth_broker, ADMIN_PASSWORD, user="admin") as conn:
        conn.channel().queue_declare(_name("pw-"), exclusive=True)


def test_update_secret_replaces_the_token_and_its_scopes(oauth_broker, idp):
    extra = _name("ext-")
    with amqp(oauth_broker, idp.token(sub="app-3")) as conn:
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.queue_declare(extra)
        assert info.value.reply_code == 403
        wider = APP_SCOPES + f" rabbitmq.configure:%2F/{extra} rabbitmq.read:%2F/{extra}"
        conn.update_secret(idp.token(sub="app-3", scope=wider), "refresh")
        ch = conn.channel()
        ch.queue_declare(extra)  # the new token's scopes apply at once
        ch.queue_delete(extra)
    assert "AMQP connection secret updated" in oauth_broker.output()


@pytest.mark.parametrize("case", ["another-user", "expired", "unknown-key"])
def test_a_refused_update_secret_closes_the_connection(oauth_broker, idp, case):
    new = {"another-user": lambda: idp.token(sub="someone-else"),
           "expired": lambda: idp.token(sub="app-4", lifetime_s=-60),
           "unknown-key": lambda: idp.token(sub="app-4", kid="rogue")}[case]()
    conn = amqp(oauth_broker, idp.token(sub="app-4"))
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        conn.update_secret(new, "refresh")
        conn.channel()
    assert info.value.reply_code == 530
    assert info.value.reply_text == "NOT_ALLOWED - New secret was refused by one of the backends"


def _wait_closed(conn: pika.BlockingConnection, seconds: float) -> pika.exceptions.ConnectionClosedByBroker | None:
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.2)
    except pika.exceptions.ConnectionClosedByBroker as exc:
        return exc
    return None


def test_the_broker_closes_a_connection_whose_token_expires(oauth_broker, idp):
    started = time.monotonic()
    conn = amqp(oauth_broker, idp.token(sub="app-5", lifetime_s=3))
    conn.channel().queue_declare(_name("oa-exp-"), exclusive=True)
    closed = _wait_closed(conn, 15)
    assert closed is not None, "the connection outlived its token"
    assert (closed.reply_code, closed.reply_text) == (320, "CONNECTION_FORCED - credential expired")
    assert 1.5 < time.monotonic() - started < 10
    assert "its OAuth 2 token has expired" in oauth_broker.output()


def test_update_secret_moves_the_expiry(oauth_broker, idp):
    conn = amqp(oauth_broker, idp.token(sub="app-6", lifetime_s=3))
    try:
        conn.update_secret(idp.token(sub="app-6", lifetime_s=600), "refresh")
        assert _wait_closed(conn, 5) is None  # past the first token's expiry
        conn.channel().queue_declare(_name("oa-later-"), exclusive=True)
    finally:
        if conn.is_open:
            conn.close()


def test_update_secret_without_oauth(tmp_path):
    """A password connection's connection.update-secret is accepted whatever it sends, OAuth or
    not, and the identity does not change: RabbitMQ's internal backend (issue 31)."""
    broker = start_broker(tmp_path / "data")
    try:
        host, port = broker.address("amqp")
        params = pika.ConnectionParameters(host=host, port=port, credentials=pika.PlainCredentials("guest", "guest"),
                                           connection_attempts=1, socket_timeout=5)
        for secret in ("guest", "not-the-password"):
            with pika.BlockingConnection(params) as conn:
                conn.update_secret(secret, "rotation")
                conn.channel().queue_declare(_name("pw-"), exclusive=True)
    finally:
        broker.stop(signal.SIGTERM)


# --- Kafka ------------------------------------------------------------------------------------

def kafka_config(broker, token_fn, **extra) -> dict:
    def oauth_cb(_config: str):
        token = token_fn()
        return token, jwt.decode(token, options={"verify_signature": False})["exp"]
    return {"bootstrap.servers": broker.addresses["kafka"], "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb, "socket.timeout.ms": 5000, **extra}


def admin_config(broker) -> dict:
    return {"bootstrap.servers": broker.addresses["kafka"], "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "admin", "sasl.password": ADMIN_PASSWORD}


def admin_client(broker) -> AdminClient:
    return AdminClient(admin_config(broker))


def _allow(broker, principal: str, resource_type, name: str, operation) -> None:
    binding = AclBinding(resource_type, name, ResourcePatternType.LITERAL, principal, "*", operation,
                         AclPermissionType.ALLOW)
    client = admin_client(broker)  # held until the answer is in: a collected client cancels its requests
    for future in client.create_acls([binding]).values():
        future.result(TIMEOUT)


def _produce(config: dict, topic: str) -> KafkaError | None:
    reports = []
    producer = Producer(config)
    producer.produce(topic, b"by token", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(TIMEOUT)
    assert reports, "no delivery report"
    return reports[0]


def test_confluent_kafka_oauthbearer_with_acls(oauth_broker, idp):
    allowed, denied, group = _name("oa-t-"), _name("oa-denied-"), _name("oa-g-")
    for topic in (allowed, denied):  # the super user makes both topics
        assert _produce(admin_config(oauth_broker), topic) is None
    for operation in (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE):
        _allow(oauth_broker, "User:kafka-app", ResourceType.TOPIC, allowed, operation)
    _allow(oauth_broker, "User:kafka-app", ResourceType.GROUP, group, AclOperation.READ)
    config = kafka_config(oauth_broker, lambda: idp.token(sub="kafka-app"))
    assert _produce(config, allowed) is None
    error = _produce(config, denied)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([allowed])
        values, deadline = [], time.monotonic() + TIMEOUT
        while len(values) < 2 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                values.append(msg.value())
        assert values == [b"by token", b"by token"]
    finally:
        consumer.close()
    assert "principal=User:kafka-app" in oauth_broker.output()


def test_confluent_kafka_reauthenticates_before_the_session_ends(oauth_broker, idp):
    """KIP-368: the broker answers with the token's lifetime as the session lifetime, librdkafka
    fetches a new token and re-authenticates on the open connection, and keeps producing."""
    topic, fetched, reports = _name("oa-re-"), [], []
    _allow(oauth_broker, "User:renewer", ResourceType.TOPIC, topic, AclOperation.WRITE)
    _allow(oauth_broker, "User:renewer", ResourceType.TOPIC, topic, AclOperation.CREATE)

    def token():
        fetched.append(time.monotonic())
        # 8 s: librdkafka re-authenticates at about 90% of the session's lifetime, and a loaded
        # machine (a CI run) has delayed that by more than 10% of a 4 s lifetime
        return idp.token(sub="renewer", lifetime_s=8)
    producer = Producer(kafka_config(oauth_broker, token))
    end = time.monotonic() + 13
    while time.monotonic() < end:
        producer.produce(topic, b"x", on_delivery=lambda err, msg: reports.append(err))
        producer.poll(0.3)
    producer.flush(TIMEOUT)
    assert reports and all(err is None for err in reports), [err for err in reports if err][:3]
    assert len(fetched) >= 2, "librdkafka never refreshed its token"
    assert "session has expired" not in oauth_broker.output()


def test_confluent_kafka_bad_token_is_an_authentication_error(oauth_broker, idp):
    errors = []
    producer = Producer({**kafka_config(oauth_broker, lambda: idp.token(sub="kafka-app", kid="rogue")),
                         "error_cb": errors.append})
    deadline = time.monotonic() + TIMEOUT
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors, "no error reported"
    assert errors[0].code() == KafkaError._AUTHENTICATION, errors[0]
    assert "invalid token: unknown signing key 'rogue'" in errors[0].str()


def test_oauthbearer_is_offered_only_with_oauth(tmp_path, idp):
    broker = start_broker(tmp_path / "data")
    try:
        errors = []
        producer = Producer({**kafka_config(broker, lambda: idp.token()), "error_cb": errors.append})
        deadline = time.monotonic() + TIMEOUT
        while not errors and time.monotonic() < deadline:
            producer.poll(0.2)
        assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
        assert "OAUTHBEARER" in errors[0].str()
    finally:
        broker.stop(signal.SIGTERM)


# --- HTTP -------------------------------------------------------------------------------------

def test_http_api_takes_a_bearer_token(oauth_broker, idp):
    url = f"{oauth_broker.http_url}/api/overview"
    admin_token = idp.token(sub="ops", scope="rabbitmq.tag:administrator")
    answer = requests.get(url, headers={"Authorization": f"Bearer {admin_token}"}, timeout=TIMEOUT)
    assert answer.status_code == 200, answer.text
    assert answer.json()["user"] == "ops"
    whoami = requests.get(f"{oauth_broker.http_url}/api/whoami", headers={"Authorization": f"Bearer {admin_token}"},
                          timeout=TIMEOUT).json()
    assert whoami == {"name": "ops", "tags": ["administrator"]}  # the token's tags, not the user store's
    for bad in (idp.token(sub="ops", scope="rabbitmq.tag:administrator", kid="rogue"),
                idp.token(sub="ops", scope="rabbitmq.tag:administrator", lifetime_s=-60), "not-a-token"):
        answer = requests.get(url, headers={"Authorization": f"Bearer {bad}"}, timeout=TIMEOUT)
        assert answer.status_code == 401, answer.text
    untagged = idp.token(sub="app-7")
    answer = requests.get(url, headers={"Authorization": f"Bearer {untagged}"}, timeout=TIMEOUT)
    assert answer.status_code == 401 and "Not management user" in answer.text  # RabbitMQ's words
