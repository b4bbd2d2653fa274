"""Things that move inside a running cluster while real clients keep using it.

* reassignment: broker 4 joins and takes partition 2 from its leader, through
  ``gateway admin reassign --wait`` (the KIP-455 APIs), while an acks=all producer runs;
* the group coordinator's broker dies: the group's committed offsets come back on the new
  leader of its ``__consumer_offsets`` partition;
* AMQP in cluster mode 'home': any broker serves any queue (forwarded to the AMQP home), a quorum queue's confirmed
  messages and acks survive a kill -9 of the home.

The brokers are real processes on loopback (see cluster.py); the clients are confluent-kafka,
pika and the ``gateway`` CLI.
"""
from __future__ import annotations

import subprocess
import sys
import time

import pika
import pytest
from confluent_kafka import Consumer, TopicPartition

from compat_tests.cluster.clients import AckedProducer, read_all
from compat_tests.cluster.cluster import ClusterBroker, create_topic, metadata, partition_view
from compat_tests.cluster.replicas import compare_replicas
from compat_tests.support import wait_until

pytestmark = pytest.mark.timeout(300)


def _gateway(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True, text=True, timeout=timeout)


def test_broker_4_joins_and_takes_partition_2_under_load(cluster, zk_connect, tmp_path):
    create_topic(cluster.bootstrap(), "moving", 3, 3, {"min.insync.replicas": "2"})
    cluster.wait_isr_full("moving")
    producer = AckedProducer(cluster.bootstrap(), "moving", 3, "mover", rate=300)
    producer.start()
    newcomer = ClusterBroker(4, tmp_path / "broker4", zk_connect)
    newcomer.start()
    cluster.brokers.append(newcomer)
    cluster.wait_registered()
    time.sleep(1)  # some records before the move
    before = partition_view(metadata(cluster.bootstrap()), "moving")[2]
    old_leader = before[0]
    target = [4] + [b for b in before[1] if b != old_leader]
    result = _gateway("admin", "reassign", "--bootstrap", cluster.bootstrap(), "--topic", "moving",
                      "--partition", "2", "--replicas", ",".join(map(str, target)), "--wait", "--timeout", "60")
    assert result.returncode == 0, result.stderr
    assert "1/1" in result.stderr  # the progress line
    time.sleep(1)  # and some after it
    producer.stop()
    assert producer.acked, "the producer got nothing acknowledged"
    view = partition_view(cluster.wait_isr_full("moving"), "moving")
    assert sorted(view[2][1]) == sorted(target)
    listed = _gateway("admin", "reassignments", "--bootstrap", cluster.bootstrap(), "--json")
    assert listed.returncode == 0 and listed.stdout.strip() == "[]", listed.stdout
    old_dir = cluster.by_id(old_leader).data_dir / "moving-2"
    wait_until(lambda: not old_dir.exists(), timeout=15, what=f"broker {old_leader} to drop its copy of moving-2")
    values, _ = read_all(cluster.bootstrap(), "moving", 3)
    lost = [i for i in producer.acked if values[i] == 0]
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:5]}"
    cluster.close()
    dirs = {b.node_id: b.data_dir for b in cluster.brokers}
    problems = [p for i in range(3) for p in compare_replicas(dirs, "moving", i, view[i][1])]
    assert not problems, problems


def test_group_offsets_survive_the_coordinators_death(cluster):
    create_topic(cluster.bootstrap(), "work", 2, 3)
    cluster.wait_isr_full("work")
    wait_until(lambda: "__consumer_offsets" in (metadata(cluster.bootstrap()) or _Empty()).topics, timeout=30,
               what="__consumer_offsets to exist")
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "payroll",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("work", 0, 0)])
    for offset in (41, 42):
        consumer.commit(offsets=[TopicPartition("work", 0, offset)], asynchronous=False)
    consumer.close()
    cluster.wait_isr_full("__consumer_offsets")
    md = metadata(cluster.bootstrap())
    coordinator = _coordinator_of(cluster.bootstrap(), "payroll")
    assert coordinator in {b.id for b in md.brokers.values()}
    cluster.by_id(coordinator).kill()

    def committed():
        c = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "payroll",
                      "enable.auto.commit": False})
        try:
            found = c.committed([TopicPartition("work", 0)], timeout=5)
            return found[0].offset == 42 and found[0].offset
        except Exception:
            return False
        finally:
            c.close()
    assert wait_until(committed, timeout=60, what="the committed offset 42 from the new coordinator") == 42
    assert _coordinator_of(cluster.bootstrap(), "payroll") != coordinator


class _Empty:
    topics: dict = {}


def _coordinator_of(bootstrap: str, group: str) -> int:
    from confluent_kafka.admin import AdminClient
    client = AdminClient({"bootstrap.servers": bootstrap})
    result = client.describe_consumer_groups([group])[group].result(15)
    return result.coordinator.id


# --- AMQP -----------------------------------------------------------------------------------

def _amqp_home(cluster) -> int:
    def home():
        md = metadata(cluster.bootstrap(), timeout=3)
        if md is None or "__amqp_state" not in md.topics:
            return None
        leader = md.topics["__amqp_state"].partitions[0].leader
        return leader if leader in {b.node_id for b in cluster.live()} else None
    return wait_until(home, timeout=30, what="an AMQP home (leader of __amqp_state)")


def _channel(broker):
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.ports["amqp"],
                                                             connection_attempts=10, retry_delay=0.5))
    return conn, conn.channel()


def _drain(broker, queue: str, ack: bool = True, idle: float = 3) -> list[bytes]:
    conn, ch = _channel(broker)
    ch.basic_qos(prefetch_count=200)
    got = []
    for method, _props, body in ch.consume(queue, inactivity_timeout=idle):
        if method is None:
            break
        got.append(body)
        if ack:
            ch.basic_ack(method.delivery_tag)
    ch.cancel()
    conn.close()
    return got


def test_any_broker_serves_any_queue(home_cluster):
    cluster = home_cluster  # AMQP cluster mode 'home'
    home = _amqp_home(cluster)
    others = [b for b in cluster.brokers if b.node_id != home]
    conn, ch = _channel(others[0])
    ch.queue_declare("anywhere", durable=True, arguments={"x-queue-type": "quorum"})
    ch.confirm_delivery()
    for i in range(20):
        ch.basic_publish("", "anywhere", f"m{i}".encode(), pika.BasicProperties(delivery_mode=2))
    conn.close()
    assert _drain(others[1], "anywhere") == [f"m{i}".encode() for i in range(20)]
    view = partition_view(cluster.wait_isr_full("anywhere"), "anywhere")
    assert len(view[0][1]) == 3 and view[0][0] == home  # a quorum queue: 3 replicas, led by the home


def test_quorum_queue_keeps_confirmed_messages_and_acks_when_the_home_dies(home_cluster):
    cluster = home_cluster  # AMQP cluster mode 'home'
    home = _amqp_home(cluster)
    entry = next(b for b in cluster.brokers if b.node_id != home)
    conn, ch = _channel(entry)
    ch.queue_declare("orders", durable=True, arguments={"x-queue-type": "quorum"})
    ch.confirm_delivery()
    for i in range(300):  # BlockingChannel.basic_publish returns once the broker confirmed
        ch.basic_publish("", "orders", f"o{i}".encode(), pika.BasicProperties(delivery_mode=2))
    conn.close()
    conn, ch = _channel(entry)
    acked = []
    for _ in range(100):
        method, _props, body = ch.basic_get("orders")
        ch.basic_ack(method.delivery_tag)
        acked.append(body)
    conn.close()
    time.sleep(2)  # the ack floor is checkpointed into __amqp_state every 250 ms, then replicated
    cluster.by_id(home).kill()
    new_home = wait_until(lambda: (lambda h: h if h != home else None)(_amqp_home(cluster)), timeout=30,
                          what="a new AMQP home")
    survivor = next(b for b in cluster.live() if b.node_id != new_home)
    rest = _drain(survivor, "orders", ack=True)
    assert rest == [f"o{i}".encode() for i in range(100, 300)]


def test_classic_queues_are_mirrored_by_an_ha_policy_and_placed_on_the_home_otherwise(home_cluster):
    cluster = home_cluster  # AMQP cluster mode 'home'
    import requests
    home = cluster.by_id(_amqp_home(cluster))
    api = f"http://127.0.0.1:{home.ports['http']}/api"
    answer = requests.put(f"{api}/policies/%2F/mirror", auth=("guest", "guest"), timeout=10,
                          json={"pattern": "^ha\\.", "definition": {"ha-mode": "exactly", "ha-params": 2},
                                "apply-to": "queues"})
    assert answer.status_code in (201, 204), answer.text
    listed = requests.get(f"{api}/policies", auth=("guest", "guest"), timeout=10).json()
    assert [p["name"] for p in listed] == ["mirror"]
    other = next(b for b in cluster.brokers if b.node_id != home.node_id)
    elsewhere = requests.get(f"http://127.0.0.1:{other.ports['http']}/api/queues/%2F/x", auth=("guest", "guest"),
                             timeout=10)
    assert elsewhere.status_code == 421 and f"broker {home.node_id}" in elsewhere.json()["reason"]
    conn, ch = _channel(other)
    ch.queue_declare("ha.orders", durable=True)
    ch.queue_declare("plain", durable=True)
    conn.close()
    # Metadata is eventually consistent across brokers (as in Kafka): the broker answering may not have seen the
    # controller's leader election for a just-created topic yet, so wait until both partitions have a leader.
    def led():
        md = metadata(cluster.bootstrap())
        if not {"ha.orders", "plain"} <= set(md.topics):
            return None
        views = partition_view(md, "ha.orders").get(0), partition_view(md, "plain").get(0)
        return views if all(v and v[0] >= 0 for v in views) else None
    mirrored, plain = wait_until(led, timeout=15, what="leaders for ha.orders and plain")
    assert len(mirrored[1]) == 2 and mirrored[0] == home.node_id
    assert plain[1] == [home.node_id] and plain[0] == home.node_id

    # the policies apply to queues that exist too: a new one mirrors plain, removing one unmirrors ha.orders
    answer = requests.put(f"{api}/policies/%2F/plain-pair", auth=("guest", "guest"), timeout=10,
                          json={"pattern": "^plain$", "definition": {"ha-mode": "exactly", "ha-params": 2},
                                "apply-to": "queues"})
    assert answer.status_code in (201, 204), answer.text
    assert requests.delete(f"{api}/policies/%2F/mirror", auth=("guest", "guest"), timeout=10).status_code == 204

    def replicas():
        md = metadata(cluster.bootstrap())
        views = partition_view(md, "ha.orders").get(0), partition_view(md, "plain").get(0)
        if not all(views) or len(views[0][1]) != 1 or len(views[1][1]) != 2 or len(views[1][2]) != 2:
            return None
        return views
    mirrored, plain = wait_until(replicas, timeout=60, what="ha.orders unmirrored and plain with 2 in-sync replicas")
    assert mirrored[1] == [home.node_id] and plain[0] == home.node_id
