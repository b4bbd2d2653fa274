"""AMQP publishers with confirms against a cluster that keeps losing brokers.

In AMQP cluster mode 'home'. A pika publisher (confirms on, persistent messages, a quorum queue) connects to any live
broker, records the id of every message the broker confirmed, and reconnects elsewhere when
its connection drops. A nemesis kills (-9) the AMQP home or another broker, restarts it, and
repeats for ``GATEWAY_AMQP_FAULT_CYCLES`` cycles (8 in CI; more by hand). At the end every
confirmed id must be in the queue (consumed through yet another broker); duplicates are
allowed (a publish whose confirm was lost is sent again: at least once) and counted.
"""
from __future__ import annotations

import os
import random
import time

import pytest

from compat_tests.cluster.clients import ConfirmingPublisher, amqp_home, drain_queue
from compat_tests.support import wait_until

CYCLES = int(os.environ.get("GATEWAY_AMQP_FAULT_CYCLES", "8"))
QUEUE = "ledger"


@pytest.mark.timeout(300 + CYCLES * 60)
def test_confirmed_messages_survive_broker_kills(home_cluster):
    cluster = home_cluster  # AMQP cluster mode 'home'
    wait_until(lambda: amqp_home(cluster), timeout=30, what="an AMQP home")
    publisher = ConfirmingPublisher(cluster, QUEUE, {"x-queue-type": "quorum"})
    publisher.start()
    rng = random.Random(int(os.environ.get("GATEWAY_FAULT_SEED", "7")))
    try:
        wait_until(lambda: len(publisher.confirmed) >= 20, timeout=60, what="the first confirms")
        for cycle in range(1, CYCLES + 1):
            home = wait_until(lambda: amqp_home(cluster), timeout=60, what="an AMQP home")
            victim = cluster.by_id(home if rng.random() < 0.6 else rng.choice(
                [b.node_id for b in cluster.brokers if b.node_id != home]))
            victim.kill()
            time.sleep(rng.uniform(1, 3))
            victim.start()
            cluster.wait_registered(timeout=60)
            before = len(publisher.confirmed)
            wait_until(lambda: len(publisher.confirmed) > before, timeout=60,
                       what=f"confirms to resume after cycle {cycle}")
            print(f"[amqp-faults] cycle {cycle}/{CYCLES}: killed broker {victim.node_id} "
                  f"({'home' if victim.node_id == home else 'not home'}), confirmed so far "
                  f"{len(publisher.confirmed)}, reconnects {publisher.reconnects}", flush=True)
    finally:
        publisher.stopping.set()
        publisher.join(30)
    assert publisher.error is None, repr(publisher.error)
    wait_until(lambda: amqp_home(cluster), timeout=60, what="an AMQP home")
    got = drain_queue(cluster, QUEUE, {"x-queue-type": "quorum"})
    lost = [m for m in publisher.confirmed if got[m] == 0]
    duplicates = sum(c - 1 for c in got.values() if c > 1)
    print(f"[amqp-faults] {len(publisher.confirmed)} confirmed, {len(got)} distinct read back, "
          f"{duplicates} duplicates, {publisher.reconnects} reconnects", flush=True)
    assert not lost, f"{len(lost)} confirmed messages lost, e.g. {lost[:10]}"
