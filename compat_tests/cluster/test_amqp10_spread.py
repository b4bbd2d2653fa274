"""AMQP 1.0 in cluster mode 'spread': a client on any broker uses queues and streams led by another.

One 3-broker ``--amqp-cluster-mode spread`` cluster for the module (its tests share it; the last
one kills a broker). Clients are RabbitMQ 4's own rabbitmq-amqp-python-client, each connected to
a chosen broker. What holds: the ``/management`` node of a broker that does not lead a queue
declares it, counts it and purges it at its leader; a publisher's ``accepted`` comes once the
leader has stored the message; a receiver's link credit bounds what the leader hands out (a
drain gets what the leader has, then ends), and every outcome (accepted, released, rejected, modified) is carried out at the leader, rejected
ones dead-lettered there; a receiver's detach or connection close gives its unsettled messages
back at the leader; a stream led elsewhere (created with ``x-stream-initial-offset``, so its
replicas start where its leader does) is read from this broker's replica; messages accepted
into a quorum queue survive kill -9 of its leader and are read through a surviving broker.
"""
from __future__ import annotations

import time
import uuid

import pytest
from proton import Timeout
from proton.utils import BlockingConnection
from rabbitmq_amqp_python_client import (
    AddressHelper, AMQPMessagingHandler, ClassicQueueSpecification, Converter, Environment, OffsetSpecification,
    OutcomeState, QuorumQueueSpecification, StreamConsumerOptions, ValidationCodeException,
)
from rabbitmq_amqp_python_client.qpid.proton import Message

from compat_tests.cluster.cluster import make_cluster, metadata, partition_view
from compat_tests.rabbitmq import amqp_greets
from compat_tests.support import wait_until
from gateway.zookeeper_node import ensure_chroot

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def spread10(zookeeper, tmp_path_factory):
    zk = zookeeper.hosts + f"/gw-amqp10-spread-{uuid.uuid4().hex[:8]}"
    ensure_chroot(zookeeper.hosts, zk[len(zookeeper.hosts):])
    cluster = make_cluster(tmp_path_factory.mktemp("amqp10-spread"), zk, n=3,
                           extra_args=("--amqp-cluster-mode", "spread"))
    try:
        cluster.start()
        for b in cluster.brokers:
            wait_until(lambda: amqp_greets(b.ip, b.ports["amqp"]), timeout=60, interval=0.2,
                       what=f"broker {b.node_id} to serve AMQP")
        yield cluster
    finally:
        cluster.close()


class Client:
    """One AMQP 1.0 connection to one broker, with its management link."""

    def __init__(self, broker):
        self.env = Environment(f"amqp://guest:guest@{broker.ip}:{broker.ports['amqp']}/")
        self.conn = self.env.connection()
        self.conn.dial()
        self.management = self.conn.management()

    def close(self) -> None:
        try:
            self.management.close()
            self.conn.close()
        finally:
            self.env.close()


@pytest.fixture
def clients(spread10):
    opened: dict[int, Client] = {}

    def client(node_id: int) -> Client:
        if node_id not in opened:
            opened[node_id] = Client(spread10.by_id(node_id))
        return opened[node_id]
    yield client
    for c in opened.values():
        try:
            c.close()
        except Exception:
            pass


class _Enough(Exception):
    pass


class Settling(AMQPMessagingHandler):
    """Settles each delivery as ``plan(body, nth time seen)`` says ("accept", "requeue",
    "discard", "discard_with_annotations", "requeue_with_annotations" or None: leave it
    unsettled); stops the consumer's run() after ``count`` deliveries."""

    def __init__(self, count: int, plan=lambda body, seen: "accept"):
        super().__init__()
        self.count, self.plan = count, plan
        self.got: list[str] = []
        self.offsets: list[int] = []  # a stream's x-stream-offset annotations

    def on_amqp_message(self, event) -> None:
        if len(self.got) >= self.count:
            return  # (the client's own credit top-up brought more: left unsettled, as it is closing)
        body = Converter.bytes_to_string(event.message.body)
        self.got.append(body)
        annotations = event.message.annotations or {}
        if "x-stream-offset" in annotations:
            self.offsets.append(annotations["x-stream-offset"])
        action = self.plan(body, self.got.count(body))
        if action in ("discard_with_annotations", "requeue_with_annotations"):
            getattr(self.delivery_context, action)(event, {"x-opt-why": "test"})
        elif action is not None:
            getattr(self.delivery_context, action)(event)
        if len(self.got) >= self.count:
            raise _Enough()


def consume(client: Client, address: str, handler: Settling, close: bool = True, **kw):
    consumer = client.conn.consumer(address, message_handler=handler, **kw)
    try:
        consumer.run()
    except _Enough:
        pass
    if close:
        consumer.close()
    return consumer


def publish(client: Client, queue: str, bodies) -> None:
    publisher = client.conn.publisher(AddressHelper.queue_address(queue))
    try:
        for body in bodies:
            outcome = publisher.publish(Message(body=Converter.string_to_bytes(body), durable=True))
            assert outcome.remote_state == OutcomeState.ACCEPTED, (body, outcome.remote_state)
    finally:
        publisher.close()


def knows(client: Client, queue: str) -> bool:
    """The client's broker has the queue's definition (made on another broker a moment ago)."""
    try:
        client.management.queue_info(queue)
        return True
    except ValidationCodeException:
        return False


def leader(cluster, topic: str) -> int:
    md = metadata(cluster.bootstrap())
    return partition_view(md, topic)[0][0] if md is not None and topic in md.topics else -1


def test_a_queue_led_by_another_broker_is_declared_published_consumed_and_settled_each_way(spread10, clients):
    work, dlq = f"work-{uuid.uuid4().hex[:6]}", f"dlq-{uuid.uuid4().hex[:6]}"
    spec = QuorumQueueSpecification(name=work, dead_letter_exchange="", dead_letter_routing_key=dlq)
    clients(2).management.declare_queue(ClassicQueueSpecification(name=dlq))  # client-local: led by broker 2
    clients(2).management.declare_queue(spec)
    wait_until(lambda: leader(spread10, work) == 2, timeout=30, what=f"broker 2 leading {work}")
    for other in (1, 3):
        wait_until(lambda: knows(clients(other), work) and knows(clients(other), dlq), timeout=30,
                   what=f"broker {other} knowing {work} and {dlq}")
    clients(1).management.declare_queue(spec)  # the same declaration on a broker that does not lead it
    info = clients(1).management.queue_info(work)
    assert (info.leader, info.message_count, info.queue_type.value) == ("gateway@2", 0, "quorum")

    bodies = [f"m{i}" for i in range(6)]
    publish(clients(3), work, bodies)  # each accepted once broker 2 has it
    wait_until(lambda: clients(1).management.queue_info(work).message_count == 6, timeout=10,
               what="the leader's count through broker 1")

    outcome = {"m0": "accept", "m1": "requeue", "m2": "discard", "m3": "discard_with_annotations",
               "m4": "requeue_with_annotations", "m5": "accept"}
    # m1 and m4 come back once and are accepted then: 8 deliveries, 2 credits at a time
    handler = Settling(8, lambda body, seen: outcome[body] if seen == 1 else "accept")
    consume(clients(1), AddressHelper.queue_address(work), handler, credit=2)
    assert handler.got[:6] == bodies
    assert sorted(handler.got[6:]) == ["m1", "m4"]

    dead = Settling(2)
    consume(clients(3), AddressHelper.queue_address(dlq), dead)
    assert dead.got == ["m2", "m3"]  # rejected and modified(undeliverable-here): dead-lettered at the leader
    assert clients(2).management.queue_info(work).message_count == 0
    assert clients(3).management.purge_queue(dlq) == 0
    clients(1).management.delete_queue(work)
    wait_until(lambda: work not in metadata(spread10.bootstrap()).topics, timeout=30, what=f"{work} deleted")


def test_unsettled_messages_go_back_at_the_leader_on_detach_and_on_connection_close(spread10, clients):
    held = f"held-{uuid.uuid4().hex[:6]}"
    clients(2).management.declare_queue(ClassicQueueSpecification(name=held))  # led by broker 2
    wait_until(lambda: leader(spread10, held) == 2, timeout=30, what=f"broker 2 leading {held}")
    for other in (1, 3):
        wait_until(lambda: knows(clients(other), held), timeout=30, what=f"broker {other} knowing {held}")
    publish(clients(1), held, [f"h{i}" for i in range(4)])

    kept = Settling(4, lambda body, seen: None)  # received, never settled
    consume(clients(3), AddressHelper.queue_address(held), kept, credit=4)  # closed: the link detaches
    assert kept.got == ["h0", "h1", "h2", "h3"]

    again = Settling(2, lambda body, seen: None)
    lost = Client(spread10.by_id(3))
    consume(lost, AddressHelper.queue_address(held), again, close=False, credit=2)
    assert again.got == ["h0", "h1"]
    lost.close()  # the connection goes with two unsettled messages

    everything = Settling(4)
    consume(clients(1), AddressHelper.queue_address(held), everything, credit=10)
    assert sorted(everything.got) == ["h0", "h1", "h2", "h3"]
    wait_until(lambda: clients(2).management.queue_info(held).message_count == 0, timeout=10,
               what=f"{held} empty at its leader")
    assert clients(2).management.queue_info(held).consumer_count == 0


def test_link_credit_bounds_what_the_leader_hands_out_and_a_drain_gets_what_it_has(spread10, clients):
    """python-qpid-proton with no prefetch window, so credit is granted only when the test says
    (rabbitmq-amqp-python-client, and proton's own default, top it up on each delivery)."""
    queue = f"credit-{uuid.uuid4().hex[:6]}"
    clients(2).management.declare_queue(ClassicQueueSpecification(name=queue))  # led by broker 2
    wait_until(lambda: leader(spread10, queue) == 2, timeout=30, what=f"broker 2 leading {queue}")
    wait_until(lambda: knows(clients(1), queue), timeout=30, what=f"broker 1 knowing {queue}")
    publish(clients(2), queue, [f"c{i}" for i in range(6)])
    b1 = spread10.by_id(1)
    conn = BlockingConnection(f"amqp://{b1.ip}:{b1.ports['amqp']}", user="guest", password="guest", timeout=10,
                              allowed_mechs="PLAIN")
    try:
        receiver = conn.create_receiver(f"/queues/{queue}", credit=0)
        receiver.link.flow(2)
        arrived = receiver.fetcher.incoming
        conn.wait(lambda: len(arrived) >= 2, timeout=10, msg="the first two deliveries")
        with pytest.raises(Timeout):  # the leader hands over no more than the credit
            conn.wait(lambda: len(arrived) > 2, timeout=1.5)
        assert receiver.link.credit == 0

        def take(n: int) -> list[str]:
            out = []
            for _ in range(n):
                message = receiver.fetcher.pop()  # (its body is a view that dies with it)
                out.append(bytes(message.body).decode())
                receiver.accept()
            return out
        assert take(2) == ["c0", "c1"]
        started = time.monotonic()
        receiver.link.drain(3)  # three of the four the leader holds come, then the drain ends
        conn.wait(lambda: receiver.link.credit == 0 and not receiver.link.draining(), timeout=10,
                  msg="the drain to end")
        assert take(len(arrived)) == ["c2", "c3", "c4"]
        receiver.link.drain(5)  # one left: it comes, and the rest of the credit is used up
        conn.wait(lambda: receiver.link.credit == 0 and not receiver.link.draining(), timeout=10,
                  msg="the second drain to end")
        assert take(len(arrived)) == ["c5"]
        receiver.link.drain(2)  # nothing left: the leader says so at once, not after its fetch wait
        conn.wait(lambda: receiver.link.credit == 0 and not receiver.link.draining(), timeout=10,
                  msg="the empty drain to end")
        print(f"[amqp10-spread] three drains across brokers in {time.monotonic() - started:.2f} s", flush=True)
        assert time.monotonic() - started < 4  # (a fetch parked at the leader waits 5 s)
        assert len(arrived) == 0
    finally:
        conn.close()
    assert clients(2).management.queue_info(queue).message_count == 0


def test_a_stream_led_by_another_broker_is_read_from_a_replica_here(spread10, clients):
    stream = f"st-{uuid.uuid4().hex[:6]}"
    # x-stream-initial-offset: the leader's log starts at 500, and its replicas start there too
    declaration = {"durable": True, "arguments": {"x-queue-type": "stream", "x-stream-initial-offset": 500}}

    def declare(node_id: int) -> None:
        clients(node_id).management.request(declaration, AddressHelper.queue_address(stream), "PUT", [200])
    declare(2)
    wait_until(lambda: leader(spread10, stream) == 2, timeout=30, what=f"broker 2 leading {stream}")
    wait_until(lambda: knows(clients(3), stream), timeout=30, what=f"broker 3 knowing {stream}")
    declare(3)  # the answer waits for broker 3's replica
    publish(clients(3), stream, [f"s{i}" for i in range(10)])
    first = Settling(10)
    consume(clients(3), AddressHelper.queue_address(stream), first,
            consumer_options=StreamConsumerOptions(offset_specification=OffsetSpecification.first))
    assert first.got == [f"s{i}" for i in range(10)]
    assert first.offsets == list(range(500, 510))
    wait_until(lambda: knows(clients(1), stream), timeout=30, what=f"broker 1 knowing {stream}")
    declare(1)
    later = Settling(3)
    consume(clients(1), AddressHelper.queue_address(stream), later,
            consumer_options=StreamConsumerOptions(offset_specification=507))
    assert later.got == ["s7", "s8", "s9"]


def test_accepted_messages_of_a_quorum_queue_survive_kill_9_of_its_leader(spread10, clients):
    """Last in the module: broker 1 stays down."""
    ledger = f"ledger-{uuid.uuid4().hex[:6]}"
    clients(1).management.declare_queue(QuorumQueueSpecification(name=ledger))  # led by broker 1
    wait_until(lambda: leader(spread10, ledger) == 1, timeout=30, what=f"broker 1 leading {ledger}")
    spread10.wait_isr_full(ledger, timeout=60)
    wait_until(lambda: knows(clients(2), ledger), timeout=30, what=f"broker 2 knowing {ledger}")
    clients(2).management.declare_queue(QuorumQueueSpecification(name=ledger))
    bodies = [f"l{i}" for i in range(50)]
    publish(clients(2), ledger, bodies)  # accepted: on every in-sync replica

    spread10.by_id(1).kill()
    started = time.monotonic()
    wait_until(lambda: leader(spread10, ledger) in (2, 3), timeout=60, what=f"a new leader of {ledger}")
    survivors = Settling(50)
    consume(clients(3), AddressHelper.queue_address(ledger), survivors, credit=20)
    print(f"[amqp10-spread] {ledger}: new leader {leader(spread10, ledger)}, all 50 read through broker 3 "
          f"{time.monotonic() - started:.1f} s after the kill", flush=True)
    assert sorted(survivors.got, key=lambda b: int(b[1:])) == bodies
