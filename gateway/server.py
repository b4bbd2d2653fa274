"""One broker process: the log, three listeners and the background duties, on one reactor.

Start-up order, so that a failure is reported before anything is half-running:

1. the data directory is created, checked writable and locked (one broker per directory);
2. the three ports are bound (a port in use fails here, in a second, not after recovery);
   Kafka and AMQP connections are refused and /healthz answers 503 until step 4;
3. the logs are opened and, after an unclean stop, recovered, in a worker thread;
4. ``listeners.json`` is written, one "listening" line is logged, and group commit and
   maintenance start.

Shutdown (SIGTERM/SIGINT, through the reactor's "before shutdown" trigger) undoes it:
stop accepting, wait for a running flush, flush and close every log, remove
``listeners.json``, release the lock.
"""
from __future__ import annotations

import base64
import errno
import fcntl
import json
import logging
import os
import resource
import socket
import time
import uuid
from pathlib import Path

from twisted.internet import defer, error, threads

from core.checkpoint import write_atomic
from core.cluster.view import BrokerInfo
from core.cluster.zk import ZkError
from core.groups import GroupCoordinator
from core.log_manager import LogManager
from core.metadata import LocalMetadataStore
from core.offsets import OFFSETS_TOPIC
from core.producers import ProducerStates
from core.transactions import TXN_TOPIC, TransactionCoordinator
from routing.broker import Router
from routing.deprecated import FEATURES as DEPRECATED, DeprecatedFeatures
from routing.state import STATE_TOPIC, NoState
from gateway import http
from gateway.alarms import Alarms
from gateway.duties import Duties
from gateway.amqp.connection import AmqpFactory
from gateway.amqp.service import AmqpService
from gateway.stream.cluster import StreamCluster
from gateway.stream.connection import StreamFactory
from gateway.stream.sac import ClusterActiveConsumers
from gateway.stream.service import StreamService
from gateway.cluster.amqp_forward import PublishForwarder
from gateway.cluster.link_server import LinkServer
from gateway.cluster.amqp_home import AmqpHome
from gateway.cluster.amqp_spread import AmqpSpread
from gateway.cluster.node import ClusterNode
from gateway.cluster.peers import PeerClients
from gateway.cluster.share_state import RemoteShareState
from gateway.cluster import shared_docs
from gateway.config import HostPort, Settings
from gateway.group_commit import GroupCommit
from gateway.kafka.apis import share_groups
from gateway.kafka import txn_steps
from gateway.kafka.connection import KafkaFactory
from gateway.kafka.context import KafkaContext, group_config
from gateway.kafka.waiters import Waiters
from gateway.logs import fields
from gateway.management import cluster_clients, definitions, history
from gateway.management.views import node_name
from gateway.security.acl import ACLS_FILE, Authorizer
from gateway.security.oauth import OAuthValidator
from gateway.security.tls import TlsConfigError, server_options
from gateway.security.users import UserStore, UserStoreError

log = logging.getLogger(__name__)

LISTENERS_FILE = "listeners.json"
LOCK_FILE = ".lock"
CLUSTER_ID_FILE = "cluster-id"
GROUP_TICK_S = 0.1
GROUP_IDLE_TICK_S = 0.5  # while no group has members or deadlines to watch
TXN_TICK_S = 1.0  # how often open transactions are checked against their timeout
AMQP_TICK_S = 0.25
MAX_NODES = 1024  # node ids of a cluster are below this
CLUSTER_TICK_S = 0.5  # how often leaders check their followers' lag (ISR shrink)


def _raise_open_file_limit() -> int:
    """Raise the soft open-file limit to the hard one (as Kafka and RabbitMQ ask of their hosts:
    every partition and connection holds a descriptor); return the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


class StartupError(Exception):
    """The broker cannot start; the message names the problem and how to fix it."""


class _Gate:
    """Wraps a factory so connections are refused (closed at once) until the broker is ready."""

    def __init__(self, factory, is_ready):
        self.factory, self.is_ready = factory, is_ready

    def __getattr__(self, name):
        return getattr(self.factory, name)

    def buildProtocol(self, addr):
        return self.factory.buildProtocol(addr) if self.is_ready() else None


class Broker:
    def __init__(self, settings: Settings, reactor):
        self.settings = settings
        self.reactor = reactor
        self.data_dir = Path(settings.data_dir)
        self.logs: LogManager | None = None
        self.ports: dict[str, object] = {}
        self.ready = False
        self._logs_open = False
        self.started_at = time.monotonic()
        self._lock_fd: int | None = None
        self._kept_ports: dict[str, object] = {}
        self.duties: Duties | None = None  # the periodic duties, from when the logs are open
        self.group_commit = GroupCommit(self)  # its fsync thread starts with the logs
        self.kafka: KafkaContext | None = None
        self.amqp: AmqpService | None = None
        self.streams: StreamService | None = None
        self._starting: defer.Deferred | None = None
        self.management_history = history.History(self)
        self.users: UserStore | None = None
        self._tls_options = None
        self._authorizer: Authorizer | None = None
        self.oauth: OAuthValidator | None = None  # --oauth-jwks: JWT logins on AMQP, Kafka and HTTP
        self.cluster: ClusterNode | None = None  # cluster mode (--zookeeper) only
        self.amqp_home: AmqpHome | None = None  # cluster mode: serves AMQP here, or forwards to the home

    # --- start --------------------------------------------------------------------
    def bind(self) -> None:
        """Steps 1 and 2; raises StartupError. Call before the reactor runs."""
        self._prepare_data_dir()
        try:
            if self.settings.zookeeper:
                # the agent is started once the ports are bound: it advertises them
                self.cluster = ClusterNode(self.settings, self.reactor, BrokerInfo(self.settings.node_id, "", 0))
                self.cluster.broker = self
                store = self.cluster.store
            else:
                store = LocalMetadataStore(self.data_dir)
            self.logs = LogManager(self.data_dir, store, node_id=self.settings.node_id,
                                   max_partitions=self.settings.max_partitions or _raise_open_file_limit() // 2)
            self.logs.replicated = self.cluster is not None
        except Exception as exc:
            self._unlock()
            raise StartupError(f"cannot read the metadata in {self.data_dir}: {exc}") from None
        try:
            self.users = UserStore.in_data_dir(self.data_dir, loopback_users=self.settings.loopback_users)
            s = self.settings
            if s.tls_cert is not None:
                self._tls_options = server_options(s.tls_cert, s.tls_key, s.tls_client_ca, s.tls_client_auth)
            if s.authorizer == "acl":
                self._authorizer = Authorizer(self.data_dir / ACLS_FILE, s.super_users,
                                              s.allow_everyone_if_no_acl_found)
            if s.oauth_jwks:
                self.oauth = OAuthValidator(s.oauth_jwks, s.oauth_issuer, s.oauth_audience, s.oauth_username_claims,
                                            s.oauth_clock_skew_s)
        except (UserStoreError, TlsConfigError, ValueError) as exc:
            self._unlock()
            raise StartupError(str(exc)) from None
        # cluster mode: producer ids are unique across brokers (node id + a multiple of MAX_NODES)
        producers = ProducerStates(self.data_dir, node_id=self.settings.node_id,
                                   stride=MAX_NODES if self.cluster is not None else 1)
        groups = GroupCoordinator(self.logs, min_session_timeout_ms=self.settings.group_min_session_timeout_ms,
                                  max_session_timeout_ms=self.settings.group_max_session_timeout_ms,
                                  consumer_session_timeout_ms=self.settings.group_consumer_session_timeout_ms,
                                  consumer_heartbeat_interval_ms=self.settings.group_consumer_heartbeat_interval_ms,
                                  initial_rebalance_delay_ms=self.settings.group_initial_rebalance_delay_ms,
                                  offsets_retention_ms=self.settings.offsets_retention_minutes * 60_000,
                                  offsets_retention_check_interval_ms=self.settings.offsets_retention_check_interval_ms)
        transactions = TransactionCoordinator(self.logs, producers, groups.offsets,
                                              partitions=self.settings.transaction_state_partitions)
        self.kafka = KafkaContext(
            logs=self.logs, producers=producers, groups=groups, transactions=transactions,
            waiters=Waiters(self.reactor), node_id=self.settings.node_id, cluster_id=self._cluster_id(),
            advertised=self._kafka_advertised, request_flush=self.request_flush,
            auto_create_topics=self.settings.auto_create_topics, num_partitions=self.settings.num_partitions,
            reactor=self.reactor)
        self.kafka.users = self.users
        self.kafka.authorizer = self._authorizer
        self.kafka.oauth = self.oauth
        alarms = Alarms(self.data_dir, self.settings.disk_free_limit_mb, self.settings.memory_limit_mb)
        router = Router(self.data_dir, self.logs, state=NoState() if self.cluster is not None else None)
        self.amqp = AmqpService(router, self.reactor, self.request_flush, alarms,
                                users=self.users)
        self.amqp.oauth = self.oauth
        self.amqp.node_name = node_name(self.settings.node_id)  # in the AMQP 1.0 open frame
        self.streams = StreamService(self.amqp, groups.offsets, self.reactor, self._stream_advertised,
                                     self.request_flush)
        self.kafka.topic_deleted = lambda name: self.amqp.router.topic_deleted(name)
        self.kafka.router = lambda: self.amqp.router
        groups.share.on_member_gone = lambda group, member: share_groups.member_gone(self.kafka, group, member)
        groups.share_deleted = lambda group: self.amqp.router.shares.forget_group(group)
        self._configure_group_settings(groups)
        self.kafka.storage_failed = self.amqp.storage_failed
        if self.cluster is not None:
            peers = self.kafka.peers = PeerClients(self.reactor, self.cluster.leader_address,
                                                   f"gateway-{self.settings.node_id}")
            # another broker's management API asks for this one's connections (ManagementView)
            self.kafka.management_view = lambda op, name, reason: cluster_clients.answer(self, op, name, reason)
        if self.cluster is not None and self.settings.amqp_cluster_mode == "spread":
            forwarder = PublishForwarder(self.reactor, peers, self._leader_of, self.amqp.forwards_settled)
            # the other brokers' consumers of queues led here (AmqpLink)
            self.kafka.amqp_links = LinkServer(self.reactor, lambda: self.amqp.router)
            self.amqp_home = AmqpSpread(self, self.cluster, forwarder)
            self.streams.cluster = StreamCluster(self.cluster, peers, self.settings.node_id)
            # single-active-consumer groups span the cluster: decided at each stream's leader
            self.streams.active = self.kafka.stream_consumers = ClusterActiveConsumers(self.streams,
                                                                                       self.streams.cluster)
        elif self.cluster is not None:
            self.amqp_home = AmqpHome(self, self.cluster)
        if self.cluster is not None:
            # offsets expire only on the leader of their __consumer_offsets partition
            groups.retention.leads = lambda p: self.cluster.replicas.leader_of(OFFSETS_TOPIC, p) is not None
            # transaction coordinators are the leaders of __transaction_state's partitions
            transactions.coordinates_all = False
            transactions.leads = lambda p: self.cluster.replicas.leader_of(TXN_TOPIC, p) is not None
        self._apply_limits()
        factories = {
            "kafka": _Gate(KafkaFactory(self.kafka, require_auth=self.settings.kafka_require_auth),
                           lambda: self.ready),
            "amqp": _Gate(self._amqp_factory(), lambda: self.ready),
            "http": http.site(self.health, self),
            "kafka_tls": _Gate(KafkaFactory(self.kafka, advertised=lambda: self._kafka_advertised("kafka_tls"),
                                            require_auth=self.settings.kafka_require_auth), lambda: self.ready),
            "amqp_tls": _Gate(self._amqp_factory(), lambda: self.ready),
            "stream": _Gate(StreamFactory(self.streams, "stream"), lambda: self.ready),
            "stream_tls": _Gate(StreamFactory(self.streams, "stream_tls"), lambda: self.ready),
        }
        for factory in factories.values():
            getattr(factory, "factory", factory).noisy = False
        try:
            for name, address in self.settings.listeners.items():
                self.ports[name] = self._listen(name, address, factories[name])
            if self.cluster is not None:
                self._join_cluster()
        except StartupError:
            self._close_ports()
            self._unlock()
            raise

    def _configure_group_settings(self, groups: GroupCoordinator) -> None:
        """KIP-848, share and streams groups read the broker's group.consumer.* / group.share.* /
        group.streams.* settings, overridden per group by group configs."""
        s, kafka = self.settings, self.kafka
        kafka.group_defaults = {"consumer.session.timeout.ms": s.group_consumer_session_timeout_ms,
                                "consumer.heartbeat.interval.ms": s.group_consumer_heartbeat_interval_ms,
                                "share.session.timeout.ms": s.group_share_session_timeout_ms,
                                "share.heartbeat.interval.ms": s.group_share_heartbeat_interval_ms,
                                "share.record.lock.duration.ms": s.group_share_record_lock_duration_ms,
                                "streams.session.timeout.ms": s.group_streams_session_timeout_ms,
                                "streams.heartbeat.interval.ms": s.group_streams_heartbeat_interval_ms,
                                "streams.num.standby.replicas": s.group_streams_num_standby_replicas}
        groups.consumer.session_timeout_for = lambda group: int(group_config(kafka, group,
                                                                             "consumer.session.timeout.ms"))
        groups.consumer.heartbeat_interval_for = lambda group: int(group_config(kafka, group,
                                                                                "consumer.heartbeat.interval.ms"))
        groups.share.session_timeout_ms = lambda group: int(group_config(kafka, group, "share.session.timeout.ms"))
        groups.share.heartbeat_interval_ms = lambda group: int(group_config(kafka, group,
                                                                            "share.heartbeat.interval.ms"))
        kafka.share_delivery_count_limit = s.group_share_delivery_count_limit
        for name, attr in (("session.timeout.ms", "session_timeout_for"),
                           ("heartbeat.interval.ms", "heartbeat_interval_for"),
                           ("num.standby.replicas", "num_standby_for")):
            setattr(groups.streams, attr, lambda group, key="streams." + name: int(group_config(kafka, group, key)))

    def _join_cluster(self) -> None:
        s = self.settings
        kafka = HostPort(*self._kafka_advertised())
        amqp_port = self.ports["amqp"].getHost()
        amqp = s.amqp_advertised or HostPort(amqp_port.host, amqp_port.port)
        stream = HostPort(*self._stream_advertised()) if "stream" in self.ports else HostPort("", -1)
        tls = HostPort(*self._stream_advertised("stream_tls")) if "stream_tls" in self.ports else HostPort("", -1)
        self.cluster.agent.me = BrokerInfo(s.node_id, kafka.host, kafka.port, amqp.host, amqp.port, s.rack or None,
                                           stream.host, stream.port, tls.host, tls.port, s.amqp_cluster_mode)
        try:
            self.kafka.cluster_id = self.cluster.start()
        except ZkError as exc:
            raise StartupError(str(exc)) from None
        # the two modes place and serve queues differently: one cluster cannot run both
        others = {b.node_id: b.amqp_mode for b in self.cluster.view.brokers.values()
                  if b.node_id != s.node_id and b.amqp_mode and b.amqp_mode != s.amqp_cluster_mode}
        if others:
            self.cluster.stop()
            raise StartupError(
                f"this broker runs AMQP cluster mode '{s.amqp_cluster_mode}' but broker(s) "
                f"{', '.join(f'{n} run(s) {m!r}' for n, m in sorted(others.items()))}: every broker of a cluster must "
                f"run the same mode; start this one with --amqp-cluster-mode {next(iter(others.values()))}")
        self.kafka.cluster = self.cluster
        self.kafka.share_remote = RemoteShareState(self.kafka, on_read=self.kafka.waiters.notify)
        # users, permissions and ACLs are the cluster's, as Kafka's and RabbitMQ's are
        self.users.share(shared_docs.SharedDocument(self.cluster, shared_docs.USERS))
        if self._authorizer is not None:
            self._authorizer.share(shared_docs.SharedDocument(self.cluster, shared_docs.ACLS))
        log.info("joined the cluster", extra=fields(node_id=s.node_id, zookeeper=s.zookeeper,
                                                    brokers=sorted(self.cluster.view.brokers),
                                                    controller=self.cluster.view.controller_id))

    def became_leader(self, topic: str, partition: int) -> None:
        """A partition is led here now: coordinators whose state lives in it reload it."""
        self.kafka.producers.reset(topic, partition)  # followers do not track producers: rebuild from the log
        if topic == OFFSETS_TOPIC:
            self.kafka.groups.reload(partition)  # committed offsets and KIP-848 groups
        elif topic == TXN_TOPIC:  # this broker now coordinates its transactional ids: finish prepared ones
            for step in self.kafka.transactions.load_partition(partition):
                txn_steps.run(self.kafka, step)
        self.amqp.router.shares.forget_partition(topic, partition)  # share state: read it again
        if topic == STATE_TOPIC and self.cluster is not None:
            self.cluster.state_followers.forget()
        if self.kafka.stream_consumers is not None:  # its streams' consumers register again here
            self.kafka.stream_consumers.took_over(topic, partition)

    def stopped_leading(self, topic: str, partition: int) -> None:
        """A partition is followed here (or offline), however it was before: coordinators drop the
        state they hold from it, as its leader serves it now."""
        if topic == OFFSETS_TOPIC:
            self.kafka.groups.unload(partition)

    def _leader_of(self, topic: str, partition: int) -> int:
        state = self.cluster.view.state(topic, partition)
        return state.leader if state is not None and state.leader in self.cluster.view.brokers else -1

    def _amqp_factory(self):
        local = AmqpFactory(self.amqp)
        return local if self.amqp_home is None else self.amqp_home.door(local)

    def _apply_limits(self) -> None:
        s = self.settings

        def too_many() -> bool:  # called as a connection arrives, so it already counts itself
            return bool(s.max_connections) and \
                len(self.amqp.connections) + len(self.amqp.amqp10_connections) + len(self.kafka.connections) \
                > s.max_connections
        self.amqp.too_many_connections = self.kafka.too_many_connections = too_many
        self.amqp.max_connections_per_user = self.kafka.max_connections_per_user = s.max_connections_per_user
        self.amqp.channel_max, self.amqp.max_message_bytes = s.channel_max, s.max_message_bytes
        self.amqp.delayed_max = s.delayed_messages_max
        self.amqp.consumer_timeout_ms = s.consumer_timeout_ms
        self.amqp.deprecated = DeprecatedFeatures(frozenset(
            f for f in DEPRECATED if not getattr(s, f"deprecated_features_permit_{f}")))
        self.kafka.throttle_ms = lambda: s.kafka_throttle_ms if self.amqp.alarm_reason else 0

    def _listen(self, name: str, address: HostPort, factory):
        try:
            if name.endswith("_tls"):
                return self.reactor.listenSSL(address.port, factory, self._tls_options, interface=address.host)
            return self.reactor.listenTCP(address.port, factory, interface=address.host)
        except error.CannotListenError as exc:
            cause = exc.socketError
            why = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(cause)
            hint = "is another broker running? pick another port with" if isinstance(cause, OSError) and \
                cause.errno == errno.EADDRINUSE else "check the address given to"
            raise StartupError(f"cannot listen for {name} on {address}: {why}; {hint} "
                               f"--{name.replace('_', '-')}-listen HOST:PORT (0 picks a free port)") from None

    def _prepare_data_dir(self) -> None:
        d = self.data_dir
        try:
            d.mkdir(parents=True, exist_ok=True)
            probe = d / ".write-probe"
            probe.write_bytes(b"")
            probe.unlink()
            self._lock_fd = os.open(d / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StartupError(f"data directory {d} is not usable: {exc.strerror or exc}; "
                               f"choose a writable directory with --data-dir") from None
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise StartupError(f"data directory {d} is in use by another broker (locked: {d / LOCK_FILE}); "
                               f"stop it or choose another --data-dir") from None
        (d / LISTENERS_FILE).unlink(missing_ok=True)  # left by a broker that was killed

    def _cluster_id(self) -> str:
        path = self.data_dir / CLUSTER_ID_FILE
        try:
            return path.read_text().strip()
        except FileNotFoundError:
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            write_atomic(path, cluster_id.encode())
            return cluster_id

    def _stream_advertised(self, listener: str = "stream") -> tuple[str, int]:
        """Host and port stream clients of a listener are told (Open's advertised_host/port, Metadata's broker)."""
        given = getattr(self.settings, f"{listener}_advertised")  # --stream-advertised, --stream-tls-advertised
        if given is not None:
            return given.host, given.port
        port = self.ports.get(listener)
        if port is None:
            return "localhost", 5552
        host = port.getHost()
        return ("localhost" if host.host in ("0.0.0.0", "::") else host.host), host.port

    def _kafka_advertised(self, listener: str = "kafka") -> tuple[str, int]:
        given = self.settings.kafka_advertised
        if listener == "kafka" and given is not None:  # clients are told it in single-node mode too
            return given.host, given.port
        port = self.ports.get(listener) or self._kept_ports.get(listener)
        host = port.getHost()
        name = host.host
        if name in ("0.0.0.0", "::", ""):
            name = socket.getfqdn()
        return name, host.port

    def start(self) -> defer.Deferred:
        """Steps 3 and 4, once the reactor runs; fires when ready, fails with the start-up error."""
        log.info("opening logs", extra=fields(data_dir=str(self.data_dir)))
        self._starting = threads.deferToThread(self._open_logs)
        self._starting.addCallback(self._opened)
        return self._starting

    def _open_logs(self):
        info = self.logs.startup()
        self.kafka.groups.load()  # committed offsets come back from __consumer_offsets
        self.kafka.transactions.load()  # and transactions a crash left half-ended are finished
        if self.cluster is None:  # cluster mode: loaded by the AMQP home when it is elected (gateway.cluster)
            self.amqp.router.load()  # durable exchanges, queues, bindings and ack floors
        return info

    def _opened(self, info) -> None:
        log.info("logs opened", extra=fields(
            partitions=info.partitions, clean_shutdown=info.clean_shutdown,
            recovered_segments=info.recovered_segments, truncated_bytes=info.truncated_bytes,
            seconds=round(info.seconds, 3)))
        self._logs_open = True
        self.group_commit.open(self.reactor)
        if self.settings.definitions is not None:
            self._load_definitions(self.settings.definitions)
        addresses = self.addresses()
        write_atomic(self.data_dir / LISTENERS_FILE, json.dumps(addresses).encode())
        self.ready = True
        log.info("listening", extra=fields(node_id=self.settings.node_id, **addresses))
        self._kept_ports = dict(self.ports)  # requests still in flight at shutdown advertise these
        duties = self.duties = Duties(self.reactor)
        duties.every(1.0, self.users.maybe_reload)  # users added with `gateway users` log in at once
        self.group_commit.start(self.settings.flush_interval_ms)
        duties.every(self.settings.maintenance_interval_ms / 1000, self._maintenance_tick)
        duties.every(lambda: GROUP_TICK_S if self.kafka.groups.watching() else GROUP_IDLE_TICK_S, self._group_tick)
        if self.settings.kafka_idle_ms:
            duties.every(min(1000, self.settings.kafka_idle_ms) / 1000, self._close_idle_kafka)
        duties.every(history.SAMPLE_S, self.management_history.sample)
        duties.every(TXN_TICK_S, self._txn_tick)
        duties.every(AMQP_TICK_S, self.amqp.tick)
        if self.cluster is not None:
            self.cluster.activate()
            duties.every(CLUSTER_TICK_S, self.cluster.tick)
        if self.kafka.stream_consumers is not None:
            duties.every(CLUSTER_TICK_S, self.kafka.stream_consumers.tick)

    def _load_definitions(self, path: Path) -> None:
        if self.cluster is not None:  # the AMQP model is the cluster's, not open yet here
            where = "any broker's" if self.settings.amqp_cluster_mode == "spread" else "the AMQP home's"
            log.warning(f"--definitions is ignored in cluster mode: import the file through {where} "
                        "management API (POST /api/definitions)", extra=fields(file=str(path)))
            return
        try:
            definitions.load_file(self, path)
        except ValueError as exc:
            raise StartupError(str(exc)) from None

    def addresses(self) -> dict[str, str]:
        out = {}
        for name, port in self.ports.items():
            host = port.getHost()
            out[name] = str(HostPort(host.host, host.port))
        return out

    def health(self) -> tuple[bool, dict]:
        doc = {"status": "ok" if self.ready else "starting", "node_id": self.settings.node_id,
               "uptime_seconds": round(time.monotonic() - self.started_at, 3)}
        if self.ready:
            doc["partitions"] = len(self.logs.logs)
            doc["listeners"] = self.addresses()
        return self.ready, doc

    # --- background duties ----------------------------------------------------------
    def request_flush(self) -> None:
        """Group commit: one fsync pass for everything appended since the last (gateway.group_commit)."""
        self.group_commit.request()

    def _close_idle_kafka(self) -> None:
        now, limit = time.monotonic(), self.settings.kafka_idle_ms / 1000
        for connection in list(self.kafka.connections):
            if connection.idle_for(now) > limit:
                connection.drop(f"no whole request for {limit:g} s (--kafka-idle-ms, Kafka's connections.max.idle.ms)")

    def _group_tick(self) -> None:
        try:
            self.kafka.groups.tick()
        except Exception:
            log.exception("group coordinator tick failed")

    def _txn_tick(self) -> None:
        try:
            for step in self.kafka.transactions.expire():
                txn_steps.run(self.kafka, step)
        except Exception:
            log.exception("transaction timeout check failed")

    def _maintenance_tick(self) -> None:
        try:
            self.logs.maintenance()
        except Exception:
            log.exception("log maintenance failed; will retry at the next interval")

    # --- stop -----------------------------------------------------------------------
    @defer.inlineCallbacks
    def stop(self):
        log.info("shutting down")
        self.ready = False
        if self.kafka is not None:
            self.kafka.accepting = False
        if self.amqp is not None and self._logs_open:
            self.streams.stop()
            self.amqp.stop()
        yield self._close_ports()
        if self.duties is not None:
            self.duties.stop()
        if self._starting is not None and not self._starting.called:
            yield _settled(self._starting)
        running = self.group_commit.close()  # logs.shutdown() below flushes everything
        if running is not None:
            yield _settled(running)
        self.group_commit.stop_thread()
        if self.cluster is not None:
            yield threads.deferToThread(self.cluster.stop)  # leaves ZooKeeper: the partitions led here move
        if self._logs_open:  # never mark a log clean whose recovery did not finish
            self.logs.shutdown()  # flushes and closes every segment, leaves the clean-shutdown mark
        (self.data_dir / LISTENERS_FILE).unlink(missing_ok=True)
        self._unlock()
        log.info("stopped")

    def _close_ports(self) -> defer.Deferred:
        ports, self.ports = list(self.ports.values()), {}
        return defer.gatherResults([defer.maybeDeferred(p.stopListening) for p in ports])

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def _settled(d: defer.Deferred) -> defer.Deferred:
    """A Deferred that fires when ``d`` does, whatever its result, without consuming it."""
    done = defer.Deferred()
    d.addBoth(lambda result: (done.callback(None), result)[1])
    return done
