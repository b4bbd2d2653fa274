"""Fixtures of the cluster suites: one private ZooKeeper per run, three brokers per test.

``zookeeper`` (session scope) is a standalone node from Debian's ``zookeeper`` package
(see zookeeper.py); every test gets its own chroot in it, so clusters never see each other's
metadata. ``cluster`` (function scope) is three started, registered brokers (see cluster.py)
with fresh data directories; on failure the brokers' log tails are in the report.
"""
from __future__ import annotations

import re
import uuid

import pytest

from compat_tests.cluster.cluster import LISTENERS, Cluster, make_cluster, running
from gateway.zookeeper_node import ZooKeeperNode, ensure_chroot


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    node = ZooKeeperNode(tmp_path_factory.mktemp("zookeeper"))
    node.start()
    try:
        yield node
    finally:
        node.close()


@pytest.fixture
def zk_connect(zookeeper, request) -> str:
    """``127.0.0.1:<port>/<chroot>``, the chroot unique to this test and already created."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", request.node.name)[:60]
    chroot = f"/gw-{name}-{uuid.uuid4().hex[:8]}"
    ensure_chroot(zookeeper.hosts, chroot)
    return zookeeper.hosts + chroot


@pytest.fixture
def cluster(zk_connect, tmp_path, request) -> Cluster:
    """Three brokers on their defaults (AMQP cluster mode 'spread')."""
    yield from running(make_cluster(tmp_path, zk_connect, n=3), request)


@pytest.fixture
def home_cluster(zk_connect, tmp_path, request) -> Cluster:
    """Three brokers in AMQP cluster mode 'home' (one broker runs AMQP, the others relay to it)."""
    yield from running(make_cluster(tmp_path, zk_connect, n=3, extra_args=("--amqp-cluster-mode", "home")), request)


@pytest.fixture
def spread(zk_connect, tmp_path, request) -> Cluster:
    """Three brokers in AMQP cluster mode 'spread' (every broker serves AMQP; queues led anywhere)."""
    yield from running(make_cluster(tmp_path, zk_connect, n=3, extra_args=("--amqp-cluster-mode", "spread"),
                                    listeners=(*LISTENERS, "stream")), request)  # stream clients keep their address


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    c = getattr(item, "cluster", None)
    if c is not None and report.failed and call.when in ("setup", "call"):
        report.sections.append(("cluster brokers", c.describe()))
