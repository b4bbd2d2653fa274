"""Unit tests of the security pieces: SCRAM (RFC 7677's test vector and failures), the user store
(file format, no plain text, reload, broken files, concurrent edits) and the loopback rule for
``guest`` on both protocols.

The loopback rule is tested here, in process, with a peer address that is not loopback
(192.0.2.10, TEST-NET-1): the test machines may only send traffic to loopback addresses, so a
real client cannot connect from a non-loopback address.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import stat
import threading
from types import SimpleNamespace

import pytest
from pamqp import commands, frame as pframe
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from gateway.security.scram import (
    ScramCredential, ScramError, ScramServer, credential_from_salted_password, make_credential, password_matches,
)
from gateway.security.users import Permission, UserStore, UserStoreError, is_loopback

# --- SCRAM ------------------------------------------------------------------------------

RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")


def test_rfc7677_scram_sha_256_exchange():
    credential = make_credential("SCRAM-SHA-256", "pencil", 4096, RFC7677_SALT)
    server = ScramServer("SCRAM-SHA-256", {"user": credential}.get,
                         server_nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    final = server.client_final(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.username == "user" and server.done


def _client_proof(mechanism: str, password: str, salt: bytes, iterations: int, auth_message: bytes) -> bytes:
    name = "sha256" if mechanism.endswith("256") else "sha512"
    salted = hashlib.pbkdf2_hmac(name, password.encode(), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", name)
    signature = hmac.digest(hashlib.new(name, client_key).digest(), auth_message, name)
    return bytes(a ^ b for a, b in zip(client_key, signature))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("password, ok", [("right", True), ("wrong", False)])
def test_scram_exchange_checks_the_proof(mechanism, password, ok):
    credential = make_credential(mechanism, "right")
    server = ScramServer(mechanism, {"a=b,c": credential}.get)
    bare = "n=a=3Db=2Cc,r=abc"
    first = server.client_first(f"n,,{bare}".encode()).decode()
    attrs = dict(part.split("=", 1) for part in first.split(","))
    without_proof = f"c=biws,r={attrs['r']}"
    proof = _client_proof(mechanism, password, base64.b64decode(attrs["s"]), int(attrs["i"]),
                          f"{bare},{first},{without_proof}".encode())
    message = f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
    if ok:
        assert server.client_final(message).startswith(b"v=")
        assert server.username == "a=b,c"
    else:
        with pytest.raises(ScramError, match="invalid proof"):
            server.client_final(message)


@pytest.mark.parametrize("first", [b"p=tls-unique,,n=user,r=x", b"n,,r=x", b"n,,n=user", b"n,a=other,n=user,r=x",
                                   b"n,,n=us=ZZer,r=x", b"n,,n=user,r=x,tokenauth=true", b"\xff"])
def test_scram_rejects_malformed_client_first(first):
    server = ScramServer("SCRAM-SHA-256", {"user": make_credential("SCRAM-SHA-256", "pw")}.get)
    with pytest.raises(ScramError):
        server.client_first(first)


def test_scram_unknown_user_and_wrong_nonce():
    server = ScramServer("SCRAM-SHA-256", {}.get)
    with pytest.raises(ScramError, match="no SCRAM-SHA-256 credential"):
        server.client_first(b"n,,n=ghost,r=x")
    server = ScramServer("SCRAM-SHA-256", {"user": make_credential("SCRAM-SHA-256", "pw")}.get)
    server.client_first(b"n,,n=user,r=x")
    with pytest.raises(ScramError, match="nonce"):
        server.client_final(b"c=biws,r=xother,p=AAAA")
    with pytest.raises(ScramError, match="channel binding"):
        server.client_final(b"c=eSws,r=x,p=AAAA")


def test_credential_from_salted_password_matches_make_credential():
    made = make_credential("SCRAM-SHA-512", "pw", 4096, b"salt" * 4)
    salted = hashlib.pbkdf2_hmac("sha512", b"pw", b"salt" * 4, 4096)
    assert credential_from_salted_password("SCRAM-SHA-512", b"salt" * 4, 4096, salted) == made
    assert password_matches(made, "pw") and not password_matches(made, "pw2")
    assert ScramCredential.from_json("SCRAM-SHA-512", made.to_json()) == made
    with pytest.raises(ValueError):
        make_credential("SCRAM-SHA-256", "pw", 100)


# --- the user store ------------------------------------------------------------------------

def test_default_store_has_guest_only_from_loopback(tmp_path):
    store = UserStore.in_data_dir(tmp_path)
    assert list(store.users) == ["guest"]
    assert store.authenticate("guest", "guest", "127.0.0.1") is None
    assert store.authenticate("guest", "guest", "::1") is None
    assert "only connect via localhost" in store.authenticate("guest", "guest", "192.0.2.10")
    assert "wrong password" in store.authenticate("guest", "nope", "127.0.0.1")
    assert store.permission("guest", "/") == Permission(".*", ".*", ".*")
    assert not (tmp_path / "users.json").exists()  # nothing written until an edit


def test_store_file_has_salted_hashes_only_and_mode_0600(tmp_path):
    store = UserStore.in_data_dir(tmp_path)
    store.add_user("alice", "correct horse battery staple")
    path = tmp_path / "users.json"
    text = path.read_text()
    assert "correct horse" not in text and '"guest"' not in text.replace('"guest": {', "")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    doc = json.loads(text)
    assert set(doc["users"]) == {"alice", "guest"}  # the first edit keeps the default guest
    assert set(doc["users"]["alice"]["scram"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert UserStore.in_data_dir(tmp_path).authenticate("alice", "correct horse battery staple", "192.0.2.10") is None


def test_store_reloads_a_changed_file_and_keeps_users_on_a_broken_one(tmp_path):
    running = UserStore.in_data_dir(tmp_path)
    cli = UserStore.in_data_dir(tmp_path)
    cli.add_user("bob", "pw")
    assert running.maybe_reload() and running.get("bob") is not None
    assert not running.maybe_reload()
    cli.delete_user("guest")
    assert running.authenticate("guest", "guest", "127.0.0.1") is not None  # authenticate reloads
    (tmp_path / "users.json").write_text("{not json")
    assert not running.maybe_reload()
    assert running.get("bob") is not None
    with pytest.raises(UserStoreError):
        UserStore.in_data_dir(tmp_path)


def test_store_edits_and_errors(tmp_path):
    store = UserStore.in_data_dir(tmp_path)
    store.add_user("carol", None)  # certificate-only
    assert store.authenticate("carol", "", "127.0.0.1") is not None
    with pytest.raises(UserStoreError, match="already exists"):
        store.add_user("carol", "x")
    with pytest.raises(UserStoreError, match="does not exist"):
        store.delete_user("nobody")
    with pytest.raises(UserStoreError, match="regular expression"):
        store.set_permissions("carol", "/", "(", ".*", ".*")
    store.set_permissions("carol", "/", "^carol-", "", ".*")
    p = store.permission("carol", "/")
    assert p.allows("configure", "carol-q") and not p.allows("configure", "other-carol-q")
    assert not p.allows("write", "carol-q")  # "" allows nothing
    assert p.allows("read", "anything")
    store.clear_permissions("carol", "/")
    assert store.permission("carol", "/") is None


def test_concurrent_edits_lose_nothing(tmp_path):
    UserStore.in_data_dir(tmp_path).add_user("seed", "x")

    def add(prefix):
        store = UserStore.in_data_dir(tmp_path)
        for i in range(5):
            store.set_tags("seed", [])
            store.add_user(f"{prefix}{i}", None)

    threads = [threading.Thread(target=add, args=(p,)) for p in "abc"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(UserStore.in_data_dir(tmp_path).users) == 2 + 15


def test_is_loopback():
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"))
    assert not any(is_loopback(h) for h in ("192.0.2.10", "10.0.0.1", "::ffff:192.0.2.1", "fd00::2"))


# --- guest from a non-loopback address, on both protocols (in process) -----------------------

class _FakeAmqpService:
    def __init__(self, users):
        self.users = users
        self.router = None
        self.reactor = Clock()
        self.connections, self.confirming, self.output_pending = set(), set(), set()
        self.accepting, self.alarm_reason = True, None
        self.max_connections_per_user, self.channel_max, self.max_message_bytes = 0, 2047, 1 << 27

    @staticmethod
    def too_many_connections():
        return False

    def server_properties(self, capabilities):
        return {"capabilities": capabilities}

    def after_input(self):
        pass


def _amqp_login(host: str, user: str, password: str) -> bytes:
    from gateway.amqp.connection import AmqpConnection
    connection = AmqpConnection(_FakeAmqpService(UserStore(None)))
    transport = StringTransport(peerAddress=IPv4Address("TCP", host, 40000))
    connection.makeConnection(transport)
    connection.dataReceived(b"AMQP\x00\x00\x09\x01")
    connection.dataReceived(pframe.marshal(commands.Connection.StartOk(
        client_properties={"capabilities": {"authentication_failure_close": True}}, mechanism="PLAIN",
        response=f"\0{user}\0{password}", locale="en_US"), 0))
    connection.reactor.advance(0)
    return transport.value()


def _frames(data: bytes) -> list:
    out, pos = [], 0
    while pos < len(data):
        consumed, _channel, value = pframe.unmarshal(data[pos:])
        out.append(value)
        pos += consumed
    return out


def test_amqp_guest_is_refused_from_a_non_loopback_address():
    frames = _frames(_amqp_login("192.0.2.10", "guest", "guest"))
    close = [f for f in frames if isinstance(f, commands.Connection.Close)]
    assert close and close[0].reply_code == 403 and "ACCESS_REFUSED" in close[0].reply_text
    assert not any(isinstance(f, commands.Connection.Tune) for f in frames)


def test_amqp_guest_is_accepted_from_loopback():
    frames = _frames(_amqp_login("127.0.0.1", "guest", "guest"))
    assert any(isinstance(f, commands.Connection.Tune) for f in frames)


def _kafka_plain(host: str, user: str, password: str):
    from gateway.kafka.apis.session import sasl_authenticate
    from wire.kafka import RequestHeader, request_class
    conn = SimpleNamespace(sasl_mechanism="PLAIN", sasl_done=False, sasl_state=None, principal=None,
                           close_after_response=False, peer=f"{host}:1", peer_host=host, conn_id="kafka-test")
    ctx = SimpleNamespace(users=UserStore(None), connections=set(), max_connections_per_user=0)
    request = request_class(36, 2)(auth_bytes=f"\0{user}\0{password}".encode())
    sasl_authenticate(ctx, conn, RequestHeader(36, 2, 7, "test", True), request)
    return conn


def test_kafka_guest_is_refused_from_a_non_loopback_address():
    conn = _kafka_plain("192.0.2.10", "guest", "guest")
    assert conn.principal is None and conn.close_after_response
    conn = _kafka_plain("127.0.0.1", "guest", "guest")
    assert conn.principal == "guest" and not conn.close_after_response


# --- TLS settings: errors at start-up ---------------------------------------------------------

def _serve(tmp_path, *args):
    import subprocess
    import sys
    from tests.brokerproc import ROOT
    argv = [sys.executable, "-m", "gateway", "serve", "--data-dir", str(tmp_path / "d"),
            "--kafka-listen", "127.0.0.1:0", "--amqp-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def test_tls_listener_without_certificate_exits_2(tmp_path):
    result = _serve(tmp_path, "--kafka-tls-listen", "127.0.0.1:0")
    assert result.returncode == 2 and "needs --tls-cert and --tls-key" in result.stderr


def test_unreadable_or_wrong_tls_files_exit_1(tmp_path):
    result = _serve(tmp_path, "--amqp-tls-listen", "127.0.0.1:0", "--tls-cert", str(tmp_path / "none.crt"),
                    "--tls-key", str(tmp_path / "none.key"))
    assert result.returncode == 1 and "cannot read the TLS certificate" in result.stderr
    (tmp_path / "bad.crt").write_text("not a certificate")
    result = _serve(tmp_path, "--amqp-tls-listen", "127.0.0.1:0", "--tls-cert", str(tmp_path / "bad.crt"),
                    "--tls-key", str(tmp_path / "bad.crt"))
    assert result.returncode == 1 and "gateway: error:" in result.stderr and "Traceback" not in result.stderr


def test_broken_users_file_exits_1(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "users.json").write_text("{}")
    result = _serve(tmp_path)
    assert result.returncode == 1 and "users file" in result.stderr


def test_users_cli(tmp_path):
    import subprocess
    import sys
    from tests.brokerproc import ROOT

    def cli(*args, stdin=None):
        return subprocess.run([sys.executable, "-m", "gateway", "users", "--data-dir", str(tmp_path), *args],
                              cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=60)

    assert cli("add", "ann", stdin="s3cret\n").returncode == 0
    assert cli("add", "ann", stdin="x\n").returncode == 1
    assert cli("add", "bo", stdin="").returncode == 1  # no password on stdin
    assert cli("add", "cert-only", "--no-password").returncode == 0
    assert cli("set-permissions", "ann", "^ann", ".*", "", "--vhost", "v1").returncode == 0
    assert cli("set-permissions", "ann", "(", ".*", "").returncode == 1
    assert cli("set-tags", "ann", "monitoring").returncode == 0
    listing = cli("list").stdout
    assert "ann\tmonitoring\tSCRAM-SHA-256,SCRAM-SHA-512\tv1\t^ann\t.*\t" in listing
    assert "cert-only\t-\t-\t-" in listing and "guest\t" in listing
    assert cli("passwd", "ann", "--password", "other", "--iterations", "100").returncode == 1
    assert cli("delete", "guest").returncode == 0 and "guest" not in cli("list").stdout
    assert "s3cret" not in (tmp_path / "users.json").read_text()


# --- Kafka ACL evaluation ------------------------------------------------------------------

def test_authorizer_semantics(tmp_path):
    from gateway.security.acl import AclBinding, AclFilter, Authorizer
    a = Authorizer(tmp_path / "acls.json", super_users=("root",))
    a.create([AclBinding("topic", "orders", "literal", "User:alice", "*", "read", "allow"),
              AclBinding("topic", "logs-", "prefixed", "User:*", "*", "write", "allow"),
              AclBinding("topic", "logs-secret", "literal", "User:bob", "*", "write", "deny"),
              AclBinding("topic", "*", "literal", "User:carol", "10.0.0.1", "all", "allow"),
              AclBinding("group", "g", "literal", "User:alice", "*", "read", "allow")])
    ok = lambda p, op, name, rt="topic", host="127.0.0.1": a.authorize(f"User:{p}", host, op, rt, name)  # noqa
    assert ok("alice", "read", "orders") and ok("alice", "describe", "orders")  # READ implies DESCRIBE
    assert not ok("alice", "write", "orders") and not ok("bob", "read", "orders")
    assert ok("bob", "write", "logs-app") and not ok("bob", "write", "logs-secret")
    assert ok("dan", "write", "logs-secret")
    assert not ok("carol", "read", "orders") and ok("carol", "read", "orders", host="10.0.0.1")  # host and "*"
    assert ok("root", "delete", "anything") and ok("root", "alter", "kafka-cluster", "cluster")
    assert not ok("alice", "read", "h") and ok("alice", "read", "g", "group")
    assert not ok("alice", "read", "unnamed", "group")  # no ACL names it: denied by default
    everyone = Authorizer(tmp_path / "acls.json", allow_if_no_acl=True)
    assert everyone.authorize("User:x", "h", "read", "group", "unnamed")
    assert not everyone.authorize("User:x", "h", "read", "topic", "unnamed")  # carol's "*" ACL names every topic
    reloaded = Authorizer(tmp_path / "acls.json")
    assert len(reloaded.bindings) == 5
    assert [b.resource_name for b in reloaded.describe(AclFilter(pattern_type="match", resource_name="logs-secret"))] \
        == ["logs-", "logs-secret", "*"]
    deleted = reloaded.delete([AclFilter(principal="User:carol")])
    assert [b.principal for b in deleted[0]] == ["User:carol"] and len(Authorizer(tmp_path / "acls.json").bindings) == 4
