"""The spread workload's ``consumer-declared`` placement (``bench scale --only spread-parts``) on
our own 3-broker cluster: the clients land where ``random`` puts them for the same seed, and each
consumer's queues are led by the broker that consumer is connected to (it declared them there,
client-local); every confirmed message comes back."""
from __future__ import annotations

import random

from bench import peers
from bench.amqp_spread_load import run_random_brokers

SEED, CLIENTS, QUEUES = 5, 3, 30


def _consumer_brokers(addresses: list[str]) -> list[str]:
    """Where "random" puts the consumers for SEED: one draw for its declaring broker, then the
    publishers, then the consumers (bench.amqp_spread_load.run_random_brokers)."""
    rng = random.Random(SEED)
    rng.choice(addresses)
    for _ in range(CLIENTS):
        rng.choice(addresses)
    return [rng.choice(addresses) for _ in range(CLIENTS)]


def test_consumer_declared_queues_are_led_where_their_consumer_is():
    cluster = peers.OurCluster("placement-test", 3)
    try:
        addresses = cluster.addresses("amqp")
        r = run_random_brokers(addresses, "cd", 900, 100, QUEUES, CLIENTS, SEED, cluster.broker_pids(),
                               cluster.addresses("http"), placement="consumer-declared")
        at_random = run_random_brokers(addresses, "rnd", 300, 100, QUEUES, CLIENTS, SEED, cluster.broker_pids(),
                                       cluster.addresses("http"))
    finally:
        cluster.close()
    assert r["confirmed"] == r["consumed"] == 900
    assert r["clients_per_broker"] == at_random["clients_per_broker"]  # the same clients, the same brokers
    consumers = _consumer_brokers(addresses)
    expected = sorted(QUEUES // CLIENTS * consumers.count(a) for a in addresses if a in consumers)
    assert sorted(r["queues_per_broker"].values()) == expected, (r["queues_per_broker"], consumers)
