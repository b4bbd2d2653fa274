"""Kafka clients against the user store and the TLS listener: SASL PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512 over SASL_PLAINTEXT and SASL_SSL, SSL with and without a client certificate,
wrong passwords, --kafka-require-auth, and Describe/AlterUserScramCredentials."""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion, UserScramCredentialUpsertion,
)

from .conftest import PASSWORDS, users_cli

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
TIMEOUT = 15


def _topic() -> str:
    return f"sec-{uuid.uuid4().hex[:10]}"


def confluent_config(broker, protocol: str, mechanism: str | None = None, user: str = "alice",
                     password: str | None = None, client_cert: str | None = None) -> dict:
    listener = "kafka_tls" if protocol in ("SSL", "SASL_SSL") else "kafka"
    config = {"bootstrap.servers": broker.bootstrap(listener), "security.protocol": protocol,
              "socket.timeout.ms": 5000, "reconnect.backoff.ms": 200, "reconnect.backoff.max.ms": 1000}
    if mechanism:
        config.update({"sasl.mechanism": mechanism, "sasl.username": user,
                       "sasl.password": PASSWORDS.get(user) if password is None else password})
    if protocol in ("SSL", "SASL_SSL"):
        config["ssl.ca.location"] = str(broker.certs.ca)
        config["ssl.endpoint.identification.algorithm"] = "https"
        if client_cert:
            cert, key = broker.certs.client(client_cert)
            config.update({"ssl.certificate.location": str(cert), "ssl.key.location": str(key)})
    return config


def confluent_round_trip(config: dict) -> None:
    topic, value = _topic(), uuid.uuid4().bytes
    errors = []
    producer = Producer(config)
    producer.produce(topic, value, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(TIMEOUT) == 0 and errors == [None], errors
    consumer = Consumer({**config, "group.id": topic, "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                assert msg.value() == value
                return
        raise AssertionError("the produced record was not consumed")
    finally:
        consumer.close()


def confluent_auth_error(config: dict) -> KafkaError:
    """The first error librdkafka reports when the broker refuses the client (a wrong password,
    a refused connection, a failed TLS handshake); fails if the client gets metadata instead."""
    errors = []
    producer = Producer({**config, "error_cb": errors.append})
    deadline = time.monotonic() + TIMEOUT
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors, "no error reported"
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=1)
    return errors[0]


def kafka_python_config(broker, protocol: str, mechanism: str | None, user: str = "alice",
                        password: str | None = None) -> dict:
    listener = "kafka_tls" if protocol in ("SSL", "SASL_SSL") else "kafka"
    config = {"bootstrap_servers": broker.bootstrap(listener), "security_protocol": protocol,
              "request_timeout_ms": 10000}
    if mechanism:
        config.update({"sasl_mechanism": mechanism, "sasl_plain_username": user,
                       "sasl_plain_password": PASSWORDS.get(user) if password is None else password})
    if protocol in ("SSL", "SASL_SSL"):
        config.update({"ssl_cafile": str(broker.certs.ca), "ssl_check_hostname": True})
    return config


def kafka_python_round_trip(config: dict) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition as KTP
    topic, value = _topic(), uuid.uuid4().bytes
    producer = KafkaProducer(**config)
    try:
        producer.send(topic, value).get(TIMEOUT)
    finally:
        producer.close(5)
    consumer = KafkaConsumer(**config, enable_auto_commit=False, consumer_timeout_ms=TIMEOUT * 1000)
    try:
        consumer.assign([KTP(topic, 0)])
        consumer.seek(KTP(topic, 0), 0)
        for record in consumer:
            assert record.value == value
            return
        raise AssertionError("the produced record was not consumed")
    finally:
        consumer.close()


# --- SASL over plaintext and TLS, both clients ---------------------------------------------

@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_sasl_round_trip(secure_broker, protocol, mechanism):
    confluent_round_trip(confluent_config(secure_broker, protocol, mechanism))


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_sasl_round_trip(secure_broker, protocol, mechanism):
    kafka_python_round_trip(kafka_python_config(secure_broker, protocol, mechanism))


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_wrong_password_is_an_authentication_error(secure_broker, protocol, mechanism):
    error = confluent_auth_error(confluent_config(secure_broker, protocol, mechanism, password="wrong"))
    assert error.code() == KafkaError._AUTHENTICATION, error
    assert "Authentication failed" in error.str()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_unknown_user_is_an_authentication_error(secure_broker, mechanism):
    error = confluent_auth_error(confluent_config(secure_broker, "SASL_PLAINTEXT", mechanism, user="nosuchuser",
                                                  password="x"))
    assert error.code() == KafkaError._AUTHENTICATION, error


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_wrong_password_is_an_authentication_error(secure_broker, mechanism, caplog):
    """kafka-python 3 gets SaslAuthenticationFailedError on the connection (it logs it) and its
    bootstrap then times out; it does so against a Kafka broker too."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError, SaslAuthenticationFailedError
    config = kafka_python_config(secure_broker, "SASL_SSL", mechanism, password="wrong")
    with caplog.at_level("ERROR", logger="kafka"), pytest.raises((SaslAuthenticationFailedError, KafkaTimeoutError)):
        KafkaProducer(**config, bootstrap_timeout_ms=1500).close()
    assert "SaslAuthenticationFailedError" in caplog.text
    assert "Authentication failed during authentication due to invalid credentials" in caplog.text


# --- TLS without SASL: client certificates ----------------------------------------------

def test_confluent_ssl_with_client_certificate(secure_broker):
    """A verified client certificate authenticates the connection (principal = its CN)."""
    confluent_round_trip(confluent_config(secure_broker, "SSL", client_cert="alice"))
    assert "Kafka client authenticated by certificate" in secure_broker.output()


def test_ssl_without_certificate_or_sasl_is_refused_when_auth_is_required(secure_broker):
    error = confluent_auth_error(confluent_config(secure_broker, "SSL"))
    assert error.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN), error


def test_plaintext_without_sasl_is_refused_when_auth_is_required(secure_broker):
    error = confluent_auth_error(confluent_config(secure_broker, "PLAINTEXT"))
    assert error.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN), error
    assert "authentication required" in secure_broker.output()


def test_untrusted_client_certificate_fails_the_handshake(secure_broker):
    error = confluent_auth_error(confluent_config(secure_broker, "SSL", client_cert="mallory"))
    assert error.code() in (KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN), error


def test_client_that_does_not_trust_the_broker_fails(secure_broker, tmp_path):
    config = confluent_config(secure_broker, "SASL_SSL", "PLAIN")
    config["ssl.ca.location"] = str(secure_broker.certs.client("mallory")[0])  # not the broker's CA
    error = confluent_auth_error(config)
    # librdkafka reports the failed verification as _SSL, or now and then as _TRANSPORT with it
    assert error.code() in (KafkaError._SSL, KafkaError._ALL_BROKERS_DOWN) or (
        error.code() == KafkaError._TRANSPORT and "certificate verify failed" in error.str()), error


def test_kafka_python_ssl_metadata_points_at_the_tls_listener(secure_broker):
    """Metadata on the TLS listener advertises the TLS port, so produce/fetch stay on TLS."""
    kafka_python_round_trip(kafka_python_config(secure_broker, "SASL_SSL", "SCRAM-SHA-256"))


# --- user management ---------------------------------------------------------------------

def test_user_added_with_the_cli_logs_in_without_a_restart(secure_broker):
    name = f"late-{uuid.uuid4().hex[:6]}"
    done = users_cli(secure_broker.data_dir, "add", name, "--password", "late-pw")
    assert done.returncode == 0, done.stderr
    confluent_round_trip(confluent_config(secure_broker, "SASL_PLAINTEXT", "SCRAM-SHA-512", user=name,
                                          password="late-pw"))
    assert users_cli(secure_broker.data_dir, "delete", name).returncode == 0
    error = confluent_auth_error(confluent_config(secure_broker, "SASL_PLAINTEXT", "PLAIN", user=name,
                                                  password="late-pw"))
    assert error.code() == KafkaError._AUTHENTICATION


def _admin(broker) -> AdminClient:
    return AdminClient(confluent_config(broker, "SASL_PLAINTEXT", "SCRAM-SHA-256"))


def test_alter_and_describe_user_scram_credentials(secure_broker):
    admin = _admin(secure_broker)
    name = f"dave-{uuid.uuid4().hex[:6]}"
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(name, info, b"dave-pw")])
    futures[name].result(TIMEOUT)
    described = admin.describe_user_scram_credentials([name])[name].result(TIMEOUT)
    infos = described.scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_512, 8192)]
    confluent_round_trip(confluent_config(secure_broker, "SASL_SSL", "SCRAM-SHA-512", user=name, password="dave-pw"))
    # PLAIN checks the same stored credential; SCRAM-SHA-256 has none for this user
    confluent_round_trip(confluent_config(secure_broker, "SASL_PLAINTEXT", "PLAIN", user=name, password="dave-pw"))
    error = confluent_auth_error(confluent_config(secure_broker, "SASL_PLAINTEXT", "SCRAM-SHA-256", user=name,
                                                  password="dave-pw"))
    assert error.code() == KafkaError._AUTHENTICATION
    stored = (secure_broker.data_dir / "users.json").read_text()
    assert name in stored and "dave-pw" not in stored

    futures = admin.alter_user_scram_credentials([UserScramCredentialDeletion(name, ScramMechanism.SCRAM_SHA_512)])
    futures[name].result(TIMEOUT)
    with pytest.raises(KafkaException) as err:
        admin.describe_user_scram_credentials([name])[name].result(TIMEOUT)
    assert err.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND


def test_alter_user_scram_credentials_errors(secure_broker):
    admin = _admin(secure_broker)
    name = f"erin-{uuid.uuid4().hex[:6]}"
    too_few = UserScramCredentialUpsertion(name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"pw")
    with pytest.raises(KafkaException) as err:
        admin.alter_user_scram_credentials([too_few])[name].result(TIMEOUT)
    assert err.value.args[0].code() == KafkaError.UNACCEPTABLE_CREDENTIAL
    missing = UserScramCredentialDeletion(name, ScramMechanism.SCRAM_SHA_256)
    with pytest.raises(KafkaException) as err:
        admin.alter_user_scram_credentials([missing])[name].result(TIMEOUT)
    assert err.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND


def test_describe_all_lists_users_with_credentials(secure_broker):
    admin = _admin(secure_broker)
    described = admin.describe_user_scram_credentials().result(TIMEOUT)
    assert {"alice", "carol", "nobody", "guest"} <= set(described)
    mechanisms = {i.mechanism for i in described["alice"].scram_credential_infos}
    assert mechanisms == {ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512}
