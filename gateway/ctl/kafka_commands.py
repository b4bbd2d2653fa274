"""``gateway topics|groups|acls ...`` over the Kafka protocol (``--bootstrap``)."""
from __future__ import annotations

from gateway.ctl.errors import CommandError, check as _check
from gateway.ctl.kafka_client import KafkaAdmin, KafkaClientError
from gateway.ctl.output import Progress, emit
from gateway.security.acl import OPERATIONS, PATTERN_TYPES, PERMISSIONS, RESOURCE_TYPES
from gateway.security.acl import code_of as _code_of

METADATA, LIST_OFFSETS, OFFSET_COMMIT, OFFSET_FETCH = 3, 2, 8, 9
DESCRIBE_GROUPS, LIST_GROUPS, CREATE_TOPICS, DELETE_TOPICS = 15, 16, 19, 20
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 44
TOPIC_RESOURCE = 2
EARLIEST, LATEST = -2, -1


def code_of(table: dict[int, str], name: str) -> int:
    try:
        return _code_of(table, name)
    except KeyError:
        raise CommandError(f"unknown value {name!r}: choose from {sorted(set(table.values()) - {'any'})}") from None


def _pairs(items: list[str] | None, what: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CommandError(f"{what} {item!r} is not KEY=VALUE")
        out[key] = value
    return out


# --- topics ---------------------------------------------------------------------------------

def _metadata(admin: KafkaAdmin, topics: list[str] | None):
    return admin.call(METADATA, {"topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
                                 "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})


def _offsets(admin: KafkaAdmin, topic: str, partitions: list[int], timestamp: int) -> dict[int, int]:
    """Each partition's offset at ``timestamp``, asked of its leader (any broker of a cluster may be --bootstrap)."""
    leaders = admin.leaders(topic)
    by_leader: dict[int, list[int]] = {}
    for p in partitions:
        by_leader.setdefault(id(leaders.get(p, admin)), []).append(p)
    clients = {id(c): c for c in leaders.values()} | {id(admin): admin}
    out = {}
    for key, parts in by_leader.items():
        answer = clients[key].call(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": p, "timestamp": timestamp, "current_leader_epoch": -1}
                                           for p in parts]}]})
        for t in answer.topics:
            for p in t.partitions:
                _check(p.error_code, f"offsets of {topic}-{p.partition_index}")
                out[p.partition_index] = p.offset
    return out


def topics(args, admin: KafkaAdmin) -> int:
    action = args.topics_command
    if action == "list":
        rows = [{"name": t.name, "partitions": len(t.partitions), "internal": t.is_internal}
                for t in sorted(_metadata(admin, None).topics, key=lambda t: t.name)]
        emit(rows, ["name", "partitions", "internal"], args.json)
    elif action == "create":
        configs = _pairs(args.config, "--config")
        answer = admin.call(CREATE_TOPICS, {"topics": [{
            "name": args.name, "num_partitions": args.partitions, "replication_factor": args.replication_factor,
            "assignments": [], "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
            "timeout": 15000, "validate_only": False})
        for t in answer.topics:
            _check(t.error_code, f"cannot create topic {args.name!r}", t.error_message)
        emit({"name": args.name, "partitions": args.partitions, "created": True}, ["name", "partitions", "created"],
             args.json)
    elif action == "delete":
        answer = admin.call(DELETE_TOPICS, {"topics": [{"name": args.name, "topic_id": None}], "topic_names": [args.name],
                                            "timeout": 15000})
        for r in answer.responses:
            _check(r.error_code, f"cannot delete topic {args.name!r}", getattr(r, "error_message", None))
        emit({"name": args.name, "deleted": True}, ["name", "deleted"], args.json)
    elif action == "describe":
        md = _metadata(admin, [args.name]).topics[0]
        _check(md.error_code, f"topic {args.name!r}")
        parts = sorted(p.partition_index for p in md.partitions)
        start, end = _offsets(admin, args.name, parts, EARLIEST), _offsets(admin, args.name, parts, LATEST)
        by_index = {p.partition_index: p for p in md.partitions}
        rows = [{"partition": i, "leader": by_index[i].leader_id, "replicas": list(by_index[i].replica_nodes),
                 "isr": list(by_index[i].isr_nodes), "start_offset": start[i], "end_offset": end[i],
                 "messages": end[i] - start[i]} for i in parts]
        configs = _configs(admin, args.name)
        if args.json:
            emit({"name": args.name, "partitions": rows, "configs": configs}, [], True)
        else:
            emit(rows, ["partition", "leader", "replicas", "isr", "start_offset", "end_offset", "messages"], False)
            if configs:
                print()
                emit([{"config": k, "value": v} for k, v in sorted(configs.items())], ["config", "value"], False)
    elif action == "alter-config":
        ops = [{"name": k, "config_operation": 0, "value": v} for k, v in _pairs(args.set, "--set").items()]
        ops += [{"name": k, "config_operation": 1, "value": None} for k in args.delete or []]
        if not ops:
            raise CommandError("nothing to change: give --set KEY=VALUE and/or --delete KEY")
        answer = admin.call(INCREMENTAL_ALTER_CONFIGS, {"resources": [
            {"resource_type": TOPIC_RESOURCE, "resource_name": args.name, "configs": ops}], "validate_only": False})
        for r in answer.responses:
            _check(r.error_code, f"cannot alter the configs of {args.name!r}", r.error_message)
        configs = _configs(admin, args.name)
        emit({"name": args.name, **configs}, ["name"] + sorted(configs), args.json)
    return 0


def _configs(admin: KafkaAdmin, name: str) -> dict[str, str]:
    """The topic's configs that differ from the broker defaults."""
    answer = admin.call(DESCRIBE_CONFIGS, {"resources": [
        {"resource_type": TOPIC_RESOURCE, "resource_name": name, "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False})
    out = {}
    for r in answer.results:
        _check(r.error_code, f"configs of {name!r}", r.error_message)
        for c in r.configs:
            if c.config_source == 1:  # DYNAMIC_TOPIC_CONFIG: set on the topic, not a default
                out[c.name] = c.value
    return out


# --- groups ---------------------------------------------------------------------------------

def _committed(admin: KafkaAdmin, group: str) -> dict[tuple[str, int], int]:
    answer = admin.call(OFFSET_FETCH, {"groups": [{"group_id": group, "topics": None}], "require_stable": False})
    out = {}
    for g in answer.groups:
        _check(g.error_code, f"offsets of group {group!r}")
        for t in g.topics:
            for p in t.partitions:
                if p.committed_offset >= 0:
                    out[(t.name, p.partition_index)] = p.committed_offset
    return out


def groups(args, admin: KafkaAdmin) -> int:
    action = args.groups_command
    if action == "list":
        listed = {}
        for broker in admin.brokers():  # in a cluster each broker lists the groups it coordinates, as in Kafka
            answer = broker.call(LIST_GROUPS, {"states_filter": []})
            _check(answer.error_code, f"list groups of the broker at {broker.address[0]}:{broker.address[1]}")
            listed.update((g.group_id, g) for g in answer.groups)
        rows = [{"group": g.group_id, "state": g.group_state, "protocol_type": g.protocol_type,
                 "protocol": getattr(g, "group_type", "classic")}  # ListGroups v5: classic or consumer (KIP-848)
                for _, g in sorted(listed.items())]
        emit(rows, ["group", "state", "protocol_type", "protocol"], args.json)
        return 0
    coordinator = admin.coordinator(args.group)  # in a cluster, the group's state lives on one broker
    described = coordinator.call(DESCRIBE_GROUPS, {"groups": [args.group],
                                                   "include_authorized_operations": False}).groups[0]
    _check(described.error_code, f"group {args.group!r}")
    committed = _committed(coordinator, args.group)
    if action == "describe":
        rows = []
        for topic in sorted({t for t, _ in committed}):
            parts = sorted(p for t, p in committed if t == topic)
            ends = _offsets(admin, topic, parts, LATEST)
            rows += [{"topic": topic, "partition": p, "committed": committed[(topic, p)], "end_offset": ends[p],
                      "lag": max(ends[p] - committed[(topic, p)], 0)} for p in parts]
        if args.json:
            emit({"group": args.group, "state": described.group_state, "members": len(described.members),
                  "offsets": rows}, [], True)
        else:
            print(f"group {args.group}: {described.group_state}, {len(described.members)} member(s)")
            emit(rows, ["topic", "partition", "committed", "end_offset", "lag"], False)
        return 0
    return _reset_offsets(args, admin, coordinator, described, committed)


def _reset_offsets(args, admin: KafkaAdmin, coordinator: KafkaAdmin, described, committed) -> int:
    if described.group_state not in ("Empty", "Dead", ""):
        raise CommandError(f"group {args.group!r} is {described.group_state} with {len(described.members)} "
                           f"member(s): stop its consumers first (offsets of an active group cannot be reset)")
    md = _metadata(admin, [args.topic]).topics[0]
    _check(md.error_code, f"topic {args.topic!r}")
    parts = sorted(p.partition_index for p in md.partitions)
    if args.to_offset is not None:
        targets = {p: args.to_offset for p in parts}
    else:
        targets = _offsets(admin, args.topic, parts, EARLIEST if args.to_earliest else LATEST)
    rows = [{"topic": args.topic, "partition": p, "current": committed.get((args.topic, p)), "new": targets[p]}
            for p in parts]
    if args.execute:
        progress = Progress(f"resetting {args.group}", len(parts))
        for p in parts:  # one commit per partition, so the progress shows where a failure stopped
            answer = coordinator.call(OFFSET_COMMIT, {"group_id": args.group, "generation_id_or_member_epoch": -1,
                                                "member_id": "", "group_instance_id": None,
                                                "retention_time_ms": -1, "topics": [{"name": args.topic, "partitions": [
                                                    {"partition_index": p, "committed_offset": targets[p],
                                                     "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
            for t in answer.topics:
                for part in t.partitions:
                    _check(part.error_code, f"commit of {args.topic}-{p} for group {args.group!r}")
            progress.step(f"{args.topic}-{p} -> {targets[p]}")
    elif not args.json:
        print("dry run (add --execute to commit these offsets):")
    emit(rows, ["topic", "partition", "current", "new"], args.json)
    return 0


# --- ACLs -----------------------------------------------------------------------------------

def _resource(args) -> tuple[int, str | None]:
    for kind, value in (("topic", args.topic), ("group", args.group), ("transactional_id", args.transactional_id)):
        if value is not None:
            return code_of(RESOURCE_TYPES, kind), value
    if args.cluster:
        return code_of(RESOURCE_TYPES, "cluster"), "kafka-cluster"
    return code_of(RESOURCE_TYPES, "any"), None


def acls(args, admin: KafkaAdmin) -> int:
    action = args.acls_command
    resource_type, name = _resource(args)
    pattern = "prefixed" if args.prefixed else ("literal" if action == "create" else "any")
    if action == "create":
        if name is None:
            raise CommandError("give the resource: --topic, --group, --transactional-id or --cluster")
        if not args.operation:
            raise CommandError("give at least one --operation (read, write, describe, all, ...)")
        creations = [{"resource_type": resource_type, "resource_name": name,
                      "resource_pattern_type": code_of(PATTERN_TYPES, pattern), "principal": args.principal,
                      "host": args.host, "operation": code_of(OPERATIONS, op.lower()),
                      "permission_type": code_of(PERMISSIONS, "deny" if args.deny else "allow")}
                     for op in args.operation]
        answer = admin.call(CREATE_ACLS, {"creations": creations})
        for r in answer.results:
            _check(r.error_code, "cannot create the ACL", r.error_message)
        emit([_acl_row(c) for c in creations], _ACL_COLUMNS, args.json)
        return 0
    flt = {"resource_type_filter": resource_type, "resource_name_filter": name,
           "pattern_type_filter": code_of(PATTERN_TYPES, pattern),
           "principal_filter": args.principal if action == "delete" or args.principal != "User:*" else None,
           "host_filter": None, "operation": code_of(OPERATIONS, (args.operation or ["any"])[0].lower()),
           "permission_type": code_of(PERMISSIONS, "deny" if args.deny else "any")}
    if action == "list":
        answer = admin.call(DESCRIBE_ACLS, flt)
        _check(answer.error_code, "list ACLs", answer.error_message)
        rows = [_acl_row({"resource_type": r.resource_type, "resource_name": r.resource_name,
                          "resource_pattern_type": r.pattern_type, **{k: getattr(a, k) for k in (
                              "principal", "host", "operation", "permission_type")}})
                for r in answer.resources for a in r.acls]
        emit(rows, _ACL_COLUMNS, args.json)
        return 0
    answer = admin.call(DELETE_ACLS, {"filters": [flt]})
    rows = []
    for result in answer.filter_results:
        _check(result.error_code, "cannot delete ACLs", result.error_message)
        rows += [_acl_row({"resource_type": m.resource_type, "resource_name": m.resource_name,
                           "resource_pattern_type": m.pattern_type, "principal": m.principal, "host": m.host,
                           "operation": m.operation, "permission_type": m.permission_type})
                 for m in result.matching_acls]
    emit(rows, _ACL_COLUMNS, args.json)
    return 0


_ACL_COLUMNS = ["resource_type", "name", "pattern", "principal", "host", "operation", "permission"]


def _acl_row(c: dict) -> dict:
    return {"resource_type": RESOURCE_TYPES.get(int(c["resource_type"])), "name": c["resource_name"],
            "pattern": PATTERN_TYPES.get(int(c["resource_pattern_type"])), "principal": c["principal"],
            "host": c["host"], "operation": OPERATIONS.get(int(c["operation"])),
            "permission": PERMISSIONS.get(int(c["permission_type"]))}


COMMANDS = {"topics": topics, "groups": groups, "acls": acls}


def run(args, command=None) -> int:
    """One Kafka-protocol command (``command``: a handler of (args, admin) from elsewhere, e.g. admin_commands)."""
    command = command or COMMANDS[args.command]
    try:
        with KafkaAdmin(args.bootstrap) as admin:
            return command(args, admin)
    except KafkaClientError as exc:
        raise CommandError(str(exc)) from None
