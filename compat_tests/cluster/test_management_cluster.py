"""The management API of any broker of a cluster shows the whole cluster, as RabbitMQ's does.

A client is connected to one broker; RabbitMQ's management API lists every node's connections,
channels and consumers, each with its node, whichever node is asked, and closes a connection on
any node, and its overview totals the whole cluster. Three brokers in cluster mode 'spread'; pika
clients on brokers 1 and 2; every question goes to broker 3, which holds none of them. Kafka
topics too: broker 3 shows the offsets of partitions it holds no replica of.
"""
from __future__ import annotations

import urllib.parse

import pika
import pytest
import requests
from confluent_kafka import Producer

from compat_tests.cluster.clients import amqp_connection
from compat_tests.cluster.cluster import create_topic
from compat_tests.support import wait_until

AUTH = ("guest", "guest")


def _amqp_by_node(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for row in rows:
        if row.get("protocol") == "AMQP 0-9-1":
            out.setdefault(row["node"], []).append(row)
    return out


def test_any_broker_lists_and_closes_the_connections_channels_and_consumers_of_every_broker(spread):
    """Broker 3 lists the clients of brokers 1 and 2, counts them and the messages of a queue led by
    broker 1 in its overview, shows each broker's own node figures, gets and purges that queue's messages (and refuses its deletion
    ``if-empty``, and that of one with a consumer on broker 2 ``if-unused``), closes a connection to
    broker 2, answers 503 for a get once broker 1 is killed, and names broker 1's disk alarm in its
    cluster-wide alarms check once broker 1 is back with one."""
    b1, b2, b3 = spread.brokers
    c1 = amqp_connection(b1)
    depth = c1.channel()
    depth.queue_declare("mgmt-depth", durable=True)  # led by broker 1 (client-local)
    depth.confirm_delivery()
    for i in range(3):
        depth.basic_publish("", "mgmt-depth", b"d%d" % i, pika.BasicProperties(delivery_mode=2))
    c2 = amqp_connection(b2)
    ch = c2.channel()
    ch.queue_declare("mgmt-seen", durable=True)
    ch.basic_qos(prefetch_count=7)
    ch.basic_consume("mgmt-seen", lambda *a: None, consumer_tag="seen-tag")
    api = f"http://{b3.ip}:{b3.ports['http']}/api"

    def get(path: str):
        answer = requests.get(api + path, auth=AUTH, timeout=10)
        assert answer.status_code == 200, (path, answer.status_code, answer.text)
        return answer.json()

    try:
        by_node = wait_until(lambda: (lambda found: found if {"gateway@1", "gateway@2"} <= set(found) else None)(
            _amqp_by_node(get("/connections"))), timeout=30, what="broker 3 listing the clients of brokers 1 and 2")
        assert "gateway@3" not in by_node and len(by_node["gateway@1"]) == len(by_node["gateway@2"]) == 1, by_node
        on_b2 = by_node["gateway@2"][0]
        assert on_b2["vhost"] == "/" and on_b2["channels"] == 1
        assert {r["name"] for r in get("/vhosts/%2F/connections") if r["protocol"] == "AMQP 0-9-1"} == \
            {by_node["gateway@1"][0]["name"], on_b2["name"]}

        channels = {c["node"]: c for c in get("/channels")}
        assert channels["gateway@2"]["consumer_count"] == 1 and channels["gateway@2"]["prefetch_count"] == 7
        assert channels["gateway@1"]["consumer_count"] == 0
        consumers = [c for c in get("/consumers/%2F") if c["consumer_tag"] == "seen-tag"]
        assert len(consumers) == 1 and consumers[0]["channel_details"]["node"] == "gateway@2"
        assert consumers[0]["queue"] == {"name": "mgmt-seen", "vhost": "/"}

        overview = get("/overview")  # the cluster's totals, as RabbitMQ's overview gives them
        assert overview["object_totals"]["consumers"] == 1 and overview["object_totals"]["queues"] == 2, overview
        assert overview["queue_totals"]["messages"] == 3 and overview["queue_totals"]["messages_ready"] == 3
        assert overview["object_totals"]["channels"] == 2
        nodes = {n["name"]: n for n in get("/nodes")}  # each broker's own figures, as it reports them
        assert {name: int(n["os_pid"]) for name, n in nodes.items()} == \
            {f"gateway@{b.node_id}": b.process.proc.pid for b in (b1, b2, b3)}
        assert all(n["mem_used"] > 0 and n["fd_used"] > 0 and n["disk_free"] > 0 for n in nodes.values()), nodes
        assert get("/nodes/gateway@2")["os_pid"] == str(b2.process.proc.pid)
        assert get("/nodes/gateway@1/memory")["memory"]["total"]["rss"] == pytest.approx(nodes["gateway@1"]["mem_used"],
                                                                                       rel=0.5)
        assert get("/health/checks/alarms") == {"status": "ok"}
        vhost = get("/vhosts/%2F")
        assert (vhost["messages"], vhost["messages_ready"]) == (3, 3), vhost
        assert vhost["cluster_state"] == {f"gateway@{n}": "running" for n in (1, 2, 3)}
        assert [v for v in get("/vhosts") if v["name"] == "/"][0]["messages"] == 3

        gets = f"{api}/queues/%2F/mgmt-depth/get"  # led by broker 1: taken over a link to it
        peeked = requests.post(gets, auth=AUTH, json={"count": 2, "ackmode": "ack_requeue_true", "encoding": "auto"},
                               timeout=30)
        assert peeked.status_code == 200, peeked.text
        assert [(m["payload"], m["message_count"]) for m in peeked.json()] == [("d0", 2), ("d1", 1)]
        taken = requests.post(gets, auth=AUTH, json={"count": 5, "ackmode": "ack_requeue_false", "encoding": "auto"},
                              timeout=30).json()
        assert [(m["payload"], m["redelivered"]) for m in taken] == [("d0", True), ("d1", True), ("d2", False)]
        assert wait_until(lambda: get("/queues/%2F/mgmt-depth")["messages"] == 0 or None, timeout=15,
                          what="mgmt-depth empty at its leader")

        for i in range(4):
            depth.basic_publish("", "mgmt-depth", b"p%d" % i, pika.BasicProperties(delivery_mode=2))
        purged = requests.delete(f"{api}/queues/%2F/mgmt-depth/contents", auth=AUTH, timeout=30)
        assert purged.status_code == 204, purged.text
        assert depth.queue_declare("mgmt-depth", passive=True).method.message_count == 0
        depth.basic_publish("", "mgmt-depth", b"kept", pika.BasicProperties(delivery_mode=2))
        refused = requests.delete(f"{api}/queues/%2F/mgmt-depth?if-empty=true", auth=AUTH, timeout=30)
        assert refused.status_code == 400 and "not empty" in refused.json()["reason"], refused.text
        refused = requests.delete(f"{api}/queues/%2F/mgmt-seen?if-unused=true", auth=AUTH, timeout=30)
        assert refused.status_code == 400 and "in use" in refused.json()["reason"], refused.text
        assert depth.queue_declare("mgmt-depth", passive=True).method.message_count == 1

        name = urllib.parse.quote(on_b2["name"], safe="")
        assert get(f"/connections/{name}")["node"] == "gateway@2"
        assert [c["number"] for c in get(f"/connections/{name}/channels")] == [1]
        assert get(f"/channels/{urllib.parse.quote(channels['gateway@2']['name'], safe='')}")["node"] == "gateway@2"

        closed = requests.delete(f"{api}/connections/{name}", auth=AUTH, headers={"X-Reason": "moved away"}, timeout=10)
        assert closed.status_code == 204, closed.text
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            for _ in range(100):
                c2.process_data_events(time_limit=0.1)
        assert info.value.reply_code == 320 and "moved away" in info.value.reply_text
        wait_until(lambda: "gateway@2" not in _amqp_by_node(get("/connections")), timeout=15,
                   what="the closed connection gone from the listing")
        assert "gateway@1" in _amqp_by_node(get("/connections"))
        missing = requests.delete(f"{api}/connections/{name}", auth=AUTH, timeout=10)
        assert missing.status_code == 404, missing.text
        assert requests.get(f"{api}/connections/{name}", auth=AUTH, timeout=10).status_code == 404

        b1.kill()  # mgmt-depth, a classic queue, has no leader now: a get says so rather than hang
        late = requests.post(gets, auth=AUTH, json={"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"},
                             timeout=60)
        assert late.status_code == 503 and "mgmt-depth" in late.json()["reason"], late.text

        b1.extra_args = (*b1.extra_args, "--disk-free-limit-mb", str(1 << 40))  # back with its disk alarm on
        b1.start()

        def alarms():
            answer = requests.get(f"{api}/health/checks/alarms", auth=AUTH, timeout=10)
            return answer.json() if answer.status_code == 503 else None
        failed = wait_until(alarms, timeout=60, what="broker 3's cluster-wide alarms check naming broker 1")
        assert failed["alarms"] == [{"node": "gateway@1", "resource": "disk"}], failed
        assert get("/health/checks/local-alarms") == {"status": "ok"}  # broker 3's own: none
    finally:
        for connection in (c1, c2):
            try:
                if connection.is_open:
                    connection.close()
            except pika.exceptions.AMQPError:
                pass  # its broker was killed


def test_any_broker_shows_every_partition_of_a_topic_with_its_leaders_offsets(spread):
    """A topic of 6 partitions with one replica each is spread over the three brokers: broker 3's
    management API shows the offsets and the message count of the partitions it does not hold too."""
    b1, b2, b3 = spread.brokers
    topic = "mgmt-offsets"
    create_topic(spread.bootstrap(), topic, 6, 1)
    producer = Producer({"bootstrap.servers": spread.bootstrap()})
    for p in range(6):
        for i in range(p + 1):  # partition p holds p + 1 records
            producer.produce(topic, value=b"%d" % i, partition=p)
    assert producer.flush(30) == 0
    api = f"http://{b3.ip}:{b3.ports['http']}/api"
    doc = requests.get(f"{api}/topics/{topic}", auth=AUTH, timeout=30).json()
    details = {d["partition"]: d for d in doc["partition_details"]}
    assert {d["leader"] for d in details.values()} == {1, 2, 3}, details  # (some held elsewhere: the point)
    for p, d in details.items():
        assert "error" not in d, d
        assert (d["log_start_offset"], d["high_watermark"], d["last_stable_offset"]) == (0, p + 1, p + 1), d
    assert doc["messages"] == 21
    listed = [t for t in requests.get(f"{api}/topics", auth=AUTH, timeout=30).json() if t["name"] == topic]
    assert listed[0]["messages"] == 21
