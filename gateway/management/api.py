"""The management HTTP API under ``/api/``: JSON, HTTP basic auth, RabbitMQ-shaped paths.

Who may call what is :mod:`gateway.management.authz`'s table (RabbitMQ's user tags). Vhost names in paths are percent-encoded
(``%2F`` is ``/``), and ``amq.default`` names the default exchange, as in RabbitMQ. Every error
is a JSON object ``{"error": ..., "reason": ...}`` with a 4xx status; nothing raised inside
reaches the client as a traceback. Everything runs on the reactor thread.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import time
import urllib.parse
from typing import Any, Callable

from pamqp.commands import Basic
from twisted.internet import defer
from twisted.python.failure import Failure
from twisted.web import resource, server

from core.errors import LogError
from gateway.logs import fields
from gateway.management import (authz, cluster_clients, cluster_groups, cluster_offsets, openapi, paging,
                                remote_figures, schemas, views)
from gateway.management.amqp_objects import AmqpObjects
from gateway.management.definitions import Definitions
from gateway.management.errors import ApiError, bad as _bad, not_found as _not_found, truthy
from gateway.management.node_api import NodeApi
from gateway.security.users import UserStoreError
from routing.errors import ChannelError, ConnectionError
from wire.amqp.encoding import encode_properties

log = logging.getLogger(__name__)

AUTH_CACHE_S = 30.0  # a checked password is not hashed again (PBKDF2) on every poll for this long


class _ApiOwner:
    """The owner of queues declared through the API: never exclusive, never a connection."""


API_OWNER = _ApiOwner()


class ManagementApi(resource.Resource):
    isLeaf = True

    def __init__(self, broker):
        super().__init__()
        self.broker = broker
        self._auth_cache: dict[bytes, tuple[float, str]] = {}
        self.owner = API_OWNER
        self._request = None  # the request being handled (handlers run one at a time, on the reactor)
        self._token_tags: list[str] | None = None  # a bearer-token request: the tags its scopes grant
        self.routes: list[tuple[str, tuple[str, ...], Callable]] = [
            ("GET", ("overview",), self.get_overview),
            ("GET", ("whoami",), lambda user: {"name": user, "tags": self._tags(user)}),
            ("GET", ("vhosts",), lambda user: remote_figures.vhosts(self.broker, None, self._request)),
            ("GET", ("queues",), lambda user: remote_figures.queues(self.broker, None, self._request)),
            ("GET", ("queues", "*"), lambda user, v: remote_figures.queues(self.broker, self.vhost(v).name,
                                                                           self._request)),
            ("GET", ("queues", "*", "*"), self.get_queue),
            ("PUT", ("queues", "*", "*"), self.put_queue),
            ("DELETE", ("queues", "*", "*"), self.delete_queue),
            ("DELETE", ("queues", "*", "*", "contents"), self.purge_queue),
            ("GET", ("exchanges",), lambda user: views.exchanges(self.broker)),
            ("GET", ("exchanges", "*"), lambda user, v: views.exchanges(self.broker, self.vhost(v).name)),
            ("GET", ("exchanges", "*", "*"), self.get_exchange),
            ("PUT", ("exchanges", "*", "*"), self.put_exchange),
            ("DELETE", ("exchanges", "*", "*"), self.delete_exchange),
            ("POST", ("exchanges", "*", "*", "publish"), self.publish),
            ("GET", ("bindings",), lambda user: [b for v in self._all_vhosts() for b in views.bindings(v)]),
            ("GET", ("bindings", "*"), lambda user, v: views.bindings(self.vhost(v))),
            ("GET", ("connections",), lambda user: cluster_clients.connections(self.broker)),
            ("GET", ("channels",), lambda user: cluster_clients.channels(self.broker)),
            ("GET", ("users",), self.get_users),
            ("GET", ("users", "without-permissions"), lambda user: [
                u for u in self.get_users(user) if not self.broker.users.get(u["name"]).permissions]),
            ("POST", ("users", "bulk-delete"), self.bulk_delete_users),
            ("GET", ("users", "*"), self.get_user),
            ("GET", ("users", "*", "permissions"), self.get_user_permissions),
            ("PUT", ("users", "*"), self.put_user),
            ("DELETE", ("users", "*"), self.delete_user),
            ("GET", ("permissions",), self.get_permissions),
            ("GET", ("permissions", "*", "*"), self.get_permission),
            ("PUT", ("permissions", "*", "*"), self.put_permission),
            ("DELETE", ("permissions", "*", "*"), self.delete_permission),
            ("GET", ("topics",), lambda user: cluster_offsets.topics(self.broker)),
            ("GET", ("topics", "*"), self.get_topic),
            ("PUT", ("topics", "*"), self.put_topic),
            ("DELETE", ("topics", "*"), self.delete_topic),
            ("GET", ("groups",), lambda user: cluster_groups.groups(self.broker)),
            ("GET", ("groups", "*"), self.get_group),
            ("GET", ("history",), lambda user: self.broker.management_history.as_json()),
            ("GET", ("policies",), lambda user: views.policies(self.broker)),
            ("GET", ("policies", "*"), lambda user, v: views.policies(self.broker, self.vhost(v).name)),
            ("PUT", ("policies", "*", "*"), self.put_policy),
            ("DELETE", ("policies", "*", "*"), self.delete_policy),
        ]
        self.routes += AmqpObjects(self).routes() + NodeApi(self).routes() + Definitions(self).routes()
        self.routes.append(("GET", ("openapi.json",), lambda user: openapi.describe(self.routes)))
        authz.check_table(self.routes)

    # --- dispatch ---------------------------------------------------------------------
    def render(self, request):
        method = request.method.decode()
        try:
            parts = [urllib.parse.unquote(p) for p in request.path.decode("ascii", "replace").split("/")[2:]]
            if parts and parts[-1] == "":
                parts.pop()
            handler, pattern, args, allowed = self._match(method, parts)
            if handler is None:
                if allowed:
                    request.setHeader(b"allow", ", ".join(sorted(allowed)).encode())
                    raise ApiError(405, "method_not_allowed", f"{method} is not allowed here; use {sorted(allowed)}")
                raise ApiError(404, "Object Not Found", f"no API resource at /api/{'/'.join(parts)}")
            if not self.broker.ready:
                raise ApiError(503, "starting", "the broker is still opening its logs; try again shortly")
            access = None if authz.RULES[(method, pattern)][0] == authz.ANON else self._authenticate(request)
            if access is not None:
                access.check(method, pattern, args)
            user = access.user if access is not None else None
            if method in ("PUT", "POST"):
                body = self._body(request)
                schemas.check(method, pattern, body)
                args.append(body)
            self._request = request
            result = handler(user, *args)
            if isinstance(result, defer.Deferred):  # figures asked of other brokers (remote_figures)
                result.addCallback(self._shaped, request, method, pattern, access)
                result.addBoth(self._answer_later, request, method)
                return server.NOT_DONE_YET
            result = self._shaped(result, request, method, pattern, access)
        except ApiError as exc:
            if exc.status >= 500 or exc.status in (401, 403):
                log.warning("management API %s %s: %s", method, request.path.decode("ascii", "replace"), exc.reason,
                            extra=fields(status=exc.status))
            return self._json(request, exc.status, {"error": exc.error, "reason": exc.reason})
        except (ChannelError, ConnectionError) as exc:  # the AMQP model's refusals, with RabbitMQ's texts
            status = {404: 404, 403: 403, 405: 409, 406: 400}.get(exc.reply_code, 400)
            error = {404: "Object Not Found", 403: "access_refused"}.get(status, "bad_request")
            return self._json(request, status, {"error": error, "reason": exc.reply_text})
        except paging.PagingError as exc:
            return self._json(request, 400, {"error": "bad_request", "reason": str(exc)})
        except (LogError, UserStoreError, ValueError) as exc:
            return self._json(request, 400, {"error": "bad_request", "reason": str(exc)})
        except Exception:
            log.exception("management API %s %s failed", method, request.path.decode("ascii", "replace"))
            return self._json(request, 500, {"error": "internal_error", "reason": "see the broker log"})
        finally:
            self._request = self._token_tags = None
        return self._response(request, result)

    @staticmethod
    def _shaped(result, request, method: str, pattern: tuple, access):
        """What a GET shows: the objects the user may see, paged and cut to the asked columns."""
        if access is not None and method == "GET":
            if isinstance(result, list):
                result = [item for item in result if access.sees(pattern, item)]
            elif not access.sees(pattern, result):
                raise ApiError(401, "not_authorised", "Not authorised to see this object")
        if method == "GET" and isinstance(result, list) and request.args:
            result = paging.apply(result, request.args)
        return result

    def _answer_later(self, outcome, request, method: str) -> None:
        if isinstance(outcome, Failure):
            exc = outcome.value
            if isinstance(exc, ApiError):
                body = self._json(request, exc.status, {"error": exc.error, "reason": exc.reason})
            elif isinstance(exc, paging.PagingError):
                body = self._json(request, 400, {"error": "bad_request", "reason": str(exc)})
            else:
                log.error("management API %s %s failed: %s", method, request.path.decode("ascii", "replace"),
                          outcome.getTraceback())
                body = self._json(request, 500, {"error": "internal_error", "reason": "see the broker log"})
        else:
            body = self._response(request, outcome)
        if not request.finished and not getattr(request, "_disconnected", False):
            request.write(body)
            request.finish()

    def _response(self, request, result) -> bytes:
        if result is None or (isinstance(result, dict) and result.get("_created")):
            request.setResponseCode(204 if result is None else 201)  # RabbitMQ: no body for either
            if result is not None and "_location" in result:
                request.setHeader(b"location", urllib.parse.quote(result["_location"], safe="/~").encode())
            return b""
        if isinstance(result, dict) and "_status" in result:  # a health check that failed: its body, its status
            return self._json(request, result.pop("_status"), result)
        return self._json(request, 200, result)

    def _match(self, method: str, parts: list[str]) -> tuple[Callable | None, tuple, list[str], set[str]]:
        allowed = set()
        for verb, pattern, handler in self.routes:
            if len(pattern) != len(parts) or any(p != "*" and p != q for p, q in zip(pattern, parts)):
                continue
            if verb == method:
                return handler, pattern, [q for p, q in zip(pattern, parts) if p == "*"], allowed
            allowed.add(verb)
        return None, (), [], allowed

    @staticmethod
    def _json(request, status: int, doc: Any) -> bytes:
        request.setResponseCode(status)
        request.setHeader(b"content-type", b"application/json")
        request.setHeader(b"cache-control", b"no-cache")
        return json.dumps(doc).encode() + b"\n"

    @staticmethod
    def _body(request) -> dict:
        raw = request.content.read() if request.content is not None else b""
        if not raw.strip():
            return {}
        doc = schemas.parse(raw)
        if not isinstance(doc, dict):
            raise _bad("the request body must be a JSON object")
        return doc

    # --- authentication ---------------------------------------------------------------
    def _authenticate(self, request) -> authz.Access:
        """The request's user (HTTP basic or an OAuth 2 bearer token), or 401."""
        header = (request.getHeader(b"authorization") or b"").decode("latin-1")
        scheme, _, token = header.partition(" ")
        oauth = getattr(self.broker, "oauth", None)
        if oauth is not None and scheme.lower() == "bearer":  # OAuth 2: the tags are the token's tag scopes
            grant, reason = oauth.check(token.strip())
            if grant is None:
                log.warning("HTTP API login refused: %s", reason, extra=fields(peer=request.getClientAddress().host))
                request.setHeader(b"www-authenticate", b'Bearer realm="gateway management", error="invalid_token"')
                raise ApiError(401, "not_authorised", "Login failed")
            self._token_tags = list(grant.tags)
            return authz.Access(grant.username, grant.tags, lambda vhost: grant.permission(vhost) is not None)
        if scheme.lower() != "basic":
            request.setHeader(b"www-authenticate", b'Basic realm="gateway management"')
            raise ApiError(401, "not_authorised", "HTTP basic authentication required")
        try:
            name, _, password = base64.b64decode(token, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            request.setHeader(b"www-authenticate", b'Basic realm="gateway management"')
            raise ApiError(401, "not_authorised", "malformed basic credentials") from None
        host = request.getClientAddress().host
        digest = hashlib.sha256(f"{name}\0{password}\0{host}".encode()).digest()
        cached = self._auth_cache.get(digest)
        if cached is None or time.monotonic() - cached[0] > AUTH_CACHE_S:
            reason = self.broker.users.authenticate(name, password, host)
            if reason is not None:
                self._auth_cache.pop(digest, None)
                request.setHeader(b"www-authenticate", b'Basic realm="gateway management"')
                raise ApiError(401, "not_authorised", "Login failed")
            self._auth_cache[digest] = (time.monotonic(), name)
        return authz.Access(name, self._tags(name), lambda vhost: self.broker.users.permission(name, vhost) is not None)

    def clear_auth_cache(self) -> None:
        self._auth_cache.clear()

    def _tags(self, name: str) -> list[str]:
        if self._token_tags is not None:
            return list(self._token_tags)
        user = self.broker.users.get(name)
        return list(user.tags) if user is not None else []

    # --- AMQP objects -----------------------------------------------------------------
    def is_admin(self, user: str | None) -> bool:
        return user is not None and authz.ADMIN in self._tags(user)

    def current_request(self):
        """The request being answered (its query arguments: ``disable_stats``...)."""
        return self._request

    def request_header(self, name: str) -> str | None:
        value = self._request.getHeader(name.encode()) if self._request is not None else None
        return value.decode("latin-1") if value is not None else None

    def _all_vhosts(self) -> list:
        self.vhost_home_check()
        return sorted(self.broker.amqp.router.vhosts.values(), key=lambda v: v.name)

    def vhost_home_check(self) -> None:
        """In cluster mode AMQP objects live on one broker (the AMQP home): 421 elsewhere."""
        home = self.broker.amqp_home
        if home is not None and not home.is_home:
            other = self.broker.cluster.view.brokers.get(home.home_id())
            raise ApiError(421, "not_amqp_home", f"broker {self.broker.settings.node_id} is not the AMQP home; ask "
                                                 f"the home, broker {home.home_id()}" +
                           (f" (its AMQP listener is {other.amqp_host}:{other.amqp_port})" if other else ""))

    def vhost(self, name: str):
        vhost = self.broker.amqp.router.vhosts.get(name)
        if vhost is None:
            self.vhost_home_check()
            raise _not_found(f"vhost '{name}'")
        return vhost

    def put_policy(self, user, vhost, name, body, operator: bool = False):
        v = self.vhost(vhost)
        if not isinstance(body.get("pattern"), str) or not isinstance(body.get("definition"), dict):
            raise _bad("a policy needs a 'pattern' (a regular expression) and a 'definition' (an object)")
        try:
            priority = int(body.get("priority", 0))
        except (TypeError, ValueError):
            raise _bad("'priority' must be a whole number") from None
        created = name not in (v.operator_policies if operator else v.policies)
        v.set_policy(name, body["pattern"], body["definition"], priority, str(body.get("apply-to", "all")),
                     operator=operator)
        return {"_created": True} if created else None

    def delete_policy(self, user, vhost, name):
        v = self.vhost(vhost)
        if name not in v.policies:
            raise _not_found(f"policy '{name}' in vhost '{v.name}'")
        v.clear_policy(name)

    def get_overview(self, user):
        def shown(doc: dict) -> dict:
            doc["user"] = user
            doc["message_stats"] = self.broker.management_history.rates()
            return doc
        broker = self.broker
        if broker.cluster is None:
            return shown(views.overview(broker))
        # a cluster's totals, as RabbitMQ's overview gives them: every broker's clients and groups,
        # the queues' figures from their leaders
        asked = [remote_figures.queues(broker, None, self._request), cluster_clients.connections(broker),
                 cluster_clients.channels(broker), cluster_groups.count(broker)]
        asked = [a if isinstance(a, defer.Deferred) else defer.succeed(a) for a in asked]
        return defer.gatherResults(asked).addCallback(
            lambda got: shown(views.overview(broker, got[0], len(got[1]), len(got[2]), got[3])))

    def get_queue(self, user, vhost, name):
        q = self.vhost(vhost).queues.get(name)
        if q is None:
            raise _not_found(f"queue '{name}' in vhost '{vhost}'")
        return remote_figures.queue(self.broker, q)

    def put_queue(self, user, vhost, name, body):
        v = self.vhost(vhost)
        created = name not in v.queues
        arguments = dict(body.get("arguments") or {})
        if body.get("queue_type") and "x-queue-type" not in arguments:  # rabbitmqadmin's queue_type=...
            arguments["x-queue-type"] = str(body["queue_type"])
        v.declare_queue(name, owner=API_OWNER, durable=truthy(body.get("durable"), True),
                        auto_delete=truthy(body.get("auto_delete"), False), arguments=arguments)
        self.settle()
        return {"_created": True} if created else None

    def delete_queue(self, user, vhost, name):
        """RabbitMQ's ``?if-empty=true`` and ``?if-unused=true`` refuse (400) a queue with messages or
        consumers; a queue led by another broker is judged by its leader's figures, as queue.delete is."""
        v = self.vhost(vhost)
        queue = v.queues.get(name)
        if queue is None:
            raise _not_found(f"queue '{name}' in vhost '{vhost}'")
        if_empty, if_unused = self._query_flag("if-empty"), self._query_flag("if-unused")
        if (if_empty or if_unused) and queue.remote and queue.ops is not None:
            v.queue(name, API_OWNER)  # (exclusive to a connection: refused here as by queue.delete)

            def judged(figures) -> None:
                if if_unused and figures.consumers:
                    raise _bad(f"queue '{name}' in vhost '{v.name}' in use")
                if if_empty and figures.ready:
                    raise _bad(f"queue '{name}' in vhost '{v.name}' not empty")
                v.delete_queue(name, owner=API_OWNER)
                self.settle()
            return queue.ops.figures(queue).addCallback(judged)
        v.delete_queue(name, owner=API_OWNER, if_unused=if_unused, if_empty=if_empty)
        self.settle()

    def _query_flag(self, name: str) -> bool:
        raw = self._request.args.get(name.encode())
        return truthy(raw[-1].decode("utf-8", "replace") if raw else None, False)

    def purge_queue(self, user, vhost, name):
        v = self.vhost(vhost)
        if name not in v.queues:
            raise _not_found(f"queue '{name}' in vhost '{vhost}'")
        queue = v.queue(name, API_OWNER)  # (exclusive to a connection: refused here as by queue.purge)
        if queue.remote and queue.ops is not None:  # purged by its leader, as queue.purge on a channel is
            def unavailable(failure):
                raise ApiError(503, "unavailable", failure.getErrorMessage())
            return queue.ops.purge(queue).addCallbacks(lambda count: None, unavailable)
        v.purge_queue(name, API_OWNER)

    def get_exchange(self, user, vhost, name):
        v = self.vhost(vhost)
        x = v.exchanges.get("" if name == "amq.default" else name)
        if x is None:
            raise _not_found(f"exchange '{name}' in vhost '{vhost}'")
        return views.exchange(v, x)

    def put_exchange(self, user, vhost, name, body):
        v = self.vhost(vhost)
        if "type" not in body:
            raise _bad("an exchange needs a 'type' (direct, fanout, topic, headers)")
        created = name not in v.exchanges
        v.declare_exchange(name, str(body["type"]), durable=truthy(body.get("durable"), True),
                           auto_delete=truthy(body.get("auto_delete"), False),
                           internal=truthy(body.get("internal"), False), arguments=body.get("arguments") or {})
        return {"_created": True} if created else None

    def delete_exchange(self, user, vhost, name):
        v = self.vhost(vhost)
        if name not in v.exchanges:
            raise _not_found(f"exchange '{name}' in vhost '{vhost}'")
        v.delete_exchange(name)

    def publish(self, user, vhost, name, body):
        """RabbitMQ's test publish: ``{"routing_key", "payload", "payload_encoding", "properties"}``."""
        v = self.vhost(vhost)
        exchange = "" if name == "amq.default" else name
        encoding = body.get("payload_encoding", "string")
        payload = body.get("payload", "")
        if not isinstance(payload, str):
            raise _bad("'payload' must be a string")
        if encoding == "base64":
            try:
                data = base64.b64decode(payload, validate=True)
            except binascii.Error:
                raise _bad("'payload' is not valid base64") from None
        elif encoding == "string":
            data = payload.encode()
        else:
            raise _bad(f"unknown payload_encoding {encoding!r}: use 'string' or 'base64'")
        props = body.get("properties") or {}
        if not isinstance(props, dict):
            raise _bad("'properties' must be an object")
        try:
            properties = Basic.Properties(**{("message_type" if k == "type" else k): val for k, val in props.items()})
        except TypeError as exc:
            raise _bad(f"unknown message property: {exc}") from None
        _, routed = self.broker.amqp.router.publish(v, exchange, str(body.get("routing_key", "")),
                                                    encode_properties(properties), data, properties.headers, False)
        self.settle()
        return {"routed": routed}

    def settle(self) -> None:
        self.broker.amqp.after_input()  # append what was staged and let queues deliver it

    # --- users and permissions ----------------------------------------------------------
    @staticmethod
    def user_json(u) -> dict:
        return {"name": u.name, "password_hash": u.password_hash, "hashing_algorithm": u.hashing_algorithm,
                "tags": list(u.tags), "limits": {}, "has_password": bool(u.scram or u.password_hash)}

    def get_users(self, user):
        store = self.broker.users
        store.maybe_reload()
        return [self.user_json(u) for u in sorted(store.users.values(), key=lambda u: u.name)]

    def get_user(self, user, name):
        u = self.broker.users.get(name)
        if u is None:
            raise _not_found(f"user '{name}'")
        return self.user_json(u)

    def bulk_delete_users(self, user, body):
        names = body.get("users")
        if not isinstance(names, list):
            raise _bad("bulk-delete needs 'users', a list of user names")
        for name in names:
            if self.broker.users.get(str(name)) is not None:
                self.broker.users.delete_user(str(name))
        self._auth_cache.clear()

    def get_user_permissions(self, user, name):
        if self.broker.users.get(name) is None:
            raise _not_found(f"user '{name}'")
        return [p for p in self.get_permissions(user) if p["user"] == name]

    def get_permission(self, user, vhost, name):
        for p in self.get_permissions(user):
            if p["user"] == name and p["vhost"] == vhost:
                return p
        raise _not_found(f"permissions of user '{name}' on vhost '{vhost}'")

    def put_user(self, user, name, body):
        store = self.broker.users
        tags = body.get("tags", [])
        if isinstance(tags, str):  # RabbitMQ's form: "administrator,monitoring"
            tags = [t.strip() for t in tags.split(",") if t.strip()]
        created = store.get(name) is None
        password, password_hash = body.get("password"), body.get("password_hash")
        if password is None and password_hash is None and created:
            raise _bad("a new user needs a 'password' or a 'password_hash' (\"\" for none)")
        if created:
            store.add_user(name, password)
        elif password is not None:
            store.change_password(name, password)
        if password is None and password_hash is not None:
            store.set_password_hash(name, str(password_hash),
                                    str(body.get("hashing_algorithm") or "rabbit_password_hashing_sha256"))
        store.set_tags(name, list(tags))
        self._auth_cache.clear()
        return {"_created": True} if created else None

    def delete_user(self, user, name):
        if self.broker.users.get(name) is None:
            raise _not_found(f"user '{name}'")
        self.broker.users.delete_user(name)
        self._auth_cache.clear()

    def get_permissions(self, user):
        return [{"user": u.name, "vhost": vhost, **p.to_json()}
                for u in sorted(self.broker.users.users.values(), key=lambda u: u.name)
                for vhost, p in sorted(u.permissions.items())]

    def put_permission(self, user, vhost, name, body):
        if self.broker.users.get(name) is None or vhost not in self.broker.amqp.router.vhosts:
            raise _bad("vhost_or_user_not_found")
        self.broker.users.set_permissions(name, vhost, str(body.get("configure", "")), str(body.get("write", "")),
                                          str(body.get("read", "")))
        return {"_created": True}

    def delete_permission(self, user, vhost, name):
        self.broker.users.clear_permissions(name, vhost)

    # --- Kafka objects ------------------------------------------------------------------
    def get_topic(self, user, name):
        md = self.broker.kafka.logs.store.get_topic(name)
        if md is None:
            raise _not_found(f"topic '{name}'")
        return cluster_offsets.topic(self.broker, md)

    def put_topic(self, user, name, body):
        partitions = body.get("partitions", self.broker.settings.num_partitions)
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise _bad("'partitions' must be a whole number of at least 1")
        configs = body.get("configs") or {}
        if not isinstance(configs, dict):
            raise _bad("'configs' must be an object of topic configs")
        if self.broker.kafka.logs.store.get_topic(name) is not None:
            raise ApiError(409, "topic_exists", f"topic '{name}' already exists")
        self.broker.kafka.logs.create_topic(name, partitions, {str(k): str(v) for k, v in configs.items()})
        log.info("created topic through the management API", extra=fields(topic=name, partitions=partitions))
        return {"_created": True}

    def delete_topic(self, user, name):
        ctx = self.broker.kafka
        if ctx.logs.store.get_topic(name) is None:
            raise _not_found(f"topic '{name}'")
        ctx.delete_topic(name)
        log.info("deleted topic through the management API", extra=fields(topic=name))

    def get_group(self, user, group_id):
        def found(doc):
            if doc is None:
                raise _not_found(f"group '{group_id}'")
            return doc
        doc = cluster_groups.group(self.broker, group_id)  # in a cluster, asked of its coordinator
        return doc.addCallback(found) if isinstance(doc, defer.Deferred) else found(doc)
