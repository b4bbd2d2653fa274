"""The RabbitMQ stream protocol on a spread cluster (``--amqp-cluster-mode spread``), with rstream.

Three brokers, each with a stream listener it registers in ZooKeeper. What holds: Metadata on
any broker names a stream's leader and its in-sync replicas by their stream addresses (the same
brokers the Kafka Metadata names for the stream's topic); streams created over the stream
protocol get three replicas and super-stream partitions are led by different brokers; a
publisher declared away from the leader is told STREAM_NOT_AVAILABLE; and across a kill -9 of
the leader, a consumer reading from a replica gets every confirmed message once and in order,
while the stored offset and the publisher's sequence are still there after the failover.
"""
from __future__ import annotations

import asyncio
import time

import pytest
from rstream import (AMQPMessage, ConfirmationStatus, Consumer, ConsumerOffsetSpecification, MessageContext,
                     OffsetType, Producer, amqp_decoder)
from rstream.exceptions import StreamDoesNotExist, StreamNotAvailable

from compat_tests.cluster.cluster import LISTENERS, Cluster, free_port, make_cluster, metadata, partition_view
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
    request.node.cluster = c
    try:
        c.start()
        yield c
    finally:
        c.close()

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
        finally:
            await producer.close()
    run(create())

    leader, replicas, isr = _kafka_view(spread, "metrics")[0]
    assert len(replicas) == 3  # RabbitMQ's default initial cluster size, all brokers here
    want = (_address(by_id[leader]), sorted(_address(by_id[b]) for b in isr if b != leader))
    for broker in spread.brokers:  # every broker answers alike, with the brokers' own stream addresses
        assert run(_leader_and_replicas(broker, "metrics")) == want

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
