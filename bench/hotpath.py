"""The AMQP hot path in one process, without sockets: ``python -m bench.hotpath [MODE ...] [--messages N]``.

A real :class:`gateway.amqp.connection.AmqpConnection` over Twisted's ``StringTransport`` and a
``MemoryReactorClock``, the real router and log in a temporary directory; pre-encoded frames go
in as 64 KiB ``dataReceived`` chunks (what a busy socket hands over) and a group commit
(``flush_dirty`` + ``log_moved``) runs every 16 chunks, as the server's fsync thread would.
It prints the process CPU microseconds per message of each mode. On a shared machine this
moves much less than a socket benchmark does, so it is the A/B check for hot-path changes
(``--profile`` prints cProfile's top functions too). Not a substitute for ``python -m bench amqp``.

MODE: transient, confirm, consume (of a queue filled first), fanout (10 queues), spreadN (confirmed
publishes round robin over N exclusive queues, e.g. spread1 and spread1000: the scale row's shape);
the AMQP 1.0 door (a second connection, its transfer frames from :mod:`bench.amqp10_load`):
amqp10-settled, amqp10-unsettled (durable, outcomes), amqp10-consume (credit 1000, accepted per 500).
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import struct
import sys
import tempfile
import time
from pathlib import Path

from pamqp import commands, frame

from bench.amqp10_load import transfer_template
from bench.amqp_load import publish_frames
from core.log_manager import LogManager
from core.metadata import LocalMetadataStore
from gateway.amqp.connection import AmqpFactory
from gateway.amqp.service import AmqpService
from routing.broker import Router
from wire.amqp10_frames import (
    HEADER_AMQP, Accepted, Attach, Begin, Disposition, Flow, Open, Source, Target, encode_frame,
)

CHUNK = 64 * 1024


class Rig:
    def __init__(self, directory: Path):
        from twisted.internet.testing import MemoryReactorClock, StringTransport
        self.logs = LogManager(directory, LocalMetadataStore(directory))
        self.logs.startup()
        self.router = Router(directory, self.logs)
        self.router.load()
        self.reactor = MemoryReactorClock()
        self.service = AmqpService(self.router, self.reactor, lambda: None)
        self.conn = AmqpFactory(self.service).buildProtocol(None)
        from twisted.internet.address import IPv4Address
        self.transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 40000))  # guest: loopback only
        self.chunks = 0
        self.conn.makeConnection(self.transport)
        self.feed(b"AMQP\x00\x00\x09\x01")
        for method in (commands.Connection.StartOk(client_properties={}, mechanism="PLAIN",
                                                   response="\0guest\0guest", locale="en_US"),
                       commands.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=0),
                       commands.Connection.Open(virtual_host="/")):
            self.feed(frame.marshal(method, 0))
        self.feed(frame.marshal(commands.Channel.Open(), 1))
        if 1 not in self.conn.channels:
            raise RuntimeError(f"handshake failed: {self.transport.value()[-300:]!r}")

    def feed(self, data: bytes) -> None:
        self.conn.dataReceived(data)
        self.reactor.advance(0)
        self.chunks += 1
        if self.chunks % 16 == 0:
            self.commit()

    def commit(self) -> None:
        self.logs.flush_dirty()
        self.service.log_moved()
        self.reactor.advance(0)
        self.transport.clear()

    def method(self, method) -> None:
        self.feed(frame.marshal(method, 1))

    def stream(self, one: bytes, n: int) -> None:
        per = max(CHUNK // len(one), 1)
        for i in range(0, n, per):
            self.feed(one * min(per, n - i))
        self.commit()


class Rig10:
    """An AMQP 1.0 connection on the same service as ``rig``'s 0-9-1 one (which declares queues)."""

    def __init__(self, rig: Rig):
        from twisted.internet.address import IPv4Address
        from twisted.internet.testing import StringTransport
        self.rig = rig
        self.transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 40001))
        self.conn = AmqpFactory(rig.service).buildProtocol(None)
        self.conn.makeConnection(self.transport)
        self.feed(HEADER_AMQP)  # anonymous: guest from loopback
        self.frame(Open(container_id="hotpath", max_frame_size=131072))
        self.frame(Begin(next_outgoing_id=0, incoming_window=1 << 31, outgoing_window=(1 << 32) - 1))
        self.handle = 0
        self.next_delivery_id = 0

    def feed(self, data: bytes) -> None:
        self.conn.dataReceived(data)
        self.rig.reactor.advance(0)
        self.rig.chunks += 1
        if self.rig.chunks % 16 == 0:
            self.rig.commit()

    def frame(self, body, payload: bytes = b"") -> None:
        self.feed(encode_frame(0, body, payload))

    def attach(self, queue: str, receiver: bool) -> int:
        self.handle += 1
        h = self.handle
        self.frame(Attach(name=f"hp-{h}", handle=h, role=receiver, snd_settle_mode=0 if receiver else 2,
                          rcv_settle_mode=0, source=Source(address=f"/queues/{queue}" if receiver else "hp"),
                          target=Target(address="hp" if receiver else f"/queues/{queue}"),
                          initial_delivery_count=None if receiver else 0))
        return h

    def publish(self, queue: str, n: int, size: int, settled: bool) -> None:
        """n transfers on a fresh sender link (credit is not waited for: the broker does not police it)."""
        h = self.attach(queue, False)
        frame, at = transfer_template(size, settled, durable=not settled, handle=h)
        per = max(CHUNK // len(frame), 1)
        base = self.next_delivery_id  # delivery ids run on across the links of the session
        for i in range(0, n, per):
            out = bytearray()
            for j in range(i, min(i + per, n)):
                struct.pack_into(">I", frame, at, base + j)
                out += frame
            self.feed(bytes(out))
        self.next_delivery_id = base + n
        self.rig.commit()


def run_amqp10(rig: Rig, mode: str, n: int, size: int, tag: str) -> float:
    """CPU seconds of one AMQP 1.0 mode; consume: credit 1,000, accepted (one range) and topped
    up every 500 deliveries."""
    queue = f"hp-{tag}"
    rig.method(commands.Queue.Declare(queue=queue, durable=True))
    r10 = getattr(rig, "r10", None) or Rig10(rig)
    rig.r10 = r10
    if mode != "amqp10-consume":
        start = time.process_time()
        r10.publish(queue, n, size, settled=mode == "amqp10-settled")
        return time.process_time() - start
    r10.publish(queue, n, size, settled=False)
    start = time.process_time()
    h = r10.attach(queue, True)
    door = r10.conn.dataReceived.__self__  # the AMQP 1.0 connection the 0-9-1 one handed over to
    session = door.sessions[0]
    link = session.links[h]
    first = session.next_delivery_id
    r10.frame(Flow(next_incoming_id=0, incoming_window=1 << 31, next_outgoing_id=1, outgoing_window=(1 << 32) - 1,
                   handle=h, delivery_count=0, link_credit=1000))
    got = idle = 0
    while got < n:
        delivered = link.delivery_count - got
        if delivered >= 500 or (delivered and got + delivered == n):
            settle = Disposition(role=True, first=(first + got) % (1 << 32),
                                 last=(first + got + delivered - 1) % (1 << 32), settled=True, state=Accepted())
            got += delivered
            r10.feed(encode_frame(0, settle) + encode_frame(0, Flow(
                next_incoming_id=got, incoming_window=1 << 31, next_outgoing_id=1, outgoing_window=(1 << 32) - 1,
                handle=h, delivery_count=got, link_credit=1000)))
            idle = 0
        else:
            idle += 1
            if idle > 100:
                raise RuntimeError(f"amqp10-consume: {got + delivered}/{n} delivered, then nothing")
            rig.commit()
    return time.process_time() - start


def run_mode(rig: Rig, mode: str, n: int, size: int, tag: str) -> float:
    """CPU seconds of one mode (the set-up it needs is outside the clock)."""
    if mode.startswith("amqp10-"):
        return run_amqp10(rig, mode, n, size, tag)
    queue = f"hp-{tag}"
    rig.method(commands.Queue.Declare(queue=queue, durable=True))
    if mode == "consume":
        rig.stream(publish_frames("", queue, size, persistent=True), n)
        rig.method(commands.Basic.Qos(prefetch_count=1000))
        channel = rig.conn.channels[1]
        base = channel.next_tag - 1  # delivery tags run on across the repetitions of one channel
        start = time.process_time()
        rig.method(commands.Basic.Consume(queue=queue, consumer_tag=tag))
        acked = 0
        while acked < n:
            delivered = channel.next_tag - 1 - base
            if delivered - acked >= 500 or delivered == n:
                rig.method(commands.Basic.Ack(delivery_tag=base + delivered, multiple=True))
                acked = delivered
            else:
                rig.commit()
        took = time.process_time() - start
        rig.method(commands.Basic.Cancel(consumer_tag=tag))
        return took
    if mode == "fanout":
        rig.method(commands.Exchange.Declare(exchange=f"fx-{tag}", exchange_type="fanout"))
        for i in range(10):
            rig.method(commands.Queue.Declare(queue=f"{queue}-{i}", durable=True))
            rig.method(commands.Queue.Bind(queue=f"{queue}-{i}", exchange=f"fx-{tag}"))
        one = publish_frames(f"fx-{tag}", "", size, persistent=False)
    elif mode.startswith("spread"):  # spreadN: confirmed transient publishes round robin over N queues
        count = int(mode[6:] or 1000)
        names = [f"{queue}-{i}" for i in range(count)]
        rig.feed(b"".join(frame.marshal(commands.Queue.Declare(queue=q, exclusive=True), 1) for q in names))
        rig.method(commands.Confirm.Select())
        frames = [publish_frames("", q, size, persistent=False) for q in names]
        start = time.process_time()
        per = max(CHUNK // len(frames[0]), 1)
        for i in range(0, n, per):
            rig.feed(b"".join(frames[j % count] for j in range(i, min(i + per, n))))
        rig.commit()
        took = time.process_time() - start
        rig.feed(b"".join(frame.marshal(commands.Queue.Delete(queue=q), 1) for q in names))
        return took
    else:
        if mode == "confirm":
            rig.method(commands.Confirm.Select())
        one = publish_frames("", queue, size, persistent=mode == "confirm")
    start = time.process_time()
    rig.stream(one, n)
    return time.process_time() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hotpath", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modes", nargs="*", default=["transient", "confirm", "consume", "fanout"])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hotpath-") as tmp:
        rig = Rig(Path(tmp))
        for mode in args.modes:
            runs = []
            for rep in range(args.repeat):
                profiler = cProfile.Profile() if args.profile and rep == 0 else None
                if profiler:
                    profiler.enable()
                runs.append(run_mode(rig, mode, args.messages, args.size, f"{mode}-{rep}"))
                if rig.conn.state != "opened":
                    raise RuntimeError(f"{mode}: the broker closed the connection: {rig.transport.value()[-300:]!r}")
                if profiler:
                    profiler.disable()
                    pstats.Stats(profiler).sort_stats("tottime").print_stats(18)
            best = min(runs)
            print(f"{mode:<10} {best / args.messages * 1e6:6.2f} us/msg (best of {args.repeat}; all: "
                  + ", ".join(f"{r / args.messages * 1e6:.2f}" for r in runs) + ")", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
