"""A virtual host's policies, operator policies and limits, with RabbitMQ's rules.

A mixin of :class:`routing.vhost.VirtualHost`, kept apart so that the vhost module stays about
exchanges, queues and bindings. It reads the vhost's ``name``, ``on_change`` and the three dicts
the vhost owns: ``policies`` and ``operator_policies`` (name -> ``{"pattern", "definition",
"priority", "apply-to"}``) and ``limits`` (``max-connections``, ``max-queues``), and sets the
effective arguments of the vhost's ``queues``. A policy applies to the queues whose name its
pattern (a regular expression) finds.
"""
from __future__ import annotations

import json
import re
from typing import Callable

from routing.errors import PRECONDITION_FAILED, ChannelError, not_found
from routing.queue_arguments import check_policy_definition

VHOST_LIMITS = ("max-connections", "max-queues")


def _check_pattern(name: str, pattern: str) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ChannelError(PRECONDITION_FAILED, f"policy '{name}': pattern {pattern!r} is not a regular "
                                                f"expression ({exc})") from None


class PoliciesMixin:
    name: str
    on_change: Callable[..., None]
    policies: dict[str, dict]
    operator_policies: dict[str, dict]
    limits: dict[str, int]
    queues: dict
    _policies_seen: str | None

    def set_policy(self, name: str, pattern: str, definition: dict, priority: int = 0, apply_to: str = "all",
                   *, operator: bool = False) -> None:
        """A RabbitMQ policy: its queue keys (message-ttl, expires, max-length, max-length-bytes,
        overflow, dead-lettering, delivery-limit, ...) apply to the queues it finds, and ha-mode /
        ha-params place their replicas. ``operator``: an operator policy, which caps the queues'
        limits (the lowest of argument, policy and operator policy holds), as RabbitMQ's do."""
        _check_pattern(name, pattern)
        problem = check_policy_definition(name, definition)
        if problem is not None:
            raise ChannelError(PRECONDITION_FAILED, problem)
        if operator:
            self.operator_policies[name] = {"pattern": pattern, "definition": dict(definition),
                                            "priority": int(priority), "apply-to": apply_to}
            self.apply_policies()
            self.on_change()
            return
        if apply_to not in ("all", "queues", "exchanges"):
            raise ChannelError(PRECONDITION_FAILED, f"policy '{name}': apply-to must be all, queues or exchanges")
        mode = definition.get("ha-mode")
        if mode not in (None, "all", "exactly"):
            raise ChannelError(PRECONDITION_FAILED, f"policy '{name}': ha-mode {mode!r} is not supported "
                                                    "(all or exactly)")
        if mode == "exactly" and not (isinstance(definition.get("ha-params"), int) and definition["ha-params"] >= 1):
            raise ChannelError(PRECONDITION_FAILED, f"policy '{name}': ha-mode exactly needs ha-params, a count >= 1")
        self.policies[name] = {"pattern": pattern, "definition": dict(definition), "priority": int(priority),
                               "apply-to": apply_to}
        self.apply_policies()
        self.on_change()

    def clear_policy(self, name: str, *, operator: bool = False) -> None:
        if (self.operator_policies if operator else self.policies).pop(name, None) is None:
            raise not_found("operator policy" if operator else "policy", name, self.name)
        self.apply_policies()
        self.on_change()

    def set_limit(self, name: str, value: int) -> None:
        """RabbitMQ's vhost limits; a negative value means no limit."""
        if name not in VHOST_LIMITS:
            raise ValueError(f"unknown vhost limit {name!r}: use {' or '.join(VHOST_LIMITS)}")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"vhost limit {name} must be a whole number (-1: no limit), not {value!r}")
        self.limits[name] = value
        self.on_change()

    def clear_limit(self, name: str) -> None:
        if self.limits.pop(name, None) is None:
            raise not_found("vhost limit", name, self.name)
        self.on_change()

    def _check_queue_limit(self, queue_name: str, queues: int) -> None:
        """406 when declaring one more queue would pass ``max-queues`` (``queues``: how many there are)."""
        limit = self.limits.get("max-queues", -1)
        if 0 <= limit <= queues:
            raise ChannelError(PRECONDITION_FAILED, f"cannot declare queue '{queue_name}': queue limit in vhost "
                                                    f"'{self.name}' ({limit}) is reached")

    def effective_policy(self, queue_name: str) -> dict | None:
        """The definition of the policy that applies to a queue, by RabbitMQ's rule: of the policies
        for queues whose pattern finds its name, the one of highest priority (the first by name
        between equals, so that every broker picks the same). Only that one applies: the keys of
        lower-priority policies are not merged in."""
        return _best(self.policies, queue_name)

    def effective_operator_policy(self, queue_name: str) -> dict | None:
        """The operator policy that applies to a queue, by the same rule; it caps the queue's limits."""
        return _best(self.operator_policies, queue_name)

    def policy_names(self, queue_name: str) -> tuple[str | None, str | None]:
        """The names of the policy and the operator policy that apply to a queue (None: none)."""
        return _best_name(self.policies, queue_name), _best_name(self.operator_policies, queue_name)

    def apply_policies(self) -> None:
        """Each queue's arguments as the policies now make them (routing.queue_arguments.merged): a
        changed policy applies to the queues it finds at once, as in RabbitMQ. Streams keep theirs."""
        self._policies_seen = self._policies_stamp()
        for queue in self.queues.values():
            self.apply_policies_to(queue)

    def apply_policies_to(self, queue) -> None:
        """One queue's arguments as its policy and operator policy make them (not a stream's)."""
        if not queue.is_stream:
            queue.apply_policy(self.effective_policy(queue.name), self.effective_operator_policy(queue.name))

    def refresh_policies(self) -> None:
        """Apply the policies again if they changed by another way than :meth:`set_policy` (another
        broker's definitions, read from the replicated journal, or a definitions import)."""
        if self._policies_stamp() != self._policies_seen:
            self.apply_policies()

    def _policies_stamp(self) -> str:
        return json.dumps([self.policies, self.operator_policies], sort_keys=True, default=str)

    def _policy_value(self, queue_name: str, key: str, kind: type = int):
        """``key`` of the policy that applies to a queue, or None if there is none, it has no such
        key or the value is not a ``kind``."""
        value = (self.effective_policy(queue_name) or {}).get(key)
        return value if isinstance(value, kind) and not isinstance(value, bool) else None

    def _policy_definitions(self) -> dict:
        """The ``policies``, ``operator_policies`` and ``limits`` parts of the durable definitions."""
        policies = [{"name": name, **policy} for name, policy in sorted(self.policies.items())]
        operator = [{"name": name, **policy} for name, policy in sorted(self.operator_policies.items())]
        return {"policies": policies, "operator_policies": operator, "limits": dict(self.limits)}

    def _restore_policies(self, definitions: dict) -> None:
        for p in definitions.get("policies", ()):
            self.policies[p["name"]] = {k: v for k, v in p.items() if k != "name"}
        for p in definitions.get("operator_policies", ()):
            self.operator_policies[p["name"]] = {k: v for k, v in p.items() if k != "name"}
        self.limits.update(definitions.get("limits", {}))


def _best(policies: dict[str, dict], queue_name: str) -> dict | None:
    name = _best_name(policies, queue_name)
    return policies[name]["definition"] if name is not None else None


def _best_name(policies: dict[str, dict], queue_name: str) -> str | None:
    best, best_name = None, None
    for name, policy in policies.items():
        if policy.get("apply-to", "all") not in ("all", "queues") or not re.search(policy["pattern"], queue_name):
            continue
        priority = policy.get("priority", 0)
        if best is None or priority > best.get("priority", 0) or (priority == best.get("priority", 0)
                                                                     and name < best_name):
            best, best_name = policy, name
    return best_name
