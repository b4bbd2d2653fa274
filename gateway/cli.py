"""``gateway`` command line: ``gateway serve [options]``, ``gateway users ...`` and
``gateway spark archive|stats ...``.

Exit codes: 0 after a clean stop, 2 for a usage or configuration error, 1 when the broker
cannot start or fails. Every error is one line on stderr naming the problem, no traceback.
"""
from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import sys

from gateway.config import OPTIONS, ConfigError, load_settings
from gateway.ctl import COMMANDS as ADMIN_COMMANDS

log = logging.getLogger("gateway")

# A broker makes many short-lived containers per message (records, tuples, frames) and few
# reference cycles: with the collector's default (a young collection every 700 allocations net of
# frees) the collector took about a tenth of a loaded broker's CPU. Cycles are still collected,
# only less often.
GC_THRESHOLDS = (10_000, 10, 10)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gateway", description="A Kafka and AMQP 0-9-1 broker over one log.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = commands.add_parser("serve", help="run a broker node",
                                description="Run a broker node. Every option can also be set as the "
                                            "environment variable shown, or as a key in the --config file; "
                                            "the command line wins over the environment, which wins over the file.")
    serve.add_argument("--config", metavar="FILE", help="TOML file of settings (env GATEWAY_CONFIG)")
    for option in OPTIONS:
        serve.add_argument(option.flag, dest=option.name, metavar=option.metavar, default=None,
                           help=f"{option.help} (env {option.env}, default {option.default})")
    from gateway.users_cli import add_parser as add_users_parser
    add_users_parser(commands)
    from gateway.ctl import add_commands as add_admin_commands
    add_admin_commands(commands)
    from spark.cli import add_commands as add_spark_commands  # argparse only: pyspark loads when a job runs
    add_spark_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.command in ADMIN_COMMANDS:
        from gateway.ctl import run as run_admin
        return run_admin(args)
    if args.command == "users":
        from gateway.users_cli import run as run_users
        return run_users(args, os.environ)
    if args.command == "spark":
        from spark.cli import run as run_spark
        return run_spark(args)
    if args.command != "serve":
        parser.print_help(sys.stderr)
        return 2
    try:
        settings = load_settings(vars(args), os.environ, args.config)
    except ConfigError as exc:
        print(f"gateway: error: {exc}", file=sys.stderr)
        return 2
    if settings.processes > 1:  # one broker per core, as a cluster (gateway.processes)
        from gateway.logs import configure
        from gateway.processes import run as run_processes
        configure(settings.log_level, settings.log_format)
        return run_processes(settings, argv[argv.index("serve") + 1:], args.config)
    return serve(settings)


def serve(settings) -> int:
    from twisted.internet import reactor

    gc.set_threshold(*GC_THRESHOLDS)

    from gateway.logs import configure
    from gateway.server import Broker, StartupError

    configure(settings.log_level, settings.log_format)
    broker = Broker(settings, reactor)
    try:
        broker.bind()
    except StartupError as exc:
        print(f"gateway: error: {exc}", file=sys.stderr)
        return 1
    outcome = {"code": 0}

    def failed(failure):
        exc = failure.value
        message = str(exc) if isinstance(exc, StartupError) else f"{type(exc).__name__}: {exc}"
        log.error("start-up failed: %s", message, exc_info=not isinstance(exc, StartupError) and
                  (failure.type, failure.value, failure.getTracebackObject()))
        print(f"gateway: error: {message}", file=sys.stderr)
        outcome["code"] = 1
        reactor.stop()

    reactor.callWhenRunning(lambda: broker.start().addErrback(failed))
    reactor.addSystemEventTrigger("before", "shutdown", broker.stop)
    # A broker started in the background by a non-interactive shell inherits SIGINT ignored, and
    # Twisted then leaves it ignored: take it back, so that SIGINT stops the broker as SIGTERM does.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    reactor.run()
    return outcome["code"]


if __name__ == "__main__":
    sys.exit(main())
