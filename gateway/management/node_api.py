"""The management API's node-level endpoints: ``nodes``, ``health/checks/*``, ``aliveness-test``,
``feature-flags``, ``extensions``, ``cluster-name`` and ``auth``, shaped as RabbitMQ's.

A failed health check answers 503 with ``{"status": "failed", "reason": ...}``, as RabbitMQ
does, so that load balancers and Kubernetes probes written for RabbitMQ read it unchanged.
"""
from __future__ import annotations

import time
from typing import Callable

from gateway.management import cluster_clients, views
from gateway.management.cluster_clients import then
from gateway.management.errors import bad, not_found
from gateway.management.node_view import PROTOCOLS, alarms_of, node_doc
from wire.amqp.encoding import encode_properties

FEATURE_FLAGS = ("implicit_default_bindings", "maintenance_mode_status", "quorum_queue", "stream_queue",
                 "user_limits", "virtual_host_metadata", "drop_unroutable_metric", "empty_basic_get_metric")
UNITS = {"days": 86400, "weeks": 7 * 86400, "months": 30 * 86400, "years": 365 * 86400}
ALIVENESS_QUEUE = "aliveness-test"


def _alarms(nodes: list[dict]) -> dict:
    """RabbitMQ's alarms health check over these nodes: 503 naming each node's alarm, if any."""
    active = [{"node": node["name"], "resource": name} for node in nodes for name in alarms_of(node)]
    return _failed("resource alarm(s) in effect in the cluster", alarms=active) if active else _ok()


def _ok(**extra) -> dict:
    return {"status": "ok", **extra}


def _failed(reason: str, **extra) -> dict:
    return {"_status": 503, "status": "failed", "reason": reason, **extra}


class NodeApi:
    def __init__(self, api):
        self.api = api
        self.broker = api.broker

    def routes(self) -> list[tuple[str, tuple[str, ...], Callable]]:
        return [
            ("GET", ("nodes",), lambda user: self.nodes()),
            ("GET", ("nodes", "*"), self.get_node),
            ("GET", ("nodes", "*", "memory"), lambda user, name: then(self.get_node(user, name), lambda node: {
                "memory": {"total": {"rss": node["mem_used"]}, "strategy": "rss"}})),
            ("GET", ("health", "checks", "alarms"), lambda user: then(self.nodes(), _alarms)),
            ("GET", ("health", "checks", "local-alarms"), lambda user: _alarms([node_doc(self.broker)])),
            ("GET", ("health", "checks", "port-listener", "*"), self.port_listener),
            ("GET", ("health", "checks", "protocol-listener", "*"), self.protocol_listener),
            ("GET", ("health", "checks", "virtual-hosts"), lambda user: _ok()),
            ("GET", ("health", "checks", "node-is-quorum-critical"), lambda user: self.quorum_critical()),
            ("GET", ("health", "checks", "node-is-mirror-sync-critical"), lambda user: self.quorum_critical()),
            ("GET", ("health", "checks", "certificate-expiration", "*", "*"), self.certificate_expiration),
            ("GET", ("health", "checks", "ready-to-serve-clients"), lambda user: _ok()),
            ("GET", ("health", "checks", "is-in-service"), lambda user: _ok()),
            ("GET", ("aliveness-test", "*"), self.aliveness),
            ("GET", ("feature-flags",), lambda user: [
                {"name": name, "desc": name.replace("_", " "), "doc_url": "", "state": "enabled",
                 "stability": "stable", "provided_by": "gateway"} for name in FEATURE_FLAGS]),
            ("GET", ("extensions",), lambda user: []),  # no management UI plugins
            ("GET", ("cluster-name",), lambda user: {"name": self.broker.amqp.cluster_name}),
            ("PUT", ("cluster-name",), self.put_cluster_name),
            ("GET", ("auth",), lambda user: self.auth()),
        ]

    # --- nodes ------------------------------------------------------------------------
    def _name(self, node_id: int) -> str:
        return views.node_name(node_id)

    def nodes(self) -> list[dict]:
        """Every node with its own figures (each broker answers for itself; one that does not
        answer in time shows as registered and running, without figures)."""
        cluster = self.broker.cluster
        if cluster is None:
            return [node_doc(self.broker)]

        def shown(answered: list[dict]) -> list[dict]:
            by_name = {n["name"]: n for n in answered}
            for node_id, info in cluster.view.brokers.items():
                by_name.setdefault(self._name(node_id), {"name": self._name(node_id), "type": "disc", "running": True,
                                                         "host": info.host, "partitions": [], "being_drained": False})
            return [by_name[k] for k in sorted(by_name)]
        return then(cluster_clients.nodes(self.broker), shown)

    def get_node(self, user, name):
        def found(nodes: list[dict]) -> dict:
            for node in nodes:
                if node["name"] == name:
                    return node
            raise not_found(f"node '{name}'")
        return then(self.nodes(), found)

    # --- health checks ------------------------------------------------------------------

    def _ports(self) -> dict[str, int]:
        return {n: int(a.rpartition(":")[2]) for n, a in self.broker.addresses().items()}

    def port_listener(self, user, port):
        try:
            wanted = int(port)
        except ValueError:
            raise bad(f"'{port}' is not a port number") from None
        ports = sorted(self._ports().values())
        if wanted in ports:
            return _ok(port=wanted)
        return _failed("No active listener", missing=wanted, ports=ports)

    def protocol_listener(self, user, protocol):
        have = {PROTOCOLS.get(n, n) for n in self._ports()}
        if protocol.lower() in have:
            return _ok(protocol=protocol)
        return _failed("No active listener", missing=protocol, protocols=sorted(have))

    def quorum_critical(self) -> dict:
        if self.broker.cluster is None:
            return _ok(reason="single node cluster")
        return _ok()  # replicated topics keep serving while a minority of their replicas is down

    def certificate_expiration(self, user, within, unit):
        if unit not in UNITS:
            raise bad(f"unit must be one of {', '.join(UNITS)}")
        try:
            horizon = time.time() + int(within) * UNITS[unit]
        except ValueError:
            raise bad(f"'{within}' is not a whole number") from None
        cert = getattr(self.broker.settings, "tls_cert", None)
        if cert is None:
            return _ok()
        from cryptography import x509  # only with TLS configured
        with open(cert, "rb") as fh:
            expires = x509.load_pem_x509_certificate(fh.read()).not_valid_after_utc
        if expires.timestamp() < horizon:
            return _failed("Certificates expiring", expired=[{"node": self._name(self.broker.settings.node_id),
                                                               "file": str(cert),
                                                               "expires": expires.isoformat()}])
        return _ok()

    def aliveness(self, user, vhost):
        """RabbitMQ's aliveness test: declare a queue, publish to it, get the message back."""
        v = self.api.vhost(vhost)
        queue = v.declare_queue(ALIVENESS_QUEUE, owner=self.api.owner, durable=False)
        self.broker.amqp.router.publish(v, "", ALIVENESS_QUEUE, encode_properties(None), b"test_message", None, False)
        self.api.settle()
        got = queue.get(self.api.owner, True)
        if got is None or got[2].value != b"test_message":
            return _failed("aliveness test failed: the message did not come back")
        return _ok()

    # --- settings -------------------------------------------------------------------------
    def put_cluster_name(self, user, body):
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise bad("cluster-name needs a 'name'")
        self.broker.amqp.cluster_name = name

    def auth(self) -> dict:
        oauth = getattr(self.broker, "oauth", None)
        return {"oauth_enabled": oauth is not None, "enable_uaa": False, "uaa_client_id": "", "uaa_location": "",
                "oauth_client_id": "", "oauth_provider_url": ""}
