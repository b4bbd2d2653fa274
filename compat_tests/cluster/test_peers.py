"""The inter-broker client (gateway/cluster/peers.py) in a 2-broker cluster: a pool keyed by node
id, with the brokers' registered Kafka addresses, reaches each partition's leader; Produce there
is acknowledged by the ISR (acks=-1) and read back from either replica; a broker that is not the
leader answers NOT_LEADER_OR_FOLLOWER; a broker that leaves is forgotten and its calls fail.
"""
from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode
from twisted.internet import reactor

from compat_tests.cluster.cluster import create_topic, make_cluster, partition_view
from compat_tests.support import wait_until
from gateway.cluster.peers import PeerClients, PeerUnavailable
from tests.reactor_thread import outcome, run
from wire.records import decode_batch, iter_batches, simple_batch

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def two(zk_connect, tmp_path):
    c = make_cluster(tmp_path, zk_connect, n=2)
    try:
        c.start()
        yield c
    finally:
        c.close()


def values(data: bytes) -> dict[int, bytes]:
    return {r.offset: r.value for pos, _h in iter_batches(data) for r in decode_batch(data, pos).records}


def test_produce_reaches_each_leader_and_replicates(two):
    create_topic(two.bootstrap(), "spread", 2, 2)
    view = partition_view(two.wait_isr_full("spread"), "spread")
    addresses = two.expected_brokers()
    pool = run(lambda: PeerClients(reactor, addresses.get, "peer-cluster-test", timeout=10))
    try:
        for partition, (leader, replicas, _isr) in view.items():
            follower = next(r for r in replicas if r != leader)
            batch = simple_batch([b"p%d-%d" % (partition, i) for i in range(10)])
            assert run(pool.produce, leader, "spread", partition, batch) == (ErrorCode.none, 0)
            error, _base = run(pool.produce, follower, "spread", partition, batch)
            assert error == ErrorCode.not_leader_or_follower
            error, high_watermark, data = run(pool.fetch, leader, "spread", partition, 0)
            assert (error, high_watermark) == (ErrorCode.none, 10)  # acks=-1: the follower has it too
            assert [values(data)[o] for o in range(10)] == [b"p%d-%d" % (partition, i) for i in range(10)]
        # both brokers' answers came over the pool's connections, one per node
        assert sorted(k[0] for k in pool.clients) == sorted(addresses)

        gone = view[0][0]
        run(pool.forget, gone)
        two.by_id(gone).kill()
        survivor = next(n for n in addresses if n != gone)
        wait_until(lambda: run(pool.metadata, survivor, ["spread"]).topics[0].partitions[0].leader_id == survivor,
                   timeout=30, what="the survivor to lead partition 0")
        addresses.pop(gone)  # the cluster view no longer lists it
        kind, error = run(lambda: outcome(pool.metadata(gone)))
        assert kind == "error" and isinstance(error, PeerUnavailable) and f"broker {gone}" in str(error)
    finally:
        run(pool.close)
