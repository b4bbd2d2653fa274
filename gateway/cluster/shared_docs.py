"""Cluster mode: client quotas, group configs, users and ACLs are the cluster's, not one broker's.

Kafka keeps all four in its metadata (ZooKeeper's ``/config/...`` and ``/kafka-acl`` nodes before
KRaft), so an AlterClientQuotas, IncrementalAlterConfigs, AlterUserScramCredentials or CreateAcls
answered by one broker holds on every broker, and RabbitMQ's users and permissions are its
cluster's too. Here each is one JSON document in ZooKeeper (core.cluster.zk SHARED_DOCS), in the
form the single-node file has. A broker's store (core.quotas.ClientQuotaStore,
core.group_configs.GroupConfigs, gateway.security.users.UserStore, gateway.security.acl.Authorizer)
reads it from the cluster view, writes it back conditionally on the version it read (two brokers
altering at once: the second is told to try again, nothing is lost), and reloads it when a view
shows another broker's write.
"""
from __future__ import annotations

from core.cluster.zk import SHARED_DOCS, ZkError

QUOTAS, GROUP_CONFIGS, USERS, ACLS = SHARED_DOCS


class SharedDocument:
    def __init__(self, node, path: str):
        self.node = node  # gateway.cluster.node.ClusterNode
        self.path = path
        self.name = f"ZooKeeper node {path}"
        self.version = -1  # of the copy last read or written (-1: none exists)

    def read(self):
        found = self.node.view.configs.get(self.path)
        if found is None:
            self.version = -1
            return None
        doc, self.version = found
        return doc

    def write(self, doc) -> None:
        try:
            self.version = self.node.agent.write_doc(self.path, doc, self.version)
        except ZkError as exc:  # the stores' callers answer an OSError as "not changed"
            raise OSError(str(exc)) from None

    def stale(self) -> bool:
        """Whether the view holds a newer version than this broker last read or wrote (another
        broker's write; a view older than this broker's own last write is not)."""
        found = self.node.view.configs.get(self.path)
        return found is not None and found[1] > self.version

    def join(self, adopt, seed) -> bool:
        """A broker's store starts sharing: ``adopt(doc)`` the cluster's copy if there is one, else
        write ``seed()`` (this broker's own, as a document) as the cluster's; True if it did."""
        doc = self.read()
        if doc is not None:
            adopt(doc)
            return False
        try:
            self.write(seed())
        except OSError:  # another broker seeded it at this very moment: its copy comes with the next view
            return False
        return True

    def newer(self):
        """The view's copy if it is newer than the one this broker last read or wrote, else None."""
        found = self.node.view.configs.get(self.path)
        if found is None or found[1] <= self.version:
            return None
        doc, self.version = found
        return doc


def document(ctx, path: str) -> SharedDocument | None:
    """The shared document for a store of ``ctx`` (a KafkaContext): None on a single node."""
    node = getattr(ctx, "cluster", None)
    return None if node is None else SharedDocument(node, path)


def refresh(ctx) -> None:
    """A new cluster view: each store whose document another broker rewrote reads it again."""
    quotas = getattr(ctx, "quotas", None)
    for store in (quotas.store if quotas is not None else None, getattr(ctx, "group_configs", None)):
        doc = getattr(store, "document", None)
        if doc is not None and doc.stale():
            store.reload()
    users = getattr(ctx, "users", None)
    if getattr(users, "document", None) is not None:
        users.maybe_reload()
    authorizer = getattr(ctx, "authorizer", None)
    if getattr(authorizer, "document", None) is not None:
        authorizer.refresh()
