"""Who may call what in the management API: the same requests as a user of each RabbitMQ tag
(``administrator``, ``monitoring``, ``policymaker``, ``management``, none) against our broker and
a real RabbitMQ with its management plugin, and the same status code expected from both, for
every endpoint the API has (issue 31). Also: no user below administrator reads a password hash.

Both targets run in one module, so each request's two answers are compared side by side.
``AMQP_COMPAT_TARGETS=gateway`` leaves RabbitMQ out: then the test is skipped (it needs both).
"""
from __future__ import annotations

import json
import os
import urllib.parse

import pytest
import requests

from compat_tests.http.test_rabbitmqadmin import TARGETS, _start_gateway, _start_rabbitmq

V = "authz-v"
ROLES = {"none": "", "mgmt": "management", "pol": "policymaker", "mon": "monitoring", "adm": "administrator"}
PW = "pw-authz"

ORDER = list(ROLES)  # none, management, policymaker, monitoring, administrator
_MGMT, _MON, _ADM = [401, 200, 200, 200, 200], [401, 401, 401, 200, 200], [401, 401, 401, 401]
# Endpoints Debian's RabbitMQ 3.10 does not have (health checks of later releases, this broker's
# Kafka views): RabbitMQ answers 404 (405 for PUT/DELETE) to every role, so these are held to
# the answers this broker's table gives, by role in ORDER.
NOT_IN_RABBITMQ_310 = {
    ("GET", "/health/checks/ready-to-serve-clients"): _MGMT, ("GET", "/health/checks/is-in-service"): _MGMT,
    ("GET", "/history"): _MGMT, ("GET", "/openapi.json"): [200] * 5, ("GET", "/topics"): _MON, ("GET", "/groups"): _MON,
    ("PUT", "/topics/t-{u}"): _ADM + [201], ("DELETE", "/topics/t-{u}"): _ADM + [204],
}
# RabbitMQ 3.10 crashes (500) on an unknown connection or channel name asked by a user who is not
# an administrator (and on a connection's channels for everyone); later releases answer 404, as
# this broker does.
CRASHES_IN_RABBITMQ_310 = {"/connections/nope", "/connections/nope/channels", "/channels/nope"}


def _q(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def requests_for(node: str, amqp_port: int) -> list[tuple[str, str, object]]:
    """(method, path, body) for every route; ``{u}`` in a path is the acting user's name."""
    v, u = _q(V), "{u}"
    gets = [
        "/overview", "/whoami", "/vhosts", f"/vhosts/{v}", "/vhosts/%2F", f"/vhosts/{v}/permissions",
        f"/vhosts/{v}/connections", f"/vhosts/{v}/channels", "/queues", f"/queues/{v}", "/queues/%2F",
        f"/queues/{v}/q", f"/queues/{v}/q/bindings", "/exchanges", f"/exchanges/{v}", f"/exchanges/{v}/x",
        f"/exchanges/{v}/x/bindings/source", f"/exchanges/{v}/x/bindings/destination", "/bindings",
        f"/bindings/{v}", f"/bindings/{v}/e/x/q/q", f"/bindings/{v}/e/x/q/q/rk", "/connections", "/channels",
        "/connections/nope", "/connections/nope/channels", "/channels/nope",
        "/consumers", f"/consumers/{v}", "/users", "/users/without-permissions", "/users/guest",
        "/users/guest/permissions", "/permissions", f"/permissions/{v}/pol", "/policies", f"/policies/{v}",
        f"/policies/{v}/p", "/operator-policies", f"/operator-policies/{v}", f"/operator-policies/{v}/op",
        "/parameters", "/parameters/vhost-limits", f"/parameters/vhost-limits/{v}",
        f"/parameters/vhost-limits/{v}/limits", "/vhost-limits", f"/vhost-limits/{v}", "/nodes",
        f"/nodes/{_q(node)}", f"/nodes/{_q(node)}/memory", "/health/checks/alarms",
        "/health/checks/local-alarms", f"/health/checks/port-listener/{amqp_port}",
        "/health/checks/protocol-listener/amqp", "/health/checks/virtual-hosts",
        "/health/checks/node-is-quorum-critical", "/health/checks/node-is-mirror-sync-critical",
        "/health/checks/certificate-expiration/1/months", "/health/checks/ready-to-serve-clients",
        "/health/checks/is-in-service", f"/aliveness-test/{v}", "/feature-flags", "/extensions",
        "/cluster-name", "/auth", "/definitions", f"/definitions/{v}", "/topics", "/groups", "/history", "/openapi.json",
    ]
    out = [("GET", p, None) for p in gets]
    policy = {"pattern": "^zz", "definition": {"max-length": 1}}
    out += [
        ("PUT", f"/queues/{v}/q-{u}", {}), ("DELETE", f"/queues/{v}/qd-{u}", None),
        ("DELETE", f"/queues/{v}/q/contents", None), ("POST", f"/queues/{v}/q/get",
                                                        {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}),
        ("PUT", f"/exchanges/{v}/x-{u}", {"type": "direct"}), ("DELETE", f"/exchanges/{v}/xd-{u}", None),
        ("POST", f"/exchanges/{v}/x/publish", {"routing_key": "rk", "payload": "m", "payload_encoding": "string",
                                               "properties": {}}),
        ("POST", f"/bindings/{v}/e/x/q/q", {"routing_key": "b-{u}"}), ("DELETE", f"/bindings/{v}/e/x/q/q/bd-{u}", None),
        ("PUT", f"/vhosts/vh-{u}", {}), ("DELETE", f"/vhosts/vhd-{u}", None),
        ("PUT", f"/users/nu-{u}", {"password": "x", "tags": ""}), ("DELETE", f"/users/ud-{u}", None),
        ("POST", "/users/bulk-delete", {"users": ["ub-{u}"]}),
        ("PUT", f"/permissions/{v}/pt-{u}", {"configure": ".*", "write": ".*", "read": ".*"}),
        ("DELETE", f"/permissions/{v}/pt-{u}", None),
        ("PUT", f"/policies/{v}/p-{u}", policy), ("DELETE", f"/policies/{v}/pd-{u}", None),
        ("PUT", f"/operator-policies/{v}/op-{u}", policy), ("DELETE", f"/operator-policies/{v}/opd-{u}", None),
        ("PUT", f"/vhost-limits/{v}/max-connections", {"value": 100}),
        ("DELETE", f"/vhost-limits/{v}/max-queues", None),
        ("PUT", f"/parameters/vhost-limits/{v}/limits", {"value": {"max-connections": 100}}),
        ("DELETE", f"/parameters/vhost-limits/{v}/limits", None),
        ("PUT", "/cluster-name", {"name": "authz-cluster"}), ("DELETE", "/connections/nope", None),
        ("POST", "/definitions", {}), ("POST", f"/definitions/{v}", {}),
        ("PUT", f"/topics/t-{u}", {"partitions": 1}), ("DELETE", f"/topics/t-{u}", None),
    ]
    return out


def _setup(t) -> None:
    """As guest (administrator): the vhost, the role users, and the objects the requests touch."""
    def ok(method, path, body=None):
        r = t.api(method, path, json=body)
        assert r.status_code in (200, 201, 204), (t.name, method, path, r.status_code, r.text)
    v = _q(V)
    ok("PUT", f"/vhosts/{v}", {})
    ok("PUT", f"/permissions/{v}/guest", {"configure": ".*", "write": ".*", "read": ".*"})
    ok("PUT", f"/queues/{v}/q", {"durable": True})
    ok("PUT", f"/exchanges/{v}/x", {"type": "direct"})
    ok("POST", f"/bindings/{v}/e/x/q/q", {"routing_key": "rk"})
    ok("PUT", f"/policies/{v}/p", {"pattern": "^nothing", "definition": {"max-length": 5}})
    ok("PUT", f"/operator-policies/{v}/op", {"pattern": "^nothing", "definition": {"max-length": 5}})
    for u, tags in ROLES.items():
        ok("PUT", f"/users/{u}", {"password": PW, "tags": tags})
        if u in ("mgmt", "pol"):  # the vhost-scoped roles: permissions in V only
            ok("PUT", f"/permissions/{v}/{u}", {"configure": ".*", "write": ".*", "read": ".*"})
        ok("PUT", f"/queues/{v}/qd-{u}", {})
        ok("PUT", f"/exchanges/{v}/xd-{u}", {"type": "direct"})
        ok("POST", f"/bindings/{v}/e/x/q/q", {"routing_key": f"bd-{u}"})
        ok("PUT", f"/vhosts/vhd-{u}", {})
        for name in (f"ud-{u}", f"ub-{u}", f"pt-{u}"):
            ok("PUT", f"/users/{name}", {"password": "x", "tags": ""})
        ok("PUT", f"/policies/{v}/pd-{u}", {"pattern": "^nothing", "definition": {"max-length": 5}})
        ok("PUT", f"/operator-policies/{v}/opd-{u}", {"pattern": "^nothing", "definition": {"max-length": 5}})


def _statuses(t) -> dict:
    node = t.api("GET", "/overview").json()["node"]
    seen, hashes = {}, []
    # every stored hash, as the administrator guest reads them (the field's name alone is no leak:
    # /api/openapi.json names it)
    secrets = {u["password_hash"] for u in t.api("GET", "/users").json() if u.get("password_hash")}
    assert secrets
    for u in ROLES:  # administrator last: its changes cannot alter what the others are answered
        t.api("PUT", f"/vhost-limits/{_q(V)}/max-queues", json={"value": 1000})
        for method, path, body in requests_for(node, t.amqp_port):
            if body:
                body = json.loads(json.dumps(body).replace("{u}", u))
            r = t.api(method, path.replace("{u}", u), auth=(u, PW), json=body)
            key = (u, method, path.replace(_q(node), "{node}").replace(str(t.amqp_port), "{port}"))
            seen[key] = r.status_code
            if u != "adm" and any(h in r.text for h in secrets):
                hashes.append((u, method, path))
    assert not hashes, f"{t.name}: users below administrator read password hashes: {hashes}"
    return seen


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    if "rabbitmq" not in TARGETS:
        pytest.skip("AMQP_COMPAT_TARGETS leaves RabbitMQ out: nothing to compare with")
    gw = _start_gateway(tmp_path_factory, "authz")
    rmq = None
    try:
        rmq = _start_rabbitmq(tmp_path_factory)
        for t in (gw, rmq):
            _setup(t)
        yield gw, rmq
    finally:
        gw.stop()
        if rmq is not None:
            rmq.stop()


def test_every_endpoint_answers_each_role_as_rabbitmq_does(both):
    gw, rmq = both
    ours, theirs = _statuses(gw), _statuses(rmq)
    diffs = []
    for key in ours:
        u, method, path = key
        if (method, path) in NOT_IN_RABBITMQ_310:
            expected = NOT_IN_RABBITMQ_310[(method, path)][ORDER.index(u)]
            if ours[key] != expected:
                diffs.append(f"{u:5} {method:6} {path:55} gateway {ours[key]} expected {expected} (ours only)")
            continue
        if path in CRASHES_IN_RABBITMQ_310 and theirs.get(key) == 500 and ours[key] == 404:
            continue
        if ours[key] != theirs.get(key):
            diffs.append(f"{key[0]:5} {key[1]:6} {key[2]:55} gateway {ours[key]} rabbitmq {theirs.get(key)}")
    if os.environ.get("AUTHZ_DUMP"):
        with open(os.environ["AUTHZ_DUMP"], "w") as f:
            json.dump([[*k, ours[k], theirs.get(k)] for k in ours], f)
    assert not diffs, "\n" + "\n".join(diffs)
