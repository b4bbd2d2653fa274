"""Resource exhaustion (issue 19): many held connections, clients that never read, slowloris.

- 10,000 connections opened and held (9,000 Kafka, 1,000 AMQP through a whole handshake): none
  is dropped, the connection gauge counts them, and real clients (confluent-kafka, pika) still
  get through, as does /healthz.
- A consumer that never reads its socket: an AMQP consumer with no prefetch limit on a queue of
  120 MB, and a Kafka client sending 200 fetches of 1 MB without reading a reply. The broker
  stops writing (AMQP: it stops delivering once the socket's buffer is full; Kafka: it stops
  reading requests), so its memory stays within 64 MB of where it was.
- Slowloris: a Kafka request trickled in a byte at a time is cut off by --kafka-idle-ms, an AMQP
  handshake that never finishes by the 10 s handshake timeout; the broker serves others meanwhile.
"""
from __future__ import annotations

import resource
import socket
import struct
import time

import pika
import pytest
import requests
from confluent_kafka import Producer
from pamqp import commands, frame as pamqp_frame

from tests.brokerproc import start_broker
from tests.test_wire_kafka import request_bytes
from wire.framing import frame
from wire.kafka import request_class

RSS_SLACK_MB = 64


def _peer_closed(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
    finally:
        sock.setblocking(True)


def _read_frame(sock: socket.socket):
    head = _exact(sock, 7)
    ftype, channel, size = struct.unpack(">BHI", head)
    payload = _exact(sock, size + 1)
    return pamqp_frame.unmarshal(head + payload)[2]


def _exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def amqp_handshake(address) -> socket.socket:
    """A raw AMQP connection through connection.open (guest, vhost /, no heartbeats)."""
    sock = socket.create_connection(address)
    sock.settimeout(30)
    sock.sendall(b"AMQP\x00\x00\x09\x01")
    assert isinstance(_read_frame(sock), commands.Connection.Start)
    sock.sendall(pamqp_frame.marshal(commands.Connection.StartOk(
        client_properties={"product": "raw"}, mechanism="PLAIN", response="\0guest\0guest", locale="en_US"), 0))
    tune = _read_frame(sock)
    sock.sendall(pamqp_frame.marshal(commands.Connection.TuneOk(tune.channel_max, tune.frame_max, 0), 0))
    sock.sendall(pamqp_frame.marshal(commands.Connection.Open("/"), 0))
    assert isinstance(_read_frame(sock), commands.Connection.OpenOk)
    return sock


@pytest.fixture
def more_files():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 12_000:
        pytest.skip(f"the open-file hard limit ({hard}) is below the 12,000 this test needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 1 << 20) if hard != resource.RLIM_INFINITY else 1 << 20, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _real_clients_work(broker) -> None:
    host, port = broker.address("kafka")
    producer = Producer({"bootstrap.servers": f"{host}:{port}", "acks": "all", "message.timeout.ms": 30000})
    reports = []
    producer.produce("busy", b"got through", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(40)
    assert reports == [None], reports
    host, port = broker.address("amqp")
    conn = pika.BlockingConnection(pika.ConnectionParameters(host, port, socket_timeout=30))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("busy")
    ch.basic_publish("", "busy", b"got through")
    conn.close()
    assert requests.get(f"{broker.http_url}/healthz", timeout=30).status_code == 200


@pytest.mark.timeout(300)
def test_ten_thousand_held_connections_leave_the_broker_serving(tmp_path, more_files):
    broker = start_broker(tmp_path / "data")
    held = []
    try:
        kafka_address = broker.address("kafka")
        for _ in range(9_000):
            held.append(socket.create_connection(kafka_address, timeout=30))
        amqp_address = broker.address("amqp")
        for _ in range(1_000):
            held.append(amqp_handshake(amqp_address))
        _real_clients_work(broker)
        overview = requests.get(f"{broker.http_url}/api/overview", auth=("guest", "guest"), timeout=30).json()
        assert overview["object_totals"]["connections"] >= 1_000, overview["object_totals"]
        for sock in held[::500]:  # none was dropped
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
    finally:
        for sock in held:
            sock.close()
        broker.stop()
    assert "Traceback" not in broker.output()


@pytest.mark.timeout(300)
def test_clients_that_never_read_do_not_grow_the_broker(tmp_path):
    broker = start_broker(tmp_path / "data")
    try:
        host, port = broker.address("amqp")
        conn = pika.BlockingConnection(pika.ConnectionParameters(host, port))
        ch = conn.channel()
        ch.queue_declare("deep", durable=True)
        body = b"m" * 4096
        for _ in range(30_000):  # 120 MB
            ch.basic_publish("", "deep", body)
        conn.close()
        time.sleep(1)
        baseline = broker.rss_mb()

        amqp = amqp_handshake((host, port))
        amqp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        amqp.sendall(pamqp_frame.marshal(commands.Channel.Open(), 1))
        amqp.sendall(pamqp_frame.marshal(commands.Basic.Consume(queue="deep", no_ack=True), 1))
        kafka = socket.create_connection(broker.address("kafka"))
        kafka.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        cls = request_class(1, 12)
        mod = __import__(cls.__module__, fromlist=["x"])
        import datetime
        fetch = cls(cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=0,
                    max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1, topics=(
                        mod.FetchTopic(topic="deep", partitions=(mod.FetchPartition(
                            partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                            log_start_offset=-1, partition_max_bytes=1 << 20),)),),
                    forgotten_topics_data=(), rack_id="")
        kafka.setblocking(False)
        sent = 0
        request = frame(request_bytes(1, 12, 1, fetch))
        deadline = time.monotonic() + 30
        while sent < 200 and time.monotonic() < deadline:
            try:
                kafka.send(request)  # whole or not at all at these sizes; a full buffer is fine too
                sent += 1
            except BlockingIOError:
                time.sleep(0.05)
        time.sleep(5)  # let the broker write what it will
        grown = broker.rss_mb() - baseline
        assert grown < RSS_SLACK_MB, f"the broker grew {grown:.0f} MB for two clients that never read"
        assert broker.proc.poll() is None
        _real_clients_work(broker)
        amqp.close()
        kafka.close()
    finally:
        broker.stop()
    assert "Traceback" not in broker.output()


@pytest.mark.timeout(120)
def test_slowloris_requests_are_cut_off(tmp_path):
    broker = start_broker(tmp_path / "data", "--kafka-idle-ms", "1500")
    try:
        kafka = socket.create_connection(broker.address("kafka"))
        amqp = socket.create_connection(broker.address("amqp"))
        partial = frame(request_bytes(18, 3, 1, request_class(18, 3)(client_software_name="slow",
                                                                    client_software_version="1")))
        began, cut, sent, served = time.monotonic(), {}, 0, False
        amqp.sendall(b"AMQP")  # half a protocol header, and then nothing more
        while len(cut) < 2 and time.monotonic() - began < 25:
            if "kafka" not in cut and sent < len(partial) - 1:  # a byte at a time, never the last one
                try:
                    kafka.sendall(partial[sent:sent + 1])
                    sent += 1
                except (BrokenPipeError, ConnectionResetError):
                    cut["kafka"] = time.monotonic() - began
            for name, sock in (("kafka", kafka), ("amqp", amqp)):
                if name not in cut and _peer_closed(sock):
                    cut[name] = time.monotonic() - began
            if not served and time.monotonic() - began > 1:
                _real_clients_work(broker)  # others are served meanwhile
                served = True
            time.sleep(0.3)
        assert "kafka" in cut and cut["kafka"] < 6, f"the trickling Kafka request was not cut off: {cut}"
        assert "amqp" in cut and 9 <= cut["amqp"] < 20, f"the unfinished AMQP handshake was not cut off: {cut}"
    finally:
        broker.stop()
    out = broker.output()
    assert "--kafka-idle-ms" in out and "Traceback" not in out
