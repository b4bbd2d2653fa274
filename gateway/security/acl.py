"""Kafka ACLs: bindings, the file that keeps them, and the authorizer that evaluates them.

A binding is Kafka's: a resource pattern (type topic, group, cluster or transactional-id; a
name; LITERAL, where ``*`` matches every name, or PREFIXED), a principal (``User:alice``,
``User:*``), a host (``*`` or an address), an operation and ALLOW or DENY. Evaluation is
Kafka's ``AclAuthorizer``'s:

* a super user (``--super-users``) may do everything;
* a matching DENY wins over any ALLOW;
* an ALLOW for the operation, or for ALL, grants it; READ, WRITE, DELETE or ALTER also
  grant DESCRIBE, and ALTER_CONFIGS grants DESCRIBE_CONFIGS;
* a resource that no binding matches at all (for any principal) is allowed only with
  ``--allow-everyone-if-no-acl-found``.

``<data-dir>/acls.json`` holds the bindings as a JSON list (written atomically on every
CreateAcls/DeleteAcls). In cluster mode they are the cluster's, as Kafka keeps ACLs in ZooKeeper:
one JSON document there (:meth:`Authorizer.share`) that every change replaces conditionally on
the version it read, seeded by the first broker with its own file's bindings. The ids below are
the wire values of Kafka's enums.
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from core.checkpoint import write_atomic

log = logging.getLogger(__name__)

ACLS_FILE = "acls.json"

RESOURCE_TYPES = {1: "any", 2: "topic", 3: "group", 4: "cluster", 5: "transactional_id", 6: "delegation_token",
                  7: "user"}
OPERATIONS = {1: "any", 2: "all", 3: "read", 4: "write", 5: "create", 6: "delete", 7: "alter", 8: "describe",
              9: "cluster_action", 10: "describe_configs", 11: "alter_configs", 12: "idempotent_write",
              13: "create_tokens", 14: "describe_tokens"}
PATTERN_TYPES = {1: "any", 2: "match", 3: "literal", 4: "prefixed"}
PERMISSIONS = {1: "any", 2: "deny", 3: "allow"}
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
IMPLIES_DESCRIBE = {"read", "write", "delete", "alter"}


def code_of(table: dict[int, str], name: str) -> int:
    for code, value in table.items():
        if value == name:
            return code
    raise KeyError(name)


@dataclass(frozen=True)
class AclBinding:
    resource_type: str   # topic, group, cluster, transactional_id
    resource_name: str
    pattern_type: str    # literal, prefixed
    principal: str       # User:alice, User:*
    host: str            # *, or an address
    operation: str       # read, write, ..., all
    permission: str      # allow, deny

    def matches_resource(self, resource_type: str, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == "prefixed":
            return name.startswith(self.resource_name)
        return self.resource_name == name or self.resource_name == WILDCARD


@dataclass(frozen=True)
class AclFilter:
    """DescribeAcls / DeleteAcls: each field None (or "any") matches everything."""
    resource_type: str = "any"
    resource_name: str | None = None
    pattern_type: str = "any"   # any, match, literal, prefixed
    principal: str | None = None
    host: str | None = None
    operation: str = "any"
    permission: str = "any"

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != "any" and b.resource_type != self.resource_type:
            return False
        if self.pattern_type == "match":
            if self.resource_name is not None and not b.matches_resource(b.resource_type, self.resource_name):
                return False
        else:
            if self.pattern_type != "any" and b.pattern_type != self.pattern_type:
                return False
            if self.resource_name is not None and b.resource_name != self.resource_name:
                return False
        return ((self.principal is None or b.principal == self.principal)
                and (self.host is None or b.host == self.host)
                and (self.operation == "any" or b.operation == self.operation)
                and (self.permission == "any" or b.permission == self.permission))


def validate(b: AclBinding) -> str | None:
    """Why a binding cannot be created, or None."""
    if b.resource_type not in ("topic", "group", "cluster", "transactional_id", "delegation_token", "user"):
        return f"invalid resource type {b.resource_type}"
    if b.pattern_type not in ("literal", "prefixed"):
        return f"invalid pattern type {b.pattern_type}: only LITERAL and PREFIXED bindings can be created"
    if b.operation in ("any", "unknown") or b.permission not in ("allow", "deny"):
        return "invalid operation or permission type"
    if not b.resource_name:
        return "the resource name must not be empty"
    if b.resource_type == "cluster" and b.resource_name != CLUSTER_NAME:
        return f"the cluster resource is named {CLUSTER_NAME!r}"
    if not b.principal.startswith("User:") or len(b.principal) <= len("User:"):
        return f"invalid principal {b.principal!r}: expected User:<name> or User:*"
    if not b.host:
        return "the host must not be empty (use * for every host)"
    return None


class Authorizer:
    def __init__(self, path: Path | None, super_users: tuple[str, ...] = (),
                 allow_if_no_acl: bool = False):
        self.path = Path(path) if path is not None else None
        self.super_users = {u if u.startswith("User:") else f"User:{u}" for u in super_users}
        self.allow_if_no_acl = allow_if_no_acl
        self.bindings: list[AclBinding] = []
        self.document = None  # cluster mode: the cluster's bindings (see share)
        if self.path is not None and self.path.exists():
            try:
                self.bindings = [AclBinding(**b) for b in json.loads(self.path.read_bytes())]
            except (ValueError, TypeError) as exc:
                raise ValueError(f"ACL file {self.path} cannot be read: {exc}") from None

    def _save(self, bindings: list[AclBinding]) -> None:
        """Keep ``bindings`` (cluster mode: OSError if another broker changed them at the same moment)."""
        if self.document is not None:
            self.document.write(_document(bindings))
        elif self.path is not None:
            write_atomic(self.path, json.dumps([asdict(b) for b in bindings], indent=1).encode())
        self.bindings = bindings

    # --- cluster mode ---------------------------------------------------------------------
    def share(self, document) -> None:
        """Make the bindings the cluster's: ``document`` (gateway.cluster.shared_docs.SharedDocument)
        holds them; if no broker wrote it yet, this broker's own become the cluster's."""
        self.document = document
        document.join(self._adopt, lambda: _document(self.bindings))

    def refresh(self) -> None:
        """Cluster mode: take the cluster's bindings if another broker changed them."""
        newer = self.document.newer()
        if newer is not None:
            self._adopt(newer)

    def _adopt(self, doc) -> None:
        try:
            self.bindings = [AclBinding(**b) for b in doc["bindings"]]
        except (KeyError, TypeError, ValueError) as exc:
            log.error("the cluster's ACLs cannot be read, keeping the previous ones: %r", exc)

    def authorize(self, principal: str, host: str, operation: str, resource_type: str, name: str) -> bool:
        if principal in self.super_users:
            return True
        matching = [b for b in self.bindings if b.matches_resource(resource_type, name)]
        if not matching:
            return self.allow_if_no_acl
        mine = [b for b in matching if b.principal in (principal, "User:*") and b.host in (host, WILDCARD)]
        if any(b.permission == "deny" and b.operation in (operation, "all") for b in mine):
            return False
        for b in mine:
            if b.permission != "allow":
                continue
            if b.operation in (operation, "all"):
                return True
            if operation == "describe" and b.operation in IMPLIES_DESCRIBE:
                return True
            if operation == "describe_configs" and b.operation == "alter_configs":
                return True
        return False

    def create(self, bindings: list[AclBinding]) -> None:
        """Raises OSError if they could not be kept (nothing changed then)."""
        if self.document is not None:
            self.refresh()
        new = list(self.bindings)
        for b in bindings:
            if b not in new:
                new.append(b)
        self._save(new)

    def describe(self, f: AclFilter) -> list[AclBinding]:
        return [b for b in self.bindings if f.matches(b)]

    def delete(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """The bindings each filter deleted; raises OSError if that could not be kept (nothing
        changed then)."""
        if self.document is not None:
            self.refresh()
        deleted = [[b for b in self.bindings if f.matches(b)] for f in filters]
        gone = {b for group in deleted for b in group}
        if gone:
            self._save([b for b in self.bindings if b not in gone])
        return deleted


def _document(bindings: list[AclBinding]) -> dict:
    """The cluster's bindings as kept in ZooKeeper."""
    return {"version": 1, "bindings": [asdict(b) for b in bindings]}
