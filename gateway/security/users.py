"""The user store shared by the Kafka and AMQP listeners: ``<data-dir>/users.json``.

One entry per user: SCRAM credentials (salt, iterations, StoredKey, ServerKey per mechanism,
as Kafka keeps them: never the password, see :mod:`gateway.security.scram`), RabbitMQ-style
permissions per vhost (configure/write/read regular expressions) and tags::

    {"format": 1,
     "users": {"alice": {"scram": {"SCRAM-SHA-256": {"salt": "...", "iterations": 4096,
                                                      "stored_key": "...", "server_key": "..."},
                                    "SCRAM-SHA-512": {...}},
                         "permissions": {"/": {"configure": ".*", "write": ".*", "read": ".*"}},
                         "tags": []}}}

Without the file the store holds RabbitMQ's first-boot default: ``guest``/``guest`` with full
permissions on ``/`` (and ``guest`` may only log in from a loopback address, as in RabbitMQ;
see ``loopback_users``). The first edit writes that default to the file with the change.

Concurrency: the file is edited by the ``gateway users`` CLI and by the running broker
(Kafka's AlterUserScramCredentials). Every edit takes ``users.json.lock`` (``flock``), reads
the current file, changes it and replaces it atomically (temp file, fsync, rename; mode 0600).
Readers never lock: the broker notices a new file by its (inode, mtime, size) and reloads it
(:meth:`UserStore.maybe_reload`, called before each authentication and once a second), so a
user added with the CLI can log in at once, without a restart. A file that does not parse is
logged and the previous contents are kept.

Cluster mode: the users are the cluster's, as Kafka keeps SCRAM credentials in ZooKeeper and
RabbitMQ keeps users in its cluster-wide metadata. They are one JSON document in ZooKeeper (the
file's form; :meth:`UserStore.share`), which every edit replaces conditionally on the version it
read; the first broker of a cluster seeds it with its own users. Each broker writes its copy to
its ``users.json`` too, so ``gateway users`` on any broker's data directory lists the cluster's
users, and an edit the CLI makes there reaches the cluster's document at the broker's next reload,
merged user by user with what other brokers changed meanwhile.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from core.checkpoint import write_atomic
from gateway.security import rabbit_hash
from gateway.security.scram import MECHANISMS, ScramCredential, make_credential, password_matches

log = logging.getLogger(__name__)

USERS_FILE = "users.json"
FORMAT = 1
DEFAULT_USER = ("guest", "guest")
DEFAULT_VHOST = "/"
FULL = (".*", ".*", ".*")
LOOPBACK_HOSTS = ("::1", "localhost")


def is_loopback(host: str) -> bool:
    return host.startswith("127.") or host in LOOPBACK_HOSTS or host.startswith("::ffff:127.")


class UserStoreError(Exception):
    """The users file cannot be read, or an edit is not allowed; the message says why."""


@dataclass(frozen=True)
class Permission:
    """RabbitMQ's three regular expressions; "" matches nothing (no access)."""
    configure: str
    write: str
    read: str

    def allows(self, kind: str, name: str) -> bool:
        pattern = getattr(self, kind)
        if pattern == ".*":
            return True
        return pattern != "" and _regex(pattern).search(name) is not None

    def to_json(self) -> dict:
        return {"configure": self.configure, "write": self.write, "read": self.read}


_regex_cache: dict[str, re.Pattern] = {}


def _regex(pattern: str) -> re.Pattern:
    compiled = _regex_cache.get(pattern)
    if compiled is None:
        compiled = _regex_cache[pattern] = re.compile(pattern)
    return compiled


def check_regex(pattern: str) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise UserStoreError(f"{pattern!r} is not a valid regular expression: {exc}") from None


@dataclass
class User:
    name: str
    scram: dict[str, ScramCredential] = field(default_factory=dict)
    permissions: dict[str, Permission] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    # RabbitMQ's form of the same password (see gateway.security.rabbit_hash): what definitions export
    password_hash: str = ""
    hashing_algorithm: str = rabbit_hash.DEFAULT_ALGORITHM

    def to_json(self) -> dict:
        doc = {"scram": {m: c.to_json() for m, c in sorted(self.scram.items())},
               "permissions": {v: p.to_json() for v, p in sorted(self.permissions.items())},
               "tags": list(self.tags)}
        if self.password_hash:
            doc["password_hash"] = self.password_hash
            doc["hashing_algorithm"] = self.hashing_algorithm
        return doc

    @classmethod
    def from_json(cls, name: str, doc: dict) -> "User":
        return cls(name,
                   {m: ScramCredential.from_json(m, c) for m, c in (doc.get("scram") or {}).items()},
                   {v: Permission(p["configure"], p["write"], p["read"])
                    for v, p in (doc.get("permissions") or {}).items()},
                   list(doc.get("tags") or []), doc.get("password_hash", ""),
                   doc.get("hashing_algorithm", rabbit_hash.DEFAULT_ALGORITHM))

    def check_password(self, password: str) -> bool:
        for mechanism in MECHANISMS:  # SCRAM-SHA-256 first: the cheaper hash
            credential = self.scram.get(mechanism)
            if credential is not None:
                return password_matches(credential, password)
        return rabbit_hash.check_hash(self.password_hash, self.hashing_algorithm, password)

    def set_password(self, password: str, iterations: int) -> None:
        self.scram = {m: make_credential(m, password, iterations) for m in MECHANISMS}
        self.password_hash, self.hashing_algorithm = rabbit_hash.make_hash(password), rabbit_hash.DEFAULT_ALGORITHM


def new_user(name: str, password: str | None, iterations: int) -> User:
    user = User(name)
    if password is not None:
        user.set_password(password, iterations)
    return user


def default_users() -> dict[str, User]:
    guest = new_user(DEFAULT_USER[0], DEFAULT_USER[1], 4096)
    guest.permissions[DEFAULT_VHOST] = Permission(*FULL)
    guest.tags = ["administrator"]
    return {guest.name: guest}


def check_user_name(name: str) -> None:
    if not name or len(name) > 255 or any(ord(c) < 32 for c in name):
        raise UserStoreError(f"user name {name!r} must be 1-255 printable characters")


class UserStore:
    """Users of both protocols; see the module docstring for the file and its concurrency."""

    def __init__(self, path: Path | None, loopback_users: tuple[str, ...] = (DEFAULT_USER[0],)):
        self.path = Path(path) if path is not None else None
        self.loopback_users = set(loopback_users)
        self.users: dict[str, User] = {}
        self._stamp: tuple | None = None
        self.document = None  # cluster mode: the cluster's users (see share)
        self._base: dict[str, dict] = {}  # cluster mode: the users file as this broker last read or wrote it
        self.load()

    @classmethod
    def in_data_dir(cls, data_dir: Path, **kw) -> "UserStore":
        return cls(Path(data_dir) / USERS_FILE, **kw)

    # --- reading ---------------------------------------------------------------------
    def _file_stamp(self) -> tuple | None:
        if self.path is None:
            return None
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def load(self) -> None:
        """Read the file (raises UserStoreError if it is unreadable or malformed)."""
        stamp = self._file_stamp()
        self.users = self._read() if stamp is not None else default_users()
        self._stamp = stamp
        self._base = _snapshot(self.users)

    def _read(self) -> dict[str, User]:
        try:
            return _parse(json.loads(self.path.read_bytes()))
        except FileNotFoundError:
            return default_users()
        except (OSError, ValueError) as exc:
            raise UserStoreError(f"users file {self.path} cannot be read: {exc}") from None

    def maybe_reload(self) -> bool:
        """Reload if the file changed since it was read; True if it did. Keeps the old users
        (and logs) if the new file is broken. Cluster mode: also takes the cluster's newer users."""
        if self.document is not None:
            return self._sync()
        stamp = self._file_stamp()
        if stamp == self._stamp:
            return False
        try:
            self.users = self._read() if stamp is not None else default_users()
        except UserStoreError as exc:
            log.error("users file not reloaded, keeping the previous users: %s", exc)
            self._stamp = stamp  # do not retry (and log) on every call until it changes again
            return False
        self._stamp = stamp
        log.info("users reloaded", extra={"fields": {"users": len(self.users)}})
        return True

    def get(self, name: str) -> User | None:
        return self.users.get(name)

    # --- authentication and authorization ----------------------------------------------
    def loopback_refused(self, name: str, peer_host: str) -> bool:
        """True if ``name`` may log in only from a loopback address and ``peer_host`` is not one."""
        return name in self.loopback_users and not is_loopback(peer_host)

    def authenticate(self, name: str, password: str, peer_host: str) -> str | None:
        """None if the password is right and the address allowed, else the reason (for the log)."""
        self.maybe_reload()
        user = self.users.get(name)
        if user is None:
            return f"user '{name}' does not exist"
        if not user.check_password(password):
            return f"wrong password for user '{name}'"
        if self.loopback_refused(name, peer_host):
            return f"user '{name}' can only connect via localhost"
        if not user.scram and self.path is not None:  # imported with RabbitMQ's hash only: Kafka's SCRAM
            self.change_password(name, password)  # logins need credentials made from the password itself
        return None

    def scram_credential(self, name: str, mechanism: str) -> ScramCredential | None:
        user = self.users.get(name)
        return None if user is None else user.scram.get(mechanism)

    def permission(self, name: str, vhost: str) -> Permission | None:
        user = self.users.get(name)
        return None if user is None else user.permissions.get(vhost)

    # --- editing -------------------------------------------------------------------------
    @contextlib.contextmanager
    def editing(self):
        """Lock the file, re-read it, yield the users dict to change, write it back (cluster mode:
        to the cluster's document, refused with UserStoreError if another broker changed it at the
        same moment)."""
        if self.document is not None:
            newer = self.document.newer()
            if newer is not None:
                self._adopt(newer)
            users = {name: User.from_json(name, doc) for name, doc in _snapshot(self.users).items()}  # a copy
            yield users
            try:
                self.document.write(_doc(users))
            except OSError as exc:
                raise UserStoreError(f"users not changed: {exc}") from None
            self._set(users)
            return
        if self.path is None:
            yield self.users
            return
        with self._locked():
            users = self._read()
            yield users
            self._write(users)
            self.users = users
            self._stamp = self._file_stamp()

    def _write(self, users: dict[str, User]) -> dict:
        """Write the users file; returns the document written."""
        doc = _doc(users)
        write_atomic(self.path, json.dumps(doc, indent=1, sort_keys=True).encode(), mode=0o600)
        return doc

    @contextlib.contextmanager
    def _locked(self):
        """The users file's lock (``flock`` on ``users.json.lock``), the CLI's and the broker's."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(str(self.path) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(lock_fd)

    # --- cluster mode ---------------------------------------------------------------------
    def share(self, document) -> None:
        """Make the users the cluster's: ``document`` (gateway.cluster.shared_docs.SharedDocument)
        holds them; if no broker wrote it yet, this broker's own users become the cluster's."""
        self.document = document
        local, mirrored = self.users, self._mirrored()

        def adopt(doc) -> None:
            if mirrored is not None and _snapshot(local) != mirrored:  # `gateway users` ran while this broker was down
                self._base = mirrored
                self._merge(local, _parse(doc), self._stamp)
            else:
                self._adopt(doc)
        if document.join(adopt, lambda: _doc(self.users)):
            log.info("users of this broker are the cluster's now", extra={"fields": {"users": len(self.users)}})
            self._set(self.users)

    def _sync(self) -> bool:
        changed = False
        stamp = self._file_stamp()
        if stamp is not None and stamp != self._stamp:  # edited by the CLI: to the cluster
            changed = self._upload(stamp)
        newer = self.document.newer()
        if newer is not None:
            self._adopt(newer)
            changed = True
        return changed

    def _upload(self, stamp: tuple) -> bool:
        """The users file changed here: apply what it changed (against the file as this broker last
        saw it) to the cluster's users, user by user, and write those back."""
        try:
            local = self._read()
        except UserStoreError as exc:
            log.error("users file not taken, keeping the cluster's users: %s", exc)
            self._stamp = stamp
            return False
        newer = self.document.newer()
        return self._merge(local, _parse(newer) if newer is not None else self.users, stamp)

    def _merge(self, local: dict[str, User], remote: dict[str, User], stamp: tuple | None) -> bool:
        """Write the cluster's users ``remote`` with what the users file (``local``, read at
        ``stamp``) changed since this broker last wrote it (``_base``), user by user."""
        merged = dict(remote)
        for name, doc in _snapshot(local).items():
            if self._base.get(name) != doc:
                merged[name] = local[name]
        for name in self._base.keys() - local.keys():
            merged.pop(name, None)
        try:
            self.document.write(_doc(merged))
        except OSError as exc:  # the file stays changed: the next reload tries again
            log.warning("users edited in %s not given to the cluster yet: %s", self.path, exc)
            return False
        self._stamp, self._base = stamp, _snapshot(local)  # the file as read: what the mirror may replace
        log.info("users edited in the users file are the cluster's now", extra={"fields": {"users": len(merged)}})
        self._set(merged)
        return True

    def _adopt(self, doc) -> None:
        try:
            users = _parse(doc)
        except ValueError as exc:
            log.error("the cluster's users cannot be read, keeping the previous ones: %s", exc)
            return
        self._set(users)

    def _set(self, users: dict[str, User]) -> None:
        """The cluster's users as this broker knows them now, also written to its users file
        (unless the CLI changed the file since this broker last saw it: that edit goes first)."""
        self.users = users
        if self.path is None:
            return
        with self._locked():
            current = self._file_stamp()
            if current is not None and current != self._stamp:
                return
            doc = self._write(users)
            write_atomic(self._mirror_path(), json.dumps(doc, sort_keys=True).encode(), mode=0o600)
            self._stamp, self._base = self._file_stamp(), doc["users"]

    def _mirror_path(self) -> Path:
        return self.path.with_name(self.path.name + ".cluster")  # the file as this broker last wrote it

    def _mirrored(self) -> dict[str, dict] | None:
        """The users file as this broker last wrote it in cluster mode (None: it never did)."""
        try:
            return _snapshot(_parse(json.loads(self._mirror_path().read_bytes())))
        except (OSError, ValueError):  # _parse turns a malformed document into ValueError
            return None

    def add_user(self, name: str, password: str | None, iterations: int = 4096) -> None:
        check_user_name(name)
        with self.editing() as users:
            if name in users:
                raise UserStoreError(f"user '{name}' already exists")
            users[name] = new_user(name, password, iterations)

    def delete_user(self, name: str) -> None:
        with self.editing() as users:
            if users.pop(name, None) is None:
                raise UserStoreError(f"user '{name}' does not exist")

    def change_password(self, name: str, password: str, iterations: int = 4096) -> None:
        with self.editing() as users:
            _existing(users, name).set_password(password, iterations)

    def set_password_hash(self, name: str, password_hash: str, algorithm: str) -> None:
        """A user imported from RabbitMQ definitions: its hash, no SCRAM credentials until a PLAIN login."""
        rabbit_hash.check_algorithm(algorithm)
        rabbit_hash.check_hash_text(password_hash)
        with self.editing() as users:
            user = _existing(users, name)
            user.scram, user.password_hash, user.hashing_algorithm = {}, password_hash, algorithm

    def set_permissions(self, name: str, vhost: str, configure: str, write: str, read: str) -> None:
        for pattern in (configure, write, read):
            check_regex(pattern)
        with self.editing() as users:
            _existing(users, name).permissions[vhost] = Permission(configure, write, read)

    def clear_permissions(self, name: str, vhost: str) -> None:
        with self.editing() as users:
            if _existing(users, name).permissions.pop(vhost, None) is None:
                raise UserStoreError(f"user '{name}' has no permissions on vhost '{vhost}'")

    def set_tags(self, name: str, tags: list[str]) -> None:
        with self.editing() as users:
            _existing(users, name).tags = list(tags)


def _snapshot(users: dict[str, User]) -> dict[str, dict]:
    return {name: user.to_json() for name, user in users.items()}


def _doc(users: dict[str, User]) -> dict:
    return {"format": FORMAT, "users": {name: u.to_json() for name, u in sorted(users.items())}}


def _parse(doc) -> dict[str, User]:
    """The users of a users document (the file's form); ValueError if it is not one."""
    try:
        if doc.get("format") != FORMAT:
            raise ValueError(f"unknown format {doc.get('format')!r}")
        return {name: User.from_json(name, u) for name, u in doc["users"].items()}
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a users document: {exc!r}") from None


def _existing(users: dict[str, User], name: str) -> User:
    user = users.get(name)
    if user is None:
        raise UserStoreError(f"user '{name}' does not exist")
    return user
