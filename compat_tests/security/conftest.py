"""Fixtures of the security suite: certificates, and one broker with users, TLS listeners and
``--kafka-require-auth``, set up the way an operator would (``gateway users ...`` CLI).

Gateway-only: the AMQP expectations here follow RabbitMQ's documented behaviour (403 at login,
530 for a vhost without permissions, 403 ACCESS_REFUSED per the access-control table), but the
suite does not run them against the private RabbitMQ node, which would need user management
through ``rabbitmqctl`` and a TLS listener configured on it.
"""
from __future__ import annotations

import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.brokerproc import ROOT, BrokerProcess, start_broker

from .certs import Certs, make_certs

PASSWORDS = {"alice": "alice-secret", "carol": "carol-secret", "nobody": "nobody-secret"}


def users_cli(data_dir: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway", "users", "--data-dir", str(data_dir), *args],
                          cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=60)


@dataclass
class SecureBroker:
    process: BrokerProcess
    certs: Certs

    def address(self, listener: str) -> tuple[str, int]:
        return self.process.address(listener)

    def bootstrap(self, listener: str = "kafka") -> str:
        return self.process.addresses[listener]

    @property
    def data_dir(self) -> Path:
        return self.process.data_dir

    def output(self) -> str:
        return self.process.output()


@pytest.fixture(scope="session")
def certs(tmp_path_factory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"), clients=("alice", "stranger"))


def tls_args(certs: Certs) -> list[str]:
    return ["--kafka-tls-listen", "127.0.0.1:0", "--amqp-tls-listen", "127.0.0.1:0", "--stream-tls-listen", "127.0.0.1:0",
            "--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key),
            "--tls-client-ca", str(certs.ca)]


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory, certs):
    data_dir = tmp_path_factory.mktemp("secure") / "data"
    for name, password in PASSWORDS.items():
        done = users_cli(data_dir, "add", name, stdin=password + "\n")
        assert done.returncode == 0, done.stderr
    assert users_cli(data_dir, "set-permissions", "alice", ".*", ".*", ".*").returncode == 0
    assert users_cli(data_dir, "set-permissions", "carol", "^carol-", "^carol-", "^carol-").returncode == 0
    process = start_broker(data_dir, *tls_args(certs), "--kafka-require-auth", "true")
    broker = SecureBroker(process, certs)
    try:
        yield broker
    finally:
        if process.proc.poll() is None:
            process.stop(signal.SIGTERM)
