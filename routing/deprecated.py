"""RabbitMQ's deprecated features that this broker still serves, each behind a permit setting.

RabbitMQ 4.3 stopped permitting these by default (``deprecated_features.permit.<name> = true``
brings one back); here each is permitted unless its setting says otherwise
(``--deprecated-features-permit-<name> false``), and a feature that is not permitted is
refused or ignored as RabbitMQ 4.3 does it:

* ``transient_nonexcl_queues``: declaring a queue that is neither durable nor exclusive closes
  the connection with 541 INTERNAL_ERROR and RabbitMQ's warning text;
* ``queue_master_locator``: declaring a classic queue with ``x-queue-master-locator`` likewise;
* ``global_qos``: ``basic.qos`` with ``global`` set is taken as a per-consumer qos.
"""
from __future__ import annotations

from routing.errors import INTERNAL_ERROR, ConnectionError

FEATURES = ("transient_nonexcl_queues", "global_qos", "queue_master_locator")


def denied_text(feature: str) -> str:
    """The text RabbitMQ 4.3 gives when a use of ``feature`` (denied by default there) is refused."""
    return (f"Feature `{feature}` is deprecated.\n"
            "By default, this feature is not permitted anymore.\n"
            "The feature will be removed from a future major RabbitMQ version, regardless of the "
            "configuration; actual version to be determined.\n"
            "To continue using this feature when it is not permitted by default, set the following "
            "parameter in your configuration:\n"
            f"    \"deprecated_features.permit.{feature} = true\"")


class DeprecatedFeatures:
    def __init__(self, denied: frozenset[str] = frozenset()):
        unknown = set(denied) - set(FEATURES)
        if unknown:
            raise ValueError(f"unknown deprecated features: {sorted(unknown)}")
        self.denied = frozenset(denied)

    def permitted(self, feature: str) -> bool:
        return feature not in self.denied

    def check_queue_declare(self, *, durable: bool, exclusive: bool, arguments: dict) -> None:
        """Before a (non-passive) queue.declare: raises ConnectionError for a denied feature it uses."""
        if not durable and not exclusive and "transient_nonexcl_queues" in self.denied:
            raise ConnectionError(INTERNAL_ERROR, denied_text("transient_nonexcl_queues"))
        if "x-queue-master-locator" in arguments and "queue_master_locator" in self.denied \
                and arguments.get("x-queue-type", "classic") == "classic":
            raise ConnectionError(INTERNAL_ERROR, denied_text("queue_master_locator"))
