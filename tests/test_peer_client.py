"""The brokers' own Kafka client (gateway.cluster.peers) against a real broker process.

The reactor runs in a thread of its own for this module (calls go in with
blockingCallFromThread): many requests in flight on one connection come back matched to their
callers; a broker killed mid-request fails every pending call with an error naming it, a call
right after fails at once, and a restarted broker is reached again; a Produce of a built batch
is read back.
"""
from __future__ import annotations

import signal
import threading
import time

import pytest
from twisted.internet import defer, reactor, threads

from gateway.cluster.peers import PeerClient, PeerUnavailable
from tests.brokerproc import start_broker
from wire.records import Record, decode_batch, encode_batch, iter_batches

METADATA, PRODUCE, FETCH = 3, 0, 1


@pytest.fixture(scope="module", autouse=True)
def running_reactor():
    if not reactor.running:
        threading.Thread(target=reactor.run, kwargs={"installSignalHandlers": False}, daemon=True).start()
        deadline = time.monotonic() + 10
        while not reactor.running and time.monotonic() < deadline:
            time.sleep(0.01)
    yield


def _in_reactor(fn, *args, timeout: float = 30):
    """Run ``fn`` in the reactor and wait for the Deferred it returns (its result or its failure)."""
    done = threading.Event()
    box = {}

    def start():
        d = defer.maybeDeferred(fn, *args)
        d.addCallbacks(lambda r: box.setdefault("ok", r), lambda f: box.setdefault("error", f.value))
        d.addBoth(lambda _: done.set())

    reactor.callFromThread(start)
    assert done.wait(timeout), "no answer in time"
    if "error" in box:
        raise box["error"]
    return box["ok"]


def _metadata(client):
    return client.call(METADATA, {"topics": None, "allow_auto_topic_creation": False,
                                  "include_topic_authorized_operations": False})


def _produce_one(client, topic: str, pairs=(("k", "v"),)) -> None:
    batch = encode_batch([Record(i, 1_700_000_000_000 + i, k.encode(), v.encode()) for i, (k, v) in enumerate(pairs)])
    request = {"transactional_id": None, "acks": -1, "timeout": 10_000,
               "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
    deadline = time.monotonic() + 20
    while True:  # the first produce may find the topic being created: ask until it is stored
        answer = _in_reactor(client.call, PRODUCE, request)
        error = answer.responses[0].partition_responses[0].error_code
        if error == 0:
            return
        assert time.monotonic() < deadline, f"produce to {topic}: error {error}"
        time.sleep(0.2)


def test_pipelined_calls_are_matched_and_a_produced_batch_reads_back(tmp_path):
    broker = start_broker(tmp_path / "b")
    try:
        client = threads.blockingCallFromThread(reactor, PeerClient, reactor, 1, lambda _: broker.address("kafka"))
        answers = _in_reactor(lambda: defer.gatherResults([_metadata(client) for _ in range(50)]))
        assert len(answers) == 50 and all(a.brokers for a in answers)

        _produce_one(client, "peer-test", [(f"k{i}", f"v{i}") for i in range(100)])
        fetched = _in_reactor(client.call, FETCH, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": "peer-test", "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}, 12)
        data = bytearray(fetched.responses[0].partitions[0].records)
        values = [r.value for pos, _ in iter_batches(data) for r in decode_batch(data, pos).records]
        assert values == [f"v{i}".encode() for i in range(100)]
    finally:
        broker.stop()


def test_a_killed_broker_fails_every_pending_call_and_is_reached_again_after_a_restart(tmp_path):
    data = tmp_path / "b"
    broker = start_broker(data)
    address = {"now": broker.address("kafka")}
    client = threads.blockingCallFromThread(reactor, PeerClient, reactor, 7, lambda _: address["now"])
    try:
        _produce_one(client, "parked")
        # fetches that wait 5 s at the broker for more than there is are pending when it dies
        parked = {"replica_id": -1, "max_wait": 5000, "min_bytes": 1 << 20, "max_bytes": 1 << 20,
                  "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
                  "forgotten_topics_data": [], "topics": [{"topic": "parked", "partitions": [{
                      "partition": 0, "current_leader_epoch": -1, "fetch_offset": 1, "last_fetched_epoch": -1,
                      "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}
        failures = []

        def park():
            for _ in range(3):
                client.call(FETCH, parked, 12).addErrback(lambda f: failures.append(f.value))

        threads.blockingCallFromThread(reactor, park)
        time.sleep(0.5)
        broker.stop(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while len(failures) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(failures) == 3 and all(isinstance(f, PeerUnavailable) and "broker 7" in str(f) for f in failures)
        with pytest.raises(PeerUnavailable, match="broker 7"):
            _in_reactor(lambda: _metadata(client))
        broker = start_broker(data)
        address["now"] = broker.address("kafka")
        deadline = time.monotonic() + 20
        while True:
            try:
                assert _in_reactor(lambda: _metadata(client)).brokers
                break
            except PeerUnavailable:
                assert time.monotonic() < deadline, "the restarted broker was not reached again"
                time.sleep(0.3)
    finally:
        broker.stop()
