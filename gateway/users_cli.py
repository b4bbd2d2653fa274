"""``gateway users ...``: manage the user store (``<data-dir>/users.json``) of both protocols.

Safe while a broker runs on the same data directory: each edit locks the file, re-reads it
and replaces it atomically, and the broker reloads it within a second (see
:mod:`gateway.security.users`). Passwords are read from standard input unless ``--password``
is given (which would leave them in the shell history and the process list).
"""
from __future__ import annotations

import getpass
import sys
from pathlib import Path

from gateway.config import ConfigError, load_settings
from gateway.security.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MIN_ITERATIONS
from gateway.security.users import UserStore, UserStoreError


def add_parser(commands) -> None:
    users = commands.add_parser(
        "users", help="manage users, passwords and AMQP permissions",
        description="Manage the users of both protocols in <data-dir>/users.json (safe while the broker "
                    "runs: it reloads the file within a second; in a cluster the file is the broker's copy of "
                    "the cluster's users, and what is changed there reaches every broker). Without the file the "
                    "only user is guest/guest, allowed from loopback addresses only.")
    users.add_argument("--data-dir", metavar="DIR", help="the broker's data directory "
                                                         "(env GATEWAY_DATA_DIR, default ./gateway-data)")
    users.add_argument("--config", metavar="FILE", help="read data_dir from this TOML file (env GATEWAY_CONFIG)")
    sub = users.add_subparsers(dest="users_command", metavar="ACTION", required=True)
    sub.add_parser("list", help="list users, their SCRAM mechanisms, tags and permissions")
    for name, text in (("add", "add a user (password from stdin unless --password)"),
                       ("passwd", "change a user's password (both SCRAM mechanisms)")):
        p = sub.add_parser(name, help=text)
        p.add_argument("user")
        p.add_argument("--password", help="the password (default: read from standard input)")
        p.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                       help=f"PBKDF2 iterations, {MIN_ITERATIONS}-{MAX_ITERATIONS} (default {DEFAULT_ITERATIONS})")
        if name == "add":
            p.add_argument("--no-password", action="store_true",
                           help="no password: the user logs in with a client certificate only (AMQP EXTERNAL)")
    p = sub.add_parser("delete", help="delete a user")
    p.add_argument("user")
    p = sub.add_parser("set-permissions", help="set a user's configure/write/read regexes on a vhost "
                                               "(RabbitMQ semantics; '' allows nothing, '.*' everything)")
    p.add_argument("user")
    p.add_argument("configure")
    p.add_argument("write")
    p.add_argument("read")
    p.add_argument("--vhost", default="/", help="the vhost (default /)")
    p = sub.add_parser("clear-permissions", help="remove a user's permissions on a vhost")
    p.add_argument("user")
    p.add_argument("--vhost", default="/")
    p = sub.add_parser("set-tags", help="replace a user's tags")
    p.add_argument("user")
    p.add_argument("tags", nargs="*")


def _password(args) -> str:
    if args.password is not None:
        return args.password
    if sys.stdin.isatty():
        first = getpass.getpass(f"password for {args.user}: ")
        if getpass.getpass("again: ") != first:
            raise UserStoreError("the passwords differ")
        return first
    line = sys.stdin.readline()
    password = line[:-1] if line.endswith("\n") else line
    if not password:
        raise UserStoreError("no password on standard input (use --no-password for certificate-only users)")
    return password


def run(args, environ) -> int:
    try:
        cli = {"data_dir": args.data_dir}
        data_dir = Path(load_settings(cli, environ, args.config).data_dir)
    except ConfigError as exc:
        print(f"gateway: error: {exc}", file=sys.stderr)
        return 2
    try:
        store = UserStore.in_data_dir(data_dir)
        action = args.users_command
        if action == "list":
            _list(store)
            return 0
        if action in ("add", "passwd") and not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
            raise UserStoreError(f"--iterations must be from {MIN_ITERATIONS} to {MAX_ITERATIONS}")
        if action == "add":
            password = None if args.no_password else _password(args)
            store.add_user(args.user, password, args.iterations)
            print(f"added user '{args.user}' (no permissions yet: see `gateway users set-permissions`)")
        elif action == "passwd":
            store.change_password(args.user, _password(args), args.iterations)
            print(f"changed the password of '{args.user}'")
        elif action == "delete":
            store.delete_user(args.user)
            print(f"deleted user '{args.user}'")
        elif action == "set-permissions":
            store.set_permissions(args.user, args.vhost, args.configure, args.write, args.read)
            print(f"set permissions of '{args.user}' on vhost '{args.vhost}'")
        elif action == "clear-permissions":
            store.clear_permissions(args.user, args.vhost)
            print(f"cleared permissions of '{args.user}' on vhost '{args.vhost}'")
        elif action == "set-tags":
            store.set_tags(args.user, args.tags)
            print(f"set tags of '{args.user}': {' '.join(args.tags)}")
    except (UserStoreError, OSError) as exc:
        print(f"gateway: error: {exc}", file=sys.stderr)
        return 1
    return 0


def _list(store: UserStore) -> None:
    print("user\ttags\tmechanisms\tvhost\tconfigure\twrite\tread")
    for name, user in sorted(store.users.items()):
        mechanisms = ",".join(sorted(user.scram)) or "-"
        tags = ",".join(user.tags) or "-"
        if not user.permissions:
            print(f"{name}\t{tags}\t{mechanisms}\t-\t-\t-\t-")
        for vhost, p in sorted(user.permissions.items()):
            print(f"{name}\t{tags}\t{mechanisms}\t{vhost}\t{p.configure}\t{p.write}\t{p.read}")
