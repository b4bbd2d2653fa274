"""The processes of the load test (``test_load.py``), run as ``python -m compat_tests.amqp.load_clients``.

``publish URL EXCHANGE N``: a pika SelectConnection publisher in confirm mode, keeping up to
``--window`` publishes unconfirmed; message ``i`` is persistent, ``message_id=str(i)``, routed
with :func:`routing_key`. Prints one JSON line ``{"published", "acked", "nacked", "seconds"}``.

``consume URL OUT QUEUE...``: a pika BlockingConnection consumer of the queues (manual acks,
``--prefetch`` per consumer). For each delivery it appends ``queue message_id redelivered`` to
OUT, and acks (multiple) only what it has written (``--ack-interval`` holds acks back, so a
killed consumer leaves written-but-unacked deliveries). SIGTERM: write, ack, close, exit 0.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import time

import pika

KEYS = ("order.std.eu", "order.priority.us", "stock.priority.eu")


def routing_key(i: int) -> str:
    return KEYS[i % 3]


def publish(url: str, exchange: str, n: int, window: int) -> int:
    state = {"next": 0, "outstanding": set(), "acked": 0, "nacked": [], "error": None}
    began = time.monotonic()

    def publish_more(ch):
        while state["next"] < n and len(state["outstanding"]) < window:
            i = state["next"]
            ch.basic_publish(exchange, routing_key(i), b"load-message-%08d" % i,
                             pika.BasicProperties(delivery_mode=2, message_id=str(i)))
            state["next"] += 1
            state["outstanding"].add(i + 1)  # delivery tags count from 1

    def on_confirm(frame, ch):
        method = frame.method
        tag = method.delivery_tag
        done = {t for t in state["outstanding"] if t <= tag} if method.multiple else {tag} & state["outstanding"]
        state["outstanding"] -= done
        if isinstance(method, pika.spec.Basic.Ack):
            state["acked"] += len(done)
        else:
            state["nacked"].extend(sorted(t - 1 for t in done))
        if state["acked"] + len(state["nacked"]) == n:
            ch.connection.close()
        else:
            publish_more(ch)

    def on_channel(ch):
        ch.confirm_delivery(lambda frame: on_confirm(frame, ch),
                            callback=lambda _f: publish_more(ch))

    def on_open_error(conn, err):
        state["error"] = repr(err)
        conn.ioloop.stop()

    def on_closed(conn, reason):
        if state["acked"] + len(state["nacked"]) != n:
            state["error"] = f"connection closed early: {reason!r}"
        conn.ioloop.stop()

    conn = pika.SelectConnection(pika.URLParameters(url), on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
                                 on_open_error_callback=on_open_error, on_close_callback=on_closed)
    conn.ioloop.start()
    print(json.dumps({"published": state["next"], "acked": state["acked"], "nacked": state["nacked"][:100],
                      "error": state["error"], "seconds": round(time.monotonic() - began, 2)}), flush=True)
    return 0 if state["error"] is None else 1


def consume(url: str, out_path: str, queues: list[str], prefetch: int, ack_interval: float = 0.0,
            batch: int = 20) -> int:
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    out = open(out_path, "a")
    lines: list[str] = []
    last = {"tag": 0, "acked": 0, "acked_at": time.monotonic()}
    queue_of = {}

    def flush_and_ack(force: bool = False):
        if lines:
            out.write("".join(lines))
            out.flush()  # written before acked: a kill after this line cannot lose it
            lines.clear()
        now = time.monotonic()
        if last["tag"] > last["acked"] and (force or now - last["acked_at"] >= ack_interval):
            ch.basic_ack(last["tag"], multiple=True)
            last["acked"], last["acked_at"] = last["tag"], now

    def on_message(_ch, method, props, _body):
        lines.append(f"{queue_of[method.consumer_tag]} {props.message_id} {int(method.redelivered)}\n")
        last["tag"] = method.delivery_tag
        if len(lines) >= batch:
            flush_and_ack()

    for q in queues:
        queue_of[ch.basic_consume(q, on_message)] = q
    print("ready", flush=True)
    while not stop["now"]:
        conn.process_data_events(time_limit=0.05)
        flush_and_ack()
    flush_and_ack(force=True)
    conn.close()
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    pp = sub.add_parser("publish")
    pp.add_argument("url")
    pp.add_argument("exchange")
    pp.add_argument("n", type=int)
    pp.add_argument("--window", type=int, default=1000)
    cp = sub.add_parser("consume")
    cp.add_argument("url")
    cp.add_argument("out")
    cp.add_argument("queues", nargs="+")
    cp.add_argument("--prefetch", type=int, default=50)
    cp.add_argument("--ack-interval", type=float, default=0.0,
                    help="ack (multiple) at most this often; deliveries are written at once regardless")
    args = p.parse_args(argv)
    if args.mode == "publish":
        return publish(args.url, args.exchange, args.n, args.window)
    return consume(args.url, args.out, args.queues, args.prefetch, args.ack_interval)


if __name__ == "__main__":
    sys.exit(main())
