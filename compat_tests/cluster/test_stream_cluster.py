"""The RabbitMQ stream protocol on a spread cluster (``--amqp-cluster-mode spread``), with rstream.

Three brokers, each with a stream listener it registers in ZooKeeper. What holds: Metadata on
any broker names a stream's leader and its in-sync replicas by their stream addresses (the same
brokers the Kafka Metadata names for the stream's topic); streams created over the stream
protocol get three replicas and super-stream partitions are led by different brokers; a
publisher declared away from the leader is told STREAM_NOT_AVAILABLE; and across a kill -9 of
the leader, a consumer reading from a replica gets every confirmed message once and in order,
while the stored offset and the publisher's sequence are still there after the failover. Over
TLS, Metadata names the brokers' TLS stream addresses. A single-active-consumer group spread
over brokers has one active consumer, across a kill -9 of the stream's leader (the new leader
rebuilds the group) and of the active consumer's broker (the next one takes over from the stored
offset); a super stream's group has one active consumer per partition.
"""
from __future__ import annotations

import asyncio
import time

import pytest
from rstream import (AMQPMessage, ConfirmationStatus, Consumer, ConsumerOffsetSpecification, MessageContext,
                     OffsetSpecification, OffsetType, Producer, SuperStreamConsumer, amqp_decoder)
from rstream.exceptions import OffsetNotFound, StreamDoesNotExist, StreamNotAvailable

from compat_tests.cluster.cluster import (LISTENERS, Cluster, free_port, make_cluster, metadata, partition_view,
                                          running)
from compat_tests.security.certs import make_certs
from compat_tests.security.test_stream_security import tls_context
from compat_tests.stream.helpers import numbered, run


@pytest.fixture
def spread_tls(zk_connect, tmp_path, request) -> Cluster:
    """The ``spread`` cluster, each broker with a TLS stream listener too (``broker.tls_port``)."""
    certs = make_certs(tmp_path / "certs")
    c = make_cluster(tmp_path, zk_connect, n=3, extra_args=(
        "--amqp-cluster-mode", "spread", "--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key)),
        listeners=(*LISTENERS, "stream"))
    for broker in c.brokers:  # the fixture's listeners are named --NAME-listen: this one is added by hand
        broker.tls_port = free_port()
        broker.extra_args += ("--stream-tls-listen", f"{broker.ip}:{broker.tls_port}")
    c.certs = certs
    yield from running(c, request)

def _args(broker, **kw) -> dict:
    return {"host": broker.ip, "port": broker.ports["stream"], "username": "guest", "password": "guest", **kw}


def _tls_args(cluster: Cluster, broker, **kw) -> dict:
    return _args(broker, port=broker.tls_port, ssl_context=tls_context(cluster.certs), **kw)


def _address(broker) -> tuple[str, int]:
    return broker.ip, broker.ports["stream"]


async def _retry(make, timeout: float = 60, what: str = "a stream call"):
    """``make()`` again until it returns without raising (brokers still opening, leaders moving)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await make()
        except Exception:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} kept failing for {timeout}s") from None
            await asyncio.sleep(0.5)


async def _open_producer(broker) -> Producer:
    async def attempt():
        producer = Producer(**_args(broker))
        await producer.start()
        return producer
    return await _retry(attempt, what=f"a stream connection to broker {broker.node_id}")


async def _leader_and_replicas(broker, stream: str):
    producer = await _open_producer(broker)
    try:
        leader, replicas = await (await producer.default_client).query_leader_and_replicas(stream)
        return (leader.host, leader.port), sorted((r.host, r.port) for r in replicas)
    finally:
        await producer.close()


def _kafka_view(cluster: Cluster, topic: str):
    md = cluster.wait_isr_full(topic, timeout=60)
    return partition_view(md, topic)


def test_metadata_names_leader_and_replicas_on_every_broker(spread):
    by_id = {b.node_id: b for b in spread.brokers}

    async def create():
        producer = await _open_producer(spread.brokers[0])
        try:
            await _retry(lambda: producer.create_stream("metrics"), what="creating the stream")
            client = await producer.default_client
            leader, _ = await client.query_leader_and_replicas("metrics")  # Create answers once it is led
            assert leader.port in [b.ports["stream"] for b in spread.brokers]
            await client.create_super_stream("invoices", [f"invoices-{i}" for i in range(3)], ["a", "b", "c"])
            # Create answers once every partition is led, and a client publishes next: each
            # partition's leader takes its publisher at once, though it leads a partition other than
            # the topic's first (a partition's own leadership decides, and is looked at when asked)
            for i in range(3):
                await producer.send_wait(f"invoices-{i}", AMQPMessage(body=b"first"))
        finally:
            await producer.close()
    run(create())

    leader, replicas, isr = _kafka_view(spread, "metrics")[0]
    assert len(replicas) == 3  # RabbitMQ's default initial cluster size, all brokers here
    want = (_address(by_id[leader]), sorted(_address(by_id[b]) for b in isr if b != leader))
    for broker in spread.brokers:  # every broker answers alike, with the brokers' own stream addresses
        # (once it has the new stream from its replica of the model: "within a moment", longer on a loaded machine)
        assert run(_retry(lambda: _leader_and_replicas(broker, "metrics"), timeout=30)) == want

    # super-stream partitions are spread: each led by another broker, each with three replicas
    parts = _kafka_view(spread, "invoices")
    assert sorted(p[0] for p in parts.values()) == [1, 2, 3]
    assert all(len(p[1]) == 3 for p in parts.values())
    for index, (p_leader, _, p_isr) in parts.items():
        found = run(_leader_and_replicas(spread.brokers[index], f"invoices-{index}"))
        assert found == (_address(by_id[p_leader]), sorted(_address(by_id[b]) for b in p_isr if b != p_leader))

    async def unknown():
        with pytest.raises(StreamDoesNotExist):
            await _leader_and_replicas(spread.brokers[1], "no-such-stream")
    run(unknown())

    # a publisher declared on a broker that does not lead the stream: RabbitMQ's STREAM_NOT_AVAILABLE
    follower = next(b for b in spread.brokers if b.node_id != leader)

    async def declare_away():
        producer = await _open_producer(follower)
        try:
            client = await producer.default_client
            with pytest.raises(StreamNotAvailable):
                await client.declare_publisher(stream="metrics", reference="away", publisher_id=7)
        finally:
            await producer.close()
    run(declare_away())

    # initial-cluster-size 1: one replica, no other to read from; a broker without it refuses a
    # subscription with STREAM_NOT_AVAILABLE, as RabbitMQ does on a node without a member
    async def single():
        producer = await _open_producer(spread.brokers[0])
        try:
            await producer.create_stream("solo", arguments={"initial-cluster-size": 1})
        finally:
            await producer.close()
    run(single())
    solo_leader, solo_replicas, _ = _kafka_view(spread, "solo")[0]
    assert solo_replicas == [solo_leader]
    elsewhere = next(b for b in spread.brokers if b.node_id != solo_leader)
    assert run(_retry(lambda: _leader_and_replicas(elsewhere, "solo"))) == (_address(by_id[solo_leader]), [])

    async def subscribe_elsewhere():
        producer = await _open_producer(elsewhere)
        try:
            with pytest.raises(StreamNotAvailable):
                await (await producer.default_client).subscribe("solo", subscription_id=3)
        finally:
            await producer.close()
    run(subscribe_elsewhere())


def test_tls_clients_are_told_tls_ports_and_reach_a_stream_led_elsewhere(spread_tls):
    """Over TLS, Metadata names every broker by its TLS stream address (as RabbitMQ tells TLS
    clients its TLS port), so rstream connected to one broker publishes to and consumes from a
    stream led by another, every connection over TLS."""
    cluster = spread_tls
    home, elsewhere = cluster.brokers[0], cluster.brokers[1]
    tls_ports = {b.ports["stream"]: b.tls_port for b in cluster.brokers}
    stream, total = "secure-ledger", 50

    async def create():  # led by the broker the Create came to (client-local), not by ``home``
        producer = Producer(**_tls_args(cluster, elsewhere))
        await producer.start()
        try:
            await producer.create_stream(stream, arguments={"queue-leader-locator": "client-local"})
        finally:
            await producer.close()
    run(_retry(create, what="creating the stream over TLS"))
    leader_id, _, isr = _kafka_view(cluster, stream)[0]
    assert leader_id == elsewhere.node_id

    async def scenario():
        producer = await _retry(lambda: _started(Producer(**_tls_args(cluster, home))), what="a TLS connection")
        try:
            client = await producer.default_client
            leader, replicas = await _retry(lambda: client.query_leader_and_replicas(stream),
                                            what=f"broker {home.node_id} knowing {stream}")
            told = [(leader.host, leader.port)] + [(r.host, r.port) for r in replicas]
            by_id = cluster.by_id
            assert (leader.host, leader.port) == (elsewhere.ip, elsewhere.tls_port)
            assert sorted(told[1:]) == sorted((by_id(b).ip, by_id(b).tls_port) for b in isr if b != leader_id)
            assert not set(p for _, p in told) & set(tls_ports), "a plain stream port was told to a TLS client"
            for i in range(total):  # to the leader (broker 2), over TLS, at the address Metadata gave
                await producer.send_wait(stream, AMQPMessage(body=b"tls-%d" % i))
        finally:
            await producer.close()
        got: list[bytes] = []
        done = asyncio.Event()

        async def on_message(message, context: MessageContext):
            got.append(bytes(message.body if not isinstance(message.body, list) else b"".join(message.body)))
            if len(got) >= total:
                done.set()
        consumer = Consumer(**_tls_args(cluster, home))
        await consumer.start()
        try:
            await consumer.subscribe(stream, on_message, decoder=amqp_decoder,
                                     offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None))
            served_by = consumer._clients[stream]
            assert served_by.port in tls_ports.values()
            await asyncio.wait_for(done.wait(), 30)
        finally:
            await consumer.close()
        return got

    assert run(scenario()) == [b"tls-%d" % i for i in range(total)]


async def _started(client):
    await client.start()
    return client


def test_confirmed_messages_offsets_and_sequence_survive_a_leader_kill(spread):
    stream, total = "payments", 2000
    # the stream is led (client-local) where the consumer name's offsets are coordinated, so the kill
    # moves both: the stored offset must come back from another broker's replica of __consumer_offsets
    coordinator = spread.by_id(_coordinator(spread, "audit"))
    run(_retry(lambda: _create(coordinator, stream, {"queue-leader-locator": "client-local"}),
               what="creating the stream"))
    leader_id = _kafka_view(spread, stream)[0][0]
    assert leader_id == coordinator.node_id
    for broker in spread.brokers:  # each broker applies the new definition from its replica of the model
        run(_retry(lambda: _leader_and_replicas(broker, stream), what=f"broker {broker.node_id} knowing {stream}"))
    leader = spread.by_id(leader_id)
    replica = next(b for b in spread.brokers if b.node_id != leader_id)  # locator of the clients
    confirmed: list[int] = []
    received: list[int] = []

    async def consume_and_publish():
        consumer = Consumer(**_args(replica))
        await consumer.start()
        done = asyncio.Event()

        async def on_message(message, context: MessageContext):
            received.append(int(bytes(message.body if not isinstance(message.body, list)
                                      else b"".join(message.body)).decode()))
            if len(set(received)) >= total:
                done.set()
        await consumer.subscribe(stream, on_message, subscriber_name="audit", decoder=amqp_decoder,
                                 offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None))
        served_by = consumer._clients[stream]
        assert (served_by.host, served_by.port) != _address(leader), "the consumer should read from a replica"

        # phase 1: publish batches with confirms until the leader is killed under the publisher
        producer = await _open_producer(replica)
        n, kill = 0, None

        def on_confirm(status: ConfirmationStatus) -> None:
            if status.is_confirmed:
                confirmed.append(status.message_id)

        def kill_soon() -> None:
            time.sleep(0.3)  # while batches are in flight
            leader.kill()
        try:
            while n < total and not (kill is not None and kill.done()):
                batch = [numbered(AMQPMessage(body=str(i).encode()), i) for i in range(n + 1, n + 11)]
                await asyncio.wait_for(producer.send_batch(stream, batch, publisher_name="ledger",
                                                           on_publish_confirm=on_confirm), 10)
                n += len(batch)
                await asyncio.sleep(0.01)
                if n == 200:
                    await _retry(lambda: _all_confirmed(confirmed, 200), what="200 confirms")
                    await consumer.store_offset(stream, "audit", 149)
                    stored = await _retry(lambda: consumer.query_offset(stream, "audit"), what="the stored offset")
                    assert stored == 149
                    await asyncio.sleep(1)  # the offset commit reaches __consumer_offsets' replicas
                    kill = asyncio.get_running_loop().run_in_executor(None, kill_soon)
        except Exception:
            if kill is None:
                raise  # only the leader's death may stop the first publisher
        finally:
            try:
                await asyncio.wait_for(producer.close(), 10)
            except Exception:
                pass
        assert kill is not None
        await kill
        assert 200 <= len(confirmed) < total, len(confirmed)  # rstream reports confirms in no set order

        # phase 2: a new producer under the same name, at the new leader, goes on after its sequence
        async def sequence():
            producer = await _open_producer(replica)
            try:
                client = await producer._get_or_create_client(stream)
                return producer, await client.query_publisher_sequence(stream=stream, reference="ledger")
            except Exception:
                await producer.close()
                raise
        producer, last = await _retry(sequence, timeout=90, what="the publisher sequence after the failover")
        assert last >= max(confirmed), (last, max(confirmed))
        again: list[int] = []
        try:
            start = max(confirmed) - 20  # sent again: confirmed, not stored twice
            for first in range(start + 1, total + 1, 100):
                ids = range(first, min(first + 100, total + 1))
                batch = [numbered(AMQPMessage(body=str(i).encode()), i) for i in ids]
                await producer.send_batch(stream, batch, publisher_name="ledger",
                                          on_publish_confirm=lambda status: again.append(status.message_id)
                                          if status.is_confirmed else None)
            await _retry(lambda: _all_confirmed(again, total - start), what="the confirms after the failover")
            confirmed.extend(again)
        finally:
            await producer.close()
        offset = await _retry(lambda: consumer.query_offset(stream, "audit"), what="the stored offset")
        try:
            await asyncio.wait_for(done.wait(), 60)
        except asyncio.TimeoutError:
            raise AssertionError(f"read {len(received)} messages, {len(set(received))} distinct, up to "
                                 f"{max(received, default=None)}; confirmed {len(confirmed)}") from None
        await asyncio.sleep(1)  # anything delivered twice would come now
        await consumer.close()
        return offset

    stored = run(consume_and_publish(), timeout=300)
    assert stored == 149  # the stored offset outlived its coordinator's or the leader's death
    assert set(confirmed) <= set(received)  # every confirmed message was read
    assert received == sorted(set(received)) == list(range(1, total + 1))  # once each, in order
    new_leader = partition_view(metadata(spread.bootstrap()), stream)[0][0]
    assert new_leader != leader_id


class _Group:
    """rstream consumers of one single-active-consumer group on one stream, each on a broker of
    the test's choosing: the offsets each receives, the ConsumerUpdates each is sent. Each stores
    every offset it gets; one made active goes on after the group's stored offset (RabbitMQ's recipe)."""

    def __init__(self, cluster: Cluster, stream: str, name: str):
        self.cluster, self.stream, self.name = cluster, stream, name
        self.got: dict[str, list[int]] = {}
        self.updates: dict[str, list[bool]] = {}

    def _handlers(self, label: str):
        async def on_message(message, context: MessageContext):
            self.got[label].append(context.offset)
            await context.consumer.store_offset(self.stream, self.name, context.offset)

        async def on_update(active: bool, context) -> OffsetSpecification:
            self.updates[label].append(active)
            if not active:
                return OffsetSpecification(OffsetType.NEXT, 0)
            # asked again while it fails: the stored offsets' coordinator may be failing over too
            stored = await _retry(lambda: _stored_or_none(context.consumer, self.stream, self.name),
                                  what="the stored offset")
            if stored is None:
                return OffsetSpecification(OffsetType.FIRST, 0)
            return OffsetSpecification(OffsetType.OFFSET, stored + 1)
        return on_message, on_update

    async def consumer_on(self, broker, label: str) -> Consumer:
        """A consumer subscribed on ``broker`` (rstream picks one of the replicas at random: ask again)."""
        self.got[label], self.updates[label] = [], []
        for _ in range(40):
            consumer = Consumer(**_args(broker))
            await consumer.start()
            client = await consumer._get_or_create_client(self.stream)
            if (client.host, client.port) == _address(broker):
                on_message, on_update = self._handlers(label)
                await consumer.subscribe(self.stream, on_message, subscriber_name=self.name,
                                         properties={"single-active-consumer": "true", "name": self.name},
                                         consumer_update_listener=on_update)
                return consumer
            await consumer.close()
        raise AssertionError(f"rstream never picked broker {broker.node_id}")

    async def publish(self, start: int, count: int) -> None:
        async def attempt():
            producer = await _open_producer(self.cluster.live()[0])
            try:
                for i in range(start, start + count):
                    await asyncio.wait_for(producer.send_wait(self.stream, AMQPMessage(body=b"%d" % i)), 10)
            finally:
                await producer.close()
        await _retry(attempt, timeout=90, what="publishing")  # re-sent messages are counted by offset

    async def until(self, predicate, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: got {self.got}, updates {self.updates}")
            await asyncio.sleep(0.1)

    async def stored(self, consumer: Consumer, offset: int) -> None:
        async def check():
            stored = await consumer.query_offset(self.stream, self.name)
            if stored != offset:
                raise AssertionError(f"stored offset {stored}, not {offset} yet")
        await _retry(check, what="the last stored offset")


async def _stored_or_none(consumer: Consumer, stream: str, name: str) -> int | None:
    """The stored offset, None if there is none (an answer, not a failure to ask again)."""
    try:
        return await consumer.query_offset(stream, name)
    except OffsetNotFound:
        return None


def _sac_stream(cluster: Cluster, stream: str):
    """A new stream every broker knows; its leader, and the two other brokers (its replicas)."""
    run(_retry(lambda: _create(cluster.brokers[0], stream), what="creating the stream"))
    leader_id = _kafka_view(cluster, stream)[0][0]
    for broker in cluster.brokers:
        run(_retry(lambda: _leader_and_replicas(broker, stream), what=f"broker {broker.node_id} knowing {stream}"))
    return leader_id, [b for b in cluster.brokers if b.node_id != leader_id]


def test_single_active_consumer_group_spans_brokers_and_a_leader_kill(spread):
    """Two consumers of one single-active-consumer group on two brokers (neither the stream's
    leader): one is active, the other gets nothing; after a kill -9 of the leader the new leader
    rebuilds the group with the same one active; when it closes, the other takes over from the
    stored offset."""
    group = _Group(spread, "orders", "billing")
    leader_id, (first, second) = _sac_stream(spread, group.stream)
    got, updates = group.got, group.updates

    async def scenario():
        a = await group.consumer_on(first, "a")
        await group.until(lambda: updates["a"] == [True], "the first consumer made active")
        b = await group.consumer_on(second, "b")
        try:
            await group.publish(0, 100)
            await group.until(lambda: len(set(got["a"])) >= 100, "the active consumer reading")
            await asyncio.sleep(2)
            assert got["b"] == [] and updates["b"] == [], "two consumers of one group active at once"

            spread.by_id(leader_id).kill()  # the coordinator of the group goes: the new leader rebuilds it
            await group.until(lambda: _leader_of(spread, group.stream) not in (leader_id, None), "a new leader",
                              timeout=90)
            await group.publish(100, 100)
            await group.until(lambda: len(set(got["a"])) >= 200, "the active consumer reading after the failover",
                              timeout=90)
            await asyncio.sleep(4)  # past the new leader's wait for registrations (REBUILD_S)
            assert got["b"] == [] and updates["b"] == [], "the failover left two consumers of one group active"

            last = max(got["a"])
            await group.stored(a, last)
            await a.close()
            await group.until(lambda: updates["b"] == [True], "the second consumer taking over")
            await group.publish(200, 50)
            await group.until(lambda: len(got["b"]) >= 50, "the second consumer reading")
        finally:
            await b.close()
        return last

    last = run(scenario(), timeout=400)
    assert sorted(set(got["a"])) == list(range(last + 1))
    assert got["b"] == list(range(last + 1, last + 51))  # from the stored offset on, nothing twice


def test_single_active_consumer_moves_on_when_its_broker_dies(spread):
    """The active consumer's broker (not the stream's leader) is killed -9: once its ZooKeeper
    session expires the leader drops its consumers and the group's next one, on another broker,
    goes on from the stored offset."""
    group = _Group(spread, "shipments", "dispatch")
    leader_id, (first, second) = _sac_stream(spread, group.stream)
    got, updates = group.got, group.updates

    async def scenario():
        a = await group.consumer_on(first, "a")
        await group.until(lambda: updates["a"] == [True], "the first consumer made active")
        b = await group.consumer_on(second, "b")
        try:
            await group.publish(0, 50)
            await group.until(lambda: len(set(got["a"])) >= 50, "the active consumer reading")
            last = max(got["a"])
            await group.stored(a, last)
            await asyncio.sleep(1)  # the last commit reaches __consumer_offsets' replicas (the kill may take its leader)
            assert got["b"] == [] and updates["b"] == []
            first.kill()
            await group.until(lambda: updates["b"] == [True], "the consumer on a live broker taking over",
                              timeout=60)
            await group.publish(50, 50)
            await group.until(lambda: len(got["b"]) >= 50, "the second consumer reading")
        finally:
            await b.close()
            try:
                await asyncio.wait_for(a.close(), 10)  # its broker is gone
            except Exception:
                pass
        return last

    last = run(scenario(), timeout=300)
    assert got["b"] == list(range(last + 1, last + 51))


def test_single_active_consumer_of_a_super_stream_one_per_partition(spread):
    """Two super-stream consumers of one group, each partition subscribed on whichever replica
    rstream picks: each partition (a stream led by its own broker) has one active consumer, and
    the partitions are spread over the group (partition index mod group size, in join order)."""
    super_stream, name, count = "payroll", "clerks", 20
    partitions = [f"{super_stream}-{i}" for i in range(3)]

    async def create():
        producer = await _open_producer(spread.brokers[0])
        try:
            await (await producer.default_client).create_super_stream(super_stream, partitions, ["0", "1", "2"])
        finally:
            await producer.close()
    run(_retry(create, what="creating the super stream"))
    assert sorted(p[0] for p in _kafka_view(spread, super_stream).values()) == [1, 2, 3]
    for broker in spread.brokers:
        for partition in partitions:
            run(_retry(lambda: _leader_and_replicas(broker, partition), what=f"broker {broker.node_id} knowing it"))
    got: dict[str, dict[str, list[int]]] = {"x": {}, "y": {}}  # consumer -> partition stream -> offsets

    def on_message_of(label: str):
        async def on_message(message, context: MessageContext):
            got[label].setdefault(context.stream, []).append(context.offset)
        return on_message

    async def first(active: bool, context) -> OffsetSpecification:
        return OffsetSpecification(OffsetType.FIRST, 0)

    async def scenario():
        consumers = []
        try:
            for label, broker in (("x", spread.brokers[0]), ("y", spread.brokers[1])):
                consumer = SuperStreamConsumer(**_args(broker), super_stream=super_stream)
                consumers.append(consumer)
                await consumer.start()
                await consumer.subscribe(on_message_of(label), subscriber_name=name, consumer_update_listener=first,
                                         properties={"single-active-consumer": "true", "name": name,
                                                     "super-stream": super_stream})
                await asyncio.sleep(1)  # x joins every partition's group first
            producer = await _open_producer(spread.brokers[2])
            try:
                for partition in partitions:
                    for i in range(count):
                        await producer.send_wait(partition, AMQPMessage(body=b"%d" % i))
            finally:
                await producer.close()
            deadline = time.monotonic() + 60
            while sum(len(o) for c in got.values() for o in c.values()) < 3 * count and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            await asyncio.sleep(2)  # a second active consumer of a partition would deliver now
            return {label: {p: list(offsets) for p, offsets in read.items()} for label, read in got.items()}
        finally:  # (the first to close hands its partitions over to the other, which reads them again)
            for consumer in consumers:
                await consumer.close()

    got = run(scenario(), timeout=200)
    for partition in partitions:
        readers = [label for label in got if got[label].get(partition)]
        assert len(readers) == 1, f"{partition} read by {readers}: {got}"
        assert got[readers[0]][partition] == list(range(count))
    # partition i goes to member i mod 2 of [x, y]
    assert sorted(got["x"]) == [partitions[0], partitions[2]] and sorted(got["y"]) == [partitions[1]], got


def _leader_of(cluster: Cluster, topic: str) -> int | None:
    try:
        leader = partition_view(metadata(cluster.live()[0].bootstrap), topic)[0][0]
    except Exception:
        return None
    return leader if leader >= 0 else None


def _coordinator(cluster: Cluster, group: str) -> int:
    """The broker coordinating ``group``: the leader of its __consumer_offsets partition (Kafka's
    rule: the group id's Java hash code modulo the partition count)."""
    view = _kafka_view(cluster, "__consumer_offsets")
    h = 0
    for ch in group:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    return view[abs(h) % len(view)][0]


async def _all_confirmed(confirmed: list[int], count: int) -> None:
    if len(confirmed) < count:
        raise AssertionError(f"{len(confirmed)} of {count} confirmed")


async def _create(broker, stream: str, arguments: dict | None = None) -> None:
    producer = await _open_producer(broker)
    try:
        await producer.create_stream(stream, arguments=arguments)
    finally:
        await producer.close()
