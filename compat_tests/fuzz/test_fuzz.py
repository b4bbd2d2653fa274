"""Mutated real-client traffic against a live broker (issue 19): it must shrug all of it off.

For each protocol, ``FUZZ_FRAMES`` frames (50,000 in CI; 1,000,000 by hand) from the captured
corpus, mutated (fuzzer.py), over 32 connections at a time. The stream protocol and AMQP 1.0
(on the AMQP port) run ``FUZZ_STREAM_FRAMES`` frames (5,000 in CI, a few seconds; by hand e.g. 500,000; unset, it
follows ``FUZZ_FRAMES`` when that is set). Afterwards:

- the broker is still running and still serves a real client (confluent-kafka, pika, rstream);
- its log has no traceback and no "internal error" (every bad frame got a protocol answer or a
  clean close);
- its resident memory, once the connections are gone, is back within 64 MB of where it was
  after a warm-up round;
- every segment file of every partition and queue holds whole, valid batches with contiguous
  offsets: no refused frame left bytes behind;
- it stops cleanly.

FUZZ_SEED sets the seed (printed).
"""
from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pika
import pytest
from confluent_kafka import Producer
from proton import Delivery, Message
from proton.utils import BlockingConnection
from rstream import Producer as StreamProducer

from compat_tests.fuzz.fuzzer import fuzz
from tests.brokerproc import start_broker
from wire.records import iter_batches

FRAMES = int(os.environ.get("FUZZ_FRAMES", "50000"))
STREAM_FRAMES = int(os.environ.get("FUZZ_STREAM_FRAMES", os.environ.get("FUZZ_FRAMES", "5000")))
SEED = int(os.environ.get("FUZZ_SEED", str(time.time_ns() % 100_000)))
RSS_SLACK_MB = 64


def _check_logs(data_dir: Path) -> int:
    batches = 0
    for part in sorted(p for p in data_dir.iterdir() if p.is_dir() and "-" in p.name):
        expected = None
        for segment in sorted(part.glob("*.log")):
            for _pos, header in iter_batches(segment.read_bytes()):  # raises on a torn or corrupt batch
                assert expected is None or header.base_offset >= expected, f"{segment}: offsets go back"
                expected = header.last_offset + 1
                batches += 1
    return batches


def _serves(broker) -> None:
    host, port = broker.address("kafka")
    producer = Producer({"bootstrap.servers": f"{host}:{port}", "acks": "all", "message.timeout.ms": 20000})
    reports = []
    producer.produce("after-fuzz", b"still here", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(30)
    assert reports == [None], f"produce after fuzzing: {reports}"
    host, port = broker.address("amqp")
    conn = pika.BlockingConnection(pika.ConnectionParameters(host, port))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("after-fuzz")
    ch.basic_publish("", "after-fuzz", b"still here")
    conn.close()
    amqp10 = BlockingConnection(f"amqp://{host}:{port}", user="guest", password="guest", allowed_mechs="PLAIN",
                                timeout=20)
    assert amqp10.create_sender("/queues/after-fuzz").send(
        Message(inferred=True, body=b"still here"), timeout=20).remote_state == Delivery.ACCEPTED
    amqp10.close()
    host, port = broker.address("stream")

    async def stream_publish() -> None:
        async with StreamProducer(host, port=port, username="guest", password="guest") as producer:
            await producer.create_stream("after-fuzz-stream", exists_ok=True)
            await producer.send_wait("after-fuzz-stream", b"still here")
    asyncio.run(asyncio.wait_for(stream_publish(), 60))


@pytest.mark.timeout(600 + max(FRAMES, STREAM_FRAMES) // 200)
@pytest.mark.parametrize("protocol", ["kafka", "amqp", "stream", "amqp10"])
def test_mutated_client_traffic_harms_nothing(protocol, tmp_path, capsys):
    data = tmp_path / "data"
    broker = start_broker(data)
    frames = STREAM_FRAMES if protocol in ("stream", "amqp10") else FRAMES
    try:
        address = broker.address("amqp" if protocol == "amqp10" else protocol)  # AMQP 1.0: the same port
        fuzz(address, protocol, min(5_000, frames // 2), seed=SEED + 1)  # warm-up: topics, queues, caches
        time.sleep(1)
        baseline = broker.rss_mb()

        def progress(stats, seconds):
            with capsys.disabled():
                print(f"[fuzz {protocol}] {stats.frames} frames, {stats.sessions} connections, {seconds:.0f}s, "
                      f"rss {broker.rss_mb():.0f} MB", flush=True)

        stats = fuzz(address, protocol, frames, seed=SEED, progress=progress)
        assert broker.proc.poll() is None, f"the broker died:\n{broker.output()[-5000:]}"
        time.sleep(2)
        after = broker.rss_mb()
        _serves(broker)
        with capsys.disabled():
            print(f"[fuzz {protocol}] seed {SEED}: {stats.frames} frames ({stats.mutated} mutated) over "
                  f"{stats.sessions} connections in {stats.seconds:.0f}s ({stats.frames / stats.seconds:.0f}/s); "
                  f"closed by the broker early {stats.closed_by_broker}; client-side errors {stats.errors}; "
                  f"rss {baseline:.0f} MB -> {after:.0f} MB", flush=True)
        assert stats.frames >= frames
        assert after <= baseline + RSS_SLACK_MB, f"memory {baseline:.0f} MB -> {after:.0f} MB after fuzzing"
        assert broker.stop() == 0
        out = broker.output()
        for bad in ("Traceback", "internal error", "Unhandled"):
            assert bad not in out, f"{bad!r} in the broker's log (seed {SEED}):\n" + \
                out[max(0, out.index(bad) - 2000):out.index(bad) + 3000]
        assert _check_logs(data) > 0
    finally:
        broker.stop()
