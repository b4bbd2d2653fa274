"""Cluster mode's users (gateway.security.users.UserStore.share): one document for every broker,
each broker's users.json a copy that ``gateway users`` may edit. ZooKeeper is played by a
versioned document that refuses a write based on an old version, as a conditional set does."""
from __future__ import annotations

import copy

import pytest

from gateway.cluster.shared_docs import SharedDocument
from gateway.security.users import UserStore, UserStoreError


class Zk:
    def __init__(self):
        self.doc, self.at = None, -1


class Doc(SharedDocument):
    """One broker's handle on the shared document, on the Zk above instead of a cluster view."""
    name = "the users document"

    def __init__(self, zk: Zk):
        self.zk, self.version = zk, -1

    def read(self):
        self.version = self.zk.at
        return copy.deepcopy(self.zk.doc)

    def write(self, doc) -> None:
        if self.version != self.zk.at:
            raise OSError("changed by another broker at the same time: try again")
        self.zk.doc, self.zk.at = copy.deepcopy(doc), self.zk.at + 1
        self.version = self.zk.at

    def newer(self):
        if self.zk.doc is None or self.zk.at <= self.version:
            return None
        self.version = self.zk.at
        return copy.deepcopy(self.zk.doc)


def _broker(tmp_path, name: str, zk: Zk, *users: str) -> UserStore:
    store = UserStore.in_data_dir(tmp_path / name)
    for user in users:
        store.add_user(user, "secret")
    store.share(Doc(zk))
    return store


def test_the_first_broker_seeds_the_cluster_and_the_next_adopts_it(tmp_path):
    zk = Zk()
    a = _broker(tmp_path, "a", zk, "alice")
    b = _broker(tmp_path, "b", zk, "carol")
    assert set(a.users) == set(b.users) == {"guest", "alice"}  # b's own users gave way to the cluster's
    assert set(UserStore.in_data_dir(tmp_path / "b").users) == {"guest", "alice"}  # and its file says so


def test_an_edit_on_one_broker_reaches_the_other(tmp_path):
    zk = Zk()
    a, b = _broker(tmp_path, "a", zk), _broker(tmp_path, "b", zk)
    a.add_user("alice", "wonderland")
    a.set_permissions("alice", "/", ".*", ".*", ".*")
    assert b.maybe_reload()
    assert b.authenticate("alice", "wonderland", "10.0.0.1") is None
    assert b.permission("alice", "/") is not None


def test_a_cli_edit_of_a_brokers_file_is_merged_user_by_user(tmp_path):
    zk = Zk()
    a, b = _broker(tmp_path, "a", zk, "alice"), _broker(tmp_path, "b", zk)
    cli = UserStore.in_data_dir(tmp_path / "b")  # `gateway users` on broker b's data directory
    cli.add_user("bob", "builder")
    cli.delete_user("alice")
    a.add_user("dave", "x")  # meanwhile, through broker a: b has not seen it yet
    assert b.maybe_reload()
    assert set(zk.doc["users"]) == {"guest", "bob", "dave"}  # the CLI's two changes, dave kept
    assert a.maybe_reload() and set(a.users) == {"guest", "bob", "dave"}
    assert set(UserStore.in_data_dir(tmp_path / "b").users) == {"guest", "bob", "dave"}


def test_an_edit_based_on_an_old_copy_is_refused_not_lost(tmp_path):
    zk = Zk()
    a, b = _broker(tmp_path, "a", zk), _broker(tmp_path, "b", zk)
    a.add_user("alice", "x")
    b.document.newer = lambda: None  # the view has not brought a's write yet
    with pytest.raises(UserStoreError, match="try again"):
        b.add_user("bob", "y")
    assert set(zk.doc["users"]) == {"guest", "alice"}


def test_a_cli_edit_made_while_the_broker_was_down_is_merged_when_it_starts(tmp_path):
    zk = Zk()
    a, b = _broker(tmp_path, "a", zk), _broker(tmp_path, "b", zk, "carol")
    assert set(b.users) == {"guest"}  # b joined a's cluster: its own carol gave way
    cli = UserStore.in_data_dir(tmp_path / "b")  # b is stopped; `gateway users` on its directory
    cli.add_user("erin", "x")
    a.add_user("dave", "y")  # meanwhile, through broker a
    restarted = UserStore.in_data_dir(tmp_path / "b")
    restarted.share(Doc(zk))
    assert set(zk.doc["users"]) == set(restarted.users) == {"guest", "erin", "dave"}
    assert set(UserStore.in_data_dir(tmp_path / "b").users) == {"guest", "erin", "dave"}
