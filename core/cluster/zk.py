"""The ZooKeeper side of a broker: registration, controller election, reading and writing metadata.

One thread (:class:`ZkAgent`) owns the session's upkeep. Watches only mark a path dirty and
wake it; it re-reads what is dirty, builds a :class:`~core.cluster.view.ClusterView` and
hands it to ``publish`` (the broker moves it to its own thread). Writes that a request
waits for (creating a topic, an ISR change) are made by the caller's thread directly: kazoo's
client is thread-safe and loopback round trips are short.

Layout, Kafka's own (under the chroot of ``--zookeeper host:port/chroot``)::

    /brokers/ids/<id>                          ephemeral  {"host", "port", "amqp_host", "amqp_port",
                                                            "stream_host", "stream_port", "stream_tls_host",
                                                            "stream_tls_port", "rack", "amqp_cluster_mode"}
    /brokers/topics/<topic>                               {"partitions": {"0": [1, 2, 3]}, "configs", "topic_id"}
    /brokers/topics/<topic>/partitions/<p>/state          {"leader", "leader_epoch", "isr", "controller_epoch"}
    /controller                                ephemeral  {"brokerid": <id>}
    /controller_epoch                                     <int>, bumped by every new controller
    /admin/reassign_partitions                            {"partitions": [{"topic", "partition", "replicas"}]}
    /cluster/id                                           the cluster id
    /config/client-quotas                                 {"version", "entities"} (core.quotas), every broker's
    /config/group-configs                                 {"version", "groups"} (core.group_configs), every broker's
    /config/gateway-users                                 {"format", "users"} (gateway.security.users), every broker's
    /config/gateway-acls                                  {"version", "bindings"} (gateway.security.acl), every broker's

Fencing: every state change the controller makes is a ZooKeeper transaction that also checks
the version of ``/controller_epoch`` it wrote when it won, so a controller that was replaced
while paused cannot overwrite its successor's decisions; every state write is conditional on
the znode version it read (a leader's ISR change loses against a concurrent election).
"""
from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from dataclasses import replace
from typing import Callable, Iterable, Mapping

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError, RolledBackError

from core.cluster.view import (NO_LEADER, NOT_AVAILABLE, NOT_CONTROLLER, UNKNOWN, BrokerInfo, ClusterView,
                               PartitionState, Reassignment, TopicAssignment, elect, elect_on_request)
from core.config import TopicConfig

log = logging.getLogger(__name__)

IDS, TOPICS, CONTROLLER, CONTROLLER_EPOCH = "/brokers/ids", "/brokers/topics", "/controller", "/controller_epoch"
REASSIGN, CLUSTER_ID = "/admin/reassign_partitions", "/cluster/id"
SHARED_DOCS = ("/config/client-quotas", "/config/group-configs", "/config/gateway-users",  # read into
               "/config/gateway-acls")  # ClusterView.configs
LOOP_S = 0.2  # the agent's pace when nothing wakes it
PREFERRED_ELECTION_S = 10.0  # how often the controller moves leadership back to preferred replicas


def state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def _dump(doc) -> bytes:
    return json.dumps(doc, sort_keys=True).encode()


class ZkError(Exception):
    """ZooKeeper is unreachable or refused a write; the message says which and what to check."""


class ZkAgent:
    def __init__(self, hosts: str, me: BrokerInfo, publish: Callable[[ClusterView], None], *,
                 session_timeout_s: float = 6.0):
        self.hosts = hosts
        self.me = me
        self.publish = publish
        self.zk = KazooClient(hosts=hosts, timeout=session_timeout_s)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # guards _dirty and _nodes between watch callbacks and the loop
        self._dirty: set[str] = set()
        self._nodes: dict[str, tuple[object, int] | None] = {}  # path -> (decoded data, version)
        self._children: dict[str, list[str]] = {}
        self._registered_session: int | None = None
        self._waiting_logged = False
        self._controller_epoch: tuple[int, int] | None = None  # (epoch, znode version) while we are controller
        self._next_preferred = time.monotonic() + PREFERRED_ELECTION_S
        self._settled_view = None  # the last view a controller pass found nothing to elect in
        self.view = ClusterView()

    # --- life cycle -----------------------------------------------------------------
    def start(self, timeout: float = 15.0) -> str:
        """Connect, create the base paths, start the thread; return the cluster id."""
        root, _, chroot = self.hosts.partition("/")
        try:
            if chroot:  # kazoo does not create the chroot itself
                bootstrap = KazooClient(hosts=root, timeout=timeout)
                bootstrap.start(timeout=timeout)
                try:
                    bootstrap.ensure_path("/" + chroot)
                finally:
                    bootstrap.stop()
                    bootstrap.close()
            self.zk.start(timeout=timeout)
        except Exception as exc:
            raise ZkError(f"cannot reach ZooKeeper at {self.hosts} ({exc}); is it running? "
                          "(--zookeeper HOST:PORT[,HOST:PORT...][/chroot])") from None
        for path in (IDS, TOPICS, "/admin", "/cluster"):
            self.zk.ensure_path(path)
        try:
            self.zk.create(CLUSTER_ID, uuid.uuid4().hex.encode())
        except NodeExistsError:
            pass
        cluster_id = self.zk.get(CLUSTER_ID)[0].decode()
        self.zk.add_listener(self._on_state)
        self._mark_all()
        self._step()  # the first view and registration, before clients are let in
        self._thread = threading.Thread(target=self._run, name="zookeeper-agent", daemon=True)
        self._thread.start()
        return cluster_id

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5)
        try:
            self.zk.stop()  # closes the session: our ephemeral nodes go at once, the controller moves
            self.zk.close()
        except Exception:
            pass

    @property
    def registered(self) -> bool:
        """Whether this broker's node in /brokers/ids belongs to the current session.

        While the connection is down (no session id to compare) the last answer stands: a
        suspended session may come back, and an expired one is noticed at reconnection."""
        session = self.session_id
        return self._registered_session is not None and session in (None, self._registered_session)

    @property
    def session_id(self) -> int | None:
        cid = self.zk.client_id
        return cid[0] if cid else None

    def _on_state(self, state) -> None:
        if state == KazooState.CONNECTED:
            self._mark_all()  # after a lost session the watches are gone: read everything again

    def _mark_all(self) -> None:
        with self._lock:
            self._dirty.update((IDS, TOPICS, CONTROLLER, REASSIGN, *SHARED_DOCS))
            self._dirty.update(p for p in self._nodes if p.startswith(TOPICS))
        self._wake.set()

    def _watch(self, event) -> None:
        if not event.path:  # a session event, not a node's: after it every watch must be set again
            self._mark_all()
            return
        with self._lock:
            self._dirty.add(event.path)
        self._wake.set()

    def wake(self, *paths: str) -> None:
        with self._lock:
            self._dirty.update(paths)
        self._wake.set()

    # --- the loop -------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(LOOP_S)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self._step()
            except KazooException as exc:
                log.warning("zookeeper: %s; retrying", type(exc).__name__)
                time.sleep(LOOP_S)
            except Exception:
                log.exception("zookeeper agent step failed; retrying")
                time.sleep(LOOP_S)

    def _step(self) -> None:
        if not self.zk.connected:
            return
        self._register()
        self._refresh()
        self._elect_controller()
        if self.is_controller:
            self._controller_duties()

    def _register(self) -> None:
        session = self.session_id
        if self._registered_session == session:
            return
        path = f"{IDS}/{self.me.node_id}"
        try:
            self.zk.create(path, _dump(self.me.to_json()), ephemeral=True)
        except NodeExistsError:
            try:
                _, stat = self.zk.get(path)
            except NoNodeError:
                return
            if stat.ephemeralOwner != session:
                if not self._waiting_logged:
                    log.warning("broker id %d is still registered by an earlier session; waiting for it to expire "
                                "(or another broker uses this --node-id)", self.me.node_id)
                    self._waiting_logged = True
                return
        self._registered_session = session
        self._waiting_logged = False
        self.view = None  # publish the next view even if unchanged: roles depend on registration too
        log.info("registered in zookeeper", extra={"fields": {"node_id": self.me.node_id, "zookeeper": self.hosts}})
        self.wake(IDS)

    # --- reading --------------------------------------------------------------------
    def _read(self, path: str) -> tuple[object, int] | None:
        while True:
            try:
                data, stat = self.zk.get(path, watch=self._watch)
                break
            except NoNodeError:
                # made between the two calls: exists' watch is then a data watch that fires only
                # when the node changes again, so the node would stay unseen; read it instead
                if self.zk.exists(path, watch=self._watch) is None:
                    return None
        try:
            return json.loads(data.decode()) if data else None, stat.version
        except ValueError:
            log.warning("zookeeper node %s holds no JSON; ignored", path)
            return None, stat.version

    def _read_children(self, path: str) -> list[str]:
        while True:
            try:
                return self.zk.get_children(path, watch=self._watch)
            except NoNodeError:
                if self.zk.exists(path, watch=self._watch) is None:  # else made meanwhile: as _read
                    return []

    def _refresh(self) -> None:
        with self._lock:
            dirty, self._dirty = self._dirty, set()
        if not dirty:
            return
        try:
            self._read_dirty(dirty)
        except BaseException:
            with self._lock:  # read them again next time: their watches may be spent
                self._dirty |= dirty
            raise
        view = self._build()
        if view != self.view:
            self.view = view
            self.publish(view)

    def _read_dirty(self, dirty: set[str]) -> None:
        for path in sorted(dirty, key=len):  # parents (children lists) before their nodes
            if path in (IDS, TOPICS):
                children = self._read_children(path)
                self._children[path] = children
                for child in children:  # every broker node again: a restart may change its address
                    full = f"{path}/{child}"
                    if path == IDS or full not in self._nodes:
                        self._nodes[full] = self._read(full)
                for gone in [p for p in self._nodes if p.startswith(path + "/")
                             and p[len(path) + 1:].split("/")[0] not in children]:
                    del self._nodes[gone]
            else:
                self._nodes[path] = self._read(path)
        # partition states of topics we have not read yet
        for name in self._children.get(TOPICS, []):
            topic = self._nodes.get(f"{TOPICS}/{name}")
            if topic and topic[0]:
                for p in range(len(topic[0].get("partitions", {}))):
                    sp = state_path(name, p)
                    if sp not in self._nodes:
                        self._nodes[sp] = self._read(sp)

    def _build(self) -> ClusterView:
        brokers = {}
        for child in self._children.get(IDS, []):
            node = self._nodes.get(f"{IDS}/{child}")
            if node and node[0] and child.isdigit():
                brokers[int(child)] = BrokerInfo.from_json(int(child), node[0])
        controller = self._nodes.get(CONTROLLER)
        controller_id = int(controller[0]["brokerid"]) if controller and controller[0] else NO_LEADER
        topics, states = {}, {}
        for name in self._children.get(TOPICS, []):
            node = self._nodes.get(f"{TOPICS}/{name}")
            if not node or not node[0]:
                continue
            topic = TopicAssignment.from_json(name, node[0], node[1])
            topics[name] = topic
            for p in range(len(topic.replicas)):
                sn = self._nodes.get(state_path(name, p))
                if sn and sn[0]:
                    states[(name, p)] = PartitionState.from_json(sn[0], sn[1])
        reassign = {}
        node = self._nodes.get(REASSIGN)
        if node and node[0]:
            for item in node[0].get("partitions", []):
                r = Reassignment(item["topic"], int(item["partition"]), tuple(int(b) for b in item["replicas"]),
                                 tuple(int(b) for b in item.get("original", ())))
                reassign[(r.topic, r.partition)] = r
        configs = {path: node for path in SHARED_DOCS if (node := self._nodes.get(path)) and node[0] is not None}
        return ClusterView(brokers, controller_id, topics, states, reassign, configs)

    # --- shared documents -------------------------------------------------------------
    def write_doc(self, path: str, doc, version: int) -> int:
        """Replace a shared JSON document if it is still at ``version`` (-1: it does not exist);
        return its new version. Raises ZkError if another broker changed it meanwhile."""
        data = _dump(doc)
        try:
            if version < 0:
                self.zk.create(path, data, makepath=True)
                new = 0
            else:
                new = self.zk.set(path, data, version=version).version
        except (NodeExistsError, BadVersionError, NoNodeError):
            raise ZkError(f"{path} was changed by another broker at the same time: try again") from None
        except KazooException as exc:
            raise ZkError(f"cannot write {path} to ZooKeeper ({type(exc).__name__}); is it reachable?") from None
        self.wake(path)
        return new

    # --- controller -----------------------------------------------------------------
    @property
    def is_controller(self) -> bool:
        return self._controller_epoch is not None

    def _elect_controller(self) -> None:
        node = self._nodes.get(CONTROLLER)
        if node and node[0]:
            if self.is_controller and int(node[0].get("brokerid", -1)) != self.me.node_id:
                log.warning("no longer the controller")
                self._controller_epoch = None
            return
        if self._registered_session != self.session_id:
            return  # only a registered broker may lead
        try:
            self.zk.create(CONTROLLER, _dump({"brokerid": self.me.node_id, "version": 1}), ephemeral=True)
        except NodeExistsError:
            self.wake(CONTROLLER)
            return
        epoch = self._bump_controller_epoch()
        self._controller_epoch = epoch
        self._next_preferred = time.monotonic() + PREFERRED_ELECTION_S
        log.info("elected controller", extra={"fields": {"node_id": self.me.node_id, "controller_epoch": epoch[0]}})
        self.wake(CONTROLLER)

    def _bump_controller_epoch(self) -> tuple[int, int]:
        while True:
            try:
                data, stat = self.zk.get(CONTROLLER_EPOCH)
                epoch = int(data.decode() or 0) + 1
                stat = self.zk.set(CONTROLLER_EPOCH, str(epoch).encode(), version=stat.version)
                return epoch, stat.version
            except NoNodeError:
                try:
                    self.zk.create(CONTROLLER_EPOCH, b"1")
                    return 1, 0
                except NodeExistsError:
                    continue
            except BadVersionError:
                continue

    def _controller_duties(self) -> None:
        view = self.view
        if view is None:
            return  # not read since the session began
        live = set(view.brokers)
        prefer_now = time.monotonic() >= self._next_preferred
        if prefer_now:
            self._next_preferred = time.monotonic() + PREFERRED_ELECTION_S
        elif view is self._settled_view and not view.reassignments:
            return  # a pass over this very view elected nothing: another one would not either
        elected, unclean_of = False, {}
        for (topic, p), state in view.states.items():
            if not self.is_controller:
                return  # fenced by a newer controller during this pass
            t = view.topics.get(topic)
            if t is None or p >= len(t.replicas):
                continue
            replicas = t.replicas[p]
            unclean = unclean_of.get(topic)
            if unclean is None:  # parsed once per topic and pass: a topic may have thousands of partitions
                unclean = unclean_of[topic] = TopicConfig.from_strings(t.configs).unclean_leader_election
            preferred = replicas[0] if prefer_now and replicas and replicas[0] in live else None
            if t.follows:  # colocated leadership: lead where the followed topic is led, when in sync there
                followed = view.state(t.follows, 0)
                if followed is not None and followed.leader in live and followed.leader in replicas:
                    preferred = followed.leader
            new = elect(state, replicas, live, unclean, self._controller_epoch[0], prefer=preferred)
            if new is not None:
                elected = True
                self._write_state(topic, p, state, new, why="broker change" if preferred is None else "preferred leader")
        # A view with nothing to elect is not walked again every LOOP_S: the next change of
        # brokers or states is a new view (the live set is part of it), and preferred
        # elections keep their own pace. A pass that wrote (or tried to) goes again.
        self._settled_view = None if elected else view
        if view.reassignments and self.is_controller:
            self._progress_reassignments(view, live)

    def elect_leaders(self, partitions: Iterable[tuple[str, int]] | None, preferred: bool) -> dict[tuple[str, int], str]:
        """ElectLeaders on the controller, from the caller's thread like the other writes: an
        outcome of :func:`elect_on_request` per partition (None: every partition), UNKNOWN, or
        NOT_CONTROLLER on any other broker. A state write that loses a race is NOT_AVAILABLE."""
        view = self.view
        if partitions is None:
            partitions = sorted(view.states) if view is not None else []
        out = {}
        for topic, p in partitions:
            controller_epoch = self._controller_epoch
            t = view.topics.get(topic) if view is not None else None
            state = view.state(topic, p) if view is not None else None
            if controller_epoch is None or view is None:
                out[(topic, p)] = NOT_CONTROLLER
            elif t is None or state is None or not 0 <= p < len(t.replicas):
                out[(topic, p)] = UNKNOWN
            else:
                outcome, new = elect_on_request(state, t.replicas[p], set(view.brokers), preferred, controller_epoch[0])
                why = "preferred election requested" if preferred else "unclean election requested"
                try:
                    if new is not None and not self._write_state(topic, p, state, new, why=why):
                        outcome = NOT_AVAILABLE
                except KazooException:  # the session is down: nothing was written
                    outcome = NOT_AVAILABLE
                except TypeError:  # fenced by the agent's thread meanwhile (_controller_epoch went None)
                    outcome = NOT_CONTROLLER
                out[(topic, p)] = outcome
        return out

    def _write_state(self, topic: str, p: int, old: PartitionState, new: PartitionState, why: str) -> bool:
        """A controller's state change, fenced by the controller epoch's znode version."""
        epoch, epoch_version = self._controller_epoch
        tx = self.zk.transaction()
        tx.check(CONTROLLER_EPOCH, epoch_version)
        tx.set_data(state_path(topic, p), _dump(new.to_json()), version=old.version)
        results = tx.commit()
        if any(isinstance(r, Exception) for r in results):
            # The epoch check failing is the fence; a failing state write rolls the check back too
            # (RolledBackError), which only means that state moved on: re-read it and try again.
            if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
                log.warning("fenced: another controller was elected")
                self._controller_epoch = None
            self.wake(state_path(topic, p), CONTROLLER)
            return False
        log.info("partition state changed", extra={"fields": {
            "topic": topic, "partition": p, "leader": new.leader, "leader_epoch": new.leader_epoch,
            "isr": list(new.isr), "why": why}})
        self.wake(state_path(topic, p))
        return True

    def _progress_reassignments(self, view: ClusterView, live: set[int]) -> None:
        """KIP-455's steps: add the target replicas, wait until they are in sync, move the leader, drop the rest."""
        done = {}  # key -> the target completed (or dropped)
        for key, r in view.reassignments.items():
            topic = view.topics.get(r.topic)
            state = view.state(r.topic, r.partition)
            if topic is None or state is None or r.partition >= len(topic.replicas):
                done[key] = r.target
                continue
            current = topic.replicas[r.partition]
            union = tuple(r.target) + tuple(b for b in current if b not in r.target)
            if set(current) != set(union) and set(current) != set(r.target):
                self._set_replicas(topic, r.partition, union)
                return  # one topic write per step: the next step sees the new version
            if not all(b in state.isr for b in r.target):
                continue  # the new replicas are still catching up
            isr = tuple(b for b in state.isr if b in r.target)
            leader = state.leader if state.leader in r.target else next(b for b in r.target if b in isr)
            if leader != state.leader or isr != state.isr:
                new = replace(state, leader=leader, isr=isr, controller_epoch=self._controller_epoch[0],
                              leader_epoch=state.leader_epoch + 1)
                if not self._write_state(r.topic, r.partition, state, new, why="reassignment"):
                    return
            if current != r.target and not self._set_replicas(topic, r.partition, tuple(r.target)):
                return  # the topic changed meanwhile: the next step tries again
            done[key] = r.target
            log.info("reassignment complete", extra={"fields": {"topic": r.topic, "partition": r.partition,
                                                                "replicas": list(r.target)}})
        if done:
            self._remove_reassignments(done)

    def _set_replicas(self, topic: TopicAssignment, partition: int, replicas: tuple[int, ...]) -> bool:
        new = list(topic.replicas)
        new[partition] = replicas
        self.wake(f"{TOPICS}/{topic.name}")
        try:
            self.zk.set(f"{TOPICS}/{topic.name}", _dump(replace(topic, replicas=tuple(new)).to_json()),
                        version=topic.version)
            return True
        except BadVersionError:
            return False

    def _remove_reassignments(self, done: dict[tuple[str, int], tuple[int, ...]]) -> None:
        """Drop the completed requests; one replaced meanwhile by a new target for the same
        partition (another broker's request written since this view) stays for the next step."""
        try:
            data, stat = self.zk.get(REASSIGN)
        except NoNodeError:
            return
        doc = json.loads(data.decode() or "{}")
        doc["partitions"] = [i for i in doc.get("partitions", [])
                             if done.get((i["topic"], int(i["partition"]))) != tuple(int(b) for b in i["replicas"])]
        try:
            if doc["partitions"]:
                self.zk.set(REASSIGN, _dump(doc), version=stat.version)
            else:
                self.zk.delete(REASSIGN, version=stat.version)
        except (BadVersionError, NoNodeError):
            pass
        self.wake(REASSIGN)

    # --- writes for the broker's thread ----------------------------------------------
    def create_topic(self, topic: TopicAssignment) -> TopicAssignment:
        tx = self.zk.transaction()
        tx.create(f"{TOPICS}/{topic.name}", _dump(topic.to_json()))
        tx.create(f"{TOPICS}/{topic.name}/partitions", b"")
        for p, replicas in enumerate(topic.replicas):
            tx.create(f"{TOPICS}/{topic.name}/partitions/{p}", b"")
            tx.create(state_path(topic.name, p), _dump(PartitionState(replicas[0], 0, tuple(replicas)).to_json()))
        results = tx.commit()
        if isinstance(results[0], NodeExistsError):
            raise NodeExistsError(topic.name)
        failed = next((r for r in results if isinstance(r, Exception)), None)
        if failed is not None:
            raise ZkError(f"creating topic {topic.name!r} in zookeeper failed: {type(failed).__name__}")
        self.wake(TOPICS, f"{TOPICS}/{topic.name}")
        return replace(topic, version=0)

    def delete_topic(self, name: str) -> None:
        self.zk.delete(f"{TOPICS}/{name}", recursive=True)
        self.wake(TOPICS)

    def set_topic(self, topic: TopicAssignment, new_partitions: Mapping[int, tuple[int, ...]] = {}) -> TopicAssignment:
        """Rewrite a topic's node (configs, more partitions) if nobody changed it since ``topic.version``."""
        tx = self.zk.transaction()
        tx.set_data(f"{TOPICS}/{topic.name}", _dump(topic.to_json()), version=topic.version)
        for p, replicas in new_partitions.items():
            tx.create(f"{TOPICS}/{topic.name}/partitions/{p}", b"")
            tx.create(state_path(topic.name, p), _dump(PartitionState(replicas[0], 0, tuple(replicas)).to_json()))
        results = tx.commit()
        if isinstance(results[0], BadVersionError):
            raise BadVersionError()
        if isinstance(results[0], NoNodeError):
            raise NoNodeError()
        self.wake(f"{TOPICS}/{topic.name}")
        return replace(topic, version=topic.version + 1)

    def update_isr(self, topic: str, partition: int, old: PartitionState, isr: tuple[int, ...]) -> PartitionState | None:
        """A leader's ISR change (Kafka's ZooKeeper-era AlterIsr): None if the state moved on meanwhile."""
        new = replace(old, isr=isr)
        try:
            stat = self.zk.set(state_path(topic, partition), _dump(new.to_json()), version=old.version)
        except (BadVersionError, NoNodeError):
            self.wake(state_path(topic, partition))
            return None
        self.wake(state_path(topic, partition))
        return replace(new, version=stat.version)

    def request_reassignment(self, items: Iterable[Reassignment]) -> None:
        """Add (or replace) reassignments; a target equal to the current replicas cancels nothing, it just ends."""
        while True:
            try:
                data, stat = self.zk.get(REASSIGN)
                doc = json.loads(data.decode() or "{}")
                version = stat.version
            except NoNodeError:
                doc, version = {"version": 1, "partitions": []}, None
            merged = {(i["topic"], int(i["partition"])): i for i in doc.get("partitions", [])}
            for r in items:
                merged[(r.topic, r.partition)] = {"topic": r.topic, "partition": r.partition,
                                                  "replicas": list(r.target), "original": list(r.original)}
            doc["partitions"] = list(merged.values())
            try:
                if version is None:
                    self.zk.create(REASSIGN, _dump(doc))
                else:
                    self.zk.set(REASSIGN, _dump(doc), version=version)
                break
            except (BadVersionError, NodeExistsError):
                continue
        self.wake(REASSIGN)
