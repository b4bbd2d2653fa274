"""AMQP 0-9-1 peer benchmark: our broker next to RabbitMQ (Debian's package), same client.

The load generator (``bench/amqp_load.py``, a raw socket writing pre-encoded frames, in its
own process) runs three cases with ``--size``-byte bodies (default 100 B) on a fresh durable
queue per run:

* publish transient: delivery_mode=1, no confirms, until a passive Queue.Declare counts all
  ``--messages`` in the queue;
* publish persistent + confirms: delivery_mode=2, at most 1,000 unconfirmed;
* consume: of the queue the persistent run just filled, prefetch 1,000, a multiple ack every 500.

Broker and peer runs alternate (who goes first flips each repetition), ``--repeat`` times
(default 3); the table shows medians and broker/peer ratios. RabbitMQ is a private node
started by ``compat_tests.rabbitmq.RabbitMQNode`` (free ports, its own epmd); if it cannot
start, our broker is measured alone.

    python -m bench amqp [--messages 100000] [--size 100] [--repeat 3] [--json PATH]

Results go to ``.cache/bench/results/amqp.json`` (and ``amqp.png`` if matplotlib is importable).
"""
from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

from bench import peers

CASES = [("transient", "publish transient (no confirms)"),
         ("confirm", "publish persistent + confirms"),
         ("consume", "consume prefetch 1000, ack/500")]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench amqp", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="default .cache/bench/results/amqp.json")
    args = parser.parse_args(argv)
    began = time.monotonic()

    print("starting our broker ...", flush=True)
    ours = peers.OurBroker("amqp")
    peer, peer_note, peer_label = None, None, "none"
    try:
        print("starting RabbitMQ ...", flush=True)
        try:
            from compat_tests.rabbitmq import RabbitMQUnavailable
            peer = peers.RabbitMQ()
            peer_label = f"RabbitMQ (Debian package, {peer.node.script}), started in {peer.node.start_seconds[-1]:.1f} s"
        except (ImportError, RabbitMQUnavailable, OSError) as exc:
            peer_note = f"RabbitMQ unavailable, our broker measured alone: {str(exc)[:300]}"
            print(peer_note, flush=True)

        samples = {label: {"broker": [], "peer": [], "bytes": args.size} for _, label in CASES}
        cpu = {"broker": 0.0, "peer": 0.0}
        names = itertools.count()
        for rep in range(args.repeat):
            targets = [("broker", ours)] + ([("peer", peer)] if peer else [])
            if rep % 2:
                targets.reverse()
            # alternate per case: broker transient, peer transient, broker confirm, ...
            queues = {who: f"bench-{rep}-{next(names)}" for who, _ in targets}
            for mode, label in CASES:
                for who, target in targets:
                    queue = f"{queues[who]}-{mode}" if mode != "consume" else f"{queues[who]}-confirm"
                    spec = {"address": target.address("amqp"), "queue": queue,
                            "messages": args.messages, "size": args.size, "mode": mode}
                    before = peers.cpu_seconds(target.pid)
                    r = peers.run_load("bench.amqp_load", spec)
                    cpu[who] += peers.cpu_seconds(target.pid) - before
                    samples[label][who].append(r["msgs_s"])
                    extra = f" (socket writes done after {r['send_seconds']:.2f} s)" if "send_seconds" in r else ""
                    print(f"  rep {rep + 1} {target.name:<8} {label:<34} {r['msgs_s']:>10,.0f} msg/s"
                          f" in {r['seconds']:.2f} s{extra}", flush=True)
    finally:
        ours.close()
        if peer is not None:
            peer.close()

    rows = peers.summarize(samples, "rabbitmq" if peer else "none")
    notes = [f"{args.messages:,} messages of {args.size} B per run, raw-socket client, medians of {args.repeat} alternating runs",
             "ratio = broker msgs/s / peer msgs/s (>1: ours is faster)",
             "consume reads the queue the persistent run filled",
             f"broker CPU over all runs: ours {cpu['broker']:.1f} s, RabbitMQ (beam.smp) {cpu['peer']:.1f} s"]
    if peer_note:
        notes.append(peer_note)
    peers.print_table("amqp", rows, peer_label, notes)
    took = time.monotonic() - began
    meta = {"peer": "rabbitmq" if peer else None, "peer_label": peer_label, "messages": args.messages,
            "size": args.size, "repeat": args.repeat, "notes": notes, "seconds": round(took, 1),
            "cpu_seconds": cpu}
    for line in peers.write_results("amqp", rows, meta, args.json):
        print(line)
    print(f"suite took {took:.0f} s")
    return 0
