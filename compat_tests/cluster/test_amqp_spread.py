"""AMQP in cluster mode 'spread': every broker serves AMQP, each queue is led where it was placed.

Three brokers with ``--amqp-cluster-mode spread``; pika clients connected to chosen brokers.
What holds: a definition made on one broker is known on the others; a queue is led by the broker
its declaration was made on (client-local) or, with ``x-queue-leader-locator: balanced``, spread
over the brokers; messages published with confirms on any broker reach a queue led by another,
in the order each channel sent them, and are all read back at the leader.
"""
from __future__ import annotations

import collections
import subprocess
import sys
import time

import pika
import pytest
import requests

from compat_tests.cluster.clients import amqp_connection, amqp_knows
from compat_tests.cluster.cluster import Cluster, metadata, partition_view
from compat_tests.support import wait_until

def _knows_queue(broker, name: str) -> bool:
    return amqp_knows(broker, lambda ch: ch.queue_declare(name, passive=True))


def _knows_binding(broker, exchange: str, queue: str) -> bool:
    """The broker's own management API lists the binding (served from its own copy of the model)."""
    url = f"http://{broker.ip}:{broker.ports['http']}/api/bindings/%2F/e/{exchange}/q/{queue}"
    try:
        answer = requests.get(url, auth=("guest", "guest"), timeout=5)
    except requests.RequestException:
        return False
    return answer.status_code == 200 and len(answer.json()) > 0


def _leader(cluster: Cluster, topic: str) -> int:
    md = metadata(cluster.bootstrap())
    return partition_view(md, topic)[0][0] if topic in md.topics else -1


def test_definitions_made_on_one_broker_route_publishes_on_the_others(spread):
    b1, b2, b3 = spread.brokers
    c1 = amqp_connection(b1)
    ch = c1.channel()
    ch.exchange_declare("orders", "topic", durable=True)
    ch.queue_declare("eu-orders", durable=True)  # client-local: led by broker 1
    ch.queue_bind("eu-orders", "orders", "eu.#")
    c1.close()
    assert wait_until(lambda: _leader(spread, "eu-orders") == 1, timeout=30, what="broker 1 leading eu-orders")
    for other in (b2, b3):
        wait_until(lambda: _knows_binding(other, "orders", "eu-orders"), timeout=30,
                   what=f"broker {other.node_id} knowing the binding of eu-orders")

    sent = collections.defaultdict(list)
    for publisher in (b2, b3):
        connection = amqp_connection(publisher)
        channel = connection.channel()
        channel.confirm_delivery()
        for i in range(200):
            body = f"{publisher.node_id}-{i}"
            channel.basic_publish("orders", f"eu.{i % 7}", body.encode(),
                                  pika.BasicProperties(delivery_mode=2), mandatory=True)
            sent[publisher.node_id].append(body)
        connection.close()

    c1 = amqp_connection(b1)
    ch = c1.channel()
    got = []
    for _ in range(400):
        method, _, body = ch.basic_get("eu-orders", auto_ack=True)
        if method is None:
            break
        got.append(body.decode())
    c1.close()
    assert sorted(got) == sorted(sent[2] + sent[3])
    for node_id in (2, 3):  # per-channel order kept across the hop
        assert [m for m in got if m.startswith(f"{node_id}-")] == sent[node_id]


def test_a_binding_routes_publishes_on_another_broker_as_soon_as_its_ok_came(spread):
    """As on RabbitMQ, whose declare-ok and bind-ok come once its metadata store has the change: a
    client that goes on through another broker right after the -ok finds the queue and binding
    there (a mandatory publish is routed, not returned)."""
    b1, b2, _ = spread.brokers
    declaring, publishing = amqp_connection(b1), amqp_connection(b2)
    try:
        definitions, publisher = declaring.channel(), publishing.channel()
        definitions.exchange_declare("instant", "direct", durable=True)
        # (once broker 2 follows the model: a cluster just started may still be adding its replica)
        wait_until(lambda: amqp_knows(b2, lambda ch: ch.exchange_declare("instant", passive=True)), timeout=30,
                   what="broker 2 knowing the exchange")
        publisher.confirm_delivery()
        for i in range(20):
            definitions.queue_declare(f"instant-{i}", durable=True)
            definitions.queue_bind(f"instant-{i}", "instant", f"key-{i}")
            # pika raises UnroutableError if it comes back unroutable
            publisher.basic_publish("instant", f"key-{i}", b"%d" % i, pika.BasicProperties(delivery_mode=2),
                                    mandatory=True)
        for i in range(20):
            method, _, body = definitions.basic_get(f"instant-{i}", auto_ack=True)
            assert method is not None and body == b"%d" % i
    finally:
        declaring.close()
        publishing.close()


def test_balanced_queues_spread_their_leaders_and_client_local_ones_stay(spread):
    b1 = spread.brokers[0]
    connection = amqp_connection(b1)
    ch = connection.channel()
    for i in range(15):
        ch.queue_declare(f"bal-{i}", durable=True, arguments={"x-queue-leader-locator": "balanced"})
    for i in range(3):
        ch.queue_declare(f"local-{i}", durable=True)
    connection.close()

    def leaders():
        view = metadata(spread.bootstrap())
        names = [f"bal-{i}" for i in range(15)] + [f"local-{i}" for i in range(3)]
        if any(name not in view.topics for name in names):
            return None
        found = {name: partition_view(view, name)[0][0] for name in names}
        return found if all(leader > 0 for leader in found.values()) else None

    found = wait_until(leaders, timeout=30, what="every queue topic with a leader")
    assert all(found[f"local-{i}"] == 1 for i in range(3)), found
    per_broker = collections.Counter(found[f"bal-{i}"] for i in range(15))
    assert set(per_broker) == {1, 2, 3} and max(per_broker.values()) - min(per_broker.values()) <= 3, per_broker

    # a balanced queue led by another broker takes publishes made on broker 1 and keeps them there
    remote = next(f"bal-{i}" for i in range(15) if found[f"bal-{i}"] != 1)
    leader = spread.by_id(found[remote])
    wait_until(lambda: _knows_queue(leader, remote), timeout=30, what=f"broker {leader.node_id} serving {remote}")
    connection = amqp_connection(b1)
    ch = connection.channel()
    ch.confirm_delivery()
    for i in range(50):
        ch.basic_publish("", remote, f"m{i}".encode(), pika.BasicProperties(delivery_mode=2))
    connection.close()
    connection = amqp_connection(leader)
    ch = connection.channel()
    ok = ch.queue_declare(remote, passive=True)
    assert ok.method.message_count == 50
    connection.close()


def test_a_consumer_on_another_broker_gets_every_message_once_and_its_unacked_ones_come_back(spread):
    b1, b2, b3 = spread.brokers
    connection = amqp_connection(b1)
    ch = connection.channel()
    ch.queue_declare("work", durable=True)  # led by broker 1
    ch.confirm_delivery()
    for i in range(300):
        ch.basic_publish("", "work", f"w{i}".encode(), pika.BasicProperties(delivery_mode=2))
    connection.close()
    wait_until(lambda: _knows_queue(b2, "work") and _knows_queue(b3, "work"), timeout=30,
               what="brokers 2 and 3 knowing queue work")

    # a consumer on broker 2 takes 20 with a prefetch of 10 and leaves without acking the last 10
    c2 = amqp_connection(b2)
    ch2 = c2.channel()
    ch2.basic_qos(prefetch_count=10)
    first = []
    for method, _, body in ch2.consume("work", inactivity_timeout=30):
        assert method is not None, f"no delivery on broker 2 after {len(first)}"
        first.append((method.delivery_tag, body.decode(), method.redelivered))
        if len(first) <= 10:
            ch2.basic_ack(method.delivery_tag)
        if len(first) == 20:
            break
    c2.close()
    assert not any(r for _, _, r in first)
    acked = {body for _, body, _ in first[:10]}
    unacked = {body for _, body, _ in first[10:]}

    # a consumer on broker 3 gets all the rest: the 10 unacked flagged redelivered, none of the acked
    c3 = amqp_connection(b3)
    ch3 = c3.channel()
    ch3.basic_qos(prefetch_count=50)
    rest = {}
    for method, _, body in ch3.consume("work", inactivity_timeout=30):
        assert method is not None, f"no delivery on broker 3 after {len(rest)}"
        rest[body.decode()] = method.redelivered
        ch3.basic_ack(method.delivery_tag)
        if len(rest) == 290:
            break
    c3.close()
    assert not acked & set(rest)
    assert set(rest) | acked == {f"w{i}" for i in range(300)}
    assert {body for body, redelivered in rest.items() if redelivered} == unacked

    connection = amqp_connection(b1)
    assert connection.channel().queue_declare("work", passive=True).method.message_count == 0
    connection.close()


def test_basic_get_on_another_broker_takes_acks_and_requeues(spread):
    b1, b2, _ = spread.brokers
    connection = amqp_connection(b1)
    ch = connection.channel()
    ch.queue_declare("jobs", durable=True)
    ch.confirm_delivery()
    for i in range(5):
        ch.basic_publish("", "jobs", f"j{i}".encode(), pika.BasicProperties(delivery_mode=2))
    connection.close()
    wait_until(lambda: _knows_queue(b2, "jobs"), timeout=30, what="broker 2 knowing queue jobs")

    c2 = amqp_connection(b2)
    ch = c2.channel()
    method, _, body = ch.basic_get("jobs", auto_ack=True)
    assert body == b"j0" and not method.redelivered
    method, _, body = ch.basic_get("jobs")
    assert body == b"j1"
    ch.basic_nack(method.delivery_tag, requeue=True)
    seen = []
    while True:
        method, _, body = ch.basic_get("jobs")
        if method is None:
            break
        seen.append((body, method.redelivered))
        ch.basic_ack(method.delivery_tag)
    c2.close()
    assert sorted(seen) == [(b"j1", True), (b"j2", False), (b"j3", False), (b"j4", False)]


def test_an_exclusive_reply_queue_on_one_broker_gets_replies_published_on_another(spread):
    _, b2, b3 = spread.brokers
    client = amqp_connection(b2)
    ch = client.channel()
    reply_to = ch.queue_declare("", exclusive=True).method.queue  # transient, led by broker 2

    def visible_on_b3():
        connection = amqp_connection(b3)
        try:
            connection.channel().queue_declare(reply_to, passive=True)
            return False  # an exclusive queue of another connection answers 405 even to a passive declare
        except pika.exceptions.ChannelClosedByBroker as exc:
            return exc.reply_code == 405
        finally:
            if connection.is_open:
                connection.close()

    wait_until(visible_on_b3, timeout=30, what=f"broker 3 knowing the exclusive queue {reply_to}")
    server = amqp_connection(b3)
    sch = server.channel()
    sch.confirm_delivery()
    for i in range(20):
        sch.basic_publish("", reply_to, f"reply-{i}".encode(), mandatory=True)
    server.close()
    got = []
    for method, _, body in ch.consume(reply_to, auto_ack=True, inactivity_timeout=20):
        assert method is not None, f"only {got} arrived"
        got.append(body.decode())
        if len(got) == 20:
            break
    assert got == [f"reply-{i}" for i in range(20)]
    client.close()


@pytest.mark.timeout(600)
def test_a_quorum_queue_fails_over_with_clients_on_other_brokers_and_loses_no_confirmed_message(spread):
    from compat_tests.cluster.clients import AckingConsumer, ConfirmingPublisher, drain_queue
    b1 = spread.brokers[0]
    arguments = {"x-queue-type": "quorum"}
    connection = amqp_connection(b1)
    connection.channel().queue_declare("ledger", durable=True, arguments=arguments)  # led by broker 1
    connection.close()
    wait_until(lambda: _leader(spread, "ledger") == 1, timeout=30, what="broker 1 leading ledger")
    spread.wait_isr_full("ledger", timeout=60)
    for other in spread.brokers[1:]:
        wait_until(lambda: _knows_queue(other, "ledger"), timeout=30, what=f"broker {other.node_id} knowing ledger")

    class Elsewhere:  # the clients use brokers 2 and 3 only: none of them leads the queue at first
        def live(self):
            return [b for b in spread.live() if b.node_id != 1]

    publisher = ConfirmingPublisher(Elsewhere(), "ledger", arguments)
    consumer = AckingConsumer(Elsewhere(), "ledger", arguments)
    publisher.start()
    consumer.start()
    try:
        wait_until(lambda: len(publisher.confirmed) >= 200 and sum(consumer.consumed.values()) >= 100, timeout=60,
                   what="confirms and deliveries through brokers 2 and 3")
        b1.kill()
        before = len(publisher.confirmed)
        wait_until(lambda: len(publisher.confirmed) > before + 200, timeout=90,
                   what="confirms to resume after the leader's kill -9")
        b1.start()
        spread.wait_registered(timeout=60)
        before = len(publisher.confirmed)
        wait_until(lambda: len(publisher.confirmed) > before + 100, timeout=60, what="confirms after the restart")
    finally:
        publisher.stopping.set()
        consumer.stopping.set()
        publisher.join(30)
        consumer.join(30)
    assert publisher.error is None, repr(publisher.error)
    assert consumer.error is None, repr(consumer.error)
    left = drain_queue(spread, "ledger", arguments)
    got = consumer.consumed + left
    lost = [m for m in publisher.confirmed if got[m] == 0]
    if lost:  # still held for a consumer that is gone: back once its link session ends (30 s without word)
        print(f"[spread-failover] {len(lost)} not read yet: {lost[:5]}; draining again after the session time",
              flush=True)
        time.sleep(32)
        got += drain_queue(spread, "ledger", arguments)
        lost = [m for m in publisher.confirmed if got[m] == 0]
    print(f"[spread-failover] {len(publisher.confirmed)} confirmed, {sum(consumer.consumed.values())} consumed, "
          f"{sum(left.values())} drained, {publisher.reconnects} publisher reconnects, "
          f"{consumer.reconnects} consumer reconnects", flush=True)
    assert not lost, f"{len(lost)} confirmed messages lost, e.g. {lost[:10]}"


def test_every_broker_lists_every_queue_with_its_leader_node(spread):
    b1, b2, b3 = spread.brokers
    for broker in (b1, b2):
        connection = amqp_connection(broker)
        connection.channel().queue_declare(f"led-by-{broker.node_id}", durable=True)
        connection.close()

    def listed(broker):
        url = f"http://{broker.ip}:{broker.ports['http']}/api/queues/%2F"
        try:
            answer = requests.get(url, auth=("guest", "guest"), timeout=5)
        except requests.RequestException:
            return None
        found = {q["name"]: q["node"] for q in answer.json()} if answer.status_code == 200 else {}
        # a queue declared on another broker a moment ago may list before its leader is known here
        known = {"led-by-1", "led-by-2"} <= set(found) and "gateway@-1" not in found.values()
        return found if known else None

    for broker in (b1, b2, b3):
        nodes = wait_until(lambda: listed(broker), timeout=30, what=f"broker {broker.node_id} listing both queues")
        assert nodes["led-by-1"] == "gateway@1" and nodes["led-by-2"] == "gateway@2", (broker.node_id, nodes)


def test_declare_purge_and_delete_from_a_broker_that_does_not_lead_the_queue(spread):
    """Declare-ok and delete-ok figures, if-unused / if-empty and purge of a queue led by broker 2,
    asked on broker 1, with consumers on brokers 2 and 3: as if the queue were local."""
    b1, b2, b3 = spread.brokers
    leader = amqp_connection(b2)
    leader.channel().queue_declare("figures", durable=True)  # client-local: led by broker 2
    c1 = amqp_connection(b1)
    wait_until(lambda: _knows_queue(b1, "figures") and _knows_queue(b3, "figures"), timeout=30,
               what="brokers 1 and 3 knowing queue figures")
    ch = c1.channel()
    ch.confirm_delivery()
    for i in range(3):
        ch.basic_publish("", "figures", b"f%d" % i, pika.BasicProperties(delivery_mode=2))
    ok = ch.queue_declare("figures", durable=True).method
    assert (ok.message_count, ok.consumer_count) == (3, 0)
    api = f"http://{b1.ip}:{b1.ports['http']}/api/queues"
    one = requests.get(f"{api}/%2F/figures", auth=("guest", "guest"), timeout=10).json()
    listed = [q for q in requests.get(api, auth=("guest", "guest"), timeout=10).json() if q["name"] == "figures"]
    for shown in (one, *listed):  # the management API of broker 1 shows the leader's figures
        assert (shown["node"], shown["messages_ready"], shown["messages"], shown["consumers"]) == ("gateway@2", 3, 3, 0)
    assert len(listed) == 1

    consumers = []
    for broker in (b2, b3):  # one consumer at the leader, one on the third broker: one message each
        connection = amqp_connection(broker)
        cch = connection.channel()
        cch.basic_qos(prefetch_count=1)
        cch.basic_consume("figures", lambda *a: None)
        consumers.append(connection)

    def figures():
        for connection in consumers:
            if connection.is_open:
                connection.process_data_events(0)
        ok = ch.queue_declare("figures", passive=True).method
        return ok.message_count, ok.consumer_count
    wait_until(lambda: figures() == (1, 2), timeout=30, what="1 ready message and 2 consumers, seen on broker 1")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        c1.channel().queue_delete("figures", if_unused=True)
    assert info.value.reply_code == 406 and "in use" in info.value.reply_text
    for connection in consumers:
        connection.close()
    wait_until(lambda: figures() == (3, 0), timeout=30, what="the unacked messages back, no consumers")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        c1.channel().queue_delete("figures", if_empty=True)
    assert info.value.reply_code == 406 and "not empty" in info.value.reply_text

    assert ch.queue_purge("figures").method.message_count == 3
    assert figures() == (0, 0)
    assert leader.channel().basic_get("figures")[0] is None  # purged at the leader
    ch.basic_publish("", "figures", b"last", pika.BasicProperties(delivery_mode=2))
    assert ch.queue_delete("figures", if_unused=True).method.message_count == 1
    wait_until(lambda: not _knows_queue(b2, "figures"), timeout=30, what="the leader dropping the queue")
    leader.close()
    c1.close()



def test_a_policy_set_on_one_broker_applies_at_once_at_the_leader_of_its_queue(spread):
    """A delivery-limit policy PUT on broker 1 for a quorum queue led by broker 2 holds there as
    soon as broker 2 knows it: a message rejected twice is dead-lettered. (Broker 2 applies the
    definition as its replica of the state topic gets it, not at its next housekeeping tick.)"""
    b1, b2, _ = spread.brokers
    connection = amqp_connection(b2)
    ch = connection.channel()
    ch.queue_declare("pol-dlq", durable=True)
    ch.queue_declare("pol-q", durable=True, arguments={  # client-local: led by broker 2
        "x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "pol-dlq"})
    wait_until(lambda: _leader(spread, "pol-q") == 2, 30, "broker 2 leading pol-q")
    ch.basic_publish("", "pol-q", b"poison", pika.BasicProperties(delivery_mode=2))
    answer = requests.put(f"http://{b1.ip}:{b1.ports['http']}/api/policies/%2F/pol-limit", auth=("guest", "guest"),
                          json={"pattern": "^pol-q$", "apply-to": "queues", "definition": {"delivery-limit": 1}},
                          timeout=10)
    assert answer.status_code in (201, 204), answer.text
    def known_at_leader() -> bool:  # what broker 2's API lists is what its queues read
        listed = requests.get(f"http://{b2.ip}:{b2.ports['http']}/api/policies/%2F", auth=("guest", "guest"),
                              timeout=5).json()
        return "pol-limit" in {p["name"] for p in listed}
    wait_until(known_at_leader, 10, "broker 2 knowing the policy", interval=0.02)
    for _ in range(2):
        method = wait_until(lambda: ch.basic_get("pol-q")[0], 10, "the message in pol-q")
        ch.basic_reject(method.delivery_tag, requeue=True)
    moved = wait_until(lambda: ch.queue_declare("pol-dlq", passive=True).method.message_count == 1 or None,
                       10, "the message dead-lettered to pol-dlq after its second delivery")
    connection.close()
    assert moved


def test_policies_and_limits_set_on_every_broker_at_once_all_hold_everywhere(spread):
    """Each broker gets its own policies, its own vhost limit and one policy all three set, PUT
    on the three at the same moment (a thread per broker): every broker ends listing every
    policy and limit, and the shared policy with the same definition on all three."""
    import threading
    vhost = "conc"
    base = [f"http://{b.ip}:{b.ports['http']}/api" for b in spread.brokers]
    auth = ("guest", "guest")
    assert requests.put(f"{base[0]}/vhosts/{vhost}", auth=auth, timeout=10).status_code in (201, 204)
    wait_until(lambda: all(requests.get(f"{u}/vhosts/{vhost}", auth=auth, timeout=5).status_code == 200
                           for u in base), 30, "every broker knowing the vhost", interval=0.05)
    limits = ["max-queues", "max-connections", "max-queues"]
    errors: list[str] = []

    def put(i: int) -> None:
        for n in range(5):
            for url, body in ((f"{base[i]}/policies/{vhost}/b{i}-p{n}", {"pattern": f"^b{i}-{n}", "definition":
                                                                        {"max-length": n}}),
                              (f"{base[i]}/policies/{vhost}/shared", {"pattern": "^s", "definition":
                                                                     {"max-length": 10 * i + n}})):
                answer = requests.put(url, auth=auth, json=body, timeout=10)
                if answer.status_code not in (201, 204):
                    errors.append(f"{url}: {answer.status_code} {answer.text}")
        if i < 2:
            answer = requests.put(f"{base[i]}/vhost-limits/{vhost}/{limits[i]}", auth=auth, json={"value": 100 + i},
                                  timeout=10)
            if answer.status_code not in (201, 204):
                errors.append(f"limit on broker {i + 1}: {answer.status_code} {answer.text}")

    threads = [threading.Thread(target=put, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    wanted = {f"b{i}-p{n}" for i in range(3) for n in range(5)} | {"shared"}

    def views() -> list:
        out = []
        for u in base:
            policies = requests.get(f"{u}/policies/{vhost}", auth=auth, timeout=5).json()
            listed = requests.get(f"{u}/vhost-limits/{vhost}", auth=auth, timeout=5).json()
            out.append(({p["name"]: p["definition"] for p in policies}, listed[0]["value"] if listed else {}))
        return out

    def settled():
        seen = views()
        return seen if all(set(p) == wanted for p, _ in seen) and seen[0] == seen[1] == seen[2] else None
    seen = wait_until(settled, 30, "every broker listing every policy, with the same definitions", interval=0.1)
    assert seen[0][1] == {"max-queues": 100, "max-connections": 101}


def test_an_ha_policy_mirrors_a_classic_queue_that_exists_and_it_fails_over(spread):
    """A classic queue declared unmirrored on broker 1 gets a replica on every broker once an
    ``ha-mode: all`` policy matching it is set (as RabbitMQ mirrors a queue when a policy starts to
    match it); when broker 1 is killed another broker leads it with every confirmed message; when
    the policy goes, the queue keeps one replica, on its leader."""
    b1, b2, _ = spread.brokers
    connection = amqp_connection(b1)
    ch = connection.channel()
    ch.queue_declare("mirr.orders", durable=True)  # client-local: led by broker 1, one replica
    ch.confirm_delivery()
    for i in range(50):
        ch.basic_publish("", "mirr.orders", f"m{i}".encode(), pika.BasicProperties(delivery_mode=2))
    connection.close()
    assert wait_until(lambda: _leader(spread, "mirr.orders") == 1, 30, "broker 1 leading mirr.orders")
    api = f"http://{b2.ip}:{b2.ports['http']}/api/policies/%2F/mirror-all"
    answer = requests.put(api, auth=("guest", "guest"), timeout=10,
                          json={"pattern": "^mirr\\.", "definition": {"ha-mode": "all"}, "apply-to": "queues"})
    assert answer.status_code in (201, 204), answer.text

    def view(check):
        md = metadata(spread.bootstrap())
        found = partition_view(md, "mirr.orders").get(0) if md is not None and "mirr.orders" in md.topics else None
        return found if found is not None and check(found) else None
    wait_until(lambda: view(lambda v: sorted(v[1]) == [1, 2, 3] and sorted(v[2]) == [1, 2, 3]), 60,
               "mirr.orders with an in-sync replica on every broker")

    spread.by_id(1).kill()
    wait_until(lambda: view(lambda v: v[0] in (2, 3)), 60, "another broker leading mirr.orders")
    connection = amqp_connection(b2)
    ch = connection.channel()
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 50 and time.monotonic() < deadline:
        try:
            method, _, body = ch.basic_get("mirr.orders", auto_ack=True)
        except pika.exceptions.ChannelClosedByBroker:  # the new leader not open for it yet
            time.sleep(0.2)
            ch = connection.channel()
            continue
        if method is None:
            time.sleep(0.1)
            continue
        got.append(body.decode())
    connection.close()
    assert sorted(got) == sorted(f"m{i}" for i in range(50))

    assert requests.delete(api, auth=("guest", "guest"), timeout=10).status_code == 204
    leader = view(lambda v: True)[0]
    wait_until(lambda: view(lambda v: v[1] == [leader]), 60, "mirr.orders back to one replica, on its leader")


def test_a_broker_whose_state_replica_is_moved_away_and_back_keeps_learning_definitions(spread):
    """Two brokers asking for a replica of the state topic at once: the later reassignment drops
    the earlier one's broker, which asks again and gets a new replica. Forced here with a
    reassignment that leaves broker 3 out: broker 3 must follow its new replica, so a queue
    declared on broker 1 afterwards is known there too."""
    b1, _b2, b3 = spread.brokers
    replicas = partition_view(metadata(spread.bootstrap()), "__amqp_state")[0][1]
    without = [b for b in replicas if b != 3]
    moved = subprocess.run([sys.executable, "-m", "gateway", "admin", "reassign", "--bootstrap", spread.bootstrap(),
                            "--topic", "__amqp_state", "--partition", "0", "--replicas", ",".join(map(str, without)),
                            "--wait", "--timeout", "60"], capture_output=True, text=True, timeout=120)
    assert moved.returncode == 0, moved.stderr
    wait_until(lambda: 3 in partition_view(metadata(spread.bootstrap()), "__amqp_state")[0][1], timeout=30,
               what="broker 3 asking for a replica of the state topic again")
    amqp_connection(b1).channel().queue_declare("after-the-move", durable=True)
    wait_until(lambda: _knows_queue(b3, "after-the-move"), timeout=30,
               what="broker 3 knowing a queue declared on broker 1 after its replica came back")


def test_definitions_imported_through_one_broker_hold_on_every_broker(spread):
    """RabbitMQ's ``POST /api/definitions`` on one node defines for the whole cluster: so here,
    through broker 1's API, and broker 3 exports them, routes through them and serves the queue."""
    b1, b2, b3 = spread.brokers
    doc = {"vhosts": [{"name": "imported"}],
           "permissions": [{"user": "guest", "vhost": "imported", "configure": ".*", "write": ".*", "read": ".*"}],
           "exchanges": [{"name": "orders", "vhost": "imported", "type": "topic", "durable": True,
                          "auto_delete": False, "internal": False, "arguments": {}}],
           "queues": [{"name": "eu-orders", "vhost": "imported", "durable": True, "auto_delete": False,
                       "arguments": {"x-queue-type": "quorum"}}],
           "bindings": [{"source": "orders", "vhost": "imported", "destination": "eu-orders",
                         "destination_type": "queue", "routing_key": "eu.#", "arguments": {}}]}
    answer = requests.post(f"http://{b1.ip}:{b1.ports['http']}/api/definitions", json=doc, auth=("guest", "guest"),
                           timeout=60)
    assert answer.status_code in (200, 201, 204), answer.text

    def exported(broker) -> dict | None:
        url = f"http://{broker.ip}:{broker.ports['http']}/api/definitions/imported"
        try:
            got = requests.get(url, auth=("guest", "guest"), timeout=5)
        except requests.RequestException:
            return None
        if got.status_code != 200:
            return None
        body = last[broker.node_id] = got.json()
        routes = {(b["source"], b["destination"], b["routing_key"]) for b in body.get("bindings", [])}
        return body if ("orders", "eu-orders", "eu.#") in routes else None

    last: dict[int, dict] = {}
    try:
        body = wait_until(lambda: exported(b3), timeout=30, what="broker 3 exporting the imported definitions")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; its last export: {last.get(3)}") from None
    assert [q["name"] for q in body["queues"]] == ["eu-orders"]
    assert body["queues"][0]["arguments"].get("x-queue-type") == "quorum"

    params = lambda b: pika.ConnectionParameters(b.ip, b.ports["amqp"], virtual_host="imported",  # noqa: E731
                                                 connection_attempts=20, retry_delay=0.5)
    publisher = pika.BlockingConnection(params(b2))
    ch = publisher.channel()
    ch.confirm_delivery()
    ch.basic_publish("orders", "eu.paris", b"order 1", pika.BasicProperties(delivery_mode=2))
    publisher.close()
    consumer = pika.BlockingConnection(params(b3))
    ch = consumer.channel()
    method, _props, body = wait_until(lambda: (lambda got: got if got[0] is not None else None)(
        ch.basic_get("eu-orders", auto_ack=True)), timeout=30, what="the routed message on broker 3")
    consumer.close()
    assert body == b"order 1"
