"""Resource limits of a running broker: connections (global and per user), AMQP channels and
message size, and Kafka produce throttling while a resource alarm is on."""
from __future__ import annotations

import socket
import subprocess
import sys
import time

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, NoFreeChannels, ProbableAccessDeniedError

from gateway.ctl.kafka_client import KafkaAdmin
from tests.brokerproc import ROOT, start_broker
from wire.records import simple_batch


def _amqp(broker, user="guest", password="guest"):
    host, port = broker.address("amqp")
    return pika.BlockingConnection(pika.ConnectionParameters(
        host, port, credentials=pika.PlainCredentials(user, password), connection_attempts=1))


def _closed_by_peer(sock: socket.socket, timeout: float = 5.0) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_global_connection_limit_counts_both_protocols(tmp_path):
    broker = start_broker(tmp_path / "data", "--max-connections", "2")
    try:
        first = _amqp(broker)
        kafka = socket.create_connection(broker.address("kafka"))  # the second connection
        time.sleep(0.2)
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            _amqp(broker)
        extra = socket.create_connection(broker.address("kafka"))
        assert _closed_by_peer(extra), "a Kafka connection over the limit must be closed"
        assert "connection limit is reached" in broker.output()
        kafka.close()
        first.close()
        time.sleep(0.2)
        _amqp(broker).close()  # room again
    finally:
        broker.stop()


def test_per_user_limits_and_channel_max_and_message_size(tmp_path):
    broker = start_broker(tmp_path / "data", "--max-connections-per-user", "1", "--channel-max", "3",
                          "--max-message-bytes", "1000")
    try:
        conn = _amqp(broker)
        with pytest.raises(ProbableAccessDeniedError) as refused:  # pika's name for a 530 at connection.open
            _amqp(broker)
        assert "(530)" in str(refused.value) and "user connection limit (1) is reached" in str(refused.value)
        channels = [conn.channel() for _ in range(3)]
        with pytest.raises(NoFreeChannels):
            conn.channel()  # the client took channel_max=3 from connection.tune
        ch = channels[0]
        ch.queue_declare("limits")
        ch.basic_publish("", "limits", b"x" * 1000)  # at the limit: fine
        with pytest.raises(ChannelClosedByBroker) as too_big:
            ch.basic_publish("", "limits", b"x" * 1001)
            ch.queue_declare("limits", passive=True)  # the close arrives with the next round trip
        assert too_big.value.reply_code == 406
        assert too_big.value.reply_text == "PRECONDITION_FAILED - message size 1001 is larger than configured " \
                                           "max size 1000"
        assert channels[1].queue_declare("limits", passive=True).method.message_count == 1
        conn.close()
    finally:
        broker.stop()


def _sasl_plain(admin: KafkaAdmin, user: str, password: str):
    admin.call(17, {"mechanism": "PLAIN"})
    return admin.call(36, {"auth_bytes": f"\0{user}\0{password}".encode()})


def test_kafka_per_user_limit_at_sasl_login(tmp_path):
    data = tmp_path / "data"
    subprocess.run([sys.executable, "-m", "gateway", "users", "--data-dir", str(data), "add", "alice", "--password",
                    "pw"], cwd=ROOT, check=True, capture_output=True)
    broker = start_broker(data, "--max-connections-per-user", "1")
    bootstrap = "%s:%d" % broker.address("kafka")
    try:
        with KafkaAdmin(bootstrap) as first, KafkaAdmin(bootstrap) as second:
            assert _sasl_plain(first, "alice", "pw").error_code == 0
            answer = _sasl_plain(second, "alice", "pw")
            assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert "user connection limit (1) is reached" in broker.output()
    finally:
        broker.stop()


def test_kafka_produce_is_throttled_while_an_alarm_is_on(tmp_path):
    # A disk-free limit larger than any disk: the disk alarm is on from the start.
    broker = start_broker(tmp_path / "data", "--disk-free-limit-mb", str(1 << 40), "--kafka-throttle-ms", "700")
    bootstrap = "%s:%d" % broker.address("kafka")
    try:
        time.sleep(1.0)  # the alarm check runs on the AMQP tick
        with KafkaAdmin(bootstrap) as admin:
            answer = admin.call(0, {"transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [
                {"name": "throttled", "partition_data": [{"index": 0, "records": simple_batch([b"v"])}]}]},
                version=12)  # topics by name (v13 names them by id)
        assert answer.throttle_time.total_seconds() == pytest.approx(0.7)
        assert [p.error_code for t in answer.responses for p in t.partition_responses] == [0]
    finally:
        broker.stop()
