"""``GET /metrics/detailed?family=...&vhost=...``: RabbitMQ's endpoint for chosen metric families.

As in RabbitMQ, nothing is returned but the identity unless families are asked for, every
family asked for comes per object, ``vhost`` (repeatable) narrows the objects to those vhosts,
and the names carry RabbitMQ's ``rabbitmq_detailed_`` (queues) and ``rabbitmq_cluster_``
(vhosts, exchanges) prefixes. A family this broker does not know is a 400 naming the ones it
does, rather than an empty answer that looks like "no objects".
"""
from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry
from twisted.web import resource

from gateway.management.rabbit_metrics import identity, queue_rows

QUEUE = ["vhost", "queue"]


def _coarse(b, vhosts):
    ready = GaugeMetricFamily("rabbitmq_detailed_queue_messages_ready", "messages waiting for a consumer",
                              labels=QUEUE)
    unacked = GaugeMetricFamily("rabbitmq_detailed_queue_messages_unacked",
                                "messages delivered and not yet acknowledged", labels=QUEUE)
    depth = GaugeMetricFamily("rabbitmq_detailed_queue_messages",
                              "messages in the queue, waiting or unacknowledged", labels=QUEUE)
    for vhost, name, r, u, m, _c, _p in queue_rows(b, vhosts):
        ready.add_metric([vhost, name], r)
        unacked.add_metric([vhost, name], u)
        depth.add_metric([vhost, name], m)
    return [ready, unacked, depth]


def _consumers(b, vhosts):
    family = GaugeMetricFamily("rabbitmq_detailed_queue_consumers", "consumers subscribed to the queue", labels=QUEUE)
    for vhost, name, _r, _u, _m, consumers, _p in queue_rows(b, vhosts):
        family.add_metric([vhost, name], consumers)
    return [family]


def _vhost_status(b, vhosts):
    family = GaugeMetricFamily("rabbitmq_cluster_vhost_status", "1 for each vhost that serves clients", labels=["vhost"])
    for name in sorted(b.amqp.router.vhosts):
        if vhosts is None or name in vhosts:
            family.add_metric([name], 1)
    return [family]


def _exchanges(b, vhosts):
    labels = ["vhost", "exchange", "type"]
    names = GaugeMetricFamily("rabbitmq_cluster_exchange_name", "1 per exchange (its name and vhost are the labels)",
                              labels=labels)
    bindings = GaugeMetricFamily("rabbitmq_cluster_exchange_bindings", "bindings whose source is the exchange",
                                 labels=labels)
    for vhost_name, vhost in sorted(b.amqp.router.vhosts.items()):
        if vhosts is not None and vhost_name not in vhosts:
            continue
        for name, x in sorted(vhost.exchanges.items()):
            if not name:  # the default exchange: RabbitMQ does not enumerate it either
                continue
            key = [vhost_name, name, x.type_name]
            names.add_metric(key, 1)
            bindings.add_metric(key, len(list(x.bindings())))
    return names, bindings


FAMILIES = {
    "queue_coarse_metrics": _coarse,
    "queue_consumer_count": _consumers,
    "vhost_status": _vhost_status,
    "exchange_names": lambda b, vhosts: [_exchanges(b, vhosts)[0]],
    "exchange_bindings": lambda b, vhosts: [_exchanges(b, vhosts)[1]],
}


class _Detailed:
    def __init__(self, broker, families: list[str], vhosts: set[str] | None):
        self.broker, self.families, self.vhosts = broker, families, vhosts

    def collect(self):
        yield identity(self.broker, "detailed")
        for family in self.families:
            yield from FAMILIES[family](self.broker, self.vhosts)


class DetailedMetricsResource(resource.Resource):
    isLeaf = True

    def __init__(self, broker):
        super().__init__()
        self.broker = broker

    def render_GET(self, request):
        args = request.args or {}
        families = list(dict.fromkeys(v.decode("utf-8", "replace") for v in args.get(b"family", [])))
        unknown = [f for f in families if f not in FAMILIES]
        if unknown:
            request.setResponseCode(400)
            request.setHeader(b"content-type", b"text/plain; charset=utf-8")
            return (f"unknown metric family {', '.join(unknown)}; this broker has: "
                    f"{', '.join(sorted(FAMILIES))}\n").encode()
        vhosts = {v.decode("utf-8", "replace") for v in args[b"vhost"]} if b"vhost" in args else None
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Detailed(self.broker, families, vhosts))
        request.setHeader(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")
        return generate_latest(registry)
