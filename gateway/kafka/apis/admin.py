"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs,
IncrementalAlterConfigs, DescribeCluster. Describing configs is in :mod:`configs`.

Configs are changed for topics (2) and groups (32, core.group_configs; a group need not exist
to have configs, as in Kafka); broker configs (4) are start-up settings, read only."""
from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from core.config import LIST_CONFIGS, default_configs, validate_configs
from core.errors import (InvalidConfigError, InvalidPartitionsError, InvalidReplicationFactorError, InvalidTopicError,
                         LogError, TopicExistsError, UnknownTopicError)
from core.group_configs import GroupConfigFileError, InvalidGroupConfig
from core.metadata import check_topic_name
from gateway.kafka.apis.configs import GROUP, TOPIC, topic_entries
from gateway.kafka.apis.metadata import UNKNOWN_OPERATIONS, broker_list, controller_id
from gateway.kafka.apis.registry import handles
from gateway.kafka.authz import CLUSTER_NAME
from gateway.kafka.operations import authorized_operations
from gateway.kafka.context import group_configs
from gateway.logs import fields
from wire.kafka import respond

log = logging.getLogger(__name__)

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs operations

_ERRORS: list[tuple[type, ErrorCode]] = [
    (TopicExistsError, ErrorCode.topic_already_exists),
    (InvalidTopicError, ErrorCode.invalid_topic_exception),
    (InvalidConfigError, ErrorCode.invalid_config),
    (InvalidPartitionsError, ErrorCode.invalid_partitions),
    (UnknownTopicError, ErrorCode.unknown_topic_or_partition),
    (InvalidReplicationFactorError, ErrorCode.invalid_replication_factor),
]


def error_code(exc: LogError) -> ErrorCode:
    for cls, code in _ERRORS:
        if isinstance(exc, cls):
            return code
    return ErrorCode.unknown_server_error


@handles(19)
def create_topics(ctx, conn, h, req):
    out = []
    for t in req.topics:
        entry = {"name": t.name, "topic_id": 0, "error_code": ErrorCode.none, "error_message": None,
                 "topic_config_error_code": 0, "num_partitions": -1, "replication_factor": -1, "configs": None}
        partitions = t.num_partitions if t.num_partitions != -1 else (len(t.assignments) or ctx.num_partitions)
        configs = {c.name: c.value for c in t.configs}
        assignment = [tuple(a.broker_ids) for a in sorted(t.assignments, key=lambda a: a.partition_index)] or None
        try:
            if ctx.cluster is None and (t.replication_factor not in (-1, 1)
                                        or any(len(a.broker_ids) != 1 for a in t.assignments)):
                entry["error_code"] = ErrorCode.invalid_replication_factor
                entry["error_message"] = (f"replication factor {t.replication_factor} is larger than the 1 broker "
                                          "of this single-node cluster")
            elif req.validate_only:
                check_topic_name(t.name)
                validate_configs(configs)
                if ctx.logs.store.get_topic(t.name):
                    raise TopicExistsError(f"topic {t.name!r} already exists")
                if partitions < 1:
                    raise InvalidPartitionsError(f"topic {t.name!r} needs at least 1 partition")
            else:
                topic = ctx.logs.create_topic(t.name, partitions, configs, replication_factor=t.replication_factor,
                                              assignment=assignment)
                entry["topic_id"] = ctx.topic_id(t.name)
                log.info("created topic", extra=fields(topic=t.name, partitions=partitions, configs=topic.configs,
                                                       replicas=[list(r) for r in topic.replicas] or None))
            if entry["error_code"] == ErrorCode.none:
                created = ctx.logs.store.get_topic(t.name)
                rf = len(created.replicas[0]) if created is not None and created.replicas else 1
                entry.update(num_partitions=partitions, replication_factor=rf,
                             configs=topic_entries(validate_configs(configs)))
        except LogError as exc:
            entry["error_code"], entry["error_message"] = error_code(exc), str(exc)
        out.append(entry)
    return respond(h, {"throttle_time": 0, "topics": out})


@handles(20)
def delete_topics(ctx, conn, h, req):
    names = list(req.topic_names) if h.api_version < 6 else [t.name for t in req.topics]
    out = []
    for name in names:
        entry = {"name": name, "topic_id": ctx.topic_id(name) if name else 0, "error_code": ErrorCode.none,
                 "error_message": None}
        try:
            if name is None:  # deletion by topic id only
                raise UnknownTopicError("deleting topics by id is not supported; give the name")
            ctx.delete_topic(name)
            log.info("deleted topic", extra=fields(topic=name))
        except LogError as exc:
            entry["error_code"], entry["error_message"] = error_code(exc), str(exc)
        out.append(entry)
    return respond(h, {"throttle_time": 0, "responses": out})


@handles(37)
def create_partitions(ctx, conn, h, req):
    out = []
    for t in req.topics:
        entry = {"name": t.name, "error_code": ErrorCode.none, "error_message": None}
        try:
            topic = ctx.logs.store.get_topic(t.name)
            if topic is None:
                raise UnknownTopicError(f"topic {t.name!r} does not exist")
            if t.count <= topic.partitions:
                raise InvalidPartitionsError(f"topic {t.name!r} has {topic.partitions} partitions; "
                                             f"it can only grow, not go to {t.count}")
            if not req.validate_only:
                ctx.logs.add_partitions(t.name, t.count)
        except LogError as exc:
            entry["error_code"], entry["error_message"] = error_code(exc), str(exc)
        out.append(entry)
    return respond(h, {"throttle_time": 0, "results": out})


def _alter_group(ctx, r, validate_only: bool, change) -> dict:
    """``change(group_configs)`` applies the request's changes to one group's configs, all or none."""
    entry = {"error_code": ErrorCode.none, "error_message": None, "resource_type": r.resource_type,
             "resource_name": r.resource_name}
    names = [c.name for c in r.configs]
    if not r.resource_name:
        entry["error_code"], entry["error_message"] = ErrorCode.invalid_request, "Group name must not be empty"
    elif len(set(names)) != len(names):
        entry["error_code"], entry["error_message"] = ErrorCode.invalid_request, "Error due to duplicate config keys"
    else:
        try:
            change(group_configs(ctx))
            if not validate_only:
                log.info("altered group configs", extra=fields(
                    group=r.resource_name, changes={c.name: c.value for c in r.configs}))
        except InvalidGroupConfig as exc:
            entry["error_code"], entry["error_message"] = ErrorCode.invalid_config, str(exc)
        except (GroupConfigFileError, OSError) as exc:
            log.error("group configs not saved: %s", exc, extra=fields(group=r.resource_name))
            entry["error_code"] = ErrorCode.unknown_server_error
            entry["error_message"] = f"the group configs could not be saved: {exc}"
    return entry


def _alter(ctx, r, validate_only: bool, changes_of) -> dict:
    entry = {"error_code": ErrorCode.none, "error_message": None, "resource_type": r.resource_type,
             "resource_name": r.resource_name}
    try:
        if r.resource_type != TOPIC:
            entry["error_code"] = ErrorCode.invalid_request
            entry["error_message"] = ("only topic and group configs can be changed "
                                      "(broker configs are start-up settings)")
            return entry
        topic = ctx.logs.store.get_topic(r.resource_name)
        if topic is None:
            raise UnknownTopicError(f"topic {r.resource_name!r} does not exist")
        changes = changes_of(dict(topic.configs))
        merged = {**topic.configs, **changes}
        validate_configs(merged)
        if not validate_only:
            ctx.logs.alter_topic_configs(r.resource_name, changes)
            log.info("altered topic configs", extra=fields(topic=r.resource_name, changes=changes))
    except LogError as exc:
        entry["error_code"], entry["error_message"] = error_code(exc), str(exc)
    return entry


@handles(33)
def alter_configs(ctx, conn, h, req):
    def replace_all(r):  # AlterConfigs sets the whole dynamic config: unnamed keys go back to defaults
        def changes(current):
            new = {c.name: c.value for c in r.configs}
            return {**{k: None for k in current if k not in new}, **new}
        return changes
    def replace_group(r):
        return lambda gc: gc.replace(r.resource_name, {c.name: c.value for c in r.configs}, req.validate_only)
    out = [_alter_group(ctx, r, req.validate_only, replace_group(r)) if r.resource_type == GROUP
           else _alter(ctx, r, req.validate_only, replace_all(r)) for r in req.resources]
    return respond(h, {"throttle_time": 0, "responses": out})


@handles(44)
def incremental_alter_configs(ctx, conn, h, req):
    def incremental(r):
        def changes(current):
            out = {}
            for c in r.configs:
                if c.config_operation == SET:
                    out[c.name] = c.value
                elif c.config_operation == DELETE:
                    out[c.name] = None
                else:  # APPEND/SUBTRACT: list configs only, starting from the current value or the default
                    if c.name not in LIST_CONFIGS:
                        raise InvalidConfigError(f"Config value append is not allowed for config key: {c.name}"
                                                 if c.config_operation == APPEND else
                                                 f"Config value subtract is not allowed for config key: {c.name}")
                    base = current.get(c.name)
                    base = default_configs().get(c.name, "") if base is None else base
                    items = [x for x in base.split(",") if x]
                    value = [x for x in (c.value or "").split(",") if x]
                    items = items + [x for x in value if x not in items] if c.config_operation == APPEND \
                        else [x for x in items if x not in value]
                    out[c.name] = ",".join(items) or None
            return out
        return changes
    def alter_group(r):
        ops = [(c.name, c.config_operation, c.value) for c in r.configs]
        return lambda gc: gc.alter(r.resource_name, ops, req.validate_only)
    out = [_alter_group(ctx, r, req.validate_only, alter_group(r)) if r.resource_type == GROUP
           else _alter(ctx, r, req.validate_only, incremental(r)) for r in req.resources]
    return respond(h, {"throttle_time": 0, "responses": out})


@handles(60)
def describe_cluster(ctx, conn, h, req):
    # v2 (KIP-1073) marks fenced brokers: every broker listed here is live (registered in
    # ZooKeeper, or this single node), so none is fenced, whether or not fenced ones were asked for
    brokers = [{"broker_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"], "is_fenced": False}
               for b in broker_list(ctx)]
    ops = (authorized_operations(conn, "cluster", CLUSTER_NAME) if req.include_cluster_authorized_operations
           else UNKNOWN_OPERATIONS)
    return respond(h, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "endpoint_type": 1,
                       "cluster_id": ctx.cluster_id, "controller_id": controller_id(ctx), "brokers": brokers,
                       "cluster_authorized_operations": ops})
