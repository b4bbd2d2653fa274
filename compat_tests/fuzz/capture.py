"""Capture real clients' traffic once, as the fuzzer's seed corpus.

    .venv/bin/python -m compat_tests.fuzz.capture [kafka] [amqp] [stream]   # default: all three

rewrites compat_tests/fuzz/corpus/<protocol>.jsonl for each protocol named.

Starts a broker, puts a recording TCP relay in front of its Kafka and AMQP ports, runs everyday
client work through the relay (kafka-python and confluent-kafka: admin, idempotent and plain
producers with compression, a consumer group; pika and aio-pika: declarations, bindings,
publishes with confirms, consume and ack, get, transactions; rstream and rbfly on the stream
port, see capture_stream.py), and writes what each client
connection sent, cut into frames, as one JSON line per connection: ``{"client": ..., "frames":
[base64, ...]}``. The corpus is committed, so the fuzzer needs none of the clients.
"""
from __future__ import annotations

import asyncio
import base64
import json
import socket
import struct
import tempfile
import threading
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus"


class RecordingRelay:
    """Accepts on a free port, relays to ``target`` both ways, records client -> server bytes."""

    def __init__(self, target: tuple[str, int], rewrite=None):
        self.target = target
        self.rewrite = rewrite  # rewrite(relay_port) -> a server -> client byte filter for one connection
        self.sessions: list[bytearray] = []
        self.label = "?"
        self.labels: list[str] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            record = bytearray()
            self.sessions.append(record)
            self.labels.append(self.label)
            threading.Thread(target=self._pump, args=(client, upstream, record), daemon=True).start()
            back = self.rewrite(self.port) if self.rewrite else None
            threading.Thread(target=self._pump, args=(upstream, client, None, back), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, record: bytearray | None, rewrite=None) -> None:
        try:
            while data := src.recv(65536):
                if record is not None:
                    record += data
                dst.sendall(rewrite(data) if rewrite else data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.server.close()


def kafka_frames(data: bytes) -> list[bytes]:
    """Size-prefixed requests, each with its 4-byte size."""
    out, pos = [], 0
    while pos + 4 <= len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        if size < 0 or pos + 4 + size > len(data):
            break
        out.append(data[pos:pos + 4 + size])
        pos += 4 + size
    return out


def amqp_frames(data: bytes) -> list[bytes]:
    """The 8-byte protocol header, then whole frames (type, channel, size, payload, 0xCE)."""
    if not data.startswith(b"AMQP"):
        return []
    out, pos = [data[:8]], 8
    while pos + 7 <= len(data):
        (size,) = struct.unpack_from(">I", data, pos + 3)
        end = pos + 7 + size + 1
        if end > len(data):
            break
        out.append(data[pos:end])
        pos = end
    return out


def _kafka_clients(bootstrap: str, relay: RecordingRelay) -> None:
    import confluent_kafka
    import kafka
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    relay.label = "kafka-python"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([KpNewTopic("fuzz-kp", 2, 1)])
    admin.list_topics()
    admin.describe_configs([kafka.admin.ConfigResource(kafka.admin.ConfigResourceType.TOPIC, "fuzz-kp")])
    admin.close()
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type="gzip")
    for i in range(30):
        producer.send("fuzz-kp", key=b"k%d" % (i % 3), value=b"kafka-python %d" % i, headers=[("h", b"v")])
    producer.flush()
    producer.close()
    consumer = kafka.KafkaConsumer("fuzz-kp", bootstrap_servers=bootstrap, group_id="fuzz-kp-group",
                                   auto_offset_reset="earliest", consumer_timeout_ms=4000)
    for _ in consumer:
        pass
    consumer.commit()
    consumer.close()

    relay.label = "librdkafka"
    cadmin = AdminClient({"bootstrap.servers": bootstrap})
    cadmin.create_topics([NewTopic("fuzz-rd", 3, 1)])["fuzz-rd"].result(15)
    cadmin.list_topics(timeout=10)
    cproducer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                          "compression.type": "lz4", "linger.ms": 5})
    for i in range(60):
        cproducer.produce("fuzz-rd", b"librdkafka %d" % i, key=b"k%d" % (i % 4), headers={"x": b"y"})
    cproducer.flush(15)
    cconsumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "fuzz-rd-group",
                                          "auto.offset.reset": "earliest"})
    cconsumer.subscribe(["fuzz-rd"])
    got = 0
    for _ in range(40):
        msg = cconsumer.poll(0.5)
        if msg is not None and not msg.error():
            got += 1
        if got >= 60:
            break
    cconsumer.commit(asynchronous=False)
    cconsumer.close()


def _amqp_clients(port: int, relay: RecordingRelay) -> None:
    import pika

    relay.label = "pika"
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    ch = conn.channel()
    ch.exchange_declare("fuzz.topic", "topic", durable=True)
    ch.queue_declare("fuzz.q", durable=True, arguments={"x-max-length": 1000, "x-message-ttl": 600000})
    ch.queue_bind("fuzz.q", "fuzz.topic", "a.#")
    ch.confirm_delivery()
    for i in range(20):
        ch.basic_publish("fuzz.topic", f"a.b.{i}", b"pika %d" % i,
                         pika.BasicProperties(delivery_mode=2, headers={"n": i, "s": "text"},
                                              content_type="text/plain", message_id=str(i)))
    ch.basic_get("fuzz.q", auto_ack=False)
    ch.basic_qos(prefetch_count=5)
    for method, _props, _body in ch.consume("fuzz.q", inactivity_timeout=1):
        if method is None:
            break
        ch.basic_ack(method.delivery_tag)
    ch.cancel()
    tx = conn.channel()
    tx.tx_select()
    tx.basic_publish("", "fuzz.q", b"in a transaction")
    tx.tx_commit()
    ch.queue_unbind("fuzz.q", "fuzz.topic", "a.#")
    conn.close()

    relay.label = "aio-pika"

    async def aio() -> None:
        import aio_pika
        connection = await aio_pika.connect_robust(f"amqp://guest:guest@127.0.0.1:{port}/")
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            exchange = await channel.declare_exchange("fuzz.direct", aio_pika.ExchangeType.DIRECT)
            queue = await channel.declare_queue("fuzz.aio", auto_delete=True)
            await queue.bind(exchange, "rk")
            for i in range(20):
                await exchange.publish(aio_pika.Message(b"aio %d" % i, headers={"i": i}, priority=1), "rk")
            async with queue.iterator() as it:
                n = 0
                async for message in it:
                    async with message.process():
                        n += 1
                    if n >= 20:
                        break
    asyncio.run(aio())


def main() -> None:
    import sys

    from compat_tests.fuzz.capture_amqp10 import amqp10_clients, amqp10_frames
    from compat_tests.fuzz.capture_stream import AdvertisedRewriter, stream_clients, stream_frames
    from tests.brokerproc import start_broker
    wanted = sys.argv[1:] or ["kafka", "amqp", "stream"]
    relays = {}
    with tempfile.TemporaryDirectory() as tmp:
        broker = start_broker(Path(tmp) / "data")
        try:
            kafka_relay = RecordingRelay(broker.address("kafka"))
            # clients must come back through the relay: the broker advertises the relay's port
            broker.stop()
            broker = start_broker(Path(tmp) / "data", "--kafka-advertised", f"127.0.0.1:{kafka_relay.port}")
            kafka_relay.target = broker.address("kafka")
            if "kafka" in wanted:
                _kafka_clients(f"127.0.0.1:{kafka_relay.port}", kafka_relay)
                relays["kafka"] = (kafka_relay, kafka_frames)
            if "amqp" in wanted:
                amqp_relay = RecordingRelay(broker.address("amqp"))
                _amqp_clients(amqp_relay.port, amqp_relay)
                relays["amqp"] = (amqp_relay, amqp_frames)
            if "amqp10" in wanted:
                amqp10_relay = RecordingRelay(broker.address("amqp"))
                amqp10_clients(amqp10_relay.port, amqp10_relay)
                relays["amqp10"] = (amqp10_relay, amqp10_frames)
            if "stream" in wanted:
                stream_relay = RecordingRelay(broker.address("stream"), rewrite=AdvertisedRewriter)
                stream_clients(stream_relay.port, stream_relay)
                relays["stream"] = (stream_relay, stream_frames)
        finally:
            broker.stop()
    CORPUS.mkdir(exist_ok=True)
    for name, (relay, split) in relays.items():
        lines = []
        for label, data in zip(relay.labels, relay.sessions):
            frames = split(bytes(data))
            if frames:
                lines.append(json.dumps({"client": label, "frames": [base64.b64encode(f).decode() for f in frames]}))
        (CORPUS / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
        print(f"{name}: {len(lines)} sessions, {sum(len(json.loads(x)['frames']) for x in lines)} frames")


if __name__ == "__main__":
    main()
