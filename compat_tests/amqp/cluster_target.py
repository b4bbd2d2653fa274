"""The [cluster] target of the AMQP suite: a 3-broker spread cluster whose client-facing broker
leads none of the durable, non-exclusive queues the tests declare.

Three ``gateway serve --amqp-cluster-mode spread --queue-leader-locator balanced`` brokers on one
private ZooKeeper (compat_tests/cluster/cluster.py), started once per run (per xdist worker). The
clients talk to broker 1. ``balanced`` places a queue on the live broker that leads the fewest
partitions, so broker 1 is made the most loaded one before any test runs: a ballast topic with a
manual replica assignment puts :data:`BALLAST` partitions on it alone. Every durable,
non-exclusive queue then goes to broker 2 or 3 (exclusive and non-durable ones stay on broker 1,
as RabbitMQ's client-local rule wants), and every publish, consume, get, purge, delete and count
of them crosses brokers. Only real features are used (the broker setting, CreateTopics with a
replica assignment); a policy per vhost would do the same, but the tests create vhosts and
policies of their own, which the broker-wide setting covers without knowing them.

:meth:`ClusterTarget.misplaced` checks the premise after each test from the management API's
``node`` field (RabbitMQ's leader of a queue): a durable non-exclusive queue on broker 1 fails
the test that declared it, so a placement change cannot silently turn the target into a
single-broker one.
"""
from __future__ import annotations

import requests

from compat_tests.cluster.cluster import Cluster, make_cluster, metadata
from compat_tests.rabbitmq import amqp_greets
from compat_tests.support import wait_until

SPREAD_ARGS = ("--amqp-cluster-mode", "spread", "--queue-leader-locator", "balanced")
BALLAST = "amqp-suite-ballast"
# More than all the durable queues the suite declares (about 45 in a run): broker 1 stays the
# most loaded even if none were deleted (the per-test check says so if this ever falls short).
# Not many more: each partition costs broker 1 work, and a broker slowed enough loses its
# ZooKeeper session on a loaded machine.
BALLAST_PARTITIONS = 150
CLIENT_BROKER = 1


def start_cluster(base, zk_connect: str) -> Cluster:
    cluster = make_cluster(base, zk_connect, n=3, extra_args=SPREAD_ARGS)
    try:
        cluster.start()
        _ballast(cluster)
        for b in cluster.brokers:  # a spread broker accepts AMQP once its model is open
            wait_until(lambda: amqp_greets(b.ip, b.ports["amqp"]), timeout=60, interval=0.2,
                       what=f"broker {b.node_id} to serve AMQP")
    except BaseException:
        cluster.close()
        raise
    return cluster


def _ballast(cluster: Cluster) -> None:
    # kafka-python: confluent-kafka 2.16 refuses a replica assignment ("mutually exclusive" with
    # a default partition count it sets itself)
    from kafka.admin import KafkaAdminClient, NewTopic
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(), request_timeout_ms=60000)
    try:
        client.create_topics([NewTopic(BALLAST, replica_assignments={p: [CLIENT_BROKER] for p in range(BALLAST_PARTITIONS)})],
                             timeout_ms=60000)
    finally:
        client.close()

    def led():
        md = metadata(cluster.bootstrap(), timeout=5)
        parts = md.topics[BALLAST].partitions if md is not None and BALLAST in md.topics else {}
        return len(parts) == BALLAST_PARTITIONS and all(p.leader == CLIENT_BROKER for p in parts.values())
    wait_until(led, timeout=60, interval=0.5, what=f"every partition of {BALLAST} led by broker {CLIENT_BROKER}")


class ClusterTarget:
    """The AmqpBroker view of the cluster (mixed into conftest.AmqpBroker there)."""
    target = "cluster"

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.client = cluster.by_id(CLIENT_BROKER)
        self.host, self.port = self.client.ip, self.client.ports["amqp"]
        self.seen: set[tuple[str, str]] = set()

    @property
    def process(self):  # the client-facing broker's BrokerProcess (its http_url for the management API)
        return self.client.process

    def output(self) -> str:
        return self.cluster.describe()

    def misplaced(self) -> list[str]:
        """Durable, non-exclusive queues led by the client-facing broker, not reported before."""
        r = requests.get(f"{self.process.http_url}/api/queues?disable_stats=true", auth=("guest", "guest"),
                         timeout=10)  # no figures: they would be asked of the leaders
        r.raise_for_status()
        found = []
        for q in r.json():
            key = (q["vhost"], q["name"])
            if q["durable"] and not q["exclusive"] and q["node"] == f"gateway@{CLIENT_BROKER}" \
                    and key not in self.seen:
                self.seen.add(key)
                found.append(f"{q['vhost']}/{q['name']}")
        return found
