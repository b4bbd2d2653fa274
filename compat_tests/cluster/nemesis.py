"""The faults of the partition suite: each is one cycle that breaks something, holds, and heals.

Network faults act on a :class:`~compat_tests.cluster.netns.Network` (hosts ``zk``, ``b1``..``b3``);
process faults reuse the kill/freeze faults of test_faults.py. Every fault returns a short
description of what it did (printed per cycle); the caller then waits for full ISRs.

    zk-isolate-leader      a partition leader cut from ZooKeeper only (clients, followers reach it)
    followers-isolate-leader  a partition leader cut from the other brokers only
    minority               one broker alone on one side, the other two and ZooKeeper on the other
    bridge                 b_a and b_c cannot see each other, b_a neither ZooKeeper; b_b sees both
    asymmetric             what a leader sends to its followers and to ZooKeeper is dropped (it hears them)
    flapping               random links cut and healed every 0.2-0.8 s
    lossy-slow             5 % loss both ways and a 2 Mbit/s egress on one broker
    delay-loss             netem's ``delay 50ms loss 5%`` on what one broker sends (nfqdelay.py)
    kill-leader, kill-follower, freeze, kill-controller   as in test_faults.py
"""
from __future__ import annotations

import time

from compat_tests.cluster.cluster import brokers_of, metadata, partition_view

NETWORK = ("zk-isolate-leader", "followers-isolate-leader", "minority", "bridge", "asymmetric",
           "flapping", "lossy-slow", "delay-loss")
PROCESS = ("kill-leader", "kill-follower", "freeze", "kill-controller")
ALL = NETWORK + PROCESS


def leader_of_some_partition(cluster, topic: str, rng) -> int:
    md = metadata(cluster.bootstrap(), timeout=3)
    ids = [b.node_id for b in cluster.brokers]
    if md is None or topic not in md.topics:
        return rng.choice(ids)
    leaders = [leader for leader, _, _ in partition_view(md, topic).values() if leader in ids]
    return rng.choice(leaders or ids)


def inflict_network(net, cluster, topic: str, fault: str, hold: float, rng) -> str:
    names = [f"b{b.node_id}" for b in cluster.brokers]
    seconds = hold * rng.uniform(1, 4)  # past the 3 s replica lag often, the 6 s ZK session now and then
    leader = f"b{leader_of_some_partition(cluster, topic, rng)}"
    others = [n for n in names if n != leader]
    if fault == "zk-isolate-leader":
        net.cut(leader, "zk")
        what = f"{leader} cut from zk"
    elif fault == "followers-isolate-leader":
        net.split([leader], others)
        what = f"{leader} cut from {others}"
    elif fault == "minority":
        alone = rng.choice(names)
        rest = [n for n in names if n != alone] + ["zk"]
        net.split([alone], rest)
        what = f"{alone} | {rest}"
    elif fault == "bridge":
        a, mid, c = rng.sample(names, 3)
        net.cut(a, c)
        net.cut(a, "zk")
        what = f"{a} | {c}+zk, bridged by {mid}"
    elif fault == "asymmetric":
        for peer in [*others, "zk"]:
            net.drop(leader, peer)
        what = f"{leader} -> {others}+zk dropped (one way)"
    elif fault == "flapping":
        end, flips = time.monotonic() + seconds, 0
        while time.monotonic() < end:
            a, b = rng.sample(names + ["zk"], 2)
            net.cut(a, b)
            time.sleep(rng.uniform(0.2, 0.8))
            net.heal()
            time.sleep(rng.uniform(0.2, 0.8))
            flips += 1
        return f"{flips} link flaps over {seconds:.1f}s"
    elif fault == "lossy-slow":
        victim = rng.choice(names)
        net.lossy(victim, 5)
        net.slow(victim)
        what = f"{victim} 5% loss, 2mbit"
    elif fault == "delay-loss":
        victim = rng.choice(names)
        net.delay(victim, 50, 5, seed=rng.randrange(1 << 30))
        what = f"{victim} sends with 50 ms delay, 5% loss"
    else:
        raise ValueError(f"unknown network fault {fault!r}")
    time.sleep(seconds)
    net.heal()
    return f"{what} for {seconds:.1f}s"


def pick_victim(cluster, topic, fault, rng) -> int:
    """The broker id a fault hits, from the cluster's current Metadata (a random one if unknown)."""
    md = metadata(cluster.bootstrap(), timeout=3)
    ids = [b.node_id for b in cluster.brokers]
    if md is None or topic not in md.topics:
        return rng.choice(ids)
    view = partition_view(md, topic)
    leader, replicas, _ = view[rng.choice(sorted(view))]
    if fault == "kill-leader" and leader in ids:
        return leader
    if fault == "kill-follower":
        return rng.choice([r for r in replicas if r != leader] or ids)
    if fault == "kill-controller" and md.controller_id in ids:
        return md.controller_id
    return rng.choice(ids)


def inflict_process(cluster, topic, broker, fault, hold: float, rng, failover_s: float = 20) -> str:
    if fault == "freeze":
        # up to 4x hold: past the 3 s replica lag often, and past the brokers' 6 s ZooKeeper
        # session now and then, so a frozen leader or controller must be fenced when it thaws
        seconds = hold * rng.uniform(1, 4)
        broker.pause()
        time.sleep(seconds)
        broker.resume()
        return f"frozen {seconds:.1f}s"
    broker.kill()
    how = ""
    # Half the time the broker stays down until the cluster has noticed (its session expired,
    # its leaderships moved): the failover path. Otherwise it is back before anyone noticed:
    # the path of a broker re-registering under an id its dead session still holds.
    if rng.random() < 0.5:
        t0 = time.monotonic()
        cluster._wait(lambda: gone(cluster, topic, broker.node_id), failover_s,
                      f"broker {broker.node_id} to be deregistered and its leaderships moved after kill -9")
        how = f"failed over in {time.monotonic() - t0:.1f}s, "
    time.sleep(hold)
    broker.start()
    return f"{how}down {hold:.1f}s more"


def gone(cluster, topic, node_id) -> bool:
    md = metadata(cluster.bootstrap(), timeout=2)
    if md is None or topic not in md.topics or node_id in brokers_of(md):
        return False
    return all(leader != node_id and leader >= 0 for leader, _, _ in partition_view(md, topic).values())
