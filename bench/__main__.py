"""``python -m bench SUITE``: run one benchmark suite (or ``all`` of them) and print its table.

``python -m bench all`` runs every suite in one process, one after the other (each starts its
broker and its peers, and alternates them; Apache Kafka starts once and serves the Kafka and
scale suites), then prints one table and writes one JSON and one
PNG (``.cache/bench/results/all.json`` / ``all.png``). ``--skip spark,log`` leaves suites out;
``--quick`` shrinks every count for a smoke run. Options of a single suite go after its name:
``python -m bench amqp --messages 200000``.
"""
from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

# suite name -> module (imported lazily: the peer suites need client libraries)
SUITES = {"log": "bench.log_bench", "kafka": "bench.kafka_bench", "amqp": "bench.amqp_bench",
          "scale": "bench.scale_bench", "spark": "bench.spark_bench"}
ORDER = ["amqp", "kafka", "scale", "log", "spark"]  # the targets first
KAFKA_SUITES = {"kafka", "scale"}  # the suites with Apache Kafka rows: one node serves them all
QUICK = {"amqp": ["--messages", "20000", "--client-messages", "2000", "--latency-seconds", "2",
                  "--small-seconds", "2"],
         "kafka": ["--messages", "20000", "--client-messages", "5000", "--latency-seconds", "2", "--small-seconds", "2"],
         "scale": ["--messages", "50000", "--kafka-messages", "200000", "--partitions", "100", "--queues", "500",
                   "--connections", "200", "--startup-gb", "0.1", "--memory-messages", "100000", "--memory-queues", "1000",
                   "--spread-messages", "3000"],
         "log": ["--mb", "32"], "spark": ["--messages", "20000"]}


def _stop_apache_kafka() -> None:
    """Stop the Apache Kafka node the Kafka-side suites share (started by the first of them)."""
    kafka = sys.modules.get("bench.apache_kafka")
    if kafka is not None:
        kafka.close()


def run_all(argv) -> int:
    from bench import peers
    parser = argparse.ArgumentParser(prog="python -m bench all", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip", default="", help="comma-separated suites to leave out")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small counts, one repetition: a smoke run")
    parser.add_argument("--startup-gb", type=float, default=1.0, help="scale suite's log size (10: manual)")
    parser.add_argument("--queues", type=int, default=1000, help="scale suite's queue count (10000: manual)")
    parser.add_argument("--json", type=Path, default=None, help="default .cache/bench/results/all.json")
    args = parser.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    began = time.monotonic()
    results = []
    for name in ORDER:
        if name in skip:
            continue
        module = importlib.import_module(SUITES[name])
        suite_parser = argparse.ArgumentParser()
        module.add_arguments(suite_parser)
        suite_argv = list(QUICK[name]) if args.quick else []
        if name not in ("log",):
            suite_argv += ["--repeat", "1" if args.quick else str(args.repeat)]
        if name == "scale" and not args.quick:
            suite_argv += ["--startup-gb", str(args.startup_gb), "--queues", str(args.queues)]
        print(f"=== {name} {' '.join(suite_argv)}", flush=True)
        try:
            results.append(module.run(suite_parser.parse_args(suite_argv)))
        except Exception as exc:  # one suite failing (a peer missing, say) must not lose the others
            print(f"suite {name} failed: {exc!r}", flush=True)
            results.append(peers.SuiteResult(name, [], [f"suite failed: {exc!r}"[:500]], {}, {}))
        if not KAFKA_SUITES & set(ORDER[ORDER.index(name) + 1:]) - skip:
            _stop_apache_kafka()  # no later suite needs it: its idle JVM leaves the cores to the rest
    _stop_apache_kafka()
    peers.report(results, "all", args.json, time.monotonic() - began)
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "all":
        return run_all(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("suite", choices=sorted(SUITES) + ["all"])
    args, rest = parser.parse_known_args(argv)
    return importlib.import_module(SUITES[args.suite]).main(rest)


if __name__ == "__main__":
    sys.exit(main())
