"""Debian's ``rabbitmqadmin`` (shipped in ``rabbitmq-server``) through all its commands, against
our broker and against a real RabbitMQ with its management plugin: the same expectations for
both targets (ids ``[gateway]`` and ``[rabbitmq]``), so what they check is RabbitMQ's
behaviour. Export/import round trips, definitions from RabbitMQ loaded into our broker, the
health checks, pagination and vhost limits are checked over the same HTTP API.

``AMQP_COMPAT_TARGETS=gateway`` limits the targets, as for the AMQP suite.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time

import pika
import pytest
import requests

from compat_tests.conftest import unique_name
from compat_tests.rabbitmq import INSTALL_HINT, RabbitMQNode, RabbitMQUnavailable
from tests.brokerproc import start_broker

TARGETS = [t.strip() for t in os.environ.get("AMQP_COMPAT_TARGETS", "gateway,rabbitmq").split(",") if t.strip()]
GUEST = ("guest", "guest")


class Target:
    def __init__(self, name: str, http_port: int, amqp_port: int, stop, data_dir=None):
        self.name, self.http_port, self.amqp_port, self.stop, self.data_dir = name, http_port, amqp_port, stop, data_dir
        self.base = f"http://127.0.0.1:{http_port}/api"

    def admin(self, *args: str, ok: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess:
        exe = shutil.which("rabbitmqadmin")
        assert exe, f"rabbitmqadmin is missing: {INSTALL_HINT}"
        done = subprocess.run([exe, "-H", "127.0.0.1", "-P", str(self.http_port), *args], input=stdin,
                              capture_output=True, text=True, timeout=60)
        if ok:
            assert done.returncode == 0, f"rabbitmqadmin {' '.join(args)} on {self.name}: {done.stdout}{done.stderr}"
        return done

    def rows(self, *args: str) -> list[dict]:
        return json.loads(self.admin("-f", "raw_json", *args).stdout)

    def api(self, method: str, path: str, auth=GUEST, **kw) -> requests.Response:
        return requests.request(method, self.base + path, auth=auth, timeout=30, **kw)

    def amqp(self, user=GUEST, vhost="/") -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", self.amqp_port, vhost, credentials=pika.PlainCredentials(*user), connection_attempts=1))


def _start_gateway(tmp_path_factory, label: str) -> Target:
    data = tmp_path_factory.mktemp(label) / "data"
    proc = start_broker(data)
    return Target("gateway", int(proc.addresses["http"].rpartition(":")[2]),
                  int(proc.addresses["amqp"].rpartition(":")[2]), proc.stop, data)


def _start_rabbitmq(tmp_path_factory) -> Target:
    try:
        node = RabbitMQNode(tmp_path_factory.mktemp("rabbitmq-mgmt"), management=True)
        node.start()
    except RabbitMQUnavailable as exc:
        pytest.fail(f"the rabbitmq target needs a RabbitMQ node: {exc}\n(install: {INSTALL_HINT})", pytrace=False)
    target = Target("rabbitmq", node.http_port, node.port, node.close)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the management plugin starts a little after the AMQP listener
        try:
            if target.api("GET", "/overview").status_code == 200:
                return target
        except requests.ConnectionError:
            pass
        time.sleep(0.5)
    node.close()
    pytest.fail(f"RabbitMQ's management API did not come up on port {node.http_port}:\n{node.output()[-3000:]}")


@pytest.fixture(scope="module", params=TARGETS)
def target(request, tmp_path_factory):
    t = _start_gateway(tmp_path_factory, "admin") if request.param == "gateway" else _start_rabbitmq(tmp_path_factory)
    try:
        yield t
    finally:
        t.stop()


def _names(rows) -> set:
    return {r["name"] for r in rows}


def test_every_list_and_show_command_in_every_format(target):
    for what in ("connections", "channels", "consumers", "exchanges", "queues", "bindings", "users", "vhosts",
                 "permissions", "nodes", "parameters", "policies", "operator_policies", "vhost_limits"):
        assert isinstance(target.rows("list", what), list), what
    assert "amq.topic" in _names(target.rows("--vhost", "/", "list", "exchanges"))
    deadline = time.monotonic() + 30
    while True:  # RabbitMQ fills in a node's figures with its first statistics round, seconds after start
        nodes = target.rows("list", "nodes")
        if "mem_used" in nodes[0] or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert len(nodes) == 1 and nodes[0]["running"] is True and nodes[0]["mem_used"] > 0
    assert nodes[0]["type"] == "disc" and nodes[0]["fd_total"] > 0
    overview = target.rows("show", "overview")
    assert overview[0]["rabbitmq_version"]
    q = unique_name("fmt")
    target.admin("declare", "queue", f"name={q}")
    for fmt in ("raw_json", "pretty_json", "tsv", "long", "table", "kvp", "bash"):
        out = target.admin("-f", fmt, "list", "queues").stdout
        assert q in out, (fmt, out)
    out = target.admin("-f", "tsv", "list", "queues", "name", "durable").stdout.splitlines()
    assert out[0].split("\t") == ["name", "durable"] and f"{q}\tTrue" in out
    target.admin("delete", "queue", f"name={q}")


def test_declare_list_and_delete_every_object(target):
    v, u, x, x2, q = (unique_name(p) for p in ("vh", "user", "x", "x2", "q"))
    target.admin("declare", "vhost", f"name={v}")
    assert v in _names(target.rows("list", "vhosts"))
    target.admin("declare", "user", f"name={u}", "password=s3cret", "tags=monitoring")
    target.admin("declare", "permission", f"vhost={v}", f"user={u}", "configure=.*", "write=.*", "read=.*")
    assert {"user": u, "vhost": v, "configure": ".*", "write": ".*", "read": ".*"} in target.rows("list", "permissions")
    target.admin("--vhost", v, "declare", "exchange", f"name={x}", "type=topic", "durable=false")
    target.admin("--vhost", v, "declare", "exchange", f"name={x2}", "type=fanout")
    target.admin("--vhost", v, "declare", "queue", f"name={q}", "durable=true", "queue_type=quorum")
    target.admin("--vhost", v, "declare", "binding", f"source={x}", f"destination={q}", "routing_key=a.*")
    target.admin("--vhost", v, "declare", "binding", f"source={x}", f"destination={q}", "routing_key=b",
                 'arguments={"k": 1}')
    target.admin("--vhost", v, "declare", "binding", f"source={x}", f"destination={x2}",
                 "destination_type=exchange", "routing_key=c")
    target.admin("--vhost", v, "declare", "policy", "name=p1", "pattern=^nothing", 'definition={"max-length": 5}',
                 "apply-to=queues")
    target.admin("--vhost", v, "declare", "operator_policy", "name=op1", "pattern=^nothing",
                 'definition={"max-length": 10}', "apply-to=queues")
    target.admin("declare", "vhost_limit", f"vhost={v}", "name=max-queues", "value=100")

    exchanges = {e["name"]: e for e in target.rows("--vhost", v, "list", "exchanges")}
    assert exchanges[x]["type"] == "topic" and exchanges[x]["durable"] is False
    queues = {r["name"]: r for r in target.rows("--vhost", v, "list", "queues")}
    assert queues[q]["arguments"]["x-queue-type"] == "quorum" and queues[q]["durable"] is True
    bindings = [(b["source"], b["destination"], b["routing_key"]) for b in target.rows("--vhost", v, "list", "bindings")]
    assert {("", q, q), (x, q, "a.*"), (x, q, "b"), (x, x2, "c")} <= set(bindings)
    assert {"p1"} == {p["name"] for p in target.rows("list", "policies") if p["vhost"] == v}
    ops = [p for p in target.rows("list", "operator_policies") if p["vhost"] == v]
    assert [(p["name"], p["definition"]) for p in ops] == [("op1", {"max-length": 10})]
    assert {"vhost": v, "value": {"max-queues": 100}} in target.rows("list", "vhost_limits")
    params = {(p["component"], p["name"]) for p in target.rows("list", "parameters") if p["vhost"] == v}
    assert {("vhost-limits", "limits"), ("operator_policy", "op1")} <= params

    # a binding with arguments is deleted by its properties key, as listed
    keyed = [b for b in target.rows("--vhost", v, "list", "bindings") if b["routing_key"] == "b"]
    target.admin("--vhost", v, "delete", "binding", f"source={x}", "destination_type=queue", f"destination={q}",
                 f"properties_key={keyed[0]['properties_key']}")
    target.admin("--vhost", v, "delete", "binding", f"source={x}", "destination_type=queue", f"destination={q}",
                 "properties_key=a.*")
    target.admin("--vhost", v, "delete", "binding", f"source={x}", "destination_type=exchange", f"destination={x2}",
                 "properties_key=c")
    assert [b for b in target.rows("--vhost", v, "list", "bindings") if b["source"]] == []
    target.admin("--vhost", v, "delete", "policy", "name=p1")
    target.admin("--vhost", v, "delete", "operator_policy", "name=op1")
    target.admin("delete", "vhost_limit", f"vhost={v}", "name=max-queues")
    target.admin("--vhost", v, "delete", "queue", f"name={q}")
    target.admin("--vhost", v, "delete", "exchange", f"name={x}")
    target.admin("delete", "permission", f"vhost={v}", f"user={u}")
    target.admin("delete", "user", f"name={u}")
    target.admin("delete", "vhost", f"name={v}")
    assert v not in _names(target.rows("list", "vhosts")) and u not in _names(target.rows("list", "users"))
    missing = target.admin("delete", "queue", f"name={q}", ok=False)
    assert missing.returncode != 0 and "Not found" in missing.stdout + missing.stderr


def test_parameters_purge_and_users_declared_by_hash(target):
    v, q, u = unique_name("par"), unique_name("purge"), unique_name("hashed")
    target.admin("declare", "vhost", f"name={v}")
    target.admin("--vhost", v, "declare", "parameter", "component=vhost-limits", "name=limits",
                 'value={"max-queues": 9, "max-connections": 4}')
    assert {"vhost": v, "value": {"max-queues": 9, "max-connections": 4}} in target.rows("list", "vhost_limits")
    target.admin("--vhost", v, "declare", "parameter", "component=vhost-limits", "name=limits",
                 'value={"max-queues": 3}')  # the parameter is the whole set: max-connections goes
    assert {"vhost": v, "value": {"max-queues": 3}} in target.rows("list", "vhost_limits")
    target.admin("--vhost", v, "delete", "parameter", "component=vhost-limits", "name=limits")
    assert [row for row in target.rows("list", "vhost_limits") if row["vhost"] == v] == []
    unknown = target.admin("--vhost", v, "declare", "parameter", "component=federation-upstream", "name=up",
                           'value={"uri": "amqp://elsewhere"}', ok=False)
    assert unknown.returncode != 0 and "federation-upstream" in unknown.stdout + unknown.stderr

    target.admin("declare", "queue", f"name={q}")
    for i in range(3):
        target.admin("publish", f"routing_key={q}", f"payload=m{i}")
    target.admin("purge", "queue", f"name={q}")
    assert target.rows("get", f"queue={q}", "ackmode=ack_requeue_false") == []
    target.admin("delete", "queue", f"name={q}")

    # a hash of "guest" that RabbitMQ 3.10 made and exported (rabbit_password_hashing_sha256)
    target.admin("declare", "user", f"name={u}", "password_hash=5rOv6UnHHgHGbeaoVKmbVKwnQB9WsEVimpkI5LnJsk013p5C",
                 "tags=administrator")
    target.admin("declare", "permission", "vhost=/", f"user={u}", "configure=.*", "write=.*", "read=.*")
    assert target.api("GET", "/whoami", auth=(u, "guest")).json()["name"] == u
    target.amqp(user=(u, "guest")).close()
    assert target.api("GET", "/whoami", auth=(u, "wrong")).status_code == 401
    target.admin("delete", "user", f"name={u}")
    target.admin("delete", "vhost", f"name={v}")


def test_publish_and_get_with_every_ack_mode(target):
    q, dlq, dlx = unique_name("get"), unique_name("dlq"), unique_name("dlx")
    target.admin("declare", "exchange", f"name={dlx}", "type=fanout")
    target.admin("declare", "queue", f"name={dlq}")
    target.admin("declare", "binding", f"source={dlx}", f"destination={dlq}")
    target.admin("declare", "queue", f"name={q}", f'arguments={{"x-dead-letter-exchange": "{dlx}"}}')
    target.admin("publish", f"routing_key={q}", "payload=one", 'properties={"headers": {"h": 1}, "priority": 3}')
    target.admin("publish", f"routing_key={q}", stdin="two\xff")  # from stdin: sent base64
    target.admin("publish", "exchange=amq.default", f"routing_key={q}", "payload=three")

    peek = target.rows("get", f"queue={q}", "count=2", "ackmode=ack_requeue_true")
    assert [m["payload"] for m in peek] == ["one", "two\xff"]
    assert peek[0]["properties"]["headers"] == {"h": 1} and peek[0]["properties"]["priority"] == 3
    assert peek[0]["payload_encoding"] == "string" and peek[0]["redelivered"] is False
    assert peek[0]["message_count"] == 2 and peek[0]["payload_bytes"] == 3

    again = target.rows("get", f"queue={q}", "ackmode=ack_requeue_false", "encoding=base64")
    assert again[0]["redelivered"] is True and again[0]["payload_encoding"] == "base64"
    assert base64.b64decode(again[0]["payload"]) == b"one"
    rejected = target.rows("get", f"queue={q}", "ackmode=reject_requeue_false")
    assert rejected[0]["payload"] == "two\xff"
    requeued = target.rows("get", f"queue={q}", "ackmode=reject_requeue_true")
    assert requeued[0]["payload"] == "three"
    assert [m["payload"] for m in target.rows("get", f"queue={q}", "ackmode=ack_requeue_false")] == ["three"]
    assert target.rows("get", f"queue={q}", "ackmode=ack_requeue_false") == []
    dead = target.rows("get", f"queue={dlq}", "ackmode=ack_requeue_false")
    assert [m["payload"] for m in dead] == ["two\xff"]
    r = target.api("POST", f"/queues/%2F/{q}/get", json={"count": 1, "ackmode": "bogus", "encoding": "auto"})
    assert r.status_code in (400, 500)  # RabbitMQ 3.10 answers 500 here; both refuse
    for name in (q, dlq):
        target.admin("delete", "queue", f"name={name}")
    target.admin("delete", "exchange", f"name={dlx}")


def test_close_connection_forces_the_client_off(target):
    conn = target.amqp()
    conn.channel()
    deadline = time.monotonic() + 30
    names = []
    while time.monotonic() < deadline and not names:  # RabbitMQ's stats arrive every few seconds
        names = [c["name"] for c in target.rows("list", "connections")]
        time.sleep(0.5)
    assert names, "the connection was never listed"
    target.admin("close", "connection", f"name={names[0]}")
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        conn.process_data_events(time_limit=5)
        conn.sleep(2)
    assert info.value.reply_code == 320


def test_consumers_are_listed(target):
    q = unique_name("cons")
    conn = target.amqp()
    ch = conn.channel()
    ch.queue_declare(q, auto_delete=True)
    ch.basic_qos(prefetch_count=7)
    tag = ch.basic_consume(q, lambda *a: None, auto_ack=False)
    deadline, mine = time.monotonic() + 30, []
    while time.monotonic() < deadline and not mine:  # RabbitMQ lists consumers from its statistics
        conn.process_data_events(time_limit=0.5)
        mine = [c for c in target.rows("list", "consumers") if c["queue"]["name"] == q]
    assert [(c["consumer_tag"], c["ack_required"], c["prefetch_count"], c["exclusive"]) for c in mine] == \
        [(tag, True, 7, False)]
    assert mine[0]["channel_details"]["user"] == "guest"
    assert [c["consumer_tag"] for c in target.api("GET", "/consumers/%2F").json() if c["queue"]["name"] == q] == [tag]
    conn.close()


def test_vhost_limits_are_enforced(target):
    v, q = unique_name("lim"), unique_name("limq")
    target.admin("declare", "vhost", f"name={v}")
    target.admin("declare", "vhost_limit", f"vhost={v}", "name=max-connections", "value=1")
    target.admin("declare", "vhost_limit", f"vhost={v}", "name=max-queues", "value=1")
    first = target.amqp(vhost=v)
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
        target.amqp(vhost=v)
    assert "connection limit (1) is reached" in str(info.value)
    ch = first.channel()
    ch.queue_declare(q)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        ch.queue_declare(q + "-2")
    assert refused.value.reply_code == 406 and "queue limit in vhost" in refused.value.reply_text
    first.close()
    target.admin("delete", "vhost", f"name={v}")


def test_health_checks_and_node_endpoints(target):
    assert target.api("GET", "/aliveness-test/%2F").json() == {"status": "ok"}
    assert target.api("GET", "/health/checks/alarms").json()["status"] == "ok"
    assert target.api("GET", "/health/checks/local-alarms").json()["status"] == "ok"
    ok = target.api("GET", f"/health/checks/port-listener/{target.amqp_port}")
    assert ok.status_code == 200 and ok.json() == {"status": "ok", "port": target.amqp_port}
    failed = target.api("GET", "/health/checks/port-listener/1")
    assert failed.status_code == 503 and failed.json()["status"] == "failed" and target.amqp_port in failed.json()["ports"]
    assert target.api("GET", "/health/checks/protocol-listener/amqp").json() == {"status": "ok", "protocol": "amqp"}
    assert target.api("GET", "/health/checks/protocol-listener/mqtt").status_code == 503
    assert target.api("GET", "/health/checks/virtual-hosts").json()["status"] == "ok"
    assert target.api("GET", "/health/checks/node-is-quorum-critical").json()["status"] == "ok"
    assert target.api("GET", "/health/checks/certificate-expiration/1/months").json()["status"] == "ok"
    flags = target.api("GET", "/feature-flags").json()
    assert all({"name", "state", "stability"} <= set(f) for f in flags) and flags
    assert isinstance(target.api("GET", "/extensions").json(), list)
    node = target.rows("list", "nodes")[0]["name"]
    assert target.api("GET", f"/nodes/{node}").json()["name"] == node
    assert target.api("GET", "/nodes/nobody@nowhere").status_code in (404, 500)  # RabbitMQ 3.10: 500; we: 404
    assert target.api("GET", "/whoami").json()["name"] == "guest"
    assert target.api("GET", "/cluster-name").json()["name"]


def test_pagination_sorting_columns_and_errors(target):
    prefix = unique_name("page")
    for i in range(3):
        target.admin("declare", "queue", f"name={prefix}-{i}")
    page = target.api("GET", f"/queues?page=2&page_size=1&name={prefix}&sort=name&sort_reverse=true").json()
    assert page["page"] == 2 and page["page_size"] == 1 and page["filtered_count"] == 3 and page["page_count"] == 3
    assert page["item_count"] == 1 and page["items"][0]["name"] == f"{prefix}-1"
    regex = target.api("GET", f"/queues?page=1&page_size=10&use_regex=true&name=^{prefix}-[02]$").json()
    assert sorted(i["name"] for i in regex["items"]) == [f"{prefix}-0", f"{prefix}-2"]
    cols = target.api("GET", "/queues?columns=name,durable").json()
    assert cols and all(set(c) <= {"name", "durable"} and "name" in c for c in cols)
    assert target.api("GET", "/queues?page=99&page_size=1").status_code == 400
    nope = target.api("GET", "/queues/%2F/no-such-queue")
    assert nope.status_code == 404 and nope.json()["error"] == "Object Not Found"
    bad_type = target.api("PUT", "/exchanges/%2F/bad-type", json={"type": "no-such-type"})
    assert bad_type.status_code == 400 and bad_type.json()["error"] == "bad_request"
    not_json = target.api("PUT", "/exchanges/%2F/bad-json", data=b"{not json",
                          headers={"content-type": "application/json"})
    assert not_json.status_code == 400
    perm = target.api("PUT", "/permissions/no-such-vhost/guest", json={"configure": "", "write": "", "read": ""})
    assert perm.status_code == 400 and perm.json()["reason"] == "vhost_or_user_not_found"
    created = target.api("POST", f"/bindings/%2F/e/amq.direct/q/{prefix}-0", json={"routing_key": "k"})
    assert created.status_code == 201 and created.headers["location"].endswith(f"{prefix}-0/k")
    for i in range(3):
        target.admin("delete", "queue", f"name={prefix}-{i}")


def test_export_then_import_into_a_fresh_broker(target, tmp_path, tmp_path_factory):
    v, u, x, q = (unique_name(p) for p in ("exp", "expuser", "expx", "expq"))
    target.admin("declare", "vhost", f"name={v}")
    target.admin("declare", "user", f"name={u}", "password=round-trip", "tags=management")
    target.admin("declare", "permission", f"vhost={v}", f"user={u}", "configure=.*", "write=.*", "read=.*")
    target.admin("--vhost", v, "declare", "exchange", f"name={x}", "type=headers")
    target.admin("--vhost", v, "declare", "queue", f"name={q}", 'arguments={"x-max-length": 7}')
    target.admin("--vhost", v, "declare", "binding", f"source={x}", f"destination={q}",
                 'arguments={"x-match": "any", "a": "1"}')
    target.admin("--vhost", v, "declare", "policy", "name=exp-pol", "pattern=^none$", 'definition={"max-length": 3}')
    target.admin("declare", "vhost_limit", f"vhost={v}", "name=max-connections", "value=50")
    path = tmp_path / "defs.json"
    target.admin("export", str(path))
    doc = json.loads(path.read_text())
    assert any(us["name"] == u and us["password_hash"] for us in doc["users"])
    one_vhost = tmp_path / "vhost.json"
    target.admin("--vhost", v, "export", str(one_vhost))
    vdoc = json.loads(one_vhost.read_text())
    assert [qq["name"] for qq in vdoc["queues"]] == [q] and "vhost" not in vdoc["queues"][0]

    if target.name == "gateway":
        fresh = _start_gateway(tmp_path_factory, "import")
    else:  # one RabbitMQ node per run: wipe what was declared and import into the same node
        target.admin("delete", "vhost", f"name={v}")
        target.admin("delete", "user", f"name={u}")
        fresh = target
    try:
        fresh.admin("import", str(path))
        assert v in _names(fresh.rows("list", "vhosts"))
        queue = next(r for r in fresh.rows("--vhost", v, "list", "queues") if r["name"] == q)
        assert queue["arguments"] == {"x-max-length": 7}
        bindings = [b for b in fresh.rows("--vhost", v, "list", "bindings") if b["source"] == x]
        assert [b["arguments"] for b in bindings] == [{"x-match": "any", "a": "1"}]
        assert {"vhost": v, "value": {"max-connections": 50}} in fresh.rows("list", "vhost_limits")
        assert "exp-pol" in {p["name"] for p in fresh.rows("list", "policies") if p["vhost"] == v}
        conn = fresh.amqp(user=(u, "round-trip"), vhost=v)  # the password hash came along
        ch = conn.channel()
        ch.confirm_delivery()  # confirmed: in the queue before the count is asked for
        ch.basic_publish(x, "", b"m", pika.BasicProperties(headers={"a": "1"}))
        assert ch.queue_declare(q, passive=True).method.message_count == 1
        conn.close()
        # importing the same file again changes nothing and refuses nothing
        fresh.admin("import", str(path))
        fresh.admin("--vhost", v, "import", str(one_vhost))
    finally:
        if fresh is not target:
            fresh.stop()
        else:
            target.admin("delete", "vhost", f"name={v}")
            target.admin("delete", "user", f"name={u}")


@pytest.mark.skipif("rabbitmq" not in TARGETS or "gateway" not in TARGETS, reason="needs both targets")
def test_definitions_exported_by_rabbitmq_load_into_the_gateway(tmp_path, tmp_path_factory):
    """A team's RabbitMQ definitions file, as RabbitMQ wrote it, recreates everything here, users
    included (RabbitMQ's SHA-256 password hash), and then Kafka SCRAM logins work too."""
    rabbit = _start_rabbitmq(tmp_path_factory)
    gateway = None
    try:
        v, u, q = unique_name("mig"), unique_name("miguser"), unique_name("migq")
        rabbit.admin("declare", "vhost", f"name={v}")
        rabbit.admin("declare", "user", f"name={u}", "password=from-rabbit", "tags=administrator")
        rabbit.admin("declare", "permission", f"vhost={v}", f"user={u}", "configure=.*", "write=.*", "read=.*")
        rabbit.admin("--vhost", v, "declare", "queue", f"name={q}", "queue_type=quorum")
        rabbit.admin("--vhost", v, "declare", "exchange", "name=events", "type=topic")
        rabbit.admin("--vhost", v, "declare", "binding", "source=events", f"destination={q}", "routing_key=#")
        path = tmp_path / "rabbit.json"
        rabbit.admin("export", str(path))
        gateway = _start_gateway(tmp_path_factory, "migrate")
        gateway.admin("import", str(path))
        conn = gateway.amqp(user=(u, "from-rabbit"), vhost=v)
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("events", "a.b", b"moved")
        assert ch.queue_declare(q, passive=True).method.message_count == 1
        conn.close()
        assert next(r for r in gateway.rows("--vhost", v, "list", "queues") if r["name"] == q)["type"] == "quorum"
        # our own admin endpoints work for the imported administrator
        assert gateway.api("GET", "/overview", auth=(u, "from-rabbit")).status_code == 200
    finally:
        rabbit.stop()
        if gateway is not None:
            gateway.stop()


def test_definitions_file_loaded_at_start_up(tmp_path):
    doc = {"vhosts": [{"name": "boot"}], "users": [{"name": "ops", "password_hash": "", "tags": "administrator"}],
           "permissions": [{"user": "guest", "vhost": "boot", "configure": ".*", "write": ".*", "read": ".*"}],
           "queues": [{"name": "jobs", "vhost": "boot", "durable": True, "auto_delete": False, "arguments": {}}],
           "topics": [{"name": "boot-events", "partitions": 3, "configs": {"retention.ms": "60000"}}]}
    path = tmp_path / "boot.json"
    path.write_text(json.dumps(doc))
    proc = start_broker(tmp_path / "data", "--definitions", str(path))
    try:
        t = Target("gateway", int(proc.addresses["http"].rpartition(":")[2]),
                   int(proc.addresses["amqp"].rpartition(":")[2]), proc.stop)
        assert [r["name"] for r in t.rows("--vhost", "boot", "list", "queues")] == ["jobs"]
        assert "ops" in _names(t.rows("list", "users"))
        topic = t.api("GET", "/topics/boot-events").json()
        assert topic["partitions"] == 3 and topic["configs"]["retention.ms"] == "60000"
        exported = t.api("GET", "/definitions").json()  # topics come back out, queues' own topics do not
        assert [tp for tp in exported["topics"] if tp["name"] == "boot-events"] == [
            {"name": "boot-events", "partitions": 3, "configs": {"retention.ms": "60000"}}]
        assert all(tp["name"] == "boot-events" for tp in exported["topics"])
    finally:
        proc.stop()
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(AssertionError, match="cannot load definitions"):
        start_broker(tmp_path / "data2", "--definitions", str(bad))


def test_pyrabbit2_client(target):
    """pyrabbit2, a common Python client of the management API, through its whole surface."""
    from pyrabbit2.api import Client
    client = Client(f"127.0.0.1:{target.http_port}", *GUEST, timeout=30)
    v, q, x, u = (unique_name(p) for p in ("pyr", "pyrq", "pyrx", "pyruser"))
    assert client.is_alive()
    assert client.get_whoami()["name"] == "guest" and client.get_overview()["cluster_name"]
    assert client.get_nodes()[0]["name"] and client.get_cluster_name()["name"]
    client.create_vhost(v)
    assert v in client.get_vhost_names() and client.get_vhost(v)["name"] == v
    client.create_user(u, "pw", tags="management")
    client.set_vhost_permissions(v, u, ".*", ".*", ".*")
    assert client.get_permission(v, u)["read"] == ".*"
    assert {p["user"] for p in client.get_vhost_permissions(v)} >= {"guest", u}
    assert [p["vhost"] for p in client.get_user_permissions(u)] == [v]
    client.create_exchange(v, x, "direct", durable=True)
    client.create_queue(v, q, durable=True, arguments={"x-max-length": 10})
    client.create_binding(v, x, q, "rk")
    assert [(b["source"], b["routing_key"]) for b in client.get_queue_bindings(v, q)] == [("", q), (x, "rk")]
    assert client.publish(v, x, "rk", "hello") is True

    def depth_becomes(n: int) -> bool:  # RabbitMQ's queue figures follow its statistics rounds (seconds)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if client.get_queue_depth(v, q) == n:
                    return True
            except KeyError:
                pass
            time.sleep(0.5)
        return False
    assert depth_becomes(1)
    assert [m["payload"] for m in client.get_messages(v, q, count=1, requeue=True)] == ["hello"]
    assert [q] == [r["name"] for r in client.get_queues(v, pattern=q[:-2], regex=False)]
    assert client.get_messages(v, q, count=5)[0]["redelivered"] is True
    assert depth_becomes(0)
    client.create_policy(v, "pyr-policy", pattern="^nothing$", definition={"max-length": 1})
    assert client.get_policy(v, "pyr-policy")["definition"] == {"max-length": 1}
    client.delete_policy(v, "pyr-policy")
    defs = client.get_definitions()
    assert q in {d["name"] for d in defs["queues"]} and u in {d["name"] for d in defs["users"]}
    assert isinstance(client.get_extensions(), list)
    client.delete_binding(v, x, q, "rk")
    assert [b["source"] for b in client.get_queue_bindings(v, q)] == [""]
    client.delete_queue(v, q)
    client.delete_exchange(v, x)
    client.delete_permission(v, u)
    client.delete_user(u)
    client.delete_vhost(v)
    assert v not in client.get_vhost_names()


def test_delete_queue_if_empty_and_if_unused(target):
    """``DELETE /api/queues/{vhost}/{name}?if-empty=true`` / ``?if-unused=true`` refuse a queue that
    holds messages / has consumers, and leave it; without them the queue goes."""
    q = unique_name("cond")
    connection = target.amqp()
    try:
        ch = connection.channel()
        ch.confirm_delivery()
        ch.queue_declare(q, durable=True)
        ch.basic_publish("", q, b"kept", pika.BasicProperties(delivery_mode=2))
        refused = target.api("DELETE", f"/queues/%2F/{q}?if-empty=true")
        assert refused.status_code == 400, (refused.status_code, refused.text)
        assert ch.queue_declare(q, passive=True).method.message_count == 1
        ch.basic_consume(q, lambda *a: None)
        refused = target.api("DELETE", f"/queues/%2F/{q}?if-unused=true")
        assert refused.status_code == 400, (refused.status_code, refused.text)
        assert target.api("GET", f"/queues/%2F/{q}").status_code == 200
        assert target.api("DELETE", f"/queues/%2F/{q}").status_code == 204
        assert target.api("GET", f"/queues/%2F/{q}").status_code == 404
    finally:
        if connection.is_open:
            try:
                connection.close()
            except pika.exceptions.AMQPError:
                pass  # the deletion cancelled its consumer


def test_a_management_user_closes_its_own_connections_only(target):
    """A user tagged ``management`` sees and closes its own connections; another user's it may not
    close (an administrator may close any)."""
    u = unique_name("closer")
    target.admin("declare", "user", f"name={u}", "password=pw", "tags=management")
    target.admin("declare", "permission", "vhost=/", f"user={u}", "configure=.*", "write=.*", "read=.*")
    theirs, mine = target.amqp(), target.amqp(user=(u, "pw"))

    def names() -> dict[str, str] | None:  # user -> connection name, once both are listed (RabbitMQ: ~5 s)
        rows = target.api("GET", "/connections").json()
        found = {r["user"]: r["name"] for r in rows if r["user"] in ("guest", u)}
        return found if len(found) == 2 else None
    try:
        deadline = time.monotonic() + 30
        while (found := names()) is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert found, "both connections listed"
        path = "/connections/{}"
        refused = target.api("DELETE", path.format(requests.utils.quote(found["guest"], safe="")), auth=(u, "pw"))
        assert refused.status_code == 401, (refused.status_code, refused.text)
        assert theirs.is_open
        closed = target.api("DELETE", path.format(requests.utils.quote(found[u], safe="")), auth=(u, "pw"))
        assert closed.status_code == 204, (closed.status_code, closed.text)
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker):
            for _ in range(100):
                mine.process_data_events(time_limit=0.1)
    finally:
        for connection in (theirs, mine):
            try:
                if connection.is_open:
                    connection.close()
            except pika.exceptions.AMQPError:
                pass
        target.admin("delete", "user", f"name={u}")
