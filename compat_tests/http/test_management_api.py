"""The management HTTP API and /metrics over real HTTP, with real Kafka and AMQP clients making
the traffic they report. Shapes are RabbitMQ's where the APIs overlap."""
from __future__ import annotations

import re
import time

import pika
import pytest
import requests
from confluent_kafka import Consumer, Producer, TopicPartition

from compat_tests.conftest import unique_name
from compat_tests.support import wait_until
from tests.brokerproc import start_broker

GUEST = ("guest", "guest")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = start_broker(tmp_path_factory.mktemp("mgmt") / "data")
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def api(broker):
    base = broker.http_url + "/api"

    def call(method: str, path: str, auth=GUEST, **kw):
        return requests.request(method, base + path, auth=auth, timeout=10, **kw)
    return call


def _amqp(broker):
    host, port = broker.address("amqp")
    return pika.BlockingConnection(pika.ConnectionParameters(host, port, credentials=pika.PlainCredentials(*GUEST)))


def test_overview_and_listeners(api, broker):
    r = api("GET", "/overview")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    doc = r.json()
    assert doc["node"] and doc["user"] == "guest"
    ports = {(l["protocol"], l["port"]) for l in doc["listeners"]}
    assert ("amqp", broker.address("amqp")[1]) in ports and ("kafka", broker.address("kafka")[1]) in ports
    assert {"publish", "deliver_get", "ack"} <= set(doc["message_stats"])


def test_auth_is_required_and_checked(api):
    assert api("GET", "/overview", auth=None).status_code == 401
    r = api("GET", "/queues", auth=("guest", "wrong"))
    assert r.status_code == 401 and r.json()["error"] == "not_authorised"
    r = api("PUT", "/users/viewer", json={"password": "pw", "tags": "monitoring"})
    assert r.status_code == 201
    assert api("GET", "/queues", auth=("viewer", "pw")).status_code == 200
    r = api("PUT", "/queues/%2F/denied", auth=("viewer", "pw"), json={})
    # RabbitMQ: 401, a declare through the API needs a permission in the vhost (issue 31)
    assert r.status_code == 401 and "virtual host" in r.json()["reason"]
    assert api("DELETE", "/users/viewer").status_code == 204
    assert api("GET", "/queues", auth=("viewer", "pw")).status_code == 401


def test_queues_exchanges_bindings_follow_amqp_clients(api, broker):
    name = unique_name("mgmt-q")
    conn = _amqp(broker)
    ch = conn.channel()
    ch.exchange_declare(name + "-x", "topic", durable=True)
    ch.queue_declare(name, durable=True, arguments={"x-max-length": 100})
    ch.queue_bind(name, name + "-x", "a.#")
    for i in range(5):
        ch.basic_publish(name + "-x", "a.b", f"m{i}".encode())
    ch.basic_qos(prefetch_count=2)
    ch.basic_consume(name, lambda *a: None)  # holds 2 unacked
    wait_until(lambda: api("GET", f"/queues/%2F/{name}").json()["messages_unacknowledged"] == 2, 10,
               "two unacked deliveries")
    q = api("GET", f"/queues/%2F/{name}").json()
    assert (q["messages"], q["messages_ready"], q["consumers"], q["durable"]) == (5, 3, 1, True)
    assert q["arguments"] == {"x-max-length": 100}
    assert q["message_stats"]["publish"] == 5 and q["message_stats"]["deliver_get"] == 2
    assert any(x["name"] == name + "-x" and x["type"] == "topic" for x in api("GET", "/exchanges/%2F").json())
    bindings = api("GET", "/bindings/%2F").json()
    assert {"source": name + "-x", "vhost": "/", "destination": name, "destination_type": "queue",
            "routing_key": "a.#", "arguments": {}, "properties_key": "a.#"} in bindings
    conns = api("GET", "/connections").json()
    assert any(c["protocol"] == "AMQP 0-9-1" and c["user"] == "guest" and c["channels"] == 1 for c in conns)
    channels = api("GET", "/channels").json()
    assert any(c["consumer_count"] == 1 and c["messages_unacknowledged"] == 2 and c["prefetch_count"] == 2
               for c in channels)
    conn.close()


def test_queue_actions_and_test_publish(api, broker):
    name = unique_name("mgmt-act")
    assert api("PUT", f"/queues/%2F/{name}", json={"durable": False}).status_code == 201
    assert api("PUT", f"/queues/%2F/{name}", json={"durable": False}).status_code == 204  # already there
    r = api("POST", "/exchanges/%2F/amq.default/publish",
            json={"routing_key": name, "payload": "aGVsbG8=", "payload_encoding": "base64",
                  "properties": {"message_id": "id-1", "headers": {"h": "v"}}})
    assert r.status_code == 200 and r.json() == {"routed": True}
    assert api("POST", "/exchanges/%2F/amq.default/publish",
               json={"routing_key": "nowhere-" + name, "payload": "x"}).json() == {"routed": False}
    conn = _amqp(broker)
    ch = conn.channel()
    method, props, body = ch.basic_get(name, auto_ack=False)
    assert (body, props.message_id, props.headers) == (b"hello", "id-1", {"h": "v"})
    ch.basic_nack(method.delivery_tag, requeue=True)
    conn.close()
    assert api("DELETE", f"/queues/%2F/{name}/contents").status_code == 204
    wait_until(lambda: api("GET", f"/queues/%2F/{name}").json()["messages"] == 0, 10, "purged")
    assert api("DELETE", f"/queues/%2F/{name}").status_code == 204
    assert api("GET", f"/queues/%2F/{name}").status_code == 404


def test_bad_requests_get_json_errors(api):
    cases = [("GET", "/queues/no-such-vhost", None, 404), ("GET", "/nothing-here", None, 404),
             ("PATCH", "/overview", None, 405), ("PUT", "/queues/%2F/bad-json", "{not json", 400),
             ("PUT", "/queues/%2F/bad-arg", '{"arguments": {"x-max-length": "many"}}', 400),
             ("PUT", "/exchanges/%2F/no-type", "{}", 400), ("PUT", "/topics/bad-parts", '{"partitions": 0}', 400),
             ("POST", "/exchanges/%2F/amq.default/publish", '{"payload": "x", "payload_encoding": "rot13"}', 400),
             ("DELETE", "/topics/never-made", None, 404)]
    for method, path, body, status in cases:
        r = api(method, path, data=body)
        assert r.status_code == status, (method, path, r.status_code, r.text)
        doc = r.json()
        assert doc["error"] and doc["reason"], (method, path, doc)


def test_topics_partitions_and_groups_with_lag(api, broker):
    topic, group = unique_name("mgmt-topic"), unique_name("mgmt-group")
    bootstrap = "%s:%d" % broker.address("kafka")
    assert api("PUT", f"/topics/{topic}", json={"partitions": 2, "configs": {"retention.ms": "3600000"}}).status_code \
        == 201
    assert api("PUT", f"/topics/{topic}", json={"partitions": 2}).status_code == 409
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(30):
        producer.produce(topic, value=b"v%d" % i, partition=i % 2)
    producer.flush(15)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 15)], asynchronous=False)
    consumer.close()
    doc = api("GET", f"/topics/{topic}").json()
    assert doc["partitions"] == 2 and doc["configs"] == {"retention.ms": "3600000"} and doc["messages"] == 30
    for p in doc["partition_details"]:
        assert (p["leader"], p["isr"], p["high_watermark"], p["last_stable_offset"], p["log_start_offset"]) == \
            (0, [0], 15, 15, 0)
    assert any(t["name"] == topic for t in api("GET", "/topics").json())
    g = api("GET", f"/groups/{group}").json()
    lags = {(o["topic"], o["partition"]): o["lag"] for o in g["offsets"]}
    assert lags == {(topic, 0): 10, (topic, 1): 0} and g["lag"] == 10
    assert any(x["group_id"] == group for x in api("GET", "/groups").json())
    assert api("DELETE", f"/topics/{topic}").status_code == 204
    assert api("GET", f"/topics/{topic}").status_code == 404


def _metric(text: str, name: str, **labels) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            found = dict(re.findall(r'(\w+)="([^"]*)"', line.partition("}")[0]))
            if all(found.get(k) == v for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} {labels} in /metrics")


def test_metrics_scrape(broker, api):
    topic, queue = unique_name("metrics-t"), unique_name("metrics-q")
    bootstrap = "%s:%d" % broker.address("kafka")
    producer = Producer({"bootstrap.servers": bootstrap})
    for _ in range(10):
        producer.produce(topic, value=b"x" * 100)
    producer.flush(15)
    conn = _amqp(broker)
    ch = conn.channel()
    ch.queue_declare(queue)
    for _ in range(3):
        ch.basic_publish("", queue, b"abc")
    wait_until(lambda: api("GET", f"/queues/%2F/{queue}").json()["messages"] == 3, 10, "3 messages")
    r = requests.get(broker.http_url + "/metrics", timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    from prometheus_client.parser import text_string_to_metric_families
    families = {f.name for f in text_string_to_metric_families(text)}  # parses cleanly
    assert {"gateway_kafka_request_seconds", "gateway_fsync_seconds", "gateway_group_lag",
            "gateway_isr_shrinks"} <= families
    assert _metric(text, "gateway_topic_records_in_total", topic=topic) == 10
    assert _metric(text, "gateway_queue_messages_ready", queue=queue, vhost="/") == 3
    assert _metric(text, "gateway_queue_messages_published_total", queue=queue) == 3
    assert _metric(text, "gateway_connections", protocol="amqp") >= 1
    assert _metric(text, "gateway_kafka_request_seconds_count", api="Produce") >= 1
    assert _metric(text, "gateway_amqp_method_seconds_count", method="basic.publish") >= 3
    assert _metric(text, "gateway_fsync_seconds_count", kind="group_commit") >= 1
    conn.close()


def test_history_samples_for_charts(api):
    deadline = time.monotonic() + 12
    while time.monotonic() < deadline and len(api("GET", "/history").json()["samples"]) < 2:
        time.sleep(0.5)
    doc = api("GET", "/history").json()
    assert doc["interval_seconds"] == 5 and len(doc["samples"]) >= 2
    assert {"time", "amqp_published_rate", "kafka_bytes_in_rate", "queue_messages", "group_lag"} <= \
        set(doc["samples"][-1])
