"""The management API's AMQP objects beyond queues and exchanges: bindings by source and
destination, ``get`` from a queue, vhosts and their limits, operator policies, runtime
parameters, consumers, and closing a connection, with RabbitMQ's paths, shapes and codes.

Each handler takes the authenticated user name first, then the path's ``*`` parts, then the
request body (PUT/POST); :func:`routes` lists them for :class:`ManagementApi`.
"""
from __future__ import annotations

import base64
from typing import Any, Callable

from twisted.internet import defer

from gateway.management import cluster_clients, remote_figures, views
from gateway.management.cluster_clients import then
from gateway.management.errors import ApiError, bad, not_found
from routing import mapping
from routing.policies import VHOST_LIMITS
from wire.amqp.codec import decode_properties

ACK_MODES = {"ack_requeue_true": ("ack", True), "ack_requeue_false": ("ack", False),
             "reject_requeue_true": ("reject", True), "reject_requeue_false": ("reject", False)}
REMOTE_GET_TIMEOUT_S = 10.0  # a get of a queue led elsewhere answers 503 if its leader is silent this long
PARAMETER_COMPONENTS = ("vhost-limits", "operator_policy")  # what this broker has; RabbitMQ adds plugins' ones


class _ApiGetter:
    """The owner of messages fetched through ``queues/{vhost}/{name}/get`` until they are settled."""


class AmqpObjects:
    def __init__(self, api):
        self.api = api
        self.broker = api.broker

    def routes(self) -> list[tuple[str, tuple[str, ...], Callable]]:
        b = ("bindings", "*", "e", "*", "*", "*")
        return [
            ("GET", b, self.list_bindings),
            ("POST", b, self.add_binding),
            ("GET", b + ("*",), self.get_binding),
            ("DELETE", b + ("*",), self.delete_binding),
            ("GET", ("exchanges", "*", "*", "bindings", "source"),
             lambda user, v, x: views.bindings(self._exchange(v, x)[0], source=self._exchange(v, x)[1])),
            ("GET", ("exchanges", "*", "*", "bindings", "destination"), self.exchange_destination_bindings),
            ("GET", ("queues", "*", "*", "bindings"), self.queue_bindings),
            ("POST", ("queues", "*", "*", "get"), self.get_messages),
            ("GET", ("vhosts", "*"), self.get_vhost),
            ("PUT", ("vhosts", "*"), self.put_vhost),
            ("DELETE", ("vhosts", "*"), self.delete_vhost),
            ("GET", ("vhosts", "*", "permissions"), self.vhost_permissions),
            ("GET", ("vhosts", "*", "connections"), lambda user, v: self._connections_of(self.api.vhost(v).name)),
            ("GET", ("vhosts", "*", "channels"), lambda user, v: self._channels_where("vhost", self.api.vhost(v).name)),
            ("GET", ("vhost-limits",), lambda user: self._limits(None)),
            ("GET", ("vhost-limits", "*"), lambda user, v: self._limits(self.api.vhost(v))),
            ("PUT", ("vhost-limits", "*", "*"), self.put_limit),
            ("DELETE", ("vhost-limits", "*", "*"), self.delete_limit),
            ("GET", ("operator-policies",), lambda user: self._operator_policies(None)),
            ("GET", ("operator-policies", "*"), lambda user, v: self._operator_policies(self.api.vhost(v))),
            ("GET", ("operator-policies", "*", "*"), self.get_operator_policy),
            ("PUT", ("operator-policies", "*", "*"), self.put_operator_policy),
            ("DELETE", ("operator-policies", "*", "*"), self.delete_operator_policy),
            ("GET", ("policies", "*", "*"), self.get_policy),
            ("GET", ("parameters",), lambda user: self._parameters(None, None)),
            ("GET", ("parameters", "*"), lambda user, c: self._parameters(self._component(c), None)),
            ("GET", ("parameters", "*", "*"),
             lambda user, c, v: self._parameters(self._component(c), self.api.vhost(v))),
            ("GET", ("parameters", "*", "*", "*"), self.get_parameter),
            ("PUT", ("parameters", "*", "*", "*"), self.put_parameter),
            ("DELETE", ("parameters", "*", "*", "*"), self.delete_parameter),
            ("GET", ("consumers",), lambda user: self._consumers(None)),
            ("GET", ("consumers", "*"), lambda user, v: self._consumers(self.api.vhost(v).name)),
            ("GET", ("connections", "*"), self.get_connection),
            ("DELETE", ("connections", "*"), self.close_connection),
            ("GET", ("connections", "*", "sessions"), self.get_sessions),
            ("GET", ("connections", "*", "channels"), self.connection_channels),
            ("GET", ("channels", "*"), self.get_channel),
        ]

    # --- bindings ---------------------------------------------------------------------
    def _exchange(self, vhost: str, name: str):
        v = self.api.vhost(vhost)
        name = "" if name == "amq.default" else name
        if name not in v.exchanges:
            raise not_found(f"exchange '{name}' in vhost '{v.name}'")
        return v, name

    def _ends(self, vhost: str, source: str, kind: str, destination: str):
        v, source = self._exchange(vhost, source)
        if kind not in ("q", "e"):
            raise not_found(f"binding destination type '{kind}' (use q or e)")
        kind = "queue" if kind == "q" else "exchange"
        if (v.queues if kind == "queue" else v.exchanges).get(destination) is None:
            raise not_found(f"{kind} '{destination}' in vhost '{v.name}'")
        return v, source, (kind, destination)

    def list_bindings(self, user, vhost, source, kind, destination):
        v, source, dest = self._ends(vhost, source, kind, destination)
        return views.bindings(v, source=source, destination=dest)

    def add_binding(self, user, vhost, source, kind, destination, body):
        v, source, (dkind, dname) = self._ends(vhost, source, kind, destination)
        if source == "":
            raise ApiError(403, "access_refused", "operation not permitted on the default exchange")
        routing_key = str(body.get("routing_key", ""))
        arguments = body.get("arguments") or {}  # [] (pyrabbit2's empty arguments) is {} too
        if not isinstance(arguments, dict):
            raise bad("'arguments' must be an object")
        if dkind == "queue":
            v.bind_queue(dname, source, routing_key, arguments, self.api.owner)
        else:
            v.bind_exchange(dname, source, routing_key, arguments)
        key = views.properties_key(routing_key, views.jsonable(arguments))
        return {"_created": True, "_location": f"{dname}/{key}"}

    def _binding(self, vhost, source, kind, destination, props):
        v, source, dest = self._ends(vhost, source, kind, destination)
        for b in views.bindings(v, source=source, destination=dest):
            if b["properties_key"] == props:
                return v, b
        raise not_found(f"binding '{props}' from '{source}' to {dest[0]} '{dest[1]}' in vhost '{v.name}'")

    def get_binding(self, user, vhost, source, kind, destination, props):
        return self._binding(vhost, source, kind, destination, props)[1]

    def delete_binding(self, user, vhost, source, kind, destination, props):
        v, b = self._binding(vhost, source, kind, destination, props)
        if b["source"] == "":
            raise ApiError(403, "access_refused", "operation not permitted on the default exchange")
        exchange = v.exchanges[b["source"]]
        arguments = next(dict(x.arguments) for x in exchange.bindings()
                         if tuple(x.destination) == (b["destination_type"], b["destination"])
                         and x.routing_key == b["routing_key"]
                         and views.jsonable(dict(x.arguments)) == b["arguments"])
        if b["destination_type"] == "queue":
            v.unbind_queue(b["destination"], b["source"], b["routing_key"], arguments, self.api.owner)
        else:
            v.unbind_exchange(b["destination"], b["source"], b["routing_key"], arguments)

    def exchange_destination_bindings(self, user, vhost, name):
        v, name = self._exchange(vhost, name)
        return views.bindings(v, destination=("exchange", name))

    def queue_bindings(self, user, vhost, name):
        v = self.api.vhost(vhost)
        if name not in v.queues:
            raise not_found(f"queue '{name}' in vhost '{v.name}'")
        return views.bindings(v, destination=("queue", name))

    # --- get ----------------------------------------------------------------------------
    def get_messages(self, user, vhost, name, body):
        """RabbitMQ's ``get``: up to ``count`` messages, then settled all together by ``ackmode``."""
        v = self.api.vhost(vhost)
        queue = v.queues.get(name)
        if queue is None:
            raise not_found(f"queue '{name}' in vhost '{v.name}'")
        if queue.is_stream:
            raise bad(f"queue '{name}' is a stream: read it with a consumer and an x-stream-offset")
        mode = body.get("ackmode")
        if mode not in ACK_MODES:
            raise bad(f"ackmode must be one of {', '.join(ACK_MODES)}")
        encoding = body.get("encoding", "auto")
        if encoding not in ("auto", "base64"):
            raise bad("encoding must be auto or base64")
        try:
            count = int(body.get("count", 1))
            truncate = int(body["truncate"]) if body.get("truncate") not in (None, "") else None
        except (TypeError, ValueError):
            raise bad("count and truncate must be whole numbers") from None
        if queue.remote and not queue.reads_here:  # led by another broker: asked of it (basic.get's link)
            return self._get_remote(queue, max(count, 0), mode, encoding, truncate)
        getter, taken, out = _ApiGetter(), [], []
        for _ in range(max(count, 0)):
            got = queue.get(getter, False)
            if got is None:
                break
            offset, redelivered, record = got
            taken.append(offset)
            exchange, routing_key, properties_raw = mapping.amqp_from_record(record)
            out.append(message_json(exchange, routing_key, properties_raw, record.value or b"", redelivered,
                                    queue.message_count(), encoding, truncate))
        if taken:
            _settle(queue, taken, mode)
            self.api.settle()
        return out

    def _get_remote(self, queue, count: int, mode: str, encoding: str, truncate: int | None) -> defer.Deferred:
        """``get`` of a queue led by another broker: one basic.get after another over a link to its
        leader, then the leader's ready count (for each message's ``message_count``, as RabbitMQ
        gives the count left after it), then the settling; the link closes with the answer."""
        getter, got, done = _ApiGetter(), [], defer.Deferred()

        def late() -> None:  # the leader did not answer (none right now, or gone): say so, not hang
            queue.release(getter)
            done.errback(ApiError(503, "unavailable", f"queue '{queue.name}' in vhost '{queue.vhost}': its leader "
                                                      f"did not answer within {REMOTE_GET_TIMEOUT_S:g} s"))
        timer = self.broker.reactor.callLater(REMOTE_GET_TIMEOUT_S, late)

        def ask(taken=False) -> None:
            if done.called:
                return
            if taken is not False and taken is not None:
                got.append(taken)
            if taken is None or len(got) >= count:
                figures = queue.ops.figures(queue, wait=False) if got else defer.succeed(None)
                figures.addCallbacks(settle, lambda f: settle(None)).addBoth(closed)
            else:
                queue.get_remote(getter, False, ask)

        def settle(figures) -> list[dict]:
            left = figures.ready if figures is not None else 0
            out = [message_json(*mapping.amqp_from_record(record), record.value or b"", redelivered,
                                left + len(got) - 1 - i, encoding, truncate)
                   for i, (_offset, redelivered, record) in enumerate(got)]
            if got:
                _settle(queue, [offset for offset, _, _ in got], mode)
            return out

        def closed(result):
            if timer.active():
                timer.cancel()
            if not done.called:
                queue.release(getter)  # (after the settle, which the link sends first)
                done.callback(result)
        ask()
        return done

    # --- vhosts ---------------------------------------------------------------------------
    def get_vhost(self, user, name):
        return then(remote_figures.vhosts(self.broker, self.api.vhost(name).name, self.api.current_request()),
                     lambda found: found[0])

    def put_vhost(self, user, name, body):
        router = self.broker.amqp.router
        self.api.vhost_home_check()
        created = name not in router.vhosts
        v = router.vhost_create(name)
        tags = body.get("tags", v.metadata.get("tags", []))
        if isinstance(tags, str):
            tags = [t.strip() for t in tags.split(",") if t.strip()]
        v.metadata = {"description": str(body.get("description", v.metadata.get("description", ""))),
                      "tags": list(tags),
                      "default_queue_type": str(body.get("default_queue_type",
                                                         v.metadata.get("default_queue_type", "undefined")))}
        router.save_definitions()
        if created:  # as RabbitMQ's API: the creating user may use the new vhost at once
            self.broker.users.set_permissions(user, name, ".*", ".*", ".*")
            return {"_created": True}
        return None

    def delete_vhost(self, user, name):
        v = self.api.vhost(name)
        for connection in [c for c in (*self.broker.amqp.connections, *self.broker.amqp.amqp10_connections)
                           if c.vhost is v]:
            connection.close_connection(320, f"CONNECTION_FORCED - vhost '{name}' is deleted")
        self.broker.amqp.router.vhost_delete(name)
        for u in list(self.broker.users.users.values()):
            if name in u.permissions:
                self.broker.users.clear_permissions(u.name, name)

    def vhost_permissions(self, user, name):
        v = self.api.vhost(name)
        return [{"vhost": v.name, "user": u.name, **p.to_json()}
                for u in sorted(self.broker.users.users.values(), key=lambda u: u.name)
                for vh, p in u.permissions.items() if vh == v.name]

    # --- limits, operator policies, parameters ---------------------------------------------
    def _limits(self, vhost) -> list[dict]:
        vhosts = [vhost] if vhost is not None else self.broker.amqp.router.vhosts.values()
        return [{"vhost": v.name, "value": dict(v.limits)} for v in sorted(vhosts, key=lambda v: v.name) if v.limits]

    def put_limit(self, user, vhost, name, body):
        v = self.api.vhost(vhost)
        if name not in VHOST_LIMITS:
            raise bad(f"unknown vhost limit '{name}': use {' or '.join(VHOST_LIMITS)}")
        value = body.get("value")
        try:
            value = int(value)
        except (TypeError, ValueError):
            raise bad(f"vhost limit {name} needs a whole-number 'value' (-1: no limit)") from None
        v.set_limit(name, value)

    def delete_limit(self, user, vhost, name):
        v = self.api.vhost(vhost)
        if name not in v.limits:
            raise not_found(f"vhost limit '{name}' in vhost '{v.name}'")
        v.clear_limit(name)

    def _operator_policies(self, vhost) -> list[dict]:
        vhosts = [vhost] if vhost is not None else self.broker.amqp.router.vhosts.values()
        return [{"vhost": v.name, "name": name, **policy}
                for v in sorted(vhosts, key=lambda v: v.name) for name, policy in sorted(v.operator_policies.items())]

    def get_operator_policy(self, user, vhost, name):
        v = self.api.vhost(vhost)
        if name not in v.operator_policies:
            raise not_found(f"operator policy '{name}' in vhost '{v.name}'")
        return {"vhost": v.name, "name": name, **v.operator_policies[name]}

    def put_operator_policy(self, user, vhost, name, body):
        return self.api.put_policy(user, vhost, name, body, operator=True)

    def delete_operator_policy(self, user, vhost, name):
        v = self.api.vhost(vhost)
        if name not in v.operator_policies:
            raise not_found(f"operator policy '{name}' in vhost '{v.name}'")
        v.clear_policy(name, operator=True)

    def get_policy(self, user, vhost, name):
        v = self.api.vhost(vhost)
        if name not in v.policies:
            raise not_found(f"policy '{name}' in vhost '{v.name}'")
        return {"vhost": v.name, "name": name, **v.policies[name]}

    @staticmethod
    def _component(name: str) -> str:
        if name not in PARAMETER_COMPONENTS:
            raise not_found(f"parameter component '{name}' (this broker has {', '.join(PARAMETER_COMPONENTS)})")
        return name

    def _parameters(self, component: str | None, vhost) -> list[dict]:
        out = []
        if component in (None, "vhost-limits"):
            out += [{"value": row["value"], "vhost": row["vhost"], "component": "vhost-limits", "name": "limits"}
                    for row in self._limits(vhost)]
        if component in (None, "operator_policy"):
            out += [{"value": {k: p[k] for k in ("pattern", "definition", "priority", "apply-to")},
                     "vhost": p["vhost"], "component": "operator_policy", "name": p["name"]}
                    for p in self._operator_policies(vhost)]
        return out

    def get_parameter(self, user, component, vhost, name):
        for p in self._parameters(self._component(component), self.api.vhost(vhost)):
            if p["name"] == name:
                return p
        raise not_found(f"parameter '{name}' of component '{component}' in vhost '{vhost}'")

    def put_parameter(self, user, component, vhost, name, body):
        if component not in PARAMETER_COMPONENTS:
            raise bad(f"Validation failed\n\ncomponent {component} not found\n")
        value = body.get("value")
        if not isinstance(value, dict):
            raise bad("a parameter needs a 'value' (an object)")
        v = self.api.vhost(vhost)
        if component == "operator_policy":
            return self.api.put_policy(user, vhost, name, value, operator=True)
        unknown = sorted(set(value) - set(VHOST_LIMITS))
        if unknown:
            raise bad(f"unknown vhost limit(s) {unknown}: use {' or '.join(VHOST_LIMITS)}")
        for limit in VHOST_LIMITS:  # the parameter is the whole set of limits: it replaces them all
            if limit in value:
                self.put_limit(user, v.name, limit, {"value": value[limit]})
            elif limit in v.limits:
                v.clear_limit(limit)
        return None

    def delete_parameter(self, user, component, vhost, name):
        self.get_parameter(user, component, vhost, name)
        v = self.api.vhost(vhost)
        if component == "operator_policy":
            v.clear_policy(name, operator=True)
        else:
            for limit in list(v.limits):
                v.clear_limit(limit)

    # --- consumers, connections, channels: the whole cluster's (cluster_clients) -------------------
    def _consumers(self, vhost: str | None):
        return then(cluster_clients.consumers(self.broker),
                     lambda rows: [r for r in rows if vhost is None or r["queue"]["vhost"] == vhost])

    def _connections_of(self, vhost: str):
        return then(cluster_clients.connections(self.broker), lambda rows: [r for r in rows if r["vhost"] == vhost])

    def _channels_where(self, key: str, value: str):
        return then(cluster_clients.channels(self.broker),
                     lambda rows: [r for r in rows if (r["connection_details"]["name"] if key == "connection"
                                                       else r[key]) == value])

    def _connection(self, name: str):
        return cluster_clients.local_connection(self.broker, name)

    def get_connection(self, user, name):
        def found(rows: list[dict]) -> dict:
            for row in rows:
                if row["name"] == name:
                    return row
            raise not_found(f"connection '{name}'")
        return then(cluster_clients.connections(self.broker), found)

    def connection_channels(self, user, name):
        return then(self.get_connection(user, name), lambda conn: self._channels_where("connection", conn["name"]))

    def get_sessions(self, user, name):
        """RabbitMQ 4: an AMQP 1.0 connection's sessions; 400 for a connection of another protocol."""
        connection, doc = self._connection(name)
        if doc["protocol"] != "AMQP 1-0":
            raise bad(f"connection '{name}' is not an AMQP 1.0 connection")
        return views.amqp10_sessions(connection)

    def close_connection(self, user, name):
        reason = self.api.request_header("x-reason") or "Closed via management plugin"
        admin = self.api.is_admin(user)

        def may_close(row: dict) -> None:  # as RabbitMQ: an administrator closes any, another user its own
            if not admin and row.get("user") != user:
                raise ApiError(401, "not_authorised", "Not authorised to close this connection")
        return cluster_clients.close(self.broker, name, reason, may_close)

    def get_channel(self, user, name):
        def found(rows: list[dict]) -> dict:
            for ch in rows:
                if ch["name"] == name:
                    return ch
            raise not_found(f"channel '{name}'")
        return then(cluster_clients.channels(self.broker), found)


def _settle(queue, taken: list[int], mode: str) -> None:
    """A get's messages, all settled as its ``ackmode`` says."""
    verb, requeue = ACK_MODES[mode]
    if verb == "ack" and not requeue:
        queue.ack(taken)
    else:
        queue.reject(taken, requeue)


def message_json(exchange: str, routing_key: str, properties_raw: bytes, body: bytes, redelivered: bool,
                 remaining: int, encoding: str, truncate: int | None) -> dict:
    size = len(body)
    if truncate is not None and truncate >= 0:
        body = body[:truncate]
    payload, payload_encoding = None, "base64"
    if encoding == "auto":
        try:
            payload, payload_encoding = body.decode("utf-8"), "string"
        except UnicodeDecodeError:
            pass
    if payload is None:
        payload = base64.b64encode(body).decode()
    return {"payload_bytes": size, "redelivered": redelivered, "exchange": exchange, "routing_key": routing_key,
            "message_count": remaining, "properties": properties_json(properties_raw), "payload": payload,
            "payload_encoding": payload_encoding}


def properties_json(properties_raw: bytes) -> dict[str, Any]:
    """Basic properties as RabbitMQ's API shows them (``type`` for pamqp's message_type; seconds for timestamp)."""
    if not properties_raw:
        return {}
    props = decode_properties(properties_raw)
    out: dict[str, Any] = {}
    for name in props.__slots__:
        value = getattr(props, name, None)
        if value is None or (name == "cluster_id" and value == ""):  # pamqp's default for a deprecated field
            continue
        if name == "timestamp" and hasattr(value, "timestamp"):
            value = int(value.timestamp())
        out["type" if name == "message_type" else name] = views.jsonable(value)
    return out
