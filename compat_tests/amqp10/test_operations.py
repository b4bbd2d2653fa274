"""AMQP 1.0 connections as the operator sees them: the management API lists, details and closes
them, /metrics counts them, the connection limits count and refuse them, and the consumer
timeout detaches a receiver link that holds a delivery too long.

Gateway only: Debian's RabbitMQ 3.10 lists its AMQP 1.0 plugin's connections in another shape
(the plugin's own protocol name, no sessions endpoint), and these are RabbitMQ 4's behaviours.
"""
from __future__ import annotations

import time
from urllib.parse import quote

import pika
import pytest
import requests
from proton import ConnectionException, Message, Timeout, symbol
from proton.utils import LinkDetached

from tests.brokerproc import start_broker

from .helpers import pika_channel, proton, unique

AUTH = ("guest", "guest")


def _api(broker, method: str, path: str, **kw):
    response = requests.request(method, f"{broker.http_url}/api/{path}", auth=AUTH, timeout=10, **kw)
    assert response.status_code < 300, (response.status_code, response.text)
    return response.json() if response.content else None


def _amqp10_connections(broker) -> list[dict]:
    return [c for c in _api(broker, "GET", "connections") if c["protocol"] == "AMQP 1-0"]


def _metric(broker, name: str) -> float:
    text = requests.get(f"{broker.http_url}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{") and line.split(" ")[0] == name:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def _wait_for(condition, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.1)


def _refused(address, why: str = "", **kw) -> str:
    """The condition of the close that refuses an AMQP 1.0 connection at its open."""
    with pytest.raises(ConnectionException) as refused:
        proton(address, **kw).close()
    assert why in str(refused.value)
    return getattr(refused.value, "condition", str(refused.value))


def test_listed_detailed_counted_and_closed_through_the_api(broker):
    queue = unique("ops-q")
    pconn, channel = pika_channel(broker.address("amqp"))
    channel.queue_declare(queue)
    before = _metric(broker, "rabbitmq_connections")
    conn = proton(broker.address("amqp"), properties={symbol("connection_name"): "ops-test"})
    try:
        receiver = conn.create_receiver(f"/queues/{queue}", credit=5)
        sender = conn.create_sender(f"/queues/{queue}")
        [listed] = _amqp10_connections(broker)
        assert listed["user"] == "guest" and listed["vhost"] == "/" and listed["channels"] >= 1
        assert listed["state"] == "running" and listed["peer_host"] == "127.0.0.1"
        assert listed["client_properties"]["connection_name"] == "ops-test"
        name = listed["name"]
        assert _api(broker, "GET", f"connections/{quote(name, safe='')}")["protocol"] == "AMQP 1-0"
        assert listed in _api(broker, "GET", "vhosts/%2F/connections")
        sessions = _api(broker, "GET", f"connections/{quote(name, safe='')}/sessions")
        outgoing = [link for s in sessions for link in s["outgoing_links"]]
        incoming = [link for s in sessions for link in s["incoming_links"]]
        assert [link["queue_name"] for link in outgoing] == [queue]
        assert [link["target_address"] for link in incoming] == [f"/queues/{queue}"]
        assert _metric(broker, "rabbitmq_connections") == before + 1
        [consumer] = [c for c in _api(broker, "GET", "consumers") if c["queue"]["name"] == queue]
        assert consumer["ack_required"] and consumer["channel_details"]["connection_name"] == name
        assert _metric(broker, 'gateway_connections{protocol="amqp10"}') == 1
        assert _metric(broker, 'rabbitmq_global_consumers{protocol="amqp10"}') == 1
        assert _metric(broker, 'rabbitmq_global_publishers{protocol="amqp10"}') == 1
        sender.send(Message(body=b"held", inferred=True))
        assert receiver.receive(timeout=10).body == b"held"  # not settled: back to the queue on close

        closed_before = _metric(broker, "rabbitmq_connections_closed_total")
        requests.delete(f"{broker.http_url}/api/connections/{quote(name, safe='')}", auth=AUTH, timeout=10,
                        headers={"X-Reason": "maintenance"}).raise_for_status()
        with pytest.raises(ConnectionException) as closed:
            receiver.receive(timeout=10)
        assert closed.value.condition == "amqp:connection:forced"
        assert "maintenance" in str(closed.value)
    finally:
        conn.close()
    _wait_for(lambda: _amqp10_connections(broker) == [])
    assert _metric(broker, "rabbitmq_connections_closed_total") >= closed_before + 1
    method, _props, body = channel.basic_get(queue, auto_ack=True)
    assert body == b"held" and method.redelivered
    pconn.close()


def test_vhost_connection_limit_counts_amqp10_connections(broker):
    vhost = unique("ops-vh")
    _api(broker, "PUT", f"vhosts/{vhost}")
    _api(broker, "PUT", f"permissions/{vhost}/guest", json={"configure": ".*", "write": ".*", "read": ".*"})
    _api(broker, "PUT", f"vhost-limits/{vhost}/max-connections", json={"value": 1})
    hostname = f"vhost:{vhost}"  # RabbitMQ 4's open hostname naming a vhost
    first = proton(broker.address("amqp"), virtual_host=hostname)
    try:
        assert _refused(broker.address("amqp"), "connection limit (1)", virtual_host=hostname) == \
            "amqp:resource-limit-exceeded"
        host, port = broker.address("amqp")
        with pytest.raises(pika.exceptions.AMQPConnectionError):  # a 0-9-1 one counts the 1.0 one too
            pika.BlockingConnection(pika.ConnectionParameters(host=host, port=port, virtual_host=vhost))
    finally:
        first.close()
    _wait_for(lambda: not [c for c in _amqp10_connections(broker) if c["vhost"] == vhost])
    proton(broker.address("amqp"), virtual_host=hostname).close()  # room again


def test_consumer_timeout_detaches_the_receiver_link(broker):
    queue = unique("ops-timeout")
    pconn, channel = pika_channel(broker.address("amqp"))
    channel.queue_declare(queue, arguments={"x-consumer-timeout": 1000})
    channel.basic_publish("", queue, b"slow")
    conn = proton(broker.address("amqp"))
    try:
        receiver = conn.create_receiver(f"/queues/{queue}", credit=1)
        assert receiver.receive(timeout=10).body == b"slow"  # and never settled
        with pytest.raises((LinkDetached, Timeout)):
            receiver.receive(timeout=6)
        condition = receiver.link.remote_condition
        assert condition is not None and condition.name == "amqp:precondition-failed", condition
        assert "1000 ms" in condition.description
        other = conn.create_receiver(f"/queues/{queue}", credit=1)  # the session goes on
        assert other.receive(timeout=10).body == b"slow"
        other.accept()
    finally:
        conn.close()
        pconn.close()


def test_global_and_user_connection_limits_count_amqp10(tmp_path):
    process = start_broker(tmp_path / "data", "--max-connections", "2", "--max-connections-per-user", "1")
    try:
        address = process.address("amqp")
        for user in ("ops", "ops2"):
            _api(process, "PUT", f"users/{user}", json={"password": user, "tags": ""})
            _api(process, "PUT", f"permissions/%2F/{user}", json={"configure": ".*", "write": ".*", "read": ".*"})
        guest = proton(address)
        try:
            assert _refused(address, "user connection limit (1)") == "amqp:resource-limit-exceeded"  # guest's 2nd
            ops = proton(address, user="ops", password="ops")
            try:
                # the refused one leaves the count when its socket closes
                _wait_for(lambda: len(_amqp10_connections(process)) == 2)
                with pytest.raises(pika.exceptions.AMQPConnectionError):  # 2 open: a third is one too many
                    pika.BlockingConnection(pika.ConnectionParameters(host=address[0], port=address[1],
                                                                      connection_attempts=1))
                # an AMQP 1.0 client is told why (ops2 is under its user limit)
                assert _refused(address, "--max-connections", user="ops2", password="ops2") == \
                    "amqp:resource-limit-exceeded"
            finally:
                ops.close()
        finally:
            guest.close()
    finally:
        assert process.stop() == 0, process.output()
