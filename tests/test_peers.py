"""The inter-broker Kafka client (gateway/cluster/peers.py, peer_apis.py) against a real broker.

The client runs in Twisted's global reactor on a thread of its own (tests/reactor_thread.py);
the tests wait for its Deferreds. The 2-broker cluster case is compat_tests/cluster/test_peers.py.
"""
from __future__ import annotations

import signal
import socket
import threading
import time

import pika
import pytest
from twisted.internet import defer, reactor

from gateway.cluster.peer_apis import ACCEPT, REJECT, RELEASE, ShareMember
from gateway.cluster.peers import PeerClients, PeerTimeout, PeerUnavailable
from tests.brokerproc import start_broker
from tests.reactor_thread import outcome, run
from wire.records import decode_batch, iter_batches, simple_batch

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = start_broker(tmp_path_factory.mktemp("peers") / "data")
    yield b
    b.stop()


@pytest.fixture
def peers(broker):
    pool = run(lambda: PeerClients(reactor, {1: broker.address("kafka")}.get, "peer-test", timeout=10))
    yield pool
    run(pool.close)


def records_at(data: bytes) -> dict[int, bytes]:
    """offset -> value of every record in a records field."""
    out = {}
    for pos, _header in iter_batches(data):
        for r in decode_batch(data, pos).records:
            out[r.offset] = r.value
    return out


def read_all(pool, topic: str, end: int) -> dict[int, bytes]:
    """offset -> value of offsets 0..end-1, fetched until all are in (a Fetch reads from one
    segment, and batches with timestamp 0 roll a segment each: core.log maybe_roll)."""
    got: dict[int, bytes] = {}
    while len(got) < end:
        error, _hw, data = run(pool.fetch, 1, topic, 0, len(got))
        assert error == 0 and data
        got.update(records_at(data))
    return got


def test_pipelined_metadata_calls_are_matched_by_correlation_id(peers):
    run(peers.metadata, 1)  # connected, versions known

    def many():
        ds = [peers.metadata(1, [f"t{i}"]) for i in range(50)]
        in_flight = peers.client(1).in_flight
        return defer.gatherResults(ds).addCallback(lambda answers: (in_flight, answers))
    in_flight, answers = run(many)
    assert in_flight == 50  # all sent before the first answer came back
    assert [a.topics[0].name for a in answers] == [f"t{i}" for i in range(50)]


def test_produce_then_fetch_reads_the_batch_back(peers):
    batch = simple_batch([b"v%d" % i for i in range(100)], timestamp_ms=int(time.time() * 1000))
    run(peers.metadata, 1, ["produced"])  # auto-creates the topic
    error, base = run(peers.produce, 1, "produced", 0, batch, acks=-1)
    assert (error, base) == (0, 0)
    error, base = run(peers.produce, 1, "produced", 0, batch, acks=-1)
    assert (error, base) == (0, 100)
    assert run(peers.produce, 1, "produced", 0, batch, acks=0) == (0, -1)  # no response to wait for
    # one Produce for everything a loop turn gathered for this leader, several topics at once
    answers = run(peers.produce_many, 1, {("produced2", 0): batch, ("produced3", 0): batch})
    assert answers == {("produced2", 0): (0, 0), ("produced3", 0): (0, 0)}
    error, high_watermark, data = run(peers.fetch, 1, "produced", 0, 100)
    assert error == 0 and high_watermark in (200, 300)  # the acks=0 batch may be in already
    got = records_at(data)
    assert [got[o] for o in range(100, 200)] == [b"v%d" % i for i in range(100)]

    def until_all():
        return peers.fetch(1, "produced", 0, 0).addCallback(lambda r: r[1])
    deadline = time.time() + 10
    while run(until_all) != 300 and time.time() < deadline:
        time.sleep(0.05)
    assert run(until_all) == 300


def parked_fetch(topic: str, max_wait_ms: int) -> dict:
    """A Fetch at the end of ``topic`` (one record long): the broker holds it ``max_wait_ms``."""
    return {"replica_id": -1, "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": 1024, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [],
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 1,
                                                         "partition_max_bytes": 1024}]}]}


def test_calls_wait_and_time_out_with_the_broker_and_api_named(peers, broker):
    assert run(peers.produce, 1, "parked", 0, simple_batch([b"x"])) == (0, 0)  # auto-created
    fetch = parked_fetch("parked", 3000)
    started = time.monotonic()
    kind, error = run(lambda: outcome(peers.call(1, 1, fetch, timeout=0.5)))  # parked 3 s at the broker
    assert kind == "error" and isinstance(error, PeerTimeout), (kind, error)
    assert time.monotonic() - started < 2
    assert f"broker 1 at 127.0.0.1:{broker.address('kafka')[1]}" in str(error) and "Fetch" in str(error)
    # the connection is kept: the late answer is dropped and the next call is answered
    assert run(peers.metadata, 1, ["parked"]).topics[0].name == "parked"


def test_unknown_node_fails_at_once(peers):
    kind, error = run(lambda: outcome(peers.metadata(9)))
    assert kind == "error" and isinstance(error, PeerUnavailable) and "broker 9" in str(error)


def test_killed_broker_fails_every_call_in_flight_and_a_restarted_one_is_reached(tmp_path):
    data = tmp_path / "data"
    b = start_broker(data)
    host, port = b.address("kafka")
    pool = run(lambda: PeerClients(reactor, {7: (host, port)}.get, backoff=(0.05, 0.5)))
    try:
        assert run(pool.produce, 7, "slow", 0, simple_batch([b"x"])) == (0, 0)
        fetch = parked_fetch("slow", 20_000)
        calls = run(lambda: [outcome(pool.call(7, 1, fetch)) for _ in range(3)]
                    + [outcome(pool.metadata(7)) for _ in range(5)])
        assert run(lambda: pool.client(7).in_flight) == 8
        b.stop(signal.SIGKILL)
        results = run(lambda: defer.gatherResults(calls), timeout=10)
        assert all(kind == "error" and isinstance(e, PeerUnavailable) for kind, e in results), results
        assert all(f"broker 7 at {host}:{port}" in str(e) for _kind, e in results)
        assert {("Fetch" in str(e)) for _k, e in results} == {True, False}
        # while the broker is down a call fails (after at most its backoff), naming the broker
        kind, error = run(lambda: outcome(pool.metadata(7)))
        assert kind == "error" and f"broker 7 at {host}:{port}" in str(error)
        b = start_broker(data, "--kafka-listen", f"{host}:{port}")
        deadline = time.time() + 10
        while True:
            kind, answer = run(lambda: outcome(pool.metadata(7, ["slow"])))
            if kind == "ok" or time.time() > deadline:
                break
            time.sleep(0.1)
        assert kind == "ok" and answer.topics[0].name == "slow"
    finally:
        run(pool.close)
        b.stop()


def confirming_channel(broker):
    """A pika connection to the broker and a channel of it in confirm mode."""
    host, port = broker.address("amqp")
    conn = pika.BlockingConnection(pika.ConnectionParameters(host, port, credentials=pika.PlainCredentials(
        "guest", "guest"), blocked_connection_timeout=10))
    ch = conn.channel()
    ch.confirm_delivery()
    return conn, ch


def test_share_group_member_reads_an_amqp_queue(peers, broker):
    conn, ch = confirming_channel(broker)
    try:
        ch.queue_declare("q", durable=True)
        for i in range(10):
            ch.basic_publish("", "q", b"m%d" % i, pika.BasicProperties(delivery_mode=2))

        member = run(lambda: ShareMember(peers, 1, "q", ["q"]))
        joined = run(member.heartbeat)
        assert joined["error_code"] == 0 and member.member_epoch > 0
        (topic_id, partitions), = member.assignment.items()
        assert partitions == [0]
        tp = (topic_id, 0)

        first = run(member.fetch, 5)
        assert first["partitions"][tp]["acquired"] == [(0, 4, 1)]
        values = records_at(first["partitions"][tp]["records"])
        assert [values[o] for o in range(5)] == [b"m%d" % i for i in range(5)]
        assert member.session_epoch == 1

        acked = run(member.acknowledge, {tp: [(0, 2, ACCEPT), (3, 3, RELEASE), (4, 4, REJECT)]})
        assert acked["error_code"] == 0 and acked["partitions"][tp] == 0

        # the released record comes back (its second delivery), then the five never fetched
        second = run(member.fetch, 10)
        acquired = second["partitions"][tp]["acquired"]
        offsets = {o for first_o, last_o, _n in acquired for o in range(first_o, last_o + 1)}
        assert offsets == {3, 5, 6, 7, 8, 9}
        assert (3, 3, 2) in acquired
        # accepting what was acquired twice is refused the second time (it is settled)
        run(member.acknowledge, {tp: [(5, 5, ACCEPT)]})
        again = run(member.acknowledge, {tp: [(5, 5, ACCEPT)]})
        assert again["partitions"][tp] != 0

        # while the member holds them, an AMQP consumer of the queue gets nothing
        assert ch.basic_get("q")[0] is None
        # closing the session (epoch -1) gives back what the member still holds: 3, 6, 7, 8, 9
        run(member.close)
        got = []
        while True:
            method, _props, body = ch.basic_get("q", auto_ack=True)
            if method is None:
                break
            got.append(body)
        assert sorted(got) == [b"m3", b"m6", b"m7", b"m8", b"m9"]  # never 0-2 (accepted), 4 (rejected), 5
    finally:
        conn.close()


def test_a_broker_that_is_not_there_or_never_answers_fails_the_call(tmp_path):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # accepts (the kernel does) and never answers ApiVersions
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
    addresses = {1: silent.getsockname(), 2: closed.getsockname()}
    pool = run(lambda: PeerClients(reactor, addresses.get, timeout=5, connect_timeout=0.3))
    try:
        started = time.monotonic()
        (k1, e1), (k2, e2) = run(lambda: defer.gatherResults([outcome(pool.metadata(1)), outcome(pool.metadata(2))]))
        assert time.monotonic() - started < 3
        assert k1 == "error" and isinstance(e1, PeerUnavailable) and "ApiVersions" in str(e1)
        assert f"broker 1 at 127.0.0.1:{addresses[1][1]}" in str(e1) and "Metadata not sent" in str(e1)
        assert k2 == "error" and isinstance(e2, PeerUnavailable) and str(e2).startswith(
            f"cannot connect to broker 2 at 127.0.0.1:{addresses[2][1]}")
    finally:
        run(pool.close)
        silent.close()
        closed.close()


def test_calls_made_while_connecting_go_out_in_call_order(broker):
    pool = run(lambda: PeerClients(reactor, {1: broker.address("kafka")}.get))
    try:
        def burst():
            # all made before the connection exists; an acks=0 Produce is done once written, and
            # what its callback sends must still go after the calls made before it
            ds = []
            for i in range(20):
                d = pool.produce(1, "ordered", 0, simple_batch([b"%d" % i]), acks=0 if i % 2 else -1)
                if i == 1:
                    d.addCallback(lambda _: ds.append(pool.produce(1, "ordered", 0, simple_batch([b"late"]))))
                ds.append(d)
            return defer.gatherResults(ds).addCallback(lambda _: defer.gatherResults(ds[20:]))
        run(pool.metadata, 1, ["ordered"])  # the topic exists before the burst (auto-created)
        run(pool.close)
        pool = run(lambda: PeerClients(reactor, {1: broker.address("kafka")}.get))
        run(burst)

        deadline = time.time() + 10
        while run(pool.fetch, 1, "ordered", 0, 0)[1] < 21 and time.time() < deadline:
            time.sleep(0.05)
        got = read_all(pool, "ordered", 21)
        assert [got[o] for o in range(21)] == [b"%d" % i for i in range(20)] + [b"late"]
    finally:
        run(pool.close)


def test_an_unreadable_answer_drops_the_connection_and_fails_its_calls():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def answer_garbage():
        conn, _ = server.accept()
        conn.recv(1024)  # ApiVersions
        conn.sendall(b"\xff\xff\xff\xfb" + b"junk")  # a negative frame size
        time.sleep(1)
        conn.close()
    thread = threading.Thread(target=answer_garbage, daemon=True)
    thread.start()
    pool = run(lambda: PeerClients(reactor, {3: server.getsockname()}.get, timeout=5))
    try:
        kind, error = run(lambda: outcome(pool.metadata(3)))
        assert kind == "error" and isinstance(error, PeerUnavailable)
        assert f"broker 3 at 127.0.0.1:{server.getsockname()[1]}" in str(error) and "-5 bytes" in str(error)
    finally:
        run(pool.close)
        server.close()
        thread.join(5)


def test_a_parked_call_holds_back_its_lane_only(peers):
    """The broker answers one connection in request order, so a long poll delays what follows it
    on its lane; another lane (another connection) is answered meanwhile."""
    assert run(peers.produce, 1, "lanes", 0, simple_batch([b"x"]))[0] == 0

    def race():
        started = reactor.seconds()
        parked = peers.call(1, 1, parked_fetch("lanes", 1500), lane="slow")
        behind = peers.metadata(1, ["lanes"], lane="slow").addCallback(lambda _: reactor.seconds() - started)
        beside = peers.metadata(1, ["lanes"]).addCallback(lambda _: reactor.seconds() - started)
        return defer.gatherResults([parked, behind, beside])
    _parked, behind, beside = run(race)
    assert behind >= 1.4 and beside < 1.0, (behind, beside)


def test_a_share_fetch_parked_when_its_session_closes_takes_nothing(peers, broker):
    """A fetch waiting at the leader when its session is closed (a remote AMQP consumer that went
    away) must not acquire what arrives afterwards: nobody would ever acknowledge it, and it
    would stay locked for the whole acquisition lock."""
    conn, ch = confirming_channel(broker)
    try:
        ch.queue_declare("parked-q", durable=True)
        topic_id = run(peers.topic_ids, 1, ["parked-q"])["parked-q"]
        opened = run(peers.share_fetch, 1, "parked-q", "m-parked", 0, {topic_id: [0]}, max_records=5)
        assert opened["error_code"] == 0
        parked = run(lambda: [outcome(peers.share_fetch(1, "parked-q", "m-parked", 1, max_records=5,
                                                        max_wait_ms=4000, lane="parked"))])[0]  # not waited for
        time.sleep(0.5)  # it is at the broker, waiting
        closed = run(peers.share_acknowledge, 1, "parked-q", "m-parked", -1, {}, lane="closer")
        assert closed["error_code"] == 0
        ch.basic_publish("", "parked-q", b"after the close", pika.BasicProperties(delivery_mode=2))
        method, _, body = ch.basic_get("parked-q", auto_ack=True)
        assert body == b"after the close", "the message went to the closed session's parked fetch"
        kind, answer = run(lambda: parked, timeout=10)
        assert kind == "ok" and not any(p["acquired"] for p in answer["partitions"].values())
    finally:
        conn.close()
