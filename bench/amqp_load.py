"""AMQP 0-9-1 load generator on a raw socket: ``python -m bench.amqp_load SPEC-JSON``.

pamqp builds the handshake and one publish frame set (Basic.Publish + content header + body)
once; publishing then writes those same bytes N times (1,000 messages per ``sendall``), so the
client costs next to nothing and the broker is what is measured. Incoming frames are parsed
by hand (only the fields needed: Basic.Ack / Basic.Nack tags, Basic.Deliver counts).

SPEC: ``{"address": "host:port", "queue": str, "messages": int, "size": int, "mode": ...}``

* ``transient``: declare a durable queue, publish delivery_mode=1 without confirms; the clock
  stops when a passive Queue.Declare reports all messages in the queue. The queue is deleted.
* ``confirm``: declare a durable queue, Confirm.Select, publish delivery_mode=2 keeping at
  most 1,000 unconfirmed (sent in chunks of 100); the clock stops at the last confirm.
* ``consume``: Basic.Qos prefetch 1,000, Basic.Consume (manual ack), a multiple Basic.Ack
  every 500 deliveries; the clock stops at the last delivery. The queue is deleted.

Prints one JSON line with seconds and msgs/s.
"""
from __future__ import annotations

import json
import socket
import struct
import sys
import time

from pamqp import commands, frame, header, body

WINDOW = 1000
CHUNK = 100
PREFETCH = 1000
ACK_EVERY = 500


class ServerClosed(RuntimeError):
    pass


class Conn:
    def __init__(self, address: str):
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=120)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.pos = 0
        self.sock.sendall(b"AMQP\x00\x00\x09\x01")
        self.expect(commands.Connection.Start, channel=0)
        self.send(0, commands.Connection.StartOk(
            client_properties={"product": "bench.amqp_load", "capabilities": {"publisher_confirms": True}},
            mechanism="PLAIN", response="\0guest\0guest", locale="en_US"))
        tune = self.expect(commands.Connection.Tune, channel=0)
        self.frame_max = tune.frame_max or 131072
        self.send(0, commands.Connection.TuneOk(channel_max=tune.channel_max or 2047,
                                                frame_max=self.frame_max, heartbeat=0))
        self.send(0, commands.Connection.Open(virtual_host="/"))
        self.expect(commands.Connection.OpenOk, channel=0)
        self.send(1, commands.Channel.Open())
        self.expect(commands.Channel.OpenOk)

    # ------------------------------------------------------------------ frames
    def send(self, channel: int, method) -> None:
        self.sock.sendall(frame.marshal(method, channel))

    def _recv(self) -> None:
        data = self.sock.recv(1 << 20)
        if not data:
            raise ServerClosed("connection closed by the broker")
        if self.pos > (1 << 20):
            del self.buf[:self.pos]
            self.pos = 0
        self.buf += data

    def frames(self):
        """Yield (type, channel, start, end) of the complete frames in the buffer (payload = buf[start:end])."""
        buf = self.buf
        unpack = struct.unpack_from
        while len(buf) - self.pos >= 8:
            ftype, channel, size = unpack(">BHI", buf, self.pos)
            start = self.pos + 7
            end = start + size
            if len(buf) <= end:
                break
            self.pos = end + 1
            yield ftype, channel, start, end

    def _check_close(self, start: int) -> None:
        cls, meth = struct.unpack_from(">HH", self.buf, start)
        if (cls, meth) in ((10, 50), (20, 40)):
            _, _, obj = frame.unmarshal(bytes(self.buf[start - 7:self.pos]))
            raise ServerClosed(f"broker closed: {obj.reply_code} {obj.reply_text}")

    def expect(self, cls, channel: int = 1):
        """Read until a method frame of ``cls`` arrives (skipping others); return it."""
        while True:
            for ftype, ch, start, end in self.frames():
                if ftype != 1:
                    continue
                self._check_close(start)
                _, _, obj = frame.unmarshal(bytes(self.buf[start - 7:end + 1]))
                if isinstance(obj, cls):
                    return obj
            self._recv()

    def close(self) -> None:
        try:
            self.send(0, commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
            self.expect(commands.Connection.CloseOk, channel=0)
        except (OSError, ServerClosed):
            pass
        self.sock.close()


def publish_bytes(queue: str, size: int, persistent: bool) -> bytes:
    props = commands.Basic.Properties(delivery_mode=2 if persistent else 1)
    return (frame.marshal(commands.Basic.Publish(exchange="", routing_key=queue), 1)
            + frame.marshal(header.ContentHeader(0, size, props), 1)
            + frame.marshal(body.ContentBody(b"x" * size), 1))


def declare(conn: Conn, queue: str, passive: bool = False) -> int:
    conn.send(1, commands.Queue.Declare(queue=queue, durable=True, passive=passive))
    return conn.expect(commands.Queue.DeclareOk).message_count


def delete(conn: Conn, queue: str) -> None:
    conn.send(1, commands.Queue.Delete(queue=queue))
    conn.expect(commands.Queue.DeleteOk)


def run_transient(conn: Conn, queue: str, n: int, size: int) -> float:
    declare(conn, queue)
    one = publish_bytes(queue, size, persistent=False)
    chunk = one * 1000
    start = time.perf_counter()
    for _ in range(n // 1000):
        conn.sock.sendall(chunk)
    if n % 1000:
        conn.sock.sendall(one * (n % 1000))
    sent = time.perf_counter()
    deadline = time.monotonic() + 300
    while True:
        count = declare(conn, queue, passive=True)
        if count >= n:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {count}/{n} messages in {queue} after 300 s")
        time.sleep(0.002)
    elapsed = time.perf_counter() - start
    delete(conn, queue)
    return elapsed, sent - start


def run_confirm(conn: Conn, queue: str, n: int, size: int) -> float:
    declare(conn, queue)
    conn.send(1, commands.Confirm.Select())
    conn.expect(commands.Confirm.SelectOk)
    one = publish_bytes(queue, size, persistent=True)
    chunk = one * CHUNK
    published = 0
    upto = 0            # every tag <= upto is confirmed
    singles = set()     # confirmed tags above upto (non-multiple acks)
    nacks = 0
    buf = conn.buf
    unpack = struct.unpack_from
    start = time.perf_counter()
    while upto < n:
        while published < n and published - upto - len(singles) + CHUNK <= WINDOW:
            k = min(CHUNK, n - published)
            conn.sock.sendall(chunk if k == CHUNK else one * k)
            published += k
        conn._recv()
        buf = conn.buf
        for ftype, ch, s, e in conn.frames():
            if ftype != 1:
                continue
            cls, meth = unpack(">HH", buf, s)
            if cls == 60 and meth in (80, 120):  # Basic.Ack / Basic.Nack
                tag = unpack(">Q", buf, s + 4)[0]
                multiple = buf[s + 12] & 1
                if meth == 120:
                    nacks += 1
                if multiple:
                    if tag > upto:
                        upto = tag
                        singles = {t for t in singles if t > upto}
                else:
                    singles.add(tag)
                while upto + 1 in singles:
                    upto += 1
                    singles.discard(upto)
            else:
                conn._check_close(s)
    elapsed = time.perf_counter() - start
    if nacks:
        raise RuntimeError(f"{nacks} Basic.Nack frames")
    return elapsed, None


def run_consume(conn: Conn, queue: str, n: int) -> float:
    conn.send(1, commands.Basic.Qos(prefetch_count=PREFETCH))
    conn.expect(commands.Basic.QosOk)
    got = 0
    acked = 0
    unpack = struct.unpack_from
    start = time.perf_counter()
    conn.send(1, commands.Basic.Consume(queue=queue, consumer_tag="bench", no_ack=False))
    while got < n:
        conn._recv()
        buf = conn.buf
        for ftype, ch, s, e in conn.frames():
            if ftype != 1:
                continue
            cls, meth = unpack(">HH", buf, s)
            if cls == 60 and meth == 60:  # Basic.Deliver
                got += 1
                tag = unpack(">Q", buf, s + 5 + buf[s + 4])[0]
                if got - acked >= ACK_EVERY:
                    conn.send(1, commands.Basic.Ack(delivery_tag=tag, multiple=True))
                    acked = got
            else:
                conn._check_close(s)
    elapsed = time.perf_counter() - start
    if got > acked:
        conn.send(1, commands.Basic.Ack(delivery_tag=tag, multiple=True))
    conn.send(1, commands.Basic.Cancel(consumer_tag="bench"))
    conn.expect(commands.Basic.CancelOk)
    delete(conn, queue)
    return elapsed, None


def main(spec: dict) -> dict:
    conn = Conn(spec["address"])
    n, q, mode = spec["messages"], spec["queue"], spec["mode"]
    if mode == "transient":
        elapsed, send_s = run_transient(conn, q, n, spec["size"])
    elif mode == "confirm":
        elapsed, send_s = run_confirm(conn, q, n, spec["size"])
    elif mode == "consume":
        elapsed, send_s = run_consume(conn, q, n)
    else:
        raise SystemExit(f"unknown mode {mode}")
    conn.close()
    out = {"mode": mode, "queue": q, "messages": n, "seconds": elapsed, "msgs_s": n / elapsed}
    if send_s is not None:
        out["send_seconds"] = send_s
    return out


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
