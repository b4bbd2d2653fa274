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
* ``fanout``: a fanout exchange bound to ``fanout`` (10) durable queues; transient publishes to
  it until a passive Queue.Declare of every queue counts all messages (msgs/s counts publishes).
* ``latency``: a second connection consumes (prefetch 1,000, multiple ack every 100) while this
  one publishes ``rate`` transient messages a second for ``seconds``, each body starting with
  the send time; reports p50/p99/max of receive time minus send time, after a 0.5 s warm-up.
  ``"confirm": true``: persistent messages on a confirm-mode channel instead.
* ``spread`` (bench.scale): ``queues`` exclusive queues, then ``messages`` confirmed publishes
  round robin over them; reports the broker's CPU seconds per message over the publish phase
  (``pid``: the broker process, or ``pids``: every broker of a cluster, each read from /proc).
* ``random_brokers`` (bench.scale): ``queues`` durable queues, ``clients`` publishers (persistent,
  confirms) and ``clients`` acking consumers at once, each on a broker picked at random (``seed``)
  from ``addresses`` (every broker of a cluster); every confirmed message must be consumed (the
  run fails if one is not); reports each broker's CPU seconds (``pids``) over the workload.
* ``memory`` (bench.scale): the broker's RSS growth for ``messages`` ready persistent messages
  in one queue (confirmed publishes), or for ``queues`` idle durable queues; all deleted after.
* ``idle`` (bench.scale): ``connections`` connections opened (handshake + one channel) and left
  idle; reports the broker's RSS growth per connection (``pid`` as above).

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
        self.sock = socket.create_connection((host, int(port)), timeout=600)  # 1,000-queue runs on a busy machine
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
    return publish_frames("", queue, size, persistent)


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


def _deliveries(conn: Conn, n: int, start: float) -> float:
    """Take ``n`` deliveries on channel 1, acking every ACK_EVERY (multiple); the seconds from
    ``start`` to the last one."""
    got = acked = tag = 0
    unpack = struct.unpack_from
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
            elif not (cls == 60 and meth == 21):  # ConsumeOk
                conn._check_close(s)
    elapsed = time.perf_counter() - start
    if got > acked:
        conn.send(1, commands.Basic.Ack(delivery_tag=tag, multiple=True))
    return elapsed


def run_consume(conn: Conn, queue: str, n: int) -> float:
    conn.send(1, commands.Basic.Qos(prefetch_count=PREFETCH))
    conn.expect(commands.Basic.QosOk)
    start = time.perf_counter()
    conn.send(1, commands.Basic.Consume(queue=queue, consumer_tag="bench", no_ack=False))
    elapsed = _deliveries(conn, n, start)
    conn.send(1, commands.Basic.Cancel(consumer_tag="bench"))
    conn.expect(commands.Basic.CancelOk)
    delete(conn, queue)
    return elapsed, None


def publish_frames(exchange: str, routing_key: str, size: int, persistent: bool) -> bytes:
    props = commands.Basic.Properties(delivery_mode=2 if persistent else 1)
    return (frame.marshal(commands.Basic.Publish(exchange=exchange, routing_key=routing_key), 1)
            + frame.marshal(header.ContentHeader(0, size, props), 1)
            + frame.marshal(body.ContentBody(b"x" * size), 1))


def expect_many(conn: Conn, class_id: int, method_id: int, count: int) -> None:
    """Read until ``count`` method frames (class_id, method_id) arrived (pipelined replies)."""
    unpack = struct.unpack_from
    seen = 0
    while seen < count:
        conn._recv()
        for ftype, ch, s, e in conn.frames():
            if ftype == 1:
                if unpack(">HH", conn.buf, s) == (class_id, method_id):
                    seen += 1
                else:
                    conn._check_close(s)


def wait_counts(conn: Conn, queues: list[str], n: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    for q in queues:
        while declare(conn, q, passive=True) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{q} did not reach {n} messages in {timeout} s")
            time.sleep(0.002)


def run_fanout(conn: Conn, name: str, n: int, size: int, fanout: int) -> tuple[float, None]:
    exchange = f"{name}-fx"
    conn.send(1, commands.Exchange.Declare(exchange=exchange, exchange_type="fanout"))
    conn.expect(commands.Exchange.DeclareOk)
    queues = [f"{name}-f{i}" for i in range(fanout)]
    for q in queues:
        declare(conn, q)
        conn.send(1, commands.Queue.Bind(queue=q, exchange=exchange, routing_key=""))
        conn.expect(commands.Queue.BindOk)
    one = publish_frames(exchange, "", size, persistent=False)
    chunk = one * 1000
    start = time.perf_counter()
    for _ in range(n // 1000):
        conn.sock.sendall(chunk)
    conn.sock.sendall(one * (n % 1000))
    wait_counts(conn, queues, n)
    elapsed = time.perf_counter() - start
    for q in queues:
        delete(conn, q)
    conn.send(1, commands.Exchange.Delete(exchange=exchange))
    conn.expect(commands.Exchange.DeleteOk)
    return elapsed, None


def run_latency(address: str, queue: str, rate: float, seconds: float, size: int, confirm: bool = False) -> dict:
    """Publish at a fixed rate on one connection, consume on another, in one thread (select).

    ``confirm``: persistent messages on a channel in confirm mode (the publisher's confirms are
    read and counted; the latency is still publish -> delivery, which need not wait for the disk)."""
    import select
    pub, con = Conn(address), Conn(address)
    declare(pub, queue)
    if confirm:
        pub.send(1, commands.Confirm.Select())
        pub.expect(commands.Confirm.SelectOk)
    con.send(1, commands.Basic.Qos(prefetch_count=PREFETCH))
    con.expect(commands.Basic.QosOk)
    con.send(1, commands.Basic.Consume(queue=queue, consumer_tag="lat", no_ack=False))
    con.expect(commands.Basic.ConsumeOk)
    size = max(size, 8)
    head = (frame.marshal(commands.Basic.Publish(exchange="", routing_key=queue), 1)
            + frame.marshal(header.ContentHeader(0, size, commands.Basic.Properties(delivery_mode=2 if confirm else 1)), 1)
            + struct.pack(">BHI", 3, 1, size))
    tail = b"x" * (size - 8) + b"\xce"
    stamp = struct.Struct(">d").pack
    unpack = struct.unpack_from
    total = int(rate * seconds)
    latencies, sent, got, acked, tag = [], 0, 0, 0, 0
    warm = 0.5
    clock = time.perf_counter
    t0 = clock()
    deadline = t0 + seconds + 60
    while got < total:
        now = clock()
        if sent < total:
            due = min(int((now - t0) * rate), total) - sent
            if due > 0:
                one = head + stamp(now) + tail
                pub.sock.sendall(one * due)
                sent += due
        wait = 0.001 if sent < total else 0.05
        readable = select.select([con.sock, pub.sock] if confirm else [con.sock], [], [], wait)[0]
        if pub.sock in readable:  # confirms: read so the broker's socket never fills
            pub._recv()
            for ftype, ch, s, e in pub.frames():
                if ftype == 1 and struct.unpack_from(">HH", pub.buf, s) != (60, 80):
                    pub._check_close(s)
        if con.sock in readable:
            con._recv()
            buf = con.buf
            arrived = clock()
            for ftype, ch, s, e in con.frames():
                if ftype == 3:
                    sent_at = unpack(">d", buf, s)[0]
                    if sent_at - t0 >= warm:
                        latencies.append(arrived - sent_at)
                    got += 1
                elif ftype == 1:
                    cls, meth = unpack(">HH", buf, s)
                    if (cls, meth) == (60, 60):
                        tag = unpack(">Q", buf, s + 5 + buf[s + 4])[0]
                    else:
                        con._check_close(s)
            if got - acked >= 100:
                con.send(1, commands.Basic.Ack(delivery_tag=tag, multiple=True))
                acked = got
        if clock() > deadline:
            raise RuntimeError(f"latency run: {got}/{total} delivered 60 s after the last publish")
    offered = sent / max(clock() - t0, 1e-9)
    con.send(1, commands.Basic.Ack(delivery_tag=tag, multiple=True))
    con.close()
    delete(pub, queue)
    pub.close()
    return _latency_summary(latencies, rate, offered, total)


def _latency_summary(latencies: list[float], rate: float, offered: float, total: int) -> dict:
    latencies.sort()
    n = len(latencies)

    def pct(p):
        return latencies[min(n - 1, int(p * n))] * 1000 if n else None
    return {"rate": rate, "achieved_rate": offered, "messages": total, "measured": n,
            "p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": latencies[-1] * 1000 if n else None}



def run_idle(address: str, count: int, pid: int) -> dict:
    from bench.peers import rss_bytes
    first = Conn(address)
    time.sleep(1.0)
    before = rss_bytes(pid)
    conns = [first]
    for _ in range(count - 1):
        conns.append(Conn(address))
    time.sleep(2.0)  # let the broker settle (allocators, lazily made buffers)
    after = rss_bytes(pid)
    for c in conns:
        c.sock.close()
    return {"connections": count, "rss_before": before, "rss_after": after,
            "kb_per_connection": (after - before) / max(count - 1, 1) / 1024}


def run_memory(address: str, queue: str, pid: int, messages: int, size: int, queues: int,
               one_by_one: bool = False) -> dict:
    """Broker RSS growth for ``messages`` ready persistent messages of ``size`` B in one queue
    (published with confirms), or, with ``queues``, for that many idle durable queues (declared
    500 at a time, or ``one_by_one``, each waiting for its declare-ok, as most applications do:
    then the rate of the first and the last thousand is reported too)."""
    from bench.peers import rss_bytes
    conn = Conn(address)
    time.sleep(1.0)
    before = rss_bytes(pid)
    start = time.perf_counter()
    rates = []
    if queues and one_by_one:
        names = [f"{queue}-{i}" for i in range(queues)]
        mark, done = time.perf_counter(), 0
        for i, name in enumerate(names, 1):
            declare(conn, name)
            if i % 1000 == 0 or i == queues:
                now = time.perf_counter()
                rates.append((i - done) / (now - mark))
                mark, done = now, i
    elif queues:
        names = [f"{queue}-{i}" for i in range(queues)]
        for i in range(0, queues, 500):
            conn.sock.sendall(b"".join(frame.marshal(commands.Queue.Declare(queue=q, durable=True), 1)
                                       for q in names[i:i + 500]))
            expect_many(conn, 50, 11, len(names[i:i + 500]))
    else:
        run_confirm(conn, queue, messages, size)
        ready = declare(conn, queue, passive=True)
        if ready != messages:
            raise RuntimeError(f"{ready:,} of {messages:,} messages ready in {queue}")
    elapsed = time.perf_counter() - start
    time.sleep(3.0)  # let the broker settle (allocators, lazily made buffers, a queue's paging)
    after = rss_bytes(pid)
    for q in (names if queues else [queue]):  # the peer is reused by later runs
        conn.send(1, commands.Queue.Delete(queue=q))
    expect_many(conn, 50, 41, queues or 1)
    conn.close()
    return {"seconds": elapsed, "rss_before": before, "rss_after": after, "rss_growth_mb": (after - before) / 2**20,
            "rates": rates}


def main(spec: dict) -> dict:
    from bench import amqp_spread_load as spread_load  # the many-queue workloads (it imports this module)
    n, q, mode = spec.get("messages", 0), spec["queue"], spec["mode"]
    if mode == "latency":
        return {"mode": mode, **run_latency(spec["address"], q, spec["rate"], spec["seconds"], spec["size"],
                                            confirm=spec.get("confirm", False))}
    if mode == "memory":
        return {"mode": mode, **run_memory(spec["address"], q, spec["pid"], n, spec.get("size", 1024),
                                           spec.get("queues", 0), spec.get("one_by_one", False))}
    if mode == "idle":
        return {"mode": mode, **run_idle(spec["address"], spec["connections"], spec["pid"])}
    if mode == "random_brokers":
        return {"mode": mode, "messages": n, **spread_load.run_random_brokers(
            spec["addresses"], q, n, spec.get("size", 100), spec["queues"], spec.get("clients", 10),
            spec.get("seed", 1), spec["pids"], spec.get("http"), spec.get("started_file"),
            spec.get("placement", "random"), spec.get("arguments"))}
    conn = Conn(spec["address"])
    if mode == "spread":
        out = spread_load.run_spread(conn, q, n, spec["size"], spec["queues"], spec.get("pids") or [spec["pid"]],
                         spec.get("durable", False),
                         spec.get("consume", False))
        conn.close()
        return {"mode": mode, "messages": n, **out}
    if mode == "transient":
        elapsed, send_s = run_transient(conn, q, n, spec["size"])
    elif mode == "confirm":
        elapsed, send_s = run_confirm(conn, q, n, spec["size"])
        if spec.get("delete"):  # no consume run follows
            delete(conn, q)
    elif mode == "consume":
        elapsed, send_s = run_consume(conn, q, n)
    elif mode == "fanout":
        elapsed, send_s = run_fanout(conn, q, n, spec["size"], spec.get("fanout", 10))
    else:
        raise SystemExit(f"unknown mode {mode}")
    conn.close()
    out = {"mode": mode, "queue": q, "messages": n, "seconds": elapsed, "msgs_s": n / elapsed}
    if send_s is not None:
        out["send_seconds"] = send_s
    return out


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
