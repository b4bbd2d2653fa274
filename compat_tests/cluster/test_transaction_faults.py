"""Transactions under faults (issue 19): no aborted record is ever visible to read_committed.

This suite puts one broker in a network namespace of its own (netns.py) and breaks it while a
confluent-kafka transactional producer commits three transactions in four and aborts the
fourth, each over two partitions. The faults, chosen at random with a printed seed, each held and healed:

    kill        kill -9 and a restart on the same data directory
    freeze      SIGSTOP, then SIGCONT
    cut         the broker cut from its clients (nftables), both ways
    lossy-slow  5 % of the broker's packets dropped both ways and a 2 Mbit/s egress
    delay-loss  netem's ``delay 50ms loss 5%`` on what the broker sends (nfqdelay.py)

The workload and its check are txn_workload.py's: every committed transaction whole and once,
no aborted record visible, each unknown one whole or not at all, each partition in transaction
order. The history's counts are printed. On the cluster the partition suite runs the same
workload (test_partitions.py).

GATEWAY_TXN_FAULT_CYCLES (10 in CI: each fault twice), GATEWAY_PARTITION_SECONDS (hold, 1.5 s)
and GATEWAY_FAULT_SEED set the run.
"""
from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.cluster import netns, txn_workload
from tests.brokerproc import start_broker

FAULTS = ("kill", "freeze", "cut", "lossy-slow", "delay-loss")
CYCLES = int(os.environ.get("GATEWAY_TXN_FAULT_CYCLES", str(2 * len(FAULTS))))
HOLD = float(os.environ.get("GATEWAY_PARTITION_SECONDS", "1.5"))
SEED = int(os.environ.get("GATEWAY_FAULT_SEED", str(time.time_ns() % 1_000_000)))
TOPIC = "txn-faults"
TID = "txn-faults-producer"


class SingleNode:
    """One broker in namespace ``b1``, restartable on the same data directory."""

    def __init__(self, net: netns.Network, data_dir):
        self.net, self.data_dir = net, data_dir
        self.host = net.add_host("b1", 11)
        self.bootstrap = f"{self.host.ip}:9092"
        self.broker = None
        self.logs: list[str] = []

    def start(self) -> None:
        ip = self.host.ip
        self.broker = start_broker(self.data_dir, "--kafka-listen", f"{ip}:9092", "--amqp-listen", f"{ip}:5672",
                                   "--http-listen", f"{ip}:15672", prefix=self.host.prefix())

    def kill(self) -> None:
        self.broker.stop(signal.SIGKILL)
        self.logs.append(self.broker.output())

    def close(self) -> None:
        if self.broker is not None and self.broker.proc.poll() is None:
            self.broker.stop()
            self.logs.append(self.broker.output())


@pytest.fixture
def single(tmp_path):
    net = netns.network_or_skip("transaction fault suite")
    node = None
    try:
        node = SingleNode(net, tmp_path / "data")
        node.start()
        yield net, node
    finally:
        net.heal()
        if node is not None:
            node.close()
        net.close()


def _wait_serving(bootstrap: str, timeout: float = 60) -> float:
    began = time.monotonic()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    while time.monotonic() - began < timeout:
        try:
            md = admin.list_topics(TOPIC, timeout=2)
            if all(p.error is None and p.leader >= 0 for p in md.topics[TOPIC].partitions.values()):
                return time.monotonic() - began
        except KafkaException:
            pass
        time.sleep(0.2)
    raise AssertionError(f"the broker did not serve {TOPIC} within {timeout}s of the heal")


def _inflict(net, node: SingleNode, fault: str, seconds: float) -> str:
    if fault == "kill":
        node.kill()
        time.sleep(seconds)
        node.start()
        return f"killed, restarted after {seconds:.1f}s"
    if fault == "freeze":
        node.broker.proc.send_signal(signal.SIGSTOP)
        time.sleep(seconds)
        node.broker.proc.send_signal(signal.SIGCONT)
        return f"frozen {seconds:.1f}s"
    if fault == "cut":
        net.cut_clients("b1")
    elif fault == "delay-loss":
        net.delay("b1", 50, 5)
    else:
        net.lossy("b1", 5)
        net.slow("b1")
    time.sleep(seconds)
    net.heal()
    return f"{fault} for {seconds:.1f}s"


def test_no_aborted_record_is_visible_under_faults(single, capsys):
    net, node = single
    rng = random.Random(SEED)
    with capsys.disabled():
        print(f"\n[txn-faults] seed {SEED}, {CYCLES} cycles, hold {HOLD}s")
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(20)
    _wait_serving(node.bootstrap)
    workload = txn_workload.TransactionalWorkload(node.bootstrap, TOPIC, TID)
    workload.start()
    schedule = [FAULTS[i % len(FAULTS)] for i in range(CYCLES)]
    rng.shuffle(schedule)
    try:
        for cycle, fault in enumerate(schedule, 1):
            time.sleep(rng.uniform(0.5, 1.5))
            what = _inflict(net, node, fault, HOLD * rng.uniform(1, 3))
            back = _wait_serving(node.bootstrap)
            settled = Counter(workload.outcomes.values())
            with capsys.disabled():
                print(f"[txn-faults] cycle {cycle}/{CYCLES}: {what}; serving again in {back:.1f}s; "
                      f"committed {settled['committed']}, aborted {settled['aborted']}, unknown {settled['unknown']}")
        time.sleep(1)
    finally:
        workload.stopping.set()
        workload.join(120)
    assert not workload.is_alive(), "the transactional producer did not finish within 120 s of the last heal"

    problems, counts, summary = txn_workload.check(node.bootstrap, workload)
    with capsys.disabled():
        print(f"[txn-faults] seed {SEED}: {summary}")
    assert not problems, f"seed {SEED}: " + "; ".join(problems[:20])
    assert counts["committed"] >= 20 and counts["aborted-written"] >= 5, f"seed {SEED}: too little happened: {dict(counts)}"
    node.close()
    for text in node.logs:
        assert "Traceback" not in text, text[-4000:]
