"""Parallel runs: how the whole suite is shared between pytest-xdist workers.

``pyproject.toml`` runs ``-n 3 --dist loadgroup`` (three workers on a two-core machine: much of the
suite waits on brokers starting, faults held and Java programs, so a third worker keeps both cores
busy): every test gets an ``xdist_group`` here and a group runs on one worker, so

* a module's tests stay together and its module-scoped broker starts once;
* every test against a reference peer (RabbitMQ, Apache Kafka, Spark's session) is in that peer's
  group, so each peer starts once per run, as it would without workers; so is the AMQP suite's
  [cluster] target (a 3-broker cluster);
* tests that take fixed ports on 127.0.0.1 (the documentation's own examples) or build network
  namespaces share one group, so two of them never run at once.

Groups are handed out longest first (``_rank``; ``--no-loadscope-reorder`` keeps xdist from
reordering them by their number of tests). ``-n 0`` runs everything in one process, in the
usual order.
"""
from __future__ import annotations

import pytest
from hypothesis import settings

# Property tests check what comes out, not how fast: on a shared, loaded machine one example may
# take 300 ms where it takes 2 ms alone, which Hypothesis's default 200 ms deadline calls a failure.
settings.register_profile("shared-machine", deadline=None)
settings.load_profile("shared-machine")

# Examples from the documentation listen where the docs say (9092, 5672, 15672, 2181, ...); one of
# them is a Spark pipeline, so they share the Spark suite's group (one SparkSession per process).
FIXED_PORTS = {"tests/test_doc_examples.py", "tests/test_doc_cluster_example.py"}
# Network namespaces, nftables and NFQUEUE: one such suite at a time.
NETNS = {"compat_tests/cluster/test_partitions.py", "compat_tests/cluster/test_transaction_faults.py"}


def _group(item: pytest.Item) -> str:
    path = item.nodeid.split("::")[0]
    params = getattr(getattr(item, "callspec", None), "params", {})
    targets = {v for v in params.values() if isinstance(v, str)}
    if "rabbitmq" in targets or "rabbitmq_node" in getattr(item, "fixturenames", ()):
        return "peer:rabbitmq"
    if path.startswith("compat_tests/kafka/") and "kafka" in targets:
        return "peer:kafka"
    if path.startswith("compat_tests/amqp/") and "cluster" in targets:
        return "peer:amqp-cluster"  # one 3-broker cluster per run, as a peer is
    if path.startswith("compat_tests/spark/") or path in FIXED_PORTS:
        return "peer:spark"
    if path in NETNS:
        return "netns"
    return path


# Groups that take many minutes on one worker (measured in a CI run), longest first. xdist would
# otherwise hand out groups by their number of tests, which put the few longest (one fault run,
# the Spark session's 28 tests) at the very end of the run, as its tail.
LONGEST = ("peer:spark", "peer:kafka", "peer:rabbitmq", "compat_tests/cluster/test_faults.py", "netns",
           "peer:amqp-cluster", "compat_tests/cluster/test_streams_cluster.py", "compat_tests/cluster/test_moves.py",
           "compat_tests/cluster/test_amqp_spread.py", "compat_tests/cluster/test_cluster.py")


def _rank(group: str) -> int:
    """Where a group goes in the work queue: the known long ones first, then the cluster modules
    (minutes each), then the rest in file order."""
    if group in LONGEST:
        return LONGEST.index(group)
    return len(LONGEST) + (0 if group.startswith("compat_tests/cluster/") else 1)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which copies the groups into the node ids
def pytest_collection_modifyitems(config, items):
    groups = {}
    for item in items:
        marker = item.get_closest_marker("xdist_group")
        if marker is None:
            groups[item] = _group(item)
            item.add_marker(pytest.mark.xdist_group(groups[item]))
        else:
            groups[item] = marker.args[0] if marker.args else marker.kwargs.get("name", "default")
    if getattr(config.option, "loadgroup", False):  # on xdist's workers: groups are handed out in this order
        items.sort(key=lambda item: _rank(groups[item]))


def pytest_collection_finish(session):
    """Fail loudly when xdist's loadgroup did not put the groups into the node ids: every group would
    be split over the workers (peers started on each, fixed ports taken twice at once)."""
    if getattr(session.config.option, "loadgroup", False) and session.items and "@" not in session.items[0].nodeid:
        raise pytest.UsageError("pytest-xdist's --dist loadgroup did not mark the tests with their groups: "
                                "install the pytest version pyproject.toml asks for (.venv/bin/pip install -e '.[test]')")
