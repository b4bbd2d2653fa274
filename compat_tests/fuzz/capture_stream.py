"""The stream protocol's part of the capture (capture.py): framing, the relay's address rewrite,
and the client sessions recorded.

Stream clients connect a second time to the address the broker advertises (Open's
``advertised_host``/``advertised_port``, Metadata's broker list) to publish and consume, so the
relay rewrites those two server answers to name itself; otherwise the publishing and consuming
connections would go round it, straight to the broker, and never be recorded.
"""
from __future__ import annotations

import asyncio
import socket
import struct

FRAME_HEAD = struct.Struct(">IHH")  # size, key, version
OPEN_RESPONSE, METADATA_RESPONSE = 0x8015, 0x800F


def stream_frames(data: bytes) -> list[bytes]:
    """Size-prefixed frames (``size:u32`` then key, version, ...), each with its size."""
    out, pos = [], 0
    while pos + 4 <= len(data):
        (size,) = struct.unpack_from(">I", data, pos)
        if pos + 4 + size > len(data):
            break
        out.append(data[pos:pos + 4 + size])
        pos += 4 + size
    return out


def _string(data: bytes, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from(">h", data, pos)
    pos += 2
    return (data[pos:pos + max(n, 0)].decode(), pos + max(n, 0))


def _pack_string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


class AdvertisedRewriter:
    """Server -> client bytes of one connection, with the broker's stream port replaced by the relay's."""

    def __init__(self, relay_port: int):
        self.relay_port = relay_port
        self.buf = b""

    def __call__(self, data: bytes) -> bytes:
        self.buf += data
        out = []
        for frame in stream_frames(self.buf):
            self.buf = self.buf[len(frame):]
            out.append(self._rewrite(frame))
        return b"".join(out)

    def _rewrite(self, frame: bytes) -> bytes:
        _size, key, version = FRAME_HEAD.unpack_from(frame)
        body = frame[8:]
        if key == OPEN_RESPONSE and len(body) >= 10:
            cid, code, count = struct.unpack_from(">IHi", body)
            pos, props = 10, []
            for _ in range(count):
                k, pos = _string(body, pos)
                v, pos = _string(body, pos)
                props.append((k, str(self.relay_port) if k == "advertised_port" else v))
            body = struct.pack(">IHi", cid, code, len(props)) + b"".join(
                _pack_string(k) + _pack_string(v) for k, v in props)
        elif key == METADATA_RESPONSE:
            body = bytearray(body)
            (count,) = struct.unpack_from(">i", body, 4)
            pos = 8
            for _ in range(count):
                _host, pos = _string(body, pos + 2)  # after the broker reference
                struct.pack_into(">I", body, pos, self.relay_port)
                pos += 4
            body = bytes(body)
        return FRAME_HEAD.pack(len(body) + 4, key, version) + body


def stream_clients(port: int, relay) -> None:
    """Everyday stream-protocol work through the relay at ``port`` (rstream, rbfly, and raw frames
    for the commands neither client sends on its own in a short session)."""
    asyncio.run(_rstream(port, relay))
    relay.label = "rbfly"
    asyncio.run(_rbfly(port))
    relay.label = "raw"
    _raw(port)


async def _rstream(port: int, relay) -> None:
    from rstream import (AMQPMessage, Consumer, ConsumerOffsetSpecification, FilterConfiguration,
                         OffsetSpecification, OffsetType, Producer, RouteType, SuperStreamConsumer,
                         SuperStreamCreationOption, SuperStreamProducer)

    args = {"host": "127.0.0.1", "port": port, "username": "guest", "password": "guest"}
    relay.label = "rstream-producer"
    confirmed: list[int] = []

    def on_confirm(status) -> None:
        confirmed.append(status.message_id)

    async def region(message) -> str:
        return bytes(message.body).split(b":")[0].decode() if isinstance(message, AMQPMessage) else "x"

    async with Producer(**args, filter_value_extractor=region) as producer:
        await producer.create_stream("fuzz-s", arguments={"max-length-bytes": 10_000_000})
        await producer.create_stream("fuzz-gone")
        await producer.send_wait("fuzz-s", AMQPMessage(body=b"ca:first", application_properties={"n": 0}))
        await producer.send_batch("fuzz-s", [AMQPMessage(body=b"ny:%d" % i) for i in range(10)],
                                  publisher_name="fuzz-pub", on_publish_confirm=on_confirm)
        await producer.send_batch("fuzz-s", [b"raw %d" % i for i in range(5)], on_publish_confirm=on_confirm)
        await asyncio.sleep(0.5)
        await producer.stream_exists("fuzz-s")
        client = await producer._get_or_create_client("fuzz-s")
        await client.query_publisher_sequence(stream="fuzz-s", reference="fuzz-pub")
        await producer.delete_stream("fuzz-gone")

    relay.label = "rstream-consumer"
    got: list = []

    async def on_message(message, context) -> None:
        got.append(message)

    async def listener(active, context):
        return OffsetSpecification(OffsetType.FIRST, 0)

    async with Consumer(**args) as consumer:
        await consumer.start()
        sub = await consumer.subscribe("fuzz-s", on_message, offset_specification=ConsumerOffsetSpecification(
            OffsetType.FIRST), initial_credit=2)
        await asyncio.sleep(0.5)
        await consumer.store_offset("fuzz-s", "fuzz-reader", 5)
        await asyncio.sleep(0.2)
        await consumer.query_offset("fuzz-s", "fuzz-reader")
        await consumer.unsubscribe(sub)
        only_ca = FilterConfiguration(values_to_filter=["ca"], predicate=lambda m: True, match_unfiltered=True)
        await consumer.subscribe("fuzz-s", on_message, offset_specification=ConsumerOffsetSpecification(
            OffsetType.OFFSET, 3), subscriber_name="fuzz-filtered", filter_input=only_ca)
        await asyncio.sleep(0.3)
    async with Consumer(**args) as consumer:  # rstream allows one subscription per stream per consumer
        await consumer.start()
        await consumer.subscribe("fuzz-s", on_message, properties={"single-active-consumer": "true",
                                                                   "name": "fuzz-app"},
                                 subscriber_name="fuzz-app", consumer_update_listener=listener)
        await asyncio.sleep(0.5)

    relay.label = "rstream-super"

    async def key(message) -> str:
        return str(message.application_properties["id"])

    async with SuperStreamProducer(**args, super_stream="fuzz-super", routing=RouteType.Hash, routing_extractor=key,
                                   super_stream_creation_option=SuperStreamCreationOption(2)) as producer:
        for i in range(6):
            await producer.send(AMQPMessage(body=b"inv-%d" % i, application_properties={"id": i}))
        await asyncio.sleep(0.3)
    async with SuperStreamConsumer(**args, super_stream="fuzz-super") as consumer:
        await consumer.start()
        await consumer.subscribe(on_message, offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
        await asyncio.sleep(0.5)


async def _rbfly(port: int) -> None:
    from rbfly.streams import Offset, streams_client

    client = streams_client(f"rabbitmq-stream://guest:guest@127.0.0.1:{port}/")
    await client.create_stream("fuzz-rb")
    async with client.publisher("fuzz-rb", name="rb") as publisher:
        for i in range(5):
            await publisher.send(f"text-{i}")
        await publisher.send(b"bin")
    n = 0
    async for _message in client.subscribe("fuzz-rb", offset=Offset.FIRST, timeout=3):
        n += 1
        if n == 6:
            break
    await client.disconnect()


def _raw(port: int) -> None:
    """One connection with what the clients above leave out: heartbeats, command versions, stream
    stats, route and partitions by hand, delete publisher and super stream, and a Close."""
    from rstream import schema
    from rstream.encoding import encode_frame

    frames = [schema.PeerProperties(correlation_id=1, properties=[schema.Property("product", "fuzz")]),
              schema.SaslHandshake(correlation_id=2),
              schema.SaslAuthenticate(correlation_id=3, mechanism="PLAIN", data=b"\0guest\0guest"),
              schema.Tune(frame_max=1 << 20, heartbeat=60),
              schema.Open(correlation_id=4, virtual_host="/"),
              schema.Heartbeat(),
              schema.ExchangeCommandVersionRequest(correlation_id=5, command_versions=[
                  schema.FrameHandlerInfo(key_command=k, min_version=1, max_version=2 if k in (2, 8) else 1)
                  for k in (2, 8, 13)]),
              _stream_stats(6, "fuzz-s"),
              schema.Metadata(correlation_id=7, streams=["fuzz-s", "fuzz-none"]),
              schema.SuperStreamRoute(correlation_id=8, routing_key="1", super_stream="fuzz-super"),
              schema.SuperStreamPartitions(correlation_id=9, super_stream="fuzz-super"),
              schema.DeclarePublisher(correlation_id=10, publisher_id=7, reference="raw", stream="fuzz-s"),
              schema.QueryPublisherSequence(correlation_id=11, publisher_ref="raw", stream="fuzz-s"),
              schema.DeletePublisher(correlation_id=12, publisher_id=7),
              schema.Credit(subscription_id=9, credit=1),
              schema.DeleteSuperStream(correlation_id=13, super_stream="fuzz-super"),
              schema.Heartbeat(),
              schema.Close(correlation_id=14, code=1, reason="done")]
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(5)
    for frame in frames:
        sock.sendall(frame if isinstance(frame, bytes) else encode_frame(frame))
        if isinstance(frame, schema.Tune):
            continue
        try:
            sock.recv(65536)  # one answer at a time, as a client would wait for it
        except socket.timeout:
            pass
    sock.close()


def _stream_stats(correlation_id: int, stream: str) -> bytes:
    """StreamStats (key 28): rstream has no class for it."""
    body = struct.pack(">HHI", 28, 1, correlation_id) + _pack_string(stream)
    return struct.pack(">I", len(body)) + body
