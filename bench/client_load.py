"""AMQP runs through the client libraries our users run: ``python -m bench.client_load SPEC-JSON``.

Unlike ``bench.amqp_load`` (raw pre-encoded frames, so that the broker is what is measured),
these rows measure what a pika or aio-pika application gets; on this machine the client's own
Python usually sets the pace, so their ratios say less about the broker than the raw rows do.

SPEC: ``{"address": "host:port", "queue": str, "messages": int, "size": int, "client": "pika"|"aio-pika",
"mode": "publish"|"consume"}``

* pika ``publish``: BlockingConnection, transient basic_publish of every message, the clock stops
  when a passive declare counts them all; ``consume``: prefetch 1,000, a multiple ack every 500.
* aio-pika ``publish``: a channel with publisher confirms, persistent messages awaited in windows
  of 1,000 (asyncio.gather); ``consume``: queue.iterator(), prefetch 1,000, multiple ack every 500.

``consume`` reads (and then deletes) the queue its ``publish`` run filled.

* pika ``confirm-each``: ``connections`` (10) threads, each its own connection publishing
  persistent messages with ``confirm_delivery`` (one confirm awaited per message) for ``seconds``.
* pika ``latency``: a consumer connection in one thread (prefetch 1,000, a multiple ack every
  100) and a publisher connection in another sending ``rate`` messages a second for ``seconds``,
  each body starting with its send time; ``"confirm": true`` makes them persistent on a
  ``confirm_delivery`` channel (each publish then waits for its confirm, as a pika application's
  does). Reports p50/p99/max of publish -> delivery after a 0.5 s warm-up, and the rate achieved.

Prints one JSON line.
"""
from __future__ import annotations

import asyncio
import json
import sys
import time

PREFETCH, ACK_EVERY, WINDOW = 1000, 500, 1000


def _url(address: str) -> str:
    return f"amqp://guest:guest@{address}/%2F"


def pika_run(spec: dict) -> float:
    import pika
    conn = pika.BlockingConnection(pika.URLParameters(_url(spec["address"])))
    ch = conn.channel()
    q, n = spec["queue"], spec["messages"]
    ch.queue_declare(q, durable=True)
    if spec["mode"] == "publish":
        body, props = b"x" * spec["size"], pika.BasicProperties(delivery_mode=1)
        start = time.perf_counter()
        for _ in range(n):
            ch.basic_publish("", q, body, props)
        while ch.queue_declare(q, passive=True).method.message_count < n:
            time.sleep(0.002)
        elapsed = time.perf_counter() - start
    else:
        ch.basic_qos(prefetch_count=PREFETCH)
        state = {"got": 0}

        def on_message(channel, method, properties, body):
            state["got"] += 1
            if state["got"] % ACK_EVERY == 0 or state["got"] == n:
                channel.basic_ack(method.delivery_tag, multiple=True)
            if state["got"] >= n:
                channel.stop_consuming()
        start = time.perf_counter()
        ch.basic_consume(q, on_message)
        ch.start_consuming()
        elapsed = time.perf_counter() - start
        ch.queue_delete(q)
    conn.close()
    return elapsed


async def aio_pika_run(spec: dict) -> float:
    import aio_pika
    conn = await aio_pika.connect(_url(spec["address"]))
    ch = await conn.channel(publisher_confirms=True)
    q, n = spec["queue"], spec["messages"]
    queue = await ch.declare_queue(q, durable=True)
    if spec["mode"] == "publish":
        body, exchange = b"x" * spec["size"], ch.default_exchange
        start = time.perf_counter()
        for i in range(0, n, WINDOW):
            await asyncio.gather(*(exchange.publish(aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                                                    routing_key=q) for _ in range(min(WINDOW, n - i))))
        elapsed = time.perf_counter() - start
    else:
        await ch.set_qos(prefetch_count=PREFETCH)
        got = 0
        start = time.perf_counter()
        async with queue.iterator() as messages:
            async for message in messages:
                got += 1
                if got % ACK_EVERY == 0 or got == n:
                    await message.ack(multiple=True)
                if got >= n:
                    break
        elapsed = time.perf_counter() - start
        await queue.delete(if_unused=False, if_empty=False)
    await conn.close()
    return elapsed


def pika_confirm_each(spec: dict) -> dict:
    """``connections`` threads, each a pika connection publishing persistent messages on a
    ``confirm_delivery`` channel (each publish waits for its confirm) for ``seconds``."""
    import threading
    import pika
    q, seconds, body = spec["queue"], spec["seconds"], b"x" * spec["size"]
    params = pika.URLParameters(_url(spec["address"]))
    setup = pika.BlockingConnection(params)
    setup.channel().queue_declare(q, durable=True)
    counts = [0] * spec.get("connections", 10)
    stop = time.monotonic() + seconds

    def run(i: int) -> None:
        conn = pika.BlockingConnection(params)
        ch = conn.channel()
        ch.confirm_delivery()
        props = pika.BasicProperties(delivery_mode=2)
        while time.monotonic() < stop:
            ch.basic_publish("", q, body, props)
            counts[i] += 1
        conn.close()
    started = time.monotonic()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(counts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    setup.channel().queue_delete(q)
    setup.close()
    return {"messages": sum(counts), "seconds": elapsed, "msgs_s": sum(counts) / elapsed}


def pika_latency(spec: dict) -> dict:
    import struct
    import threading
    import pika
    from bench.amqp_load import _latency_summary
    q, rate, seconds, confirm = spec["queue"], spec["rate"], spec["seconds"], spec.get("confirm", False)
    total = int(rate * seconds)
    params = pika.URLParameters(_url(spec["address"]))
    pub_conn, con_conn = pika.BlockingConnection(params), pika.BlockingConnection(params)
    pub, con = pub_conn.channel(), con_conn.channel()
    pub.queue_declare(q, durable=True)
    if confirm:
        pub.confirm_delivery()
    con.basic_qos(prefetch_count=PREFETCH)
    clock, stamp, unpack = time.perf_counter, struct.Struct(">d"), struct.Struct(">d").unpack_from
    t0 = clock()
    latencies, state = [], {"got": 0}

    def on_message(channel, method, properties, body):
        arrived = clock()
        sent_at = unpack(body)[0]
        if sent_at - t0 >= 0.5:
            latencies.append(arrived - sent_at)
        state["got"] += 1
        if state["got"] % 100 == 0 or state["got"] == total:
            channel.basic_ack(method.delivery_tag, multiple=True)
        if state["got"] >= total:
            channel.stop_consuming()
    con.basic_consume(q, on_message)
    consumer = threading.Thread(target=con.start_consuming, daemon=True)
    consumer.start()
    props = pika.BasicProperties(delivery_mode=2 if confirm else 1)
    pad = b"x" * max(spec["size"] - 8, 0)
    for i in range(total):
        due = t0 + i / rate
        now = clock()
        if due > now:
            time.sleep(due - now)
        pub.basic_publish("", q, stamp.pack(clock()) + pad, props)
    offered = total / max(clock() - t0, 1e-9)
    consumer.join(timeout=60)
    if consumer.is_alive():
        raise RuntimeError(f"pika latency run: {state['got']}/{total} delivered 60 s after the last publish")
    con_conn.close()
    pub.queue_delete(q)
    pub_conn.close()
    return _latency_summary(latencies, rate, offered, total)


def main(spec: dict) -> dict:
    if spec["mode"] == "latency":
        return {**spec, **pika_latency(spec)}
    if spec["mode"] == "confirm-each":
        return {**spec, **pika_confirm_each(spec)}
    if spec["client"] == "pika":
        elapsed = pika_run(spec)
    else:
        elapsed = asyncio.run(aio_pika_run(spec))
    return {**spec, "seconds": elapsed, "msgs_s": spec["messages"] / elapsed}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
