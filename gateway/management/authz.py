"""Who may call which management endpoint: RabbitMQ's user tags as one table.

Every route of :class:`gateway.management.api.ManagementApi` has exactly one row here (the API
refuses to start otherwise), so a new endpoint cannot be added without saying who may use it.
The rules, as RabbitMQ 3.10's management plugin applies them (checked by
``compat_tests/http/test_authz_roles.py`` against a real node):

* ``management`` and above (``policymaker``, ``monitoring``, ``administrator``) may use the API at
  all; a user without one of these tags gets 401 everywhere (``/api/auth`` alone is open).
* ``management``/``policymaker`` see the objects of the vhosts they have permissions in, and only
  their own connections and channels; ``monitoring`` and ``administrator`` see everything.
* vhost-scoped reads need a permission in the vhost (an administrator needs none); AMQP actions
  through the API (declare, delete, purge, get, publish, bind, aliveness) need a permission in the
  vhost even for an administrator, since RabbitMQ performs them as that user.
* policies and runtime parameters: ``policymaker`` with a permission in the vhost, or administrator.
* node figures: ``monitoring``; users, permissions, definitions, vhosts, limits, operator
  policies, feature flags, the cluster name: ``administrator`` only (so no lower user reads a
  password hash).

Every refusal is 401 ``not_authorised``, as RabbitMQ answers it (not 403).
"""
from __future__ import annotations

from typing import Callable

from gateway.management.errors import ApiError

ANON = "anonymous"
MANAGEMENT = "management"
MONITOR = "monitor"
ADMIN = "administrator"
VHOST_READ = "vhost-read"
VHOST_AMQP = "vhost-amqp"
POLICIES = "policies"

_B = "bindings/*/e/*/*/*"

# (method, path pattern, rule, index of the vhost among the pattern's * parts or None)
TABLE: list[tuple[str, str, str, int | None]] = [
    ("GET", "auth", ANON, None),
    ("GET", "openapi.json", ANON, None),  # the API's description (gateway.management.openapi)
    *[("GET", p, MANAGEMENT, None) for p in (
        "overview", "whoami", "vhosts", "queues", "exchanges", "bindings", "connections", "channels",
        "connections/*", "connections/*/channels", "channels/*", "consumers", "consumers/*", "policies",
        "operator-policies", "vhost-limits", "vhost-limits/*", "extensions", "cluster-name", "history",
        "health/checks/alarms", "health/checks/local-alarms", "health/checks/port-listener/*",
        "health/checks/protocol-listener/*", "health/checks/virtual-hosts", "health/checks/node-is-quorum-critical",
        "health/checks/node-is-mirror-sync-critical", "health/checks/certificate-expiration/*/*",
        "health/checks/ready-to-serve-clients", "health/checks/is-in-service")],
    ("DELETE", "connections/*", MANAGEMENT, None),  # a management user closes its own (see own_only)
    *[("GET", p, MONITOR, None) for p in ("nodes", "nodes/*", "nodes/*/memory", "topics", "topics/*", "groups",
                                          "groups/*", "connections/*/sessions")],  # sessions name no user
    *[("GET", p, VHOST_READ, 0) for p in (
        "queues/*", "queues/*/*", "queues/*/*/bindings", "exchanges/*", "exchanges/*/*",
        "exchanges/*/*/bindings/source", "exchanges/*/*/bindings/destination", "bindings/*", _B, _B + "/*",
        "vhosts/*/connections", "vhosts/*/channels", "policies/*", "operator-policies/*")],
    *[(m, p, VHOST_AMQP, 0) for m, p in (
        ("PUT", "queues/*/*"), ("DELETE", "queues/*/*"), ("DELETE", "queues/*/*/contents"), ("POST", "queues/*/*/get"),
        ("PUT", "exchanges/*/*"), ("DELETE", "exchanges/*/*"), ("POST", "exchanges/*/*/publish"), ("POST", _B),
        ("DELETE", _B + "/*"), ("GET", "aliveness-test/*"))],
    ("GET", "parameters", POLICIES, None),
    ("GET", "parameters/*", POLICIES, None),
    ("GET", "parameters/*/*", POLICIES, 1),
    *[(m, "parameters/*/*/*", POLICIES, 1) for m in ("GET", "PUT", "DELETE")],
    *[(m, "policies/*/*", POLICIES, 0) for m in ("GET", "PUT", "DELETE")],
    *[(m, p, ADMIN, None) for m, p in (
        ("GET", "vhosts/*"), ("PUT", "vhosts/*"), ("DELETE", "vhosts/*"), ("GET", "vhosts/*/permissions"),
        ("GET", "users"), ("GET", "users/without-permissions"), ("POST", "users/bulk-delete"), ("GET", "users/*"),
        ("GET", "users/*/permissions"), ("PUT", "users/*"), ("DELETE", "users/*"), ("GET", "permissions"),
        ("GET", "permissions/*/*"), ("PUT", "permissions/*/*"), ("DELETE", "permissions/*/*"),
        ("GET", "operator-policies/*/*"), ("PUT", "operator-policies/*/*"), ("DELETE", "operator-policies/*/*"),
        ("PUT", "vhost-limits/*/*"), ("DELETE", "vhost-limits/*/*"), ("GET", "feature-flags"),
        ("PUT", "cluster-name"), ("GET", "definitions"), ("GET", "definitions/*"), ("POST", "definitions"),
        ("POST", "definitions/*"), ("PUT", "topics/*"), ("DELETE", "topics/*"))],
]

RULES: dict[tuple[str, tuple[str, ...]], tuple[str, int | None]] = {
    (m, tuple(p.split("/"))): (rule, index) for m, p, rule, index in TABLE}
# Lists a management/policymaker user sees only its own entries of (RabbitMQ: "own" connections).
OWN_ONLY = {("connections",), ("channels",), ("vhosts", "*", "connections"), ("vhosts", "*", "channels"),
            ("connections", "*"), ("connections", "*", "channels"), ("channels", "*")}


def check_table(routes) -> None:
    """Every route has a rule and every rule a route: the table cannot drift from the API."""
    keys = {(m, tuple(p)) for m, p, _ in routes}
    missing, stale = keys - RULES.keys(), RULES.keys() - keys
    if missing or stale:
        raise RuntimeError(f"gateway.management.authz.TABLE is out of date: no rule for {sorted(missing)}, "
                           f"no route for {sorted(stale)}")


class Access:
    """One request's user as the table sees it: its tags and a ``may_use(vhost)`` permission test."""

    def __init__(self, user: str, tags, may_use: Callable[[str], bool]):
        self.user, self.tags, self.may_use = user, set(tags), may_use
        self.admin = ADMIN in self.tags
        self.monitor = self.admin or "monitoring" in self.tags
        self.policymaker = self.admin or "policymaker" in self.tags
        self.management = self.monitor or self.policymaker or "management" in self.tags

    def check(self, method: str, pattern: tuple[str, ...], args: list[str]) -> None:
        rule, index = RULES[(method, pattern)]
        if rule == ANON:
            return
        if not self.management:
            raise _refused("Not management user")
        vhost = args[index] if index is not None and index < len(args) else None
        if rule == MONITOR and not self.monitor:
            raise _refused("Not monitor user")
        if rule == ADMIN and not self.admin:
            raise _refused("Not administrator user")
        if rule == POLICIES and not (self.policymaker and (vhost is None or self.admin or self.may_use(vhost))):
            raise _refused("Not policymaker user" if not self.policymaker else
                           "User not authorised to access virtual host")
        if rule == VHOST_READ and not (self.admin or self.may_use(vhost)):
            raise _refused("User not authorised to access virtual host")
        if rule == VHOST_AMQP and not self.may_use(vhost):
            raise _refused("User not authorised to access virtual host")

    def sees(self, pattern: tuple[str, ...], item) -> bool:
        """Whether a listed object is shown to this user (vhosts it may use; own connections)."""
        if self.monitor or not isinstance(item, dict):
            return True
        if pattern in OWN_ONLY and "user" in item and item["user"] != self.user:
            return False
        vhost = item.get("name") if pattern == ("vhosts",) else item.get("vhost")
        return not isinstance(vhost, str) or self.may_use(vhost)


def _refused(reason: str) -> ApiError:
    return ApiError(401, "not_authorised", reason)
