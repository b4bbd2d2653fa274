"""Users, permissions and ACLs are the cluster's, as in Kafka and in RabbitMQ.

Three brokers (``--authorizer acl``, everyone allowed where no ACL matches). A user made through
one broker's management API, with permissions set through another's, logs in over AMQP on the
third; ``gateway users`` run on any broker's data directory lists the cluster's users, and a user
it adds there logs in on another broker a moment later; a user deleted through one broker can no
longer log in anywhere. A Kafka ACL created through one broker is what every broker answers
DescribeAcls with, until it is deleted through another.
"""
from __future__ import annotations

import subprocess
import sys

import pika
import pika.exceptions
import pytest
import requests
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

from compat_tests.cluster.cluster import make_cluster, running
from compat_tests.support import wait_until

AUTH = ("guest", "guest")


@pytest.fixture
def secured(zk_connect, tmp_path, request):
    yield from running(make_cluster(tmp_path, zk_connect, n=3, extra_args=(
        "--authorizer", "acl", "--allow-everyone-if-no-acl-found", "true")), request)


def _api(broker, method: str, path: str, **kw) -> requests.Response:
    return requests.request(method, f"http://{broker.ip}:{broker.ports['http']}/api{path}", auth=AUTH, timeout=30,
                            **kw)


def _logs_in(broker, user: str, password: str) -> bool:
    credentials = pika.PlainCredentials(user, password)
    try:
        pika.BlockingConnection(pika.ConnectionParameters(broker.ip, broker.ports["amqp"], credentials=credentials,
                                                          connection_attempts=1)).close()
        return True
    # a user known here before the permissions given to it (a second edit) have come is refused the
    # vhost: not logged in yet either
    except (pika.exceptions.ProbableAuthenticationError, pika.exceptions.ProbableAccessDeniedError):
        return False


def _users_cli(broker, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway", "users", "--data-dir", str(broker.data_dir), *args],
                          input=stdin, capture_output=True, text=True, timeout=60)


def test_users_and_permissions_made_on_one_broker_hold_on_every_broker(secured):
    b1, b2, b3 = secured.brokers
    answer = _api(b1, "PUT", "/users/alice", json={"password": "wonderland", "tags": "management"})
    assert answer.status_code in (201, 204), answer.text
    answer = _api(b2, "PUT", "/permissions/%2F/alice", json={"configure": ".*", "write": ".*", "read": ".*"})
    assert answer.status_code in (201, 204), answer.text
    wait_until(lambda: _logs_in(b3, "alice", "wonderland"), timeout=30, what="alice logging in on broker 3")
    assert not _logs_in(b3, "alice", "wrong password")

    listed = _users_cli(b3, "list")
    assert listed.returncode == 0 and "alice" in listed.stdout, listed.stdout + listed.stderr

    added = _users_cli(b3, "add", "bob", "--password", "builder")
    assert added.returncode == 0, added.stderr
    assert _users_cli(b3, "set-permissions", "bob", ".*", ".*", ".*").returncode == 0
    wait_until(lambda: _logs_in(b1, "bob", "builder"), timeout=30,
               what="bob, added with `gateway users` on broker 3, logging in on broker 1")
    assert _logs_in(b2, "alice", "wonderland"), "the CLI's edit on broker 3 must not undo the users made elsewhere"

    answer = _api(b2, "DELETE", "/users/alice")
    assert answer.status_code == 204, answer.text
    wait_until(lambda: not _logs_in(b1, "alice", "wonderland") and not _logs_in(b3, "alice", "wonderland"),
               timeout=30, what="alice refused on brokers 1 and 3 after her deletion on broker 2")
    listed = _users_cli(b1, "list")
    assert "alice" not in listed.stdout and "bob" in listed.stdout, listed.stdout


def _acls_at(broker) -> list | None:
    """The ACLs broker ``broker`` itself answers DescribeAcls with (``gateway acls list`` asks the
    broker it is given, where a Kafka admin client asks whichever it likes)."""
    import json
    listed = subprocess.run([sys.executable, "-m", "gateway", "acls", "list", "--json",
                             "--bootstrap", broker.bootstrap], capture_output=True, text=True, timeout=60)
    return json.loads(listed.stdout) if listed.returncode == 0 else None


def test_an_acl_created_through_one_broker_holds_on_every_broker(secured):
    b1, b2, b3 = secured.brokers
    deny = AclBinding(ResourceType.TOPIC, "payments", ResourcePatternType.LITERAL, "User:*", "*",
                      AclOperation.WRITE, AclPermissionType.DENY)
    creator = AdminClient({"bootstrap.servers": b1.bootstrap})
    for future in creator.create_acls([deny]).values():
        future.result(30)
    for broker in (b1, b2, b3):
        found = wait_until(lambda: _acls_at(broker) or None, timeout=30, what=f"broker {broker.node_id}'s ACLs")
        assert len(found) == 1 and found[0]["name"] == "payments", found

    deleter = AdminClient({"bootstrap.servers": b3.bootstrap})
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)
    for future in deleter.delete_acls([everything]).values():
        assert future.result(30) == [deny]
    for broker in (b1, b2, b3):
        wait_until(lambda: _acls_at(broker) == [], timeout=30, what=f"broker {broker.node_id} without the ACL")
