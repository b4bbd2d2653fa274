"""The broker process: start-up, listeners, /healthz, settings precedence, errors, shutdown."""
from __future__ import annotations

import json
import re
import signal
import socket
import struct
import subprocess
import sys

import pytest
import requests

from core.log_manager import LogManager
from core.metadata import LocalMetadataStore
from tests.brokerproc import ROOT, spawn, start_broker
from tests.logutil import batch


def run_cli(*args: str, env: dict | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_healthz_and_listeners_file(broker):
    listeners = json.loads((broker.data_dir / "listeners.json").read_text())
    assert set(listeners) == {"kafka", "amqp", "http", "stream"}
    for address in listeners.values():
        host, port = address.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
    r = requests.get(broker.http_url + "/healthz", timeout=5)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    doc = r.json()
    assert doc["status"] == "ok" and doc["listeners"] == listeners
    r = requests.get(broker.http_url + "/no/such/thing", timeout=5)
    assert r.status_code == 404 and r.json()["error"] == "not found"
    lines = [line for line in broker.output().splitlines() if " listening " in line]
    assert len(lines) == 1 and all(f"{k}={v}" in lines[0] for k, v in listeners.items())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly(tmp_path, sig):
    b = start_broker(tmp_path / "data")
    assert b.stop(sig, timeout=10) == 0
    assert not (b.data_dir / "listeners.json").exists()
    assert (b.data_dir / ".clean-shutdown").exists()
    assert "stopped" in b.output()


def test_restart_after_kill_9_recovers(tmp_path):
    data = tmp_path / "data"
    logs = LogManager(data, LocalMetadataStore(data))
    logs.startup()
    logs.create_topic("t", 1)
    logs.get_log("t", 0).append(batch(3))
    logs.shutdown()
    b = start_broker(data)
    b.stop(signal.SIGKILL)
    again = start_broker(data)
    try:
        assert "clean_shutdown=False" in again.output()
        opened = re.search(r"logs opened partitions=(\d+)", again.output())
        assert opened and int(opened.group(1)) >= 1  # topic t (and the broker's internal topics)
        assert requests.get(again.http_url + "/healthz", timeout=5).json()["status"] == "ok"
    finally:
        assert again.stop() == 0


def test_command_line_beats_env_beats_config_file(tmp_path):
    config = tmp_path / "gateway.toml"
    config.write_text('node_id = 7\nlog_format = "json"\nlog_level = "debug"\n')
    b = start_broker(tmp_path / "data", "--config", str(config), "--log-level", "info",
                     env={"GATEWAY_NODE_ID": "8"})
    try:
        health = requests.get(b.http_url + "/healthz", timeout=5).json()
        assert health["node_id"] == 8  # env beats the file
        lines = [json.loads(line) for line in b.output().splitlines()]  # json from the file
        assert not any(line["level"] == "debug" for line in lines)  # command line beats the file
        listening = [line for line in lines if line["msg"] == "listening"]
        assert len(listening) == 1 and listening[0]["kafka"] == b.addresses["kafka"]
    finally:
        b.stop()


def test_port_in_use_is_one_clear_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc, log_path = spawn(tmp_path / "data", "--amqp-listen", f"127.0.0.1:{port}")
        assert proc.wait(30) == 1
    out = log_path.read_text()
    errors = [line for line in out.splitlines() if line.startswith("gateway: error:")]
    assert len(errors) == 1, out
    assert f"127.0.0.1:{port}" in errors[0] and "amqp" in errors[0] and "--amqp-listen" in errors[0]
    assert "Traceback" not in out


def test_unwritable_data_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = run_cli("serve", "--data-dir", str(blocker / "data"), "--kafka-listen", "127.0.0.1:0",
                     "--amqp-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("gateway: error: data directory")
    assert "Traceback" not in result.stderr


def test_second_broker_on_same_data_dir_is_refused(broker):
    proc, log_path = spawn(broker.data_dir)
    assert proc.wait(30) == 1
    assert "in use by another broker" in log_path.read_text()


@pytest.mark.parametrize("args, needle", [
    (["--kafka-listen", "nowhere"], "--kafka-listen"),
    (["--node-id", "-1"], "--node-id"),
    (["--log-level", "loud"], "--log-level"),
    (["--no-such-option"], "unrecognized arguments"),
])
def test_bad_option_exits_2(tmp_path, args, needle):
    result = run_cli("serve", "--data-dir", str(tmp_path / "d"), *args)
    assert result.returncode == 2
    assert needle in result.stderr and "Traceback" not in result.stderr


def test_bad_env_and_config_name_their_source(tmp_path):
    result = run_cli("serve", env={"GATEWAY_FLUSH_INTERVAL_MS": "soon", "PATH": "/usr/bin"})
    assert result.returncode == 2 and "GATEWAY_FLUSH_INTERVAL_MS" in result.stderr
    config = tmp_path / "c.toml"
    config.write_text("colour = 'blue'\n")
    result = run_cli("serve", "--config", str(config))
    assert result.returncode == 2 and "unknown key 'colour'" in result.stderr


def test_help_lists_every_option():
    result = run_cli("serve", "--help")
    assert result.returncode == 0
    for flag in ("--data-dir", "--kafka-listen", "--amqp-listen", "--http-listen", "--node-id", "--log-level",
                 "--log-format", "--config", "GATEWAY_DATA_DIR"):
        assert flag in result.stdout


def _recv_all(sock: socket.socket) -> bytes:
    sock.settimeout(10)
    chunks = []
    while chunk := sock.recv(4096):
        chunks.append(chunk)
    return b"".join(chunks)


def test_amqp_wrong_protocol_header_gets_ours(broker):
    with socket.create_connection(broker.address("amqp")) as s:
        s.sendall(b"HTTP/1.1 GET /\r\n\r\n")
        assert _recv_all(s) == b"AMQP\x00\x00\x09\x01"


@pytest.mark.parametrize("size", [100 * 1024 * 1024 + 1, -5])
def test_kafka_oversize_or_negative_frame_closes(broker, size):
    with socket.create_connection(broker.address("kafka")) as s:
        s.sendall(struct.pack(">i", size) + b"\x00" * 16)
        assert _recv_all(s) == b""
    assert "bad request framing" in broker.output()
    assert requests.get(broker.http_url + "/healthz", timeout=5).status_code == 200
