"""Admin commands of the ``gateway`` CLI, talking to a running broker.

``topics``, ``groups`` and ``acls`` speak the Kafka protocol to ``--bootstrap`` (so they work
against any Kafka-compatible broker too); ``queues`` and ``exchanges`` use the management
HTTP API at ``--http``. Tables by default, ``--json`` for scripts; ``groups reset-offsets``
shows progress on stderr. Exit status 0, or 1 with one ``gateway: error:`` line naming the
object and the broker's error.
"""
from __future__ import annotations

import sys

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_HTTP = "127.0.0.1:15672"
COMMANDS = ("topics", "groups", "acls", "admin", "queues", "exchanges")


def _common(parser, kafka: bool) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    if kafka:
        parser.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT",
                            help=f"the broker's Kafka listener (default {DEFAULT_BOOTSTRAP})")
    else:
        parser.add_argument("--http", default=DEFAULT_HTTP, metavar="HOST:PORT",
                            help=f"the broker's HTTP listener (default {DEFAULT_HTTP})")
        parser.add_argument("--user", default="guest", help="management API user (default guest)")
        parser.add_argument("--password", default="guest", help="its password (default guest)")
        parser.add_argument("--vhost", default="/", help="AMQP virtual host (default /)")


def add_commands(commands) -> None:
    topics = commands.add_parser("topics", help="list, create, delete, describe topics; alter their configs")
    sub = topics.add_subparsers(dest="topics_command", metavar="ACTION", required=True)
    _common(sub.add_parser("list", help="every topic with its partition count"), True)
    p = sub.add_parser("create", help="create a topic")
    p.add_argument("name")
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--replication-factor", type=int, default=1)
    p.add_argument("--config", action="append", metavar="KEY=VALUE", help="a topic config (repeatable)")
    _common(p, True)
    for action, text in (("delete", "delete a topic"), ("describe", "partitions, offsets and non-default configs")):
        p = sub.add_parser(action, help=text)
        p.add_argument("name")
        _common(p, True)
    p = sub.add_parser("alter-config", help="set or delete topic configs")
    p.add_argument("name")
    p.add_argument("--set", action="append", metavar="KEY=VALUE")
    p.add_argument("--delete", action="append", metavar="KEY")
    _common(p, True)

    groups = commands.add_parser("groups", help="list and describe consumer groups (with lag); reset offsets")
    sub = groups.add_subparsers(dest="groups_command", metavar="ACTION", required=True)
    _common(sub.add_parser("list", help="every group and its state (in a cluster, from every broker)"), True)
    p = sub.add_parser("describe", help="a group's committed offsets and lag per partition")
    p.add_argument("group")
    _common(p, True)
    p = sub.add_parser("reset-offsets", help="move an inactive group's offsets (dry run unless --execute)")
    p.add_argument("group")
    p.add_argument("--topic", required=True)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--to-earliest", action="store_true")
    where.add_argument("--to-latest", action="store_true")
    where.add_argument("--to-offset", type=int, metavar="N")
    p.add_argument("--execute", action="store_true", help="commit the new offsets (default: only show them)")
    _common(p, True)

    acls = commands.add_parser("acls", help="list, create and delete Kafka ACLs")
    sub = acls.add_subparsers(dest="acls_command", metavar="ACTION", required=True)
    for action, text in (("list", "ACLs matching the filter"), ("create", "add ACLs"),
                         ("delete", "remove the ACLs matching the filter")):
        p = sub.add_parser(action, help=text)
        p.add_argument("--principal", default="User:*", help="e.g. User:alice (default User:*)")
        p.add_argument("--host", default="*")
        p.add_argument("--operation", action="append", metavar="OP",
                       help="read, write, create, delete, alter, describe, all, ... (repeatable)")
        p.add_argument("--deny", action="store_true", help="a DENY rule (default ALLOW)")
        p.add_argument("--prefixed", action="store_true", help="the name is a prefix (default literal)")
        resource = p.add_mutually_exclusive_group()
        resource.add_argument("--topic")
        resource.add_argument("--group")
        resource.add_argument("--transactional-id")
        resource.add_argument("--cluster", action="store_true")
        _common(p, True)

    admin = commands.add_parser("admin", help="cluster administration: move partitions between brokers")
    sub = admin.add_subparsers(dest="admin_command", metavar="ACTION", required=True)
    p = sub.add_parser("reassign", help="move partitions to other brokers while clients keep going")
    p.add_argument("--topic")
    p.add_argument("--partition", type=int)
    p.add_argument("--replicas", metavar="IDS", help="the new replica list, preferred leader first, e.g. 4,2,3")
    p.add_argument("--file", metavar="PLAN.json", help="Kafka's reassignment JSON, for many partitions at once")
    p.add_argument("--cancel", action="store_true", help="stop the reassignment: back to the original replicas")
    p.add_argument("--wait", action="store_true", help="show progress until every move is complete")
    p.add_argument("--timeout", type=float, default=600, help="seconds --wait waits at most (default 600)")
    _common(p, True)
    _common(sub.add_parser("reassignments", help="the reassignments in progress"), True)

    queues = commands.add_parser("queues", help="list, declare, purge, delete AMQP queues")
    sub = queues.add_subparsers(dest="queues_command", metavar="ACTION", required=True)
    _common(sub.add_parser("list", help="queues with their message and consumer counts"), False)
    p = sub.add_parser("declare", help="declare a queue (durable unless --transient)")
    p.add_argument("name")
    p.add_argument("--transient", action="store_true")
    p.add_argument("--auto-delete", action="store_true")
    p.add_argument("--argument", action="append", metavar="KEY=VALUE", help="e.g. x-max-length=100 (repeatable)")
    _common(p, False)
    for action, text in (("purge", "drop a queue's ready messages"), ("delete", "delete a queue")):
        p = sub.add_parser(action, help=text)
        p.add_argument("name")
        _common(p, False)

    exchanges = commands.add_parser("exchanges", help="list, declare, delete AMQP exchanges; show bindings")
    sub = exchanges.add_subparsers(dest="exchanges_command", metavar="ACTION", required=True)
    _common(sub.add_parser("list", help="exchanges of the vhost"), False)
    p = sub.add_parser("declare", help="declare an exchange")
    p.add_argument("name")
    p.add_argument("--type", default="direct", choices=["direct", "fanout", "topic", "headers"])
    p.add_argument("--transient", action="store_true")
    p.add_argument("--auto-delete", action="store_true")
    p.add_argument("--internal", action="store_true")
    p.add_argument("--argument", action="append", metavar="KEY=VALUE")
    _common(p, False)
    for action, text in (("delete", "delete an exchange"), ("bindings", "the bindings from an exchange")):
        p = sub.add_parser(action, help=text)
        p.add_argument("name")
        _common(p, False)


def run(args) -> int:
    from gateway.ctl import admin_commands, http_commands, kafka_commands
    from gateway.ctl.errors import CommandError
    try:
        if args.command == "admin":
            return kafka_commands.run(args, admin_commands.run)
        if args.command in ("topics", "groups", "acls"):
            return kafka_commands.run(args)
        return http_commands.run(args)
    except CommandError as exc:
        print(f"gateway: error: {exc}", file=sys.stderr)
        return 1
