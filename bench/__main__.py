"""``python -m bench SUITE``: run one benchmark suite and print its table."""
from __future__ import annotations

import argparse
import importlib
import sys

# suite name -> module (imported lazily: the peer suites need client libraries)
SUITES = {"log": "bench.log_bench", "kafka": "bench.kafka_bench", "amqp": "bench.amqp_bench",
          "spark": "bench.spark_bench"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("suite", choices=sorted(SUITES))
    args, rest = parser.parse_known_args(argv)
    return importlib.import_module(SUITES[args.suite]).main(rest)


if __name__ == "__main__":
    sys.exit(main())
