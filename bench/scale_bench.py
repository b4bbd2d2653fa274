"""Scale runs: does the cost per message stay flat, and what does an idle connection cost?

* partitions: confluent-kafka produces ``--kafka-messages`` (1,000,000) 100 B records (acks=1) to
  a topic of 1 and of ``--partitions`` (1,000) partitions; the row is the broker's CPU microseconds per message
  (from /proc, over the produce phase), our broker next to Tansu and Apache Kafka (default
  settings, ``bench/apache_kafka.py``), and cost(N) / cost(1);
* queues: the raw AMQP client declares 1 and ``--queues`` (10,000) exclusive queues, then
  publishes ``--messages`` confirmed transient messages round robin over them: CPU us/msg and
  cost(N) / cost(1), and the time the N declarations took, our broker next to RabbitMQ;
* idle connections: ``--connections`` (1,000) AMQP connections (handshake and one channel each)
  left idle: the broker's RSS growth / connections, next to RabbitMQ's beam.smp;
* memory: the broker's RSS with ``--memory-queues`` (10,000) idle durable queues, and with
  ``--memory-messages`` (1,000,000) ready persistent 1 KB messages in one queue, next to
  RabbitMQ (fresh brokers for each; our partition budget raised for 10,000 queues);
* cores: ``gateway serve --processes 2`` (two brokers as one cluster) against one broker,
  Kafka 1 KB produce to 16 partitions, AMQP confirmed publishes over 100 queues (one connection),
  and the spread workload below over 100 queues: msg/s, the brokers' CPU per message, and each
  broker's share of the cluster's CPU (the largest as a row, all of them in its note);
* spread: ``--spread-queues`` (300) durable queues (``x-queue-leader-locator: balanced``:
  each broker leads about a third; the row prints how many), ``--spread-clients`` (10)
  publishers of persistent 100 B messages with confirms and as many acking consumers, each client
  on a broker picked at random (seeded) among the nodes of ``gateway serve --processes
  --spread-brokers`` (3), against one broker on the same workload; ``--spread-messages``
  (30,000). Rows: the brokers' CPU per message (summed over the broker processes from /proc,
  ZooKeeper left out), cluster / single (target <= 1.2), and the largest broker's share of the
  cluster's broker CPU (target <= 45%; every broker's share in the row's note). Every confirmed
  message must be consumed: one that is not fails the run (printed, and in the notes);
* spread-parts: the spread workload taken apart on one cluster: every client on its queues'
  leader (``local``), only the publishers on another broker (``publishers-remote``: publishes
  forwarded), only the consumers on another broker (``consumers-remote``: served over links),
  every client on a random broker with each client's queues still on one leader (``aligned``: as
  many messages cross as in ``random``, but no client talks to several leaders), ``random``
  as above, and ``consumer-declared`` (the clients of ``random``, each consumer's queues declared
  by it with the default ``client-local`` locator: only publishes cross); rows: each one's CPU
  per message / one broker's;
* start-up on a large log (ours only: Tansu keeps nothing on disk): a 1-partition topic filled
  with ``--startup-gb`` GB of 1 KB records (default 1 for CI and a quick manual run; 10 is the
  long manual setting), then the time from process start to listening after a clean stop
  and after a kill -9 (tail recovery).

Targets: cost per message within 1.5x from 1 to N; idle connection <= 50 KB.
Spread targets: CPU per message, 3 brokers / 1 <= 1.2; no broker above 45%.

    python -m bench scale [--messages 100000] [--startup-gb 1] [--repeat 3] [--only partitions,queues,...]
    python -m bench scale --only spread [--spread-messages 30000] [--spread-brokers 3] [--repeat 3]
                                        [--spread-rabbitmq]
    python -m bench scale --only spread-parts [--spread-messages 60000] [--repeat 3]
    python -m bench scale --only cores [--messages 100000] [--spread-messages 30000]
"""
from __future__ import annotations

import itertools
import os
import shlex
import shutil
import signal
import time

from bench import peers

PARTS = ("partitions", "queues", "connections", "memory", "cores", "spread", "spread-parts", "startup")


def add_arguments(parser) -> None:
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--kafka-messages", type=int, default=1_000_000,
                        help="records per partitions run: librdkafka sends 100,000 in a few clock ticks of broker CPU")
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--queues", type=int, default=1000,
                        help="10,000 is the long manual setting")
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--memory-messages", type=int, default=1_000_000, help="ready 1 KB messages in the RSS row")
    parser.add_argument("--memory-queues", type=int, default=10_000, help="idle durable queues in the RSS row")
    parser.add_argument("--spread-messages", type=int, default=30_000, help="messages per spread-workload run")
    parser.add_argument("--spread-queues", type=int, default=300)
    parser.add_argument("--spread-brokers", type=int, default=3, help="--processes of the spread workload's cluster")
    parser.add_argument("--spread-clients", type=int, default=10, help="publishers (and as many consumers)")
    parser.add_argument("--spread-rabbitmq", action="store_true",
                        help="the spread rows' referee: the same workload on a RabbitMQ cluster of --spread-brokers "
                             "nodes and on one RabbitMQ node (Debian's rabbitmq-server)")
    parser.add_argument("--cluster-args", default="",
                        help="more `gateway serve` options for the clusters of the cores and spread rows, e.g. "
                             "'--queue-leader-locator client-local'")
    parser.add_argument("--startup-gb", type=float, default=1.0, help="log size for the start-up rows (10: manual)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")


_failures: list[str] = []


def _scaling(samples, label, who, target, runs, per_run, unit_label):
    """Run ``per_run(n)`` for n in ``runs`` (1, N) and add cost rows and the N/1 cost ratio."""
    costs = {}
    for n in runs:
        try:
            r = per_run(n)
        except Exception as exc:  # one stuck run (a peer stalling on a loaded machine) must not lose the rest
            print(f"  {target.name:<8} {label} {n:>6,} {unit_label}: failed: {str(exc)[-300:]}", flush=True)
            _failures.append(f"{target.name} {label} {n:,} {unit_label}: {str(exc).strip().splitlines()[-1][:200]}")
            return costs
        costs[n] = r["cpu_us_per_msg"]
        samples.add(f"{label}: CPU per message, {n:,} {unit_label}", who, costs[n], unit="us/msg", better="lower")
        print(f"  {target.name:<8} {label} {n:>6,} {unit_label}: {costs[n]:8.1f} us/msg, "
              f"{r.get('produce_msgs_s', r.get('msgs_s', 0)):>10,.0f} msg/s", flush=True)
    low, high = runs
    if low not in costs or high not in costs or costs[low] <= 0:  # under one clock tick of CPU: too few messages to tell
        return costs
    samples.add(f"{label}: cost {high:,} / cost {low:,} {unit_label} (target <= 1.5)", who, costs[high] / costs[low],
                unit="x", better="lower")
    return costs


def run(args) -> peers.SuiteResult:
    from bench import amqp_bench, apache_kafka, kafka_bench
    only = set(args.only.split(","))
    samples = peers.Samples("scale", None)
    seen, notes = {}, []
    names = itertools.count()
    if "partitions" in only:
        ours = peers.OurBroker("scale-kafka")
        others = []
        try:
            # flush settings do not change the CPU a message costs: Apache Kafka with its defaults only
            others, kafka_seen, kafka_notes = kafka_bench.start_peers(["tansu", "kafka"])
            seen.update(kafka_seen)
            notes += kafka_notes
            if "kafka" in kafka_seen:
                notes.append("kafka partitions rows: the CPU of Apache Kafka's whole JVM (its JIT compiler and "
                             "collector included) over the produce or consume phase")
            targets = [("broker", ours)] + [(peer.name, peer) for peer in others]
            for rep, who, target in peers.alternate(targets, args.repeat):
                runs = {}  # one run produces and then consumes: the consume row reads its second half

                def produce_consume(n):
                    runs[n] = peers.run_load("bench.kafka_load", {
                        "bootstrap": target.address("kafka"), "topic": f"scale-{next(names)}",
                        "messages": args.kafka_messages, "size": 100, "acks": "1", "partitions": n,
                        "consume": True, "pid": target.pid})
                    return runs[n]
                _scaling(samples, "kafka produce 100B", who, target, (1, args.partitions), produce_consume,
                         "partitions")
                _scaling(samples, "kafka consume 100B", who, target, (1, args.partitions), lambda n: {
                    "cpu_us_per_msg": runs[n]["consume_cpu_us_per_msg"], "msgs_s": runs[n]["consume_msgs_s"]},
                    "partitions")
        finally:
            ours.close()
            for peer in others:
                peer.close()
            # the rows below are AMQP's and ours: an idle JVM should not share the cores with them
            apache_kafka.close()
    if "queues" in only or "connections" in only:
        # Our broker: a fresh process per measurement. Closing a connection with thousands of
        # exclusive queues keeps it busy deleting topics for a while (and its freed memory would
        # hide the growth the connection rows measure); closing the process waits for that, so
        # none of it overlaps the peer's turn.
        peer = None
        try:
            peer, label, note = amqp_bench.start_peer()
            if peer:
                seen["rabbitmq"] = label
            elif note:
                notes.append(note)
            targets = [("broker", None)] + ([("peer", peer)] if peer else [])
            for rep, who, fixed in peers.alternate(targets, args.repeat):
                if "queues" in only:
                    declared = {}

                    spread_runs = {}  # the transient run also consumes: the spread consume row reads it

                    def spread(n, durable=False):
                        target = fixed or peers.OurBroker("scale-queues", *_partition_args(n))
                        try:
                            r = peers.run_load("bench.amqp_load", {
                                "address": target.address("amqp"), "queue": f"scale-{next(names)}", "mode": "spread",
                                "messages": args.messages, "size": 100, "queues": n, "pid": target.pid,
                                "durable": durable, "consume": not durable}, timeout=3600)
                        finally:
                            if fixed is None:
                                target.close(timeout=1800)
                        if not durable:
                            declared[n] = r["declare_seconds"]
                            spread_runs[n] = r
                        return r
                    _scaling(samples, "amqp publish+confirm 100B", who, fixed or peers.OurBroker, (1, args.queues),
                             spread, "queues")
                    _scaling(samples, "amqp consume 100B, multi-ack", who, fixed or peers.OurBroker,
                             (1, args.queues), lambda n: {"cpu_us_per_msg": spread_runs[n]["consume_cpu_us_per_msg"],
                                                          "msgs_s": spread_runs[n]["consume_msgs_s"]}, "queues")
                    # persistent messages into durable queues: each queue's first message reaches a new log file
                    _scaling(samples, "amqp publish persistent+confirm 100B, durable queues", who,
                             fixed or peers.OurBroker, (1, args.queues), lambda n: spread(n, durable=True), "queues")
                    if args.queues in declared:
                        samples.add(f"amqp: declare {args.queues:,} queues (pipelined)", who, declared[args.queues],
                                    unit="s", better="lower")
                if "connections" in only:
                    target = fixed or peers.OurBroker("scale-conn")
                    try:
                        r = peers.run_load("bench.amqp_load", {"address": target.address("amqp"), "queue": "-",
                                                               "mode": "idle", "connections": args.connections,
                                                               "pid": target.pid})
                    finally:
                        if fixed is None:
                            target.close()
                    samples.add(f"amqp: RSS per idle connection, {args.connections:,} (target <= 50 KB)", who,
                                r["kb_per_connection"], unit="KB", better="lower")
                    print(f"  {target.name:<8} {args.connections:,} idle connections: "
                          f"{r['kb_per_connection']:.1f} KB each", flush=True)
        finally:
            if peer is not None:
                peer.close()
    if "memory" in only:
        memory_rows(samples, args, names, seen, notes)
    if "cores" in only:
        core_rows(samples, args, names)
        notes.append("cores rows: 'gateway' is `gateway serve --processes 2` (two brokers as one cluster, a private "
                     "ZooKeeper), the peer column one broker process; ratio = 2 processes / 1; the AMQP spread rows "
                     f"run the spread workload ({args.spread_messages:,} messages, --spread-messages) over 100 "
                     "queues, CPU = the brokers' (ZooKeeper left out)")
    if "spread-parts" in only:
        spread_parts_rows(samples, args, names)
    if "spread" in only:
        spread_rows(samples, args, names)
        notes.append(f"spread rows: 'gateway' is `gateway serve --processes {args.spread_brokers}"
                     f"{' ' + args.cluster_args if args.cluster_args else ''}`, the peer column "
                     f"one broker process, the same workload ({args.spread_messages:,} persistent 100 B messages, "
                     f"{args.spread_queues} queues, {args.spread_clients} confirming publishers and "
                     f"{args.spread_clients} acking consumers, each on a random broker); CPU = the brokers' "
                     "(ZooKeeper left out) over publish and consume; targets: cluster / single <= 1.2, "
                     "max share <= 45%")
        if args.spread_rabbitmq:
            notes.append(f"spread rows' rabbitmq column: the same workload on a RabbitMQ cluster of "
                         f"{args.spread_brokers} nodes (its classic queues spread by its own locator) against one "
                         "RabbitMQ node, each node with the management plugin; CPU = the nodes' beam.smp")
    if "startup" in only:
        for label, seconds in startup_times(args.startup_gb, args.repeat):
            samples.add(label, "broker", seconds, unit="s", better="lower")
        notes.append(f"start-up rows: {args.startup_gb:g} GB log (--startup-gb; 10 is the manual setting), ours only")
    notes += [f"failed run (left out of the medians): {failure}" for failure in _failures]
    notes.append(f"{args.messages:,} messages per scale run ({args.kafka_messages:,} per partitions run); CPU from "
                 f"/proc of the broker process (beam.smp for RabbitMQ); medians of {args.repeat}")
    meta = {"messages": args.messages, "cluster_args": args.cluster_args, "spread_messages": args.spread_messages, "spread_queues": args.spread_queues,
            "spread_brokers": args.spread_brokers, "spread_clients": args.spread_clients,
            "spread_rabbitmq": args.spread_rabbitmq, "kafka_messages": args.kafka_messages,
            "partitions": args.partitions,
            "queues": args.queues, "memory_messages": args.memory_messages, "memory_queues": args.memory_queues,
            "connections": args.connections, "startup_gb": args.startup_gb, "repeat": args.repeat}
    rows = samples.rows()
    for row in rows:  # the peer differs by part (the partitions rows name theirs)
        if row["peer"] is not None and row["peer_name"] is None:
            row["peer_name"] = ("1 process" if row["case"].startswith(("cores", "spread")) else
                                "tansu" if row["case"].startswith("kafka") else "rabbitmq")
    return peers.SuiteResult("scale", rows, notes, seen, meta)


def _partition_args(queues: int) -> list[str]:
    """Broker options for ``queues`` queues (one partition each, plus the internal topics).

    The default partition budget is half the open-file limit (each partition holds its segment
    file open; the rest is for connections); with a 20,000 limit that is 10,000, one short of
    10,000 queues. Above the default, the budget is raised to what the run needs while it
    leaves a quarter of the limit for connections (the open-file limit itself can only be raised
    by a process with CAP_SYS_RESOURCE)."""
    import resource
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    wanted = queues + 200
    if wanted <= soft // 2:
        return []
    return ["--max-partitions", str(max(wanted, soft * 3 // 4))]


def memory_rows(samples, args, names, seen, notes) -> None:
    """Broker RSS (absolute, after filling and 3 s of settling): ``--memory-queues`` idle durable
    queues, and ``--memory-messages`` ready 1 KB messages in one queue; a fresh broker of ours and
    a fresh RabbitMQ node for each, so that nothing an earlier run left behind is counted."""
    rows = ((f"amqp: RSS with {args.memory_queues:,} idle durable queues", {"queues": args.memory_queues}),
            (f"amqp: RSS with {args.memory_messages:,} ready 1 KB messages in one queue",
             {"messages": args.memory_messages, "size": 1024}),
            (f"amqp: durable queues declared one at a time, the last 1,000 of {args.memory_queues:,}",
             {"queues": args.memory_queues, "one_by_one": True}))
    for rep in range(args.repeat):
        for label, spec in rows:
            for who in (("broker", "peer") if rep % 2 == 0 else ("peer", "broker")):
                if who == "broker":
                    target = peers.OurBroker("scale-memory", *_partition_args(spec.get("queues", 0)))
                else:
                    from bench import amqp_bench
                    target, peer_label, note = amqp_bench.start_peer()
                    if target is None:
                        if note not in notes:
                            notes.append(note)
                        continue
                    seen["rabbitmq"] = peer_label
                try:
                    r = peers.run_load("bench.amqp_load", {"address": target.address("amqp"), "pid": target.pid,
                                                           "queue": f"mem-{next(names)}", "mode": "memory", **spec},
                                       timeout=3600)
                except Exception as exc:
                    print(f"  {target.name:<8} {label}: failed: {str(exc)[-300:]}", flush=True)
                    _failures.append(f"{target.name} {label}: {str(exc).strip().splitlines()[-1][:200]}")
                    continue
                finally:
                    target.close(**({"timeout": 1800} if who == "broker" else {}))
                if spec.get("one_by_one"):  # a rate row: does the 10,000th declaration cost what the first did?
                    first, last = r["rates"][0], r["rates"][-1]
                    samples.add(label, who, last, unit="declarations/s")
                    print(f"  {target.name:<8} {label}: {last:,.0f}/s (the first 1,000: {first:,.0f}/s; all in "
                          f"{r['seconds']:.1f} s)", flush=True)
                    continue
                mb = r["rss_after"] / 2**20
                samples.add(label, who, mb, unit="MB", better="lower")
                print(f"  {target.name:<8} {label}: {mb:,.1f} MB (idle {r['rss_before'] / 2**20:,.1f} MB; "
                      f"filled in {r['seconds']:.1f} s)", flush=True)


def core_rows(samples, args, names) -> None:
    """Every core of the machine: Kafka 1 KB produce to 16 partitions (acks=1), AMQP confirmed
    publishes over 100 queues (one connection, to node 1), and the spread workload (see
    :func:`spread_rows`) over 100 queues with its clients on random brokers: its throughput, the
    brokers' CPU per message, and the largest broker's share of the cluster's CPU (each run's
    shares in the row's note); two broker processes as one cluster against one broker. The
    2-process figures go in the broker column, the 1-process ones in the peer column."""
    for rep in range(args.repeat):
        for who in (("peer", "broker") if rep % 2 == 0 else ("broker", "peer")):
            target = (peers.OurBroker("scale-cores") if who == "peer" else
                      peers.OurCluster("scale-cores", 2, *shlex.split(args.cluster_args)))
            label = "1 process" if who == "peer" else "2 processes"
            try:
                r = peers.run_load("bench.kafka_load", {
                    "bootstrap": target.address("kafka"), "topic": f"cores-{next(names)}", "messages": args.messages,
                    "size": 1024, "acks": "1", "consume": False, "partitions": 16, "client": "confluent"})
                samples.add("cores: kafka produce 1KB acks=1, 16 partitions", who, r["produce_msgs_s"], size=1024)
                print(f"  {label:<12} kafka produce 16 partitions: {r['produce_msgs_s']:>10,.0f} msg/s", flush=True)
                r = peers.run_load("bench.amqp_load", {
                    "address": target.address("amqp"), "queue": f"cores-{next(names)}", "mode": "spread",
                    "messages": args.messages, "size": 100, "queues": 100, "pids": target.broker_pids()},
                    timeout=1800)
                samples.add("cores: amqp publish+confirm 100B over 100 queues", who, r["msgs_s"], size=100)
                print(f"  {label:<12} amqp publish over 100 queues: {r['msgs_s']:>10,.0f} msg/s", flush=True)
                # the spread workload over 100 queues (placed balanced), clients on both brokers:
                # throughput, CPU per message, shares
                r = peers.run_load("bench.amqp_load", {
                    "addresses": target.addresses("amqp"), "queue": f"cores-{next(names)}", "mode": "random_brokers",
                    "messages": args.spread_messages, "size": 100, "queues": 100, "clients": args.spread_clients,
                    "seed": rep, "pids": target.broker_pids()}, timeout=1800)
                samples.add("cores: amqp spread 100 queues, random brokers", who, r["msgs_s"], size=100)
                samples.add("cores: amqp spread 100 queues, CPU/msg", who, r["cpu_us_per_msg"], unit="us/msg",
                            better="lower")
                print(f"  {label:<12} amqp spread over 100 queues, clients on random brokers: "
                      f"{r['msgs_s']:>8,.0f} msg/s, {r['cpu_us_per_msg']:.1f} us/msg", flush=True)
                if who == "broker":
                    shares = _shares(samples, "cores: amqp spread, max broker CPU share", r["cpu_seconds_by_broker"])
                    print(f"  {label:<12} amqp spread per-broker CPU shares: {shares}", flush=True)
            except Exception as exc:
                print(f"  {label:<12} cores run failed: {str(exc)[-300:]}", flush=True)
                _failures.append(f"cores {label}: {str(exc).strip().splitlines()[-1][:200]}")
            finally:
                target.close()


def _shares(samples, case: str, cpus: list[float], who: str = "broker") -> str:
    """Add the largest broker's share of the brokers' CPU as a row of ``who`` (each run's shares of
    ours in its note); return the shares as text ("21% / 57% / 22%")."""
    total = sum(cpus)
    shares = [c / total * 100 if total > 0 else float("nan") for c in cpus]
    text = " / ".join(f"{x:.0f}%" for x in shares)
    entry = samples.case(case, unit="%", better="lower")
    if who == "broker":
        entry["note"] = (f"{entry['note']}; " if entry["note"] else
                         "per-broker CPU shares, node 1 first, by run: ") + text
    samples.add(case, who, max(shares))
    return text


def _spread_run(label: str, start, args, names, seed: int, arguments: dict | None = None) -> dict | None:
    """One run of the spread workload on the brokers ``start()`` brings up (closed after it);
    None, with the failure printed and noted, when they do not start or a confirmed message is
    not consumed."""
    n = args.spread_messages
    try:
        target = start()
    except Exception as exc:
        print(f"  {label:<20} spread run failed to start: {str(exc)[-300:]}", flush=True)
        _failures.append(f"spread {label}: {str(exc).strip().splitlines()[-1][:200]}")
        return None
    try:
        r = peers.run_load("bench.amqp_load", {
            "addresses": target.addresses("amqp"), "queue": f"spread-{next(names)}",
            "mode": "random_brokers", "messages": n, "size": 100, "queues": args.spread_queues,
            "clients": args.spread_clients, "seed": seed, "pids": target.broker_pids(),
            "http": target.addresses("http"), "arguments": arguments}, timeout=1800)
    except Exception as exc:  # a confirmed message not consumed lands here too: loudly, and no row
        print(f"  {label:<20} spread run FAILED: {str(exc)[-600:]}", flush=True)
        _failures.append(f"spread {label}: {str(exc).strip().splitlines()[-1][:300]}")
        return None
    finally:
        target.close()
    print(f"  {label:<20} spread {n:,} messages: {r['cpu_us_per_msg']:8.1f} us/msg, {r['msgs_s']:>8,.0f} msg/s, "
          f"{r['confirmed']:,} confirmed, {r['consumed']:,} consumed ({r['redelivered']} redelivered), "
          f"clients per broker {r['clients_per_broker']}, queues led per broker {r['queues_per_broker']}",
          flush=True)
    return r


def spread_rows(samples, args, names) -> None:
    """The spread workload (bench.amqp_load ``random_brokers``): ``--spread-queues`` durable
    queues, ``--spread-clients`` confirming publishers and as many acking consumers, each on a
    broker picked at random (seed = the repetition) among a ``--processes --spread-brokers``
    cluster's nodes, against one broker on the same workload, alternating which goes first. Rows:
    the brokers' CPU per message (summed over the broker processes from /proc, ZooKeeper left out),
    cluster / single from the pair of each repetition, and the largest broker's share of the
    cluster's CPU (every share in the row's note). A confirmed message not consumed fails the run.

    ``--spread-rabbitmq``: the referee too, each repetition: the same workload on a RabbitMQ
    cluster of as many nodes (classic queues spread by its own locator) and on one RabbitMQ node;
    its cluster / single and largest share go in the same rows, as the ``rabbitmq`` column."""
    brokers = args.spread_brokers
    case = f"spread: amqp CPU/msg, {args.spread_queues} queues, {brokers} brokers"
    ratio_case = f"spread: CPU/msg {brokers} brokers / 1 (target <= 1.2)"
    share_case = "spread: max broker CPU share (target <= 45%)"
    for rep in range(args.repeat):
        cost = {}
        for who in (("peer", "broker") if rep % 2 == 0 else ("broker", "peer")):
            label = "1 process" if who == "peer" else f"{brokers} processes"
            r = _spread_run(label, lambda: (peers.OurBroker("scale-spread") if who == "peer" else peers.OurCluster(
                "scale-spread", brokers, *shlex.split(args.cluster_args))), args, names, rep)
            if r is None:
                continue
            cost[who] = r["cpu_us_per_msg"]
            samples.add(case, who, cost[who], unit="us/msg", better="lower")
            if who == "broker":
                print(f"  {label:<20} spread per-broker CPU shares: "
                      f"{_shares(samples, share_case, r['cpu_seconds_by_broker'])}", flush=True)
        if "broker" in cost and cost.get("peer"):
            ratio = cost["broker"] / cost["peer"]
            samples.add(ratio_case, "broker", ratio, unit="x", better="lower")
            print(f"  spread cluster / single CPU per message: {ratio:.2f}", flush=True)
        if args.spread_rabbitmq:
            _spread_referee(samples, args, names, rep, ratio_case, share_case)


def _spread_referee(samples, args, names, rep: int, ratio_case: str, share_case: str) -> None:
    """RabbitMQ's own cluster / single on the spread workload (one repetition)."""
    brokers, cost = args.spread_brokers, {}
    for nodes in ((1, brokers) if rep % 2 == 0 else (brokers, 1)):
        label = f"rabbitmq {nodes} node{'s' if nodes > 1 else ''}"
        r = _spread_run(label, lambda: peers.RabbitMQCluster("spread-ref", nodes), args, names, rep,
                        peers.RabbitMQCluster.queue_arguments())
        if r is None:
            continue
        cost[nodes] = r["cpu_us_per_msg"]
        if nodes > 1:
            print(f"  {label:<20} spread per-node CPU shares: "
                  f"{_shares(samples, share_case, r['cpu_seconds_by_broker'], 'rabbitmq')}", flush=True)
    if cost.get(1) and cost.get(brokers):
        ratio = cost[brokers] / cost[1]
        samples.add(ratio_case, "rabbitmq", ratio, unit="x", better="lower")
        print(f"  rabbitmq spread cluster / single CPU per message: {ratio:.2f}", flush=True)


def spread_parts_rows(samples, args, names) -> None:
    """The spread workload taken apart (bench.amqp_spread_load.PLACEMENTS): one cluster runs it with
    every client on its queues' leader ("local"), with only the publishers on another broker, with
    only the consumers on another broker, with every client on a random broker but each client's
    queues on one leader ("aligned"), as the spread row does ("random"), and with the clients
    where "random" puts them but each consumer's queues declared client-local by it
    ("consumer-declared"); each against one broker on the same workload. What "publishers-remote"
    and "consumers-remote" cost above "local" is what forwarding publishes and serving consumers
    over links add; what "random" costs above "aligned", that each client's queues are led by
    several brokers; "consumer-declared", what consumers that declare their own queues save."""
    from bench.amqp_spread_load import PLACEMENTS
    n, brokers = args.spread_messages, args.spread_brokers
    for rep in range(args.repeat):
        costs = {}
        for who in ("peer", "broker"):
            try:
                target = (peers.OurBroker("scale-parts") if who == "peer" else
                          peers.OurCluster("scale-parts", brokers, *shlex.split(args.cluster_args)))
            except Exception as exc:
                _failures.append(f"spread parts {who}: {str(exc).strip().splitlines()[-1][:200]}")
                continue
            try:
                for placement in (("random",) if who == "peer" else PLACEMENTS):
                    r = peers.run_load("bench.amqp_load", {
                        "addresses": target.addresses("amqp"), "queue": f"parts-{next(names)}",
                        "mode": "random_brokers", "messages": n, "size": 100, "queues": args.spread_queues,
                        "clients": args.spread_clients, "seed": rep, "pids": target.broker_pids(),
                        "http": target.addresses("http"), "placement": placement}, timeout=1800)
                    key = "single" if who == "peer" else placement
                    costs[key] = r["cpu_us_per_msg"]
                    print(f"  {key:<18} {costs[key]:6.1f} us/msg, {r['msgs_s']:>8,.0f} msg/s, "
                          f"queues led per broker {r['queues_per_broker']}", flush=True)
            except Exception as exc:
                print(f"  spread parts run failed: {str(exc)[-300:]}", flush=True)
                _failures.append(f"spread parts {who}: {str(exc).strip().splitlines()[-1][:200]}")
            finally:
                target.close()
        for placement in PLACEMENTS:
            if placement in costs and costs.get("single"):
                samples.add(f"spread parts: CPU/msg {brokers} brokers, {placement} / 1 broker", "broker",
                            costs[placement] / costs["single"], unit="x", better="lower")


def startup_times(gb: float, repeat: int):
    """Fill a log with ``gb`` GB, then time start-ups after a clean stop and after a kill -9."""
    from tests.brokerproc import start_broker
    data = peers.CACHE / "data" / f"startup-{os.getpid()}"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    broker = start_broker(data, "--log-level", "warning")
    try:
        host, port = broker.address("kafka")
        n = int(gb * 1e9 / 1024)
        print(f"  filling a {gb:g} GB log ({n:,} records of 1 KB) ...", flush=True)
        peers.run_load("bench.kafka_load", {"bootstrap": f"{host}:{port}", "topic": "startup-keep", "messages": n,
                                            "size": 1024, "acks": "1", "keep": True}, timeout=3600)
    finally:
        broker.stop()
    out = []
    for rep in range(repeat):
        # each start-up follows the stop named in its label: clean (SIGTERM) or kill -9
        for how, stop in (("clean stop", signal.SIGKILL), ("kill -9", signal.SIGTERM)):
            began = time.monotonic()
            broker = start_broker(data, "--log-level", "warning", timeout=600)
            took = time.monotonic() - began
            out.append((f"start-up after {how}, {gb:g} GB log", took))
            print(f"  start-up after {how} ({gb:g} GB): {took:.2f} s", flush=True)
            broker.stop(stop, timeout=120)
    shutil.rmtree(data, ignore_errors=True)
    return out


def main(argv=None) -> int:
    return peers.suite_main("scale", __doc__, add_arguments, run, argv)
