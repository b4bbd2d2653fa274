"""ElectLeaders (KIP-460): preferred (type 0) or unclean (type 1) leader elections.

A single node leads every partition itself, and is each partition's only (so preferred)
replica: every election is ELECTION_NOT_NEEDED. In cluster mode the controller decides with
:func:`core.cluster.view.elect_on_request` and writes the new state to ZooKeeper before it
answers: a preferred election moves leadership to the first replica when it is live and in the
ISR (else PREFERRED_LEADER_NOT_AVAILABLE); an unclean one gives a partition without a live
leader one (else ELIGIBLE_LEADERS_NOT_AVAILABLE). Other brokers answer NOT_CONTROLLER, and the
client asks the controller Metadata names. Unknown partitions are UNKNOWN_TOPIC_OR_PARTITION;
asked for every partition (null), partitions whose election was not needed are left out, as
Kafka leaves them out.
"""
from __future__ import annotations

from kio.schema.errors import ErrorCode

from core.cluster.view import ELECTED, NOT_CONTROLLER, NOT_NEEDED, UNKNOWN
from gateway.kafka.apis.registry import handles
from wire.kafka import respond

PREFERRED, UNCLEAN = 0, 1


def _single_node(ctx, partitions) -> dict[tuple[str, int], str]:
    if partitions is None:
        return {k: NOT_NEEDED for k in sorted(ctx.logs.logs)}
    out = {}
    for topic, p in partitions:
        meta = ctx.logs.store.get_topic(topic)
        out[(topic, p)] = NOT_NEEDED if meta is not None and 0 <= p < meta.partitions else UNKNOWN
    return out


def _result(outcome: str, preferred: bool, topic: str, p: int) -> tuple[ErrorCode, str | None]:
    if outcome == ELECTED:
        return ErrorCode.none, None
    if outcome == NOT_NEEDED:
        return ErrorCode.election_not_needed, ("the preferred replica already leads" if preferred
                                               else "the partition has a live leader")
    if outcome == UNKNOWN:
        return ErrorCode.unknown_topic_or_partition, f"{topic}-{p} does not exist"
    if outcome == NOT_CONTROLLER:
        return ErrorCode.not_controller, "this broker is not the controller"
    if preferred:
        return ErrorCode.preferred_leader_not_available, "the preferred replica is not live and in sync"
    return ErrorCode.eligible_leaders_not_available, "no live replica can lead the partition"


@handles(43)
def elect_leaders(ctx, conn, h, req):
    preferred = getattr(req, "election_type", PREFERRED) == PREFERRED  # v0 knows preferred elections only
    asked = None if req.topic_partitions is None else [
        (t.topic, p) for t in req.topic_partitions for p in t.partitions]
    if ctx.cluster is not None and not ctx.cluster.agent.is_controller and h.api_version >= 1:
        return respond(h, {"throttle_time": 0, "error_code": ErrorCode.not_controller,
                           "replica_election_results": []})
    outcomes = (ctx.cluster.agent.elect_leaders(asked, preferred) if ctx.cluster is not None
                else _single_node(ctx, asked))
    results: dict[str, list[dict]] = {}
    for (topic, p), outcome in outcomes.items():
        if asked is None and outcome == NOT_NEEDED:
            continue
        error, message = _result(outcome, preferred, topic, p)
        results.setdefault(topic, []).append({"partition_id": p, "error_code": error, "error_message": message})
    return respond(h, {"throttle_time": 0, "error_code": ErrorCode.none, "replica_election_results": [
        {"topic": t, "partition_result": ps} for t, ps in results.items()]})
