"""``gateway admin reassign|reassignments`` over the Kafka protocol (KIP-455's two APIs).

``reassign`` takes one partition (``--topic T --partition P --replicas 4,2,3``) or Kafka's
reassignment JSON (``--file plan.json``: ``{"version": 1, "partitions": [{"topic", "partition",
"replicas"}]}``), submits it, and with ``--wait`` shows progress until the controller has
finished every move; ``--cancel`` puts partitions back where they were.
"""
from __future__ import annotations

import json
import time

from gateway.ctl.kafka_client import KafkaAdmin
from gateway.ctl.errors import CommandError, check as _check
from gateway.ctl.output import Progress, emit

ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 45, 46
POLL_S = 0.5


def _plan(args) -> list[tuple[str, int, list[int] | None]]:
    if args.file:
        try:
            with open(args.file) as fh:
                doc = json.load(fh)
            return [(i["topic"], int(i["partition"]), None if args.cancel else [int(b) for b in i["replicas"]])
                    for i in doc["partitions"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CommandError(f"reassignment file {args.file}: {exc}; expected "
                               '{"version": 1, "partitions": [{"topic": ..., "partition": ..., "replicas": [...]}]}') \
                from None
    if args.topic is None or args.partition is None or (args.replicas is None and not args.cancel):
        raise CommandError("give --topic, --partition and --replicas (or --cancel), or --file PLAN.json")
    replicas = None if args.cancel else [int(b) for b in args.replicas.split(",") if b.strip()]
    return [(args.topic, args.partition, replicas)]


def _pending(admin: KafkaAdmin, only=None) -> list[dict]:
    answer = admin.call(LIST_REASSIGNMENTS, {"timeout": 30000, "topics": None})
    _check(answer.error_code, "listing reassignments", answer.error_message)
    rows = []
    for t in answer.topics:
        for p in t.partitions:
            if only is None or (t.name, p.partition_index) in only:
                rows.append({"topic": t.name, "partition": p.partition_index, "replicas": list(p.replicas),
                             "adding": list(p.adding_replicas), "removing": list(p.removing_replicas)})
    return rows


def run(args, admin: KafkaAdmin) -> int:
    if args.admin_command == "reassignments":
        emit(_pending(admin), ("topic", "partition", "replicas", "adding", "removing"), args.json)
        return 0
    plan = _plan(args)
    topics: dict[str, list[dict]] = {}
    for topic, partition, replicas in plan:
        topics.setdefault(topic, []).append({"partition_index": partition, "replicas": replicas})
    answer = admin.call(ALTER_REASSIGNMENTS, {"timeout": 30000, "topics": [
        {"name": n, "partitions": ps} for n, ps in topics.items()]})
    _check(answer.error_code, "reassignment", answer.error_message)
    for t in answer.responses:
        for p in t.partitions:
            _check(p.error_code, f"reassigning {t.name}-{p.partition_index}", p.error_message)
    rows = [{"topic": t, "partition": p, "replicas": r if r is not None else "(back to the original)"}
            for t, p, r in plan]
    if not args.wait:
        emit(rows, ("topic", "partition", "replicas"), args.json)
        return 0
    keys = {(t, p) for t, p, _ in plan}
    progress = Progress("reassigning", len(keys))
    deadline = time.monotonic() + args.timeout
    done: set = set()
    while len(done) < len(keys):
        left = {(r["topic"], r["partition"]) for r in _pending(admin, keys)}
        for key in sorted(keys - left - done):
            done.add(key)
            progress.step(f"{key[0]}-{key[1]}")
        if len(done) < len(keys):
            if time.monotonic() > deadline:
                raise CommandError(f"reassignment of {sorted(left)} not finished after {args.timeout}s; "
                                   "check the brokers are up (gateway admin reassignments shows what is pending)")
            time.sleep(POLL_S)
    emit(rows, ("topic", "partition", "replicas"), args.json)
    return 0
