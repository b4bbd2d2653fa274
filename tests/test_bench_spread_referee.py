"""The spread workload's referee (``bench scale --only spread --spread-rabbitmq``): a real RabbitMQ
cluster of two nodes, joined by the bench, runs a small spread workload. Every confirmed message
must come back (run_random_brokers raises otherwise), the queues must be led by both nodes (the
locator the bench passes for the installed version spreads them), and each node's CPU counts."""
from __future__ import annotations

from bench import peers
from bench.amqp_spread_load import run_random_brokers


def test_rabbitmq_cluster_runs_the_spread_workload():
    cluster = peers.RabbitMQCluster("referee-test", 2)
    try:
        r = run_random_brokers(cluster.addresses("amqp"), "ref", 2_000, 100, 20, 4, 7, cluster.broker_pids(),
                               cluster.addresses("http"), arguments=peers.RabbitMQCluster.queue_arguments())
    finally:
        cluster.close()
    assert r["confirmed"] == r["consumed"] == 2_000
    assert sorted(r["queues_per_broker"].values()) == [10, 10], r["queues_per_broker"]
    assert len(r["cpu_seconds_by_broker"]) == 2 and all(c > 0 for c in r["cpu_seconds_by_broker"])
