"""AMQP 1.0 client traffic for the fuzz corpus: python-qpid-proton and rabbitmq-amqp-python-client
sessions (SASL, open, sessions, links, transfers of several sizes and frames, each outcome, the
management node), recorded through capture.py's relay."""
from __future__ import annotations

import struct


def amqp10_frames(data: bytes) -> list[bytes]:
    """Protocol headers (8 bytes) and whole frames (their size field counts the whole frame)."""
    out, pos = [], 0
    while pos + 8 <= len(data):
        if data.startswith(b"AMQP", pos):
            out.append(data[pos:pos + 8])
            pos += 8
            continue
        (size,) = struct.unpack_from(">I", data, pos)
        if size < 8 or pos + size > len(data):
            break
        out.append(data[pos:pos + size])
        pos += size
    return out


def amqp10_clients(port: int, relay) -> None:
    import pika
    from proton import Delivery, Message
    from proton.reactor import AtMostOnce
    from proton.utils import BlockingConnection
    from rabbitmq_amqp_python_client import AddressHelper, Environment, QuorumQueueSpecification

    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", relay.target[1]))
    channel = connection.channel()
    channel.queue_declare("fuzz10", durable=True, arguments={"x-queue-type": "quorum"})
    channel.queue_declare("fuzz10-dlq", durable=True)
    channel.queue_bind("fuzz10", "amq.direct", "fuzz10")
    connection.close()

    relay.label = "proton"
    conn = BlockingConnection(f"amqp://127.0.0.1:{port}", user="guest", password="guest", allowed_mechs="PLAIN",
                              timeout=10)
    sender = conn.create_sender("/queues/fuzz10")
    for body in (b"small", b"m" * 300, b"L" * 200_000):
        sender.send(Message(inferred=True, body=body, id="id-1", subject="s", properties={"k": 1}), timeout=10)
    conn.create_sender("/exchanges/amq.direct/fuzz10", name="to-exchange").send(
        Message(inferred=True, body=b"x"), timeout=10)
    anonymous = conn.create_sender(None, name="anonymous", options=AtMostOnce())
    anonymous.send(Message(inferred=True, body=b"y", address="/queues/fuzz10"), timeout=10)
    receiver = conn.create_receiver("/queues/fuzz10", credit=5)
    receiver.receive(timeout=10)
    receiver.accept()
    receiver.receive(timeout=10)
    receiver.release(delivered=False)
    receiver.receive(timeout=10)
    receiver.fetcher.unsettled[0].local.failed = True
    receiver.settle(Delivery.MODIFIED)
    receiver.receive(timeout=10)
    receiver.reject()
    receiver.close()
    conn.close()

    relay.label = "rabbitmq-amqp-python-client"
    env = Environment(f"amqp://guest:guest@127.0.0.1:{port}/")
    client = env.connection()
    client.dial()
    management = client.management()
    management.declare_queue(QuorumQueueSpecification(name="fuzz10-m"))
    management.queue_info("fuzz10-m")
    management.purge_queue("fuzz10-m")
    publisher = client.publisher(AddressHelper.queue_address("fuzz10-m"))
    from rabbitmq_amqp_python_client.qpid.proton import Message as ClientMessage
    publisher.publish(ClientMessage(body=b"z"))
    publisher.close()
    management.delete_queue("fuzz10-m")
    management.close()
    client.close()
    env.close()
