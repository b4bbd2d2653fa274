"""One broker's node as the management API's ``/api/nodes`` shows it (RabbitMQ's node object):
its memory, disk, file descriptors, alarms and listeners. In a cluster each broker answers for
itself (gateway.management.cluster_clients), so any broker shows every node's figures."""
from __future__ import annotations

import os
import time

from gateway.alarms import fd_limit, open_fds, resident_bytes
from gateway.management import views

# What RabbitMQ's listeners are called, for protocol-listener checks, by our listener names.
PROTOCOLS = {"amqp": "amqp", "amqp_tls": "amqp/ssl", "http": "http", "kafka": "kafka", "kafka_tls": "kafka/ssl"}
EXCHANGE_TYPES = ("direct", "fanout", "topic", "headers")


def node_doc(broker) -> dict:
    alarms = broker.amqp.alarms
    active = alarms.active if alarms is not None else frozenset()
    stat = os.statvfs(broker.data_dir)
    soft_fds = fd_limit()
    return {
        "name": views.node_name(broker.settings.node_id), "type": "disc", "running": True,
        "os_pid": str(os.getpid()), "uptime": int((time.monotonic() - broker.started_at) * 1000),
        "mem_used": resident_bytes(), "mem_limit": alarms.memory_limit if alarms is not None else 0,
        "mem_alarm": "memory" in active, "disk_free": stat.f_bavail * stat.f_frsize,
        "disk_free_limit": alarms.disk_free_limit if alarms is not None else 0, "disk_free_alarm": "disk" in active,
        "fd_used": open_fds(), "fd_total": soft_fds, "sockets_used": len(broker.amqp.connections) +
        len(getattr(broker.kafka, "connections", ())), "sockets_total": soft_fds,
        "proc_used": 1, "proc_total": 1, "run_queue": 0, "processors": os.cpu_count() or 1,
        "rates_mode": "basic", "partitions": [], "being_drained": False, "enabled_plugins": [],
        "exchange_types": [{"name": t, "description": f"AMQP {t} exchange", "enabled": True}
                           for t in EXCHANGE_TYPES],
        "auth_mechanisms": [{"name": m, "description": m, "enabled": True} for m in ("PLAIN", "AMQPLAIN")],
        "listeners": [{"protocol": PROTOCOLS.get(n, n), "port": int(a.rpartition(":")[2]),
                       "ip_address": a.rpartition(":")[0].strip("[]")}
                      for n, a in sorted(broker.addresses().items())],
    }


def alarms_of(node: dict) -> list[str]:
    """The resource alarms a node object says are in effect (RabbitMQ's ``resource`` names)."""
    return [name for name, flag in (("disk", "disk_free_alarm"), ("memory", "mem_alarm")) if node.get(flag)]
