"""AMQP 0-9-1 peer benchmark: our broker next to RabbitMQ (Debian's package), same clients.

Rows, each measured on broker and peer in alternation (who goes first flips each repetition),
``--repeat`` times (default 3), medians in the table:

* raw-socket client (``bench/amqp_load.py``, pre-encoded frames, so the broker sets the pace),
  ``--size``-byte bodies (default 100 B), a fresh durable queue per run:
  publish transient (no confirms); publish persistent + confirms (window 1,000); consume with
  prefetch 1,000 and a multiple ack every 500 (of the queue the persistent run filled);
  transient publish through a fanout exchange to 10 queues;
* pika (transient publish, consume) and aio-pika (persistent publish with confirms, consume),
  ``--client-messages`` each (``bench/client_load.py``): what applications get;
* end-to-end latency p50/p99 at a fixed offered rate (a publisher and a consumer connection in
  one process, send time in the body): ``--latency-rate``, by default half of RabbitMQ's
  median transient publish rate measured above, for ``--latency-seconds``.

RabbitMQ is a private node started by ``compat_tests.rabbitmq.RabbitMQNode`` (free ports, its
own epmd); if it cannot start, our broker is measured alone.

    python -m bench amqp [--messages 100000] [--size 100] [--repeat 3] [--json PATH]

Results go to ``.cache/bench/results/amqp.json`` (and ``amqp.png`` if matplotlib is importable).
"""
from __future__ import annotations

import itertools

from bench import peers

RAW = [("transient", "raw: publish transient"),
       ("confirm", "raw: publish persistent + confirms"),
       ("consume", "raw: consume prefetch 1000, multi-ack/500"),
       ("fanout", "raw: publish transient, fanout to 10 queues")]
CLIENTS = [("pika", "publish", "pika: publish transient"),
           ("pika", "consume", "pika: consume prefetch 1000, multi-ack"),
           ("aio-pika", "publish", "aio-pika: publish persistent + confirms"),
           ("aio-pika", "consume", "aio-pika: consume prefetch 1000, multi-ack")]


def add_arguments(parser) -> None:
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--client-messages", type=int, default=20_000, help="per pika / aio-pika run")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--latency-rate", type=float, default=None,
                        help="msgs/s offered in the latency rows (default: half RabbitMQ's transient median)")
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--skip-clients", action="store_true", help="no pika / aio-pika rows")


def start_peer():
    """(RabbitMQ or None, its label, a note when it is missing)."""
    print("starting RabbitMQ ...", flush=True)
    try:
        from compat_tests.rabbitmq import RabbitMQUnavailable
        peer = peers.RabbitMQ()
    except ImportError as exc:
        return None, "none", f"RabbitMQ unavailable, our broker measured alone: {exc}"
    except (RabbitMQUnavailable, OSError) as exc:
        return None, "none", f"RabbitMQ unavailable, our broker measured alone: {str(exc)[:300]}"
    return peer, f"RabbitMQ (Debian package, {peer.node.script}), started in {peer.node.start_seconds[-1]:.1f} s", None


def run(args) -> peers.SuiteResult:
    print("starting our broker ...", flush=True)
    ours = peers.OurBroker("amqp")
    peer, peer_label, peer_note = None, "none", None
    samples = peers.Samples("amqp", "rabbitmq")
    cpu = {"broker": 0.0, "peer": 0.0}
    names = itertools.count()
    try:
        peer, peer_label, peer_note = start_peer()
        if peer_note:
            print(peer_note, flush=True)
        targets = [("broker", ours)] + ([("peer", peer)] if peer else [])

        def load(module, who, target, spec, case, field="msgs_s", **kind):
            r, used = peers.measured(lambda: peers.run_load(module, spec), target.pid)
            cpu[who] += used
            samples.add(case, who, r[field], **kind)
            print(f"  {target.name:<8} {case:<46} {r[field]:>10,.0f} msg/s in {r['seconds']:.2f} s", flush=True)
            return r

        for rep, who, target in peers.alternate(targets, args.repeat):
            base = f"bench-{rep}-{next(names)}"
            for mode, case in RAW:
                queue = f"{base}-confirm" if mode == "consume" else f"{base}-{mode}"
                load("bench.amqp_load", who, target, {"address": target.address("amqp"), "queue": queue,
                     "messages": args.messages, "size": args.size, "mode": mode}, case, size=args.size)
            if args.skip_clients:
                continue
            for client, mode, case in CLIENTS:
                load("bench.client_load", who, target, {"address": target.address("amqp"), "client": client,
                     "queue": f"{base}-{client}", "messages": args.client_messages, "size": args.size,
                     "mode": mode}, case, size=args.size)

        rate = args.latency_rate
        if rate is None:
            peak = samples.cases["raw: publish transient"]["peer"] or samples.cases["raw: publish transient"]["broker"]
            rate = round(sorted(peak)[len(peak) // 2] / 2, -2)
        for rep, who, target in peers.alternate(targets, args.repeat):
            spec = {"address": target.address("amqp"), "queue": f"bench-lat-{next(names)}", "mode": "latency",
                    "rate": rate, "seconds": args.latency_seconds, "size": args.size}
            r, used = peers.measured(lambda: peers.run_load("bench.amqp_load", spec), target.pid)
            cpu[who] += used
            samples.add(f"raw: latency p50 at {rate:,.0f} msg/s", who, r["p50_ms"], unit="ms", better="lower")
            samples.add(f"raw: latency p99 at {rate:,.0f} msg/s", who, r["p99_ms"], unit="ms", better="lower")
            print(f"  {target.name:<8} latency at {rate:,.0f} msg/s (achieved {r['achieved_rate']:,.0f}): "
                  f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, max {r['max_ms']:.1f} ms", flush=True)
    finally:
        ours.close()
        if peer is not None:
            peer.close()

    notes = [f"raw rows: {args.messages:,} messages of {args.size} B per run; pika/aio-pika rows: "
             f"{args.client_messages:,}; medians of {args.repeat} alternating runs",
             "fanout rows count publishes (each is stored 10 times)",
             f"latency: {args.latency_seconds:g} s at a fixed offered rate (half RabbitMQ's transient median "
             "unless --latency-rate), transient 100 B, prefetch 1000, after 0.5 s warm-up",
             f"broker CPU over all runs: ours {cpu['broker']:.1f} s, RabbitMQ (beam.smp) {cpu['peer']:.1f} s"]
    if peer_note:
        notes.append(peer_note)
    meta = {"peer": "rabbitmq" if peer else None, "peer_label": peer_label, "messages": args.messages,
            "size": args.size, "repeat": args.repeat, "latency_rate": rate, "cpu_seconds": cpu}
    return peers.SuiteResult("amqp", samples.rows(), notes, {"rabbitmq": peer_label} if peer else {}, meta)


def main(argv=None) -> int:
    return peers.suite_main("amqp", __doc__, add_arguments, run, argv)
