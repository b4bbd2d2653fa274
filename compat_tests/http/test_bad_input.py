"""Issue 31's bad input for the management API, each example a regression test: answered 400
``bad_request`` naming the field (never 500, never accepted), and the request limits that hold
before authentication (a huge Content-Length is answered 413 and closed at once)."""
from __future__ import annotations

import socket
import time

import pytest
import requests

from compat_tests.conftest import unique_name
from compat_tests.http.test_rabbitmqadmin import TARGETS, _start_rabbitmq
from tests.brokerproc import start_broker

GUEST = ("guest", "guest")
DEEP = "[" * 5000 + "]" * 5000


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = start_broker(tmp_path_factory.mktemp("badin") / "data")
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def rabbitmq(tmp_path_factory):
    if "rabbitmq" not in TARGETS:
        pytest.skip("AMQP_COMPAT_TARGETS leaves RabbitMQ out")
    target = _start_rabbitmq(tmp_path_factory)
    try:
        target.api("PUT", "/queues/%2F/bad-in-q", json={})
        target.api("PUT", "/exchanges/%2F/bad-in-x", json={"type": "direct"})
        yield target
    finally:
        target.stop()


@pytest.fixture(scope="module")
def api(broker):
    base = broker.http_url + "/api"

    def call(method, path, body=None, raw=None, auth=GUEST):
        data = raw if raw is not None else None
        return requests.request(method, base + path, auth=auth, timeout=10, json=body if raw is None else None,
                                data=data, headers={"content-type": "application/json"})
    call("PUT", "/queues/%2F/bad-in-q", {})
    call("PUT", "/exchanges/%2F/bad-in-x", {"type": "direct"})
    return call


CASES = [
    # (id, method, path, body or raw text, field named in the reason)
    ("deep-json", "PUT", "/queues/%2F/deep", '{"arguments": ' + DEEP + "}", "nests deeper"),
    ("policy-priority-1e400", "PUT", "/policies/%2F/p1", '{"pattern": ".*", "definition": {}, "priority": 1e400}',
     "out of range"),
    ("vhost-limit-1e400", "PUT", "/vhost-limits/%2F/max-connections", '{"value": 1e400}', "out of range"),
    ("message-priority-1e400", "POST", "/exchanges/%2F/amq.default/publish",
     '{"routing_key": "bad-in-q", "payload": "x", "payload_encoding": "string", "properties": {"priority": 1e400}}',
     "out of range"),
    ("get-count-1e400", "POST", "/queues/%2F/bad-in-q/get", '{"count": 1e400, "ackmode": "ack_requeue_true", '
     '"encoding": "auto"}', "out of range"),
    ("queue-arguments-list", "PUT", "/queues/%2F/bad-args", {"arguments": [["x-max-length", 1]]}, "arguments"),
    ("queue-arguments-number", "PUT", "/queues/%2F/bad-args", {"arguments": 5}, "arguments"),
    ("exchange-arguments-list", "PUT", "/exchanges/%2F/bad-args", {"type": "direct", "arguments": ["a"]},
     "arguments"),
    ("definitions-arguments-list", "POST", "/definitions",
     {"queues": [{"name": "q", "vhost": "/", "durable": True, "auto_delete": False, "arguments": [1]}]},
     "queues[0].arguments"),
    ("password-number", "PUT", "/users/bad-pw", {"password": 5, "tags": ""}, "password"),
    ("password-list", "PUT", "/users/bad-pw", {"password": ["a"], "tags": ""}, "password"),
    ("tags-number", "PUT", "/users/bad-tags", {"password": "x", "tags": 5}, "tags"),
    ("tags-list-of-objects", "PUT", "/users/bad-tags", {"password": "x", "tags": [{}]}, "tags"),
    ("delivery-mode-text", "POST", "/exchanges/%2F/amq.default/publish",
     {"routing_key": "bad-in-q", "payload": "x", "payload_encoding": "string", "properties": {"delivery_mode": "x"}},
     "properties.delivery_mode"),
    ("timestamp-text", "POST", "/exchanges/%2F/amq.default/publish",
     {"routing_key": "bad-in-q", "payload": "x", "payload_encoding": "string", "properties": {"timestamp": "now"}},
     "properties.timestamp"),
    ("definitions-password-hash-number", "POST", "/definitions",
     {"users": [{"name": "u-hash", "password_hash": 5, "tags": ""}]}, "users[0].password_hash"),
    ("auto-delete-number", "PUT", "/queues/%2F/bad-ad", {"auto_delete": 5}, "auto_delete"),
    ("tracing-yes", "PUT", "/vhosts/bad-tracing", {"tracing": "yes"}, "tracing"),
    ("default-queue-type-number", "PUT", "/vhosts/bad-dqt", {"default_queue_type": 5}, "default_queue_type"),
    ("policy-max-length-text", "PUT", "/policies/%2F/p2", {"pattern": ".*", "definition": {"max-length": "abc"}},
     "definition.max-length"),
    ("permissions-configure-number", "PUT", "/permissions/%2F/guest", {"configure": 5, "write": ".*", "read": ".*"},
     "configure"),
    ("binding-routing-key-number", "POST", "/bindings/%2F/e/bad-in-x/q/bad-in-q", {"routing_key": 5}, "routing_key"),
    ("topic-configs-list", "PUT", "/topics/bad-configs", {"partitions": 1, "configs": []}, "configs"),
    ("nan", "PUT", "/vhost-limits/%2F/max-queues", '{"value": NaN}', "not a JSON number"),
    ("huge-int", "PUT", "/vhost-limits/%2F/max-queues", '{"value": ' + "9" * 5000 + "}", "out of range"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_a_400_naming_the_field(api, broker, case):
    _, method, path, body, field = case
    r = api(method, path, raw=body) if isinstance(body, str) else api(method, path, body)
    assert r.status_code == 400, (r.status_code, r.text)
    assert r.json()["error"] == "bad_request" and field in r.json()["reason"], r.text
    assert "Traceback" not in broker.output()


def _raw_exchange(broker, request: bytes, wait: float = 5.0) -> tuple[bytes, float]:
    host, port = broker.address("http")
    started = time.monotonic()
    with socket.create_connection((host, port), timeout=wait) as s:
        s.sendall(request)
        data = b""
        while True:
            chunk = s.recv(65536)  # the server answers and closes: no hang
            if not chunk:
                return data, time.monotonic() - started
            data += chunk


@pytest.mark.parametrize("auth", [b"", b"Authorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n"], ids=["anonymous", "guest"])
def test_a_huge_content_length_is_answered_and_closed(broker, auth):
    data, took = _raw_exchange(broker, b"PUT /api/queues/%2F/" + unique_name("cl").encode() + b" HTTP/1.1\r\n"
                               b"Host: x\r\n" + auth + b"Content-Type: application/json\r\n"
                               b"Content-Length: 1000000000000\r\n\r\n{}")
    assert data.startswith(b"HTTP/1.1 413 "), data[:200]
    assert took < 3


# This broker's own endpoints (Kafka topics), which RabbitMQ does not have.
OURS_ONLY = {"topic-configs-list"}
# Debian's RabbitMQ 3.10 answers these otherwise: it crashes (500) on the first five and stores
# the wrongly typed value of the others. This broker answers 400 to all of them (issue 31: a
# 500 is never an answer, and a stored value of the wrong type breaks exports and clients).
RABBITMQ_310 = {
    "queue-arguments-number": 500, "password-number": 500, "password-list": 500, "tags-number": 500,
    "permissions-configure-number": 500, "exchange-arguments-list": 201, "tags-list-of-objects": 201,
    "default-queue-type-number": 201, "binding-routing-key-number": 201, "huge-int": 204,
}


@pytest.mark.parametrize("case", [c for c in CASES if c[0] not in OURS_ONLY], ids=[c[0] for c in CASES
                                                                                  if c[0] not in OURS_ONLY])
def test_rabbitmq_refuses_the_same_input(rabbitmq, case):
    """The same examples against a real RabbitMQ: most of the 400s above are its answers too;
    where 3.10 differs (RABBITMQ_310) its answer is pinned here, so a change shows."""
    name, method, path, body, _ = case
    kw = {"data": body, "headers": {"content-type": "application/json"}} if isinstance(body, str) else {"json": body}
    r = rabbitmq.api(method, path, **kw)
    assert r.status_code == RABBITMQ_310.get(name, 400), (r.status_code, r.text[:300])
