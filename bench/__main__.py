"""``python -m bench SUITE``: run one benchmark suite and print its table."""
from __future__ import annotations

import argparse
import sys

from bench import log_bench

SUITES = {"log": log_bench}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("suite", choices=sorted(SUITES))
    args, rest = parser.parse_known_args(argv)
    return SUITES[args.suite].main(rest)


if __name__ == "__main__":
    sys.exit(main())
