"""Kafka authorization in front of the API handlers: which request needs which ACL, and the
answer a denial gets, without touching the handlers themselves.

With an authorizer (``--authorizer acl``) every request passes :func:`authorize` first. The
principal is ``User:<name>`` once the connection authenticated (SASL or a client
certificate), ``User:ANONYMOUS`` before. A rule per API gives one of three verdicts:

* allowed as it is (the common case);
* answered here: the whole request concerns one denied resource (a group, a transactional
  id, the cluster), so its response is built here with GROUP_AUTHORIZATION_FAILED,
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED or CLUSTER_AUTHORIZATION_FAILED;
* filtered: denied topics are taken out of a request that changes state (Produce,
  OffsetCommit, CreateTopics, ...), the handler runs on the rest, and entries with
  TOPIC_AUTHORIZATION_FAILED (or GROUP_...) are added to its response; a request that only
  reads (Fetch, ListOffsets, OffsetFetch, Metadata of all topics, ...) runs whole, and the
  denied entries of its response are replaced by error entries (or left out of listings, as
  Kafka leaves unauthorized topics and groups out of them).

Every denial is logged with the principal, the operation and the resource. An API without a
rule here needs the cluster's DESCRIBE (reads) or ALTER permission; denied, the connection is
closed (logged).
"""
from __future__ import annotations

import dataclasses
import logging
import typing
from functools import cache

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from twisted.internet import defer

from gateway.logs import fields
from gateway.security.acl import CLUSTER_NAME
from wire.kafka import build, encode_response, response_class
from wire.kafka_private import ENTITIES as PRIVATE_APIS

log = logging.getLogger(__name__)

TOPIC_DENIED = ErrorCode.topic_authorization_failed
GROUP_DENIED = ErrorCode.group_authorization_failed
CLUSTER_DENIED = ErrorCode.cluster_authorization_failed
TXN_DENIED = ErrorCode.transactional_id_authorization_failed
UNAUTHORIZED_OPS = -(2**31)


@dataclasses.dataclass
class Verdict:
    body: typing.Any = None                 # the request body to dispatch (maybe filtered)
    post: typing.Callable | None = None     # response entity -> response entity
    answered: bool = False                  # True: ``answer`` is the response (None: none owed)
    answer: bytes | None = None
    refuse: str | None = None               # close the connection, with this log reason


class _Check:
    def __init__(self, authorizer, conn):
        self.authorizer = authorizer
        self.conn = conn
        self.principal = f"User:{conn.principal_name}"
        self.host = conn.peer_host

    def __call__(self, operation: str, resource_type: str, name: str, log_denial: bool = True) -> bool:
        if self.authorizer.authorize(self.principal, self.host, operation, resource_type, name):
            return True
        if log_denial:
            log.warning("Kafka request denied", extra=fields(
                peer=self.conn.peer, principal=self.principal, operation=operation,
                resource=f"{resource_type}:{name}"))
        return False

    def may_create(self, topic: str) -> bool:
        """Auto-creating a topic needs CREATE on the cluster or on the topic, as in Kafka."""
        return self("create", "cluster", CLUSTER_NAME, log_denial=False) or self("create", "topic", topic)

    def missing(self, topic: str) -> bool:
        return self.conn.ctx.logs.store.get_topic(topic) is None

    def any_topic_write(self) -> bool:
        """Kafka lets a producer be idempotent if it may write to some topic."""
        return any(b.resource_type == "topic" and b.permission == "allow" and b.operation in ("write", "all")
                   and b.principal in (self.principal, "User:*") for b in self.authorizer.bindings)


def checker(authorizer, conn) -> "_Check":
    """``check(operation, resource_type, name, log_denial=True) -> bool`` for a connection's principal."""
    return _Check(authorizer, conn)


def authorize(authorizer, conn, request) -> Verdict:
    h, body = request.header, request.body
    rule = RULES.get(h.api_key)
    check = _Check(authorizer, conn)
    if rule is None:
        operation = "alter" if h.api_key in WRITING_APIS else "describe"
        if check(operation, "cluster", CLUSTER_NAME):
            return Verdict(body)
        return Verdict(refuse=f"not authorized for API {h.api_key} ({operation} on the cluster)")
    verdict = rule(check, h, body)
    return Verdict(body) if verdict is None else verdict


def respond_with(h, data: dict) -> Verdict:
    return Verdict(answered=True, answer=encode_response(h, build(response_class(h.api_key, h.api_version), data)))


def apply_post(h, result, post):
    """Run ``post`` over the handler's response (bytes, a Deferred of bytes, or None)."""
    if post is None or result is None:
        return result
    if isinstance(result, defer.Deferred):
        return result.addCallback(lambda data: _rewrite(h, data, post))
    return _rewrite(h, result, post)


@cache
def _response_reader(api_key: int, version: int):
    return entity_reader(response_class(api_key, version))


def with_throttle(h, data: bytes, throttle_ms: int) -> bytes:
    """The response with ``throttle_time_ms`` raised to at least ``throttle_ms`` (if it has one)."""
    cls = response_class(h.api_key, h.api_version)
    if data is None or "throttle_time" not in getattr(cls, "__dataclass_fields__", {}):
        return data

    def longer(entity):
        current = entity.throttle_time.total_seconds() * 1000
        if current >= throttle_ms:
            return entity
        return dataclasses.replace(entity, throttle_time=type(entity.throttle_time)(milliseconds=throttle_ms))
    return _rewrite(h, data, longer)


def _rewrite(h, data: bytes, post) -> bytes:
    if data is None:
        return data
    data = bytes(data)  # a zero-copy answer (wire.kafka.ResponseParts) is read in to be rewritten
    offset = 8 + (1 if h.flexible and h.api_key != 18 else 0)  # size, correlation id, header tags
    entity, _size = _response_reader(h.api_key, h.api_version)(data, offset)
    return encode_response(h, post(entity))


@cache
def _item_class(cls, name: str):
    hint = typing.get_type_hints(cls)[name]
    return typing.get_args(hint)[0]


def _items(cls, name: str, dicts: list[dict]) -> tuple:
    item = _item_class(cls, name)
    return tuple(build(item, d) for d in dicts)


def _with(entity, name: str, extra: list[dict]):
    """``entity`` with dict-described items appended to its tuple field ``name``."""
    if not extra:
        return entity
    return dataclasses.replace(entity, **{name: tuple(getattr(entity, name)) + _items(type(entity), name, extra)})


def _filtered(body, name: str, keep) -> typing.Any:
    return dataclasses.replace(body, **{name: tuple(x for x in getattr(body, name) if keep(x))})


# --- rules -----------------------------------------------------------------------------------

def _produce(check, h, req):
    codes = {}
    txn_denied = req.transactional_id is not None and not check("write", "transactional_id", req.transactional_id)
    ctx = check.conn.ctx

    def key(t):  # v13+ names topics by id; an unknown id is the handler's UNKNOWN_TOPIC_ID
        return t.topic_id if hasattr(t, "topic_id") else t.name

    for t in req.topic_data:
        name = ctx.topic_name(t.topic_id) if hasattr(t, "topic_id") else t.name
        if txn_denied:
            codes[key(t)] = TXN_DENIED
        elif name is None:
            continue
        elif not check("write", "topic", name):
            codes[key(t)] = TOPIC_DENIED
        elif check.missing(name) and not check.may_create(name):
            codes[key(t)] = ErrorCode.unknown_topic_or_partition  # no auto-creation without CREATE
    if not codes:
        return None
    denied = [t for t in req.topic_data if key(t) in codes]
    allowed = [t for t in req.topic_data if key(t) not in codes]
    entries = [{"name": getattr(t, "name", None), "topic_id": getattr(t, "topic_id", None), "partition_responses": [
        {"index": p.index, "error_code": codes[key(t)], "base_offset": -1, "log_append_time": None,
         "log_start_offset": -1, "record_errors": [], "error_message": None} for p in t.partition_data]}
        for t in denied]
    if not allowed:
        if req.acks == 0:
            return Verdict(answered=True, answer=None)
        return respond_with(h, {"responses": entries, "throttle_time": 0})
    return Verdict(dataclasses.replace(req, topic_data=tuple(allowed)), lambda r: _with(r, "responses", entries))


def _fetch(check, h, req):
    state = getattr(req, "replica_state", None)  # Fetch v15+ carries the replica id there
    if (state.replica_id if state is not None else req.replica_id) >= 0:
        return None if check("cluster_action", "cluster", CLUSTER_NAME) else \
            Verdict(refuse="replica fetch without CLUSTER_ACTION")
    ctx = check.conn.ctx

    def key(t):  # v13+ names topics by id; an unknown id is the handler's UNKNOWN_TOPIC_ID
        return t.topic if hasattr(t, "topic") else t.topic_id

    def name(t):
        return t.topic if hasattr(t, "topic") else ctx.topic_name(t.topic_id)

    denied = {key(t) for t in req.topics if name(t) is not None and not check("read", "topic", name(t))}
    if not denied:
        return None

    def post(resp):
        out = []
        for t in resp.responses:
            if key(t) in denied:
                t = dataclasses.replace(t, partitions=tuple(dataclasses.replace(
                    p, error_code=TOPIC_DENIED, high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
                    aborted_transactions=None, records=None) for p in t.partitions))
            out.append(t)
        return dataclasses.replace(resp, responses=tuple(out))
    return Verdict(req, post)


def _list_offsets(check, h, req):
    denied = {t.name for t in req.topics if not check("describe", "topic", t.name)}
    if not denied:
        return None

    def post(resp):
        return dataclasses.replace(resp, topics=tuple(
            dataclasses.replace(t, partitions=tuple(dataclasses.replace(p, error_code=TOPIC_DENIED, timestamp=-1,
                                                                        offset=-1) for p in t.partitions))
            if t.name in denied else t for t in resp.topics))
    return Verdict(req, post)


def _metadata(check, h, req):
    if req.topics is None or (h.api_version == 0 and not req.topics):  # every topic: list the described ones
        return Verdict(req, lambda r: dataclasses.replace(r, topics=tuple(
            t for t in r.topics if check("describe", "topic", t.name, log_denial=False))))
    denied = [t.name for t in req.topics if not check("describe", "topic", t.name)]
    body = req
    if getattr(req, "allow_auto_topic_creation", False) and any(
            t.name not in denied and check.missing(t.name) and not check.may_create(t.name) for t in req.topics):
        body = dataclasses.replace(req, allow_auto_topic_creation=False)  # no auto-creation without CREATE
    if not denied:
        return None if body is req else Verdict(body)
    entries = [{"error_code": TOPIC_DENIED, "name": n, "topic_id": 0, "is_internal": False, "partitions": [],
                "topic_authorized_operations": UNAUTHORIZED_OPS} for n in denied]
    return Verdict(_filtered(body, "topics", lambda t: t.name not in denied), lambda r: _with(r, "topics", entries))


def _group_only(operation: str, data: dict):
    """A request about one group: the whole answer is GROUP_AUTHORIZATION_FAILED when denied."""
    def rule(check, h, req):
        if check(operation, "group", req.group_id):
            return None
        return respond_with(h, {"throttle_time": 0, "error_code": GROUP_DENIED, **data})
    return rule


def _find_coordinator(check, h, req):
    key_type = getattr(req, "key_type", 0)
    kind, code = ("transactional_id", TXN_DENIED) if key_type == 1 else ("group", GROUP_DENIED)
    keys = list(req.coordinator_keys) if h.api_version >= 4 else [req.key]
    denied = {k for k in keys if not check("describe", kind, k)}
    if not denied:
        return None
    error = {"error_code": code, "error_message": "Not authorized", "node_id": -1, "host": "", "port": -1}
    if h.api_version < 4:
        return respond_with(h, {"throttle_time": 0, **error})
    return Verdict(req, lambda r: dataclasses.replace(r, coordinators=tuple(
        dataclasses.replace(c, **error) if c.key in denied else c for c in r.coordinators)))


def _offset_commit(check, h, req):
    if not check("read", "group", req.group_id):
        denied, code = list(req.topics), GROUP_DENIED
    else:
        denied, code = [t for t in req.topics if not check("read", "topic", t.name)], TOPIC_DENIED
    if not denied:
        return None
    entries = [{"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code}
                                                for p in t.partitions]} for t in denied]
    if len(denied) == len(req.topics):
        return respond_with(h, {"throttle_time": 0, "topics": entries})
    return Verdict(_filtered(req, "topics", lambda t: t not in denied), lambda r: _with(r, "topics", entries))


def _deny_offsets(check, topics, explicit: bool):
    out = []
    for t in topics:
        if check("describe", "topic", t.name, log_denial=explicit):
            out.append(t)
        elif explicit:
            out.append(dataclasses.replace(t, partitions=tuple(dataclasses.replace(
                p, error_code=TOPIC_DENIED, committed_offset=-1, metadata=None) for p in t.partitions)))
    return tuple(out)


def _offset_fetch(check, h, req):
    if h.api_version >= 8:
        denied = {g.group_id for g in req.groups if not check("describe", "group", g.group_id)}
        explicit = {g.group_id: g.topics is not None for g in req.groups}

        def post(resp):
            groups = []
            for g in resp.groups:
                if g.group_id in denied:
                    g = dataclasses.replace(g, error_code=GROUP_DENIED, topics=())
                else:
                    g = dataclasses.replace(g, topics=_deny_offsets(check, g.topics, explicit.get(g.group_id, True)))
                groups.append(g)
            return dataclasses.replace(resp, groups=tuple(groups))
        return Verdict(req, post)
    if not check("describe", "group", req.group_id):
        return respond_with(h, {"throttle_time": 0, "error_code": GROUP_DENIED, "topics": []})
    explicit = req.topics is not None
    return Verdict(req, lambda r: dataclasses.replace(r, topics=_deny_offsets(check, r.topics, explicit)))


def _describe_groups(check, h, req):
    denied = {g for g in req.groups if not check("describe", "group", g)}
    if not denied:
        return None
    return Verdict(req, lambda r: dataclasses.replace(r, groups=tuple(
        dataclasses.replace(g, error_code=GROUP_DENIED, group_state="", protocol_type="", protocol_data="",
                            members=()) if g.group_id in denied else g for g in r.groups)))


def _list_groups(check, h, req):
    if check("describe", "cluster", CLUSTER_NAME, log_denial=False):
        return None
    return Verdict(req, lambda r: dataclasses.replace(r, groups=tuple(
        g for g in r.groups if check("describe", "group", g.group_id, log_denial=False))))


def _delete_groups(check, h, req):
    denied = [g for g in req.groups_names if not check("delete", "group", g)]
    if not denied:
        return None
    entries = [{"group_id": g, "error_code": GROUP_DENIED} for g in denied]
    return Verdict(_filtered(req, "groups_names", lambda g: g not in denied), lambda r: _with(r, "results", entries))


def _create_topics(check, h, req):
    if check("create", "cluster", CLUSTER_NAME, log_denial=False):
        return None
    denied = [t.name for t in req.topics if not check("create", "topic", t.name)]
    if not denied:
        return None
    entries = [{"name": n, "topic_id": 0, "error_code": TOPIC_DENIED, "error_message": "Authorization failed.",
                "topic_config_error_code": 0, "num_partitions": -1, "replication_factor": -1, "configs": None}
               for n in denied]
    return Verdict(_filtered(req, "topics", lambda t: t.name not in denied), lambda r: _with(r, "topics", entries))


def _delete_topics(check, h, req):
    if h.api_version >= 6:
        denied = [t.name for t in req.topics if t.name is not None and not check("delete", "topic", t.name)]
        body = _filtered(req, "topics", lambda t: t.name not in denied) if denied else req
    else:
        denied = [n for n in req.topic_names if not check("delete", "topic", n)]
        body = _filtered(req, "topic_names", lambda n: n not in denied) if denied else req
    if not denied:
        return None
    entries = [{"name": n, "topic_id": 0, "error_code": TOPIC_DENIED, "error_message": None} for n in denied]
    return Verdict(body, lambda r: _with(r, "responses", entries))


def _delete_records(check, h, req):
    denied = [t for t in req.topics if not check("delete", "topic", t.name)]
    if not denied:
        return None
    entries = [{"name": t.name, "partitions": [{"partition_index": p.partition_index, "low_watermark": -1,
                                                "error_code": TOPIC_DENIED} for p in t.partitions]} for t in denied]
    return Verdict(_filtered(req, "topics", lambda t: t not in denied), lambda r: _with(r, "topics", entries))


def _create_partitions(check, h, req):
    denied = [t.name for t in req.topics if not check("alter", "topic", t.name)]
    if not denied:
        return None
    entries = [{"name": n, "error_code": TOPIC_DENIED, "error_message": None} for n in denied]
    return Verdict(_filtered(req, "topics", lambda t: t.name not in denied), lambda r: _with(r, "results", entries))


_CONFIG_RESOURCES = {2: ("topic", TOPIC_DENIED), 32: ("group", GROUP_DENIED)}  # others: the cluster's


def _config_resource(resource) -> tuple[str, str]:
    kind = _CONFIG_RESOURCES.get(resource.resource_type)
    return (kind[0], resource.resource_name) if kind else ("cluster", CLUSTER_NAME)


def _configs(operation: str, results: str):
    """Kafka's rule: DESCRIBE_CONFIGS/ALTER_CONFIGS on the topic, on the group, or on the cluster
    (brokers and the rest); a denied resource gets TOPIC_/GROUP_/CLUSTER_AUTHORIZATION_FAILED."""
    def rule(check, h, req):
        denied = [r for r in req.resources if not check(operation, *_config_resource(r))]
        if not denied:
            return None
        entries = [{"error_code": _CONFIG_RESOURCES.get(r.resource_type, ("", CLUSTER_DENIED))[1],
                    "error_message": "Authorization failed.", "resource_type": r.resource_type,
                    "resource_name": r.resource_name, "configs": []} for r in denied]
        return Verdict(_filtered(req, "resources", lambda r: r not in denied), lambda r: _with(r, results, entries))
    return rule


def _offset_for_leader_epoch(check, h, req):
    denied = {t.topic for t in req.topics if not check("describe", "topic", t.topic)}
    if not denied:
        return None
    return Verdict(req, lambda r: dataclasses.replace(r, topics=tuple(
        dataclasses.replace(t, partitions=tuple(dataclasses.replace(p, error_code=TOPIC_DENIED, end_offset=-1)
                                                for p in t.partitions)) if t.topic in denied else t
        for t in r.topics)))


def _init_producer_id(check, h, req):
    if req.transactional_id is not None:
        if check("write", "transactional_id", req.transactional_id):
            return None
        code = TXN_DENIED
    elif check("idempotent_write", "cluster", CLUSTER_NAME, log_denial=False) or check.any_topic_write():
        return None
    else:
        code = CLUSTER_DENIED
        check("idempotent_write", "cluster", CLUSTER_NAME)  # logs the denial
    return respond_with(h, {"throttle_time": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1})


def _txn_only(data_of):
    """A request under one transactional id: all of it fails when the id may not be written."""
    def rule(check, h, req):
        txn = getattr(req, "transactional_id", None) or getattr(req, "v3_and_below_transactional_id", "")
        if check("write", "transactional_id", txn):
            return None
        return respond_with(h, {"throttle_time": 0, **data_of(req)})
    return rule


_add_partitions = _txn_only(lambda req: {"results_by_topic_v3_and_below": [
    {"name": t.name, "results_by_partition": [{"partition_index": p, "partition_error_code": TXN_DENIED}
                                              for p in t.partitions]}
    for t in req.v3_and_below_topics]})


def _cluster(operation: str, data: dict):
    def rule(check, h, req):
        if check(operation, "cluster", CLUSTER_NAME):
            return None
        return respond_with(h, {"throttle_time": 0, "error_code": CLUSTER_DENIED,
                                "error_message": "Cluster authorization failed.", **data})
    return rule


def _offset_delete(check, h, req):
    if not check("delete", "group", req.group_id):
        return respond_with(h, {"throttle_time": 0, "error_code": GROUP_DENIED, "topics": []})
    denied = [t for t in req.topics if not check("read", "topic", t.name)]
    if not denied:
        return None
    entries = [{"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": TOPIC_DENIED}
                                                for p in t.partitions]} for t in denied]
    return Verdict(_filtered(req, "topics", lambda t: t not in denied), lambda r: _with(r, "topics", entries))


def _describe_topic_partitions(check, h, req):
    if not req.topics:  # every topic: list the described ones
        return Verdict(req, lambda r: dataclasses.replace(r, topics=tuple(
            t for t in r.topics if check("describe", "topic", t.name, log_denial=False))))
    cursor = req.cursor
    after = cursor.topic_name if cursor is not None else ""  # topics before the cursor are not described
    denied = {t.name for t in req.topics if t.name >= after and not check("describe", "topic", t.name)}
    if not denied:
        return None
    body = _filtered(req, "topics", lambda t: t.name not in denied)
    if cursor is not None and cursor.topic_name in denied:  # Kafka: start at the next allowed topic, from 0
        later = sorted(t.name for t in body.topics if t.name > cursor.topic_name)
        body = dataclasses.replace(body, cursor=dataclasses.replace(cursor, topic_name=later[0], partition_index=0)
                                   if later else None, topics=body.topics if later else ())
    entries = [{"error_code": TOPIC_DENIED, "name": n, "topic_id": 0, "is_internal": False, "partitions": [],
                "topic_authorized_operations": UNAUTHORIZED_OPS} for n in sorted(denied)]
    if not body.topics:
        return respond_with(h, {"throttle_time": 0, "topics": entries, "next_cursor": None})
    return Verdict(body, lambda r: _with(r, "topics", entries))


def _elect_leaders(check, h, req):
    if check("alter", "cluster", CLUSTER_NAME):
        return None
    results = [{"topic": t.topic, "partition_result": [
        {"partition_id": p, "error_code": CLUSTER_DENIED, "error_message": None} for p in t.partitions]}
        for t in req.topic_partitions or ()]
    return respond_with(h, {"throttle_time": 0, "error_code": CLUSTER_DENIED, "replica_election_results": results})


def _alter_replica_log_dirs(check, h, req):
    if check("alter", "cluster", CLUSTER_NAME):
        return None
    topics: dict[str, list] = {}
    for d in req.dirs:
        for t in d.topics:
            topics.setdefault(t.name, []).extend({"partition_index": p, "error_code": CLUSTER_DENIED}
                                                 for p in t.partitions)
    return respond_with(h, {"throttle_time": 0, "results": [{"topic_name": n, "partitions": ps}
                                                             for n, ps in topics.items()]})


def _alter_client_quotas(check, h, req):
    if check("alter_configs", "cluster", CLUSTER_NAME):
        return None
    return respond_with(h, {"throttle_time": 0, "entries": [
        {"error_code": CLUSTER_DENIED, "error_message": "Cluster authorization failed.",
         "entity": [{"entity_type": e.entity_type, "entity_name": e.entity_name} for e in entry.entity]}
        for entry in req.entries]})


RULES: dict[int, typing.Callable] = {
    0: _produce,
    1: _fetch,
    2: _list_offsets,
    3: _metadata,
    8: _offset_commit,
    9: _offset_fetch,
    10: _find_coordinator,
    11: _group_only("read", {"generation_id": -1, "protocol_type": None, "protocol_name": None, "leader": "",
                             "skip_assignment": False, "member_id": "", "members": []}),
    12: _group_only("read", {}),
    13: _group_only("read", {"members": []}),
    14: _group_only("read", {"protocol_type": None, "protocol_name": None, "assignment": b""}),
    15: _describe_groups,
    16: _list_groups,
    17: lambda check, h, req: None,  # SaslHandshake
    18: lambda check, h, req: None,  # ApiVersions
    19: _create_topics,
    20: _delete_topics,
    21: _delete_records,
    22: _init_producer_id,
    23: _offset_for_leader_epoch,
    24: lambda check, h, req: (_cluster("cluster_action", {"results_by_transaction": []}) if h.api_version >= 4
                               else _add_partitions)(check, h, req),  # v4+: brokers only (Kafka: ClusterAction)
    25: _txn_only(lambda req: {"error_code": TXN_DENIED}),
    26: _txn_only(lambda req: {"error_code": TXN_DENIED}),
    28: _txn_only(lambda req: {"topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": TXN_DENIED}
                                        for p in t.partitions]} for t in req.topics]}),
    32: _configs("describe_configs", "results"),
    33: _configs("alter_configs", "responses"),
    36: lambda check, h, req: None,  # SaslAuthenticate
    37: _create_partitions,
    42: _delete_groups,
    44: _configs("alter_configs", "responses"),
    60: _cluster("describe", {"endpoint_type": 1, "cluster_id": "", "controller_id": -1, "brokers": [],
                              "cluster_authorized_operations": UNAUTHORIZED_OPS}),
    34: _alter_replica_log_dirs,
    35: _cluster("describe", {"results": []}),
    43: _elect_leaders,
    47: _offset_delete,
    48: _cluster("describe_configs", {"entries": None}),
    55: _cluster("describe", {"topics": [], "nodes": []}),  # DescribeQuorum: DESCRIBE on the cluster, as Kafka
    57: _cluster("alter", {"results": []}),  # UpdateFeatures: ALTER on the cluster, as Kafka
    74: _cluster("describe_configs", {"config_resources": []}),  # ListConfigResources: as Kafka 4.1
    49: _alter_client_quotas,
    71: lambda check, h, req: None,  # GetTelemetrySubscriptions: no ACL in Kafka either
    72: lambda check, h, req: None,  # PushTelemetry
    75: _describe_topic_partitions,
    # share groups: READ on the group (Kafka also checks the topics; that check is left to the cluster rule)
    76: _group_only("read", {"error_message": "Not authorized", "member_id": None, "member_epoch": -1,
                             "heartbeat_interval": 0, "assignment": None}),
    78: _group_only("read", {"error_message": "Not authorized", "acquisition_lock_timeout": 0, "responses": [],
                             "node_endpoints": []}),
    79: _group_only("read", {"error_message": "Not authorized", "responses": [], "node_endpoints": []}),
    91: _group_only("read", {"error_message": "Not authorized", "responses": []}),
    # streams groups: READ on the group (Kafka also checks the topics; left to the cluster rule, as above)
    88: _group_only("read", {"error_message": "Not authorized", "member_id": "", "member_epoch": -1,
                             "heartbeat_interval": 0, "acceptable_recovery_lag": 0, "task_offset_interval": 0,
                             "status": None, "active_tasks": None, "standby_tasks": None, "warmup_tasks": None,
                             "endpoint_information_epoch": 0, "partitions_by_user_endpoint": None}),
    92: _group_only("delete", {"error_message": "Not authorized", "responses": []}),
    # DescribeUserScramCredentials, AlterUserScramCredentials and the ACL APIs check the
    # cluster themselves (their answers carry per-entry errors).
    29: lambda check, h, req: None,
    30: lambda check, h, req: None,
    31: lambda check, h, req: None,
    50: lambda check, h, req: None,
    51: lambda check, h, req: None,
    # the brokers' own (wire.kafka_private): whichever exists, only a broker may send it
    **{key: _cluster("cluster_action", {}) for key in PRIVATE_APIS},
}
WRITING_APIS = {21, 27, 33, 37, 44, 45, 51}  # 27: WriteTxnMarkers (Kafka: ClusterAction)
