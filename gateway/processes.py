"""``gateway serve --processes N``: every core of one machine, as one cluster of N brokers.

One broker is one Python process and so one core. This runs N of them as the cluster mode
already built (ZooKeeper metadata, partitions and their leaders spread by the controller, any
broker answering Metadata for all, AMQP connections relayed to the AMQP home): node ``i``
(1..N) gets node id ``i``, every listener port of the settings plus ``i - 1`` (port 0 stays 0),
and the data directory ``DIR/node-i``. Without ``--zookeeper`` a private ZooKeeper runs under
``DIR/zookeeper`` (Debian's package, as the cluster tests use; its data is kept there, so the
cluster comes back with its metadata on the next start). Topics get one replica unless a
replication factor is set: the processes share one disk and one machine, and a second copy on
the same machine would halve the throughput this is for.

The launcher only supervises: SIGTERM or SIGINT stops every broker (each a clean stop), then
ZooKeeper; a broker that exits on its own stops the rest, and the exit status says which.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from gateway.config import Settings, read_toml
from gateway.logs import fields

log = logging.getLogger("gateway.processes")

LISTENERS = ("kafka", "amqp", "http", "stream", "kafka_tls", "amqp_tls", "stream_tls")
ADVERTISED = ("kafka", "amqp", "stream", "stream_tls")
STOP_TIMEOUT_S = 120


class NotListening(Exception):
    """A broker did not write its listeners.json: it exited first (``exited``), or time ran out."""

    def __init__(self, message: str, exited: bool):
        super().__init__(message)
        self.exited = exited


def listeners_path(data_dir: Path, index: int) -> Path:
    """Where node ``index`` of ``gateway serve --processes`` with ``--data-dir data_dir`` writes its listeners."""
    return Path(data_dir) / f"node-{index}" / "listeners.json"


def read_listeners(path: Path) -> dict | None:
    """The listener addresses ({"kafka": "host:port", ...}) a broker writes to its data directory's
    listeners.json once it listens (and removes when it stops); None while the file is not there."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


def wait_for_listeners(path: Path, timeout: float, alive: Callable[[], bool] = lambda: True,
                       interval: float = 0.2) -> dict:
    """:func:`read_listeners` once there are some, polling every ``interval`` s; :class:`NotListening`
    when ``alive()`` (asked before each look) says the broker is gone, or after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise NotListening(f"the broker exited before writing {path}; its log says why", exited=True)
        listeners = read_listeners(path)
        if listeners is not None:
            return listeners
        time.sleep(interval)
    raise NotListening(f"{path} was not written within {timeout} s: the broker is not listening; see its log, "
                       f"or give it a longer timeout if it is still starting", exited=False)


def _without(args: list[str], flag: str) -> list[str]:
    """``args`` without ``flag VALUE`` / ``flag=VALUE``."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == flag:
            skip = True
        elif not arg.startswith(flag + "="):
            out.append(arg)
    return out


def _shifted(host_port, offset: int) -> str:
    port = host_port.port + offset if host_port.port else 0
    host = f"[{host_port.host}]" if ":" in host_port.host else host_port.host
    return f"{host}:{port}"


def _given(name: str, args: list[str], settings_file: str | None) -> bool:
    """Whether the user set setting ``name`` (a Settings field): option, environment or file."""
    flag = "--" + name.replace("_", "-")
    if any(a == flag or a.startswith(flag + "=") for a in args):
        return True
    if os.environ.get("GATEWAY_" + name.upper()):
        return True
    config = settings_file or os.environ.get("GATEWAY_CONFIG")
    return bool(config) and name in read_toml(Path(config))


# What --processes changes from a cluster's defaults, unless the user set it: AMQP queues led
# by every process (cluster mode 'spread') and placed on the one leading the fewest partitions,
# since clients of one machine mostly connect to the first port and 'client-local' would put
# every queue there.
PROCESSES_DEFAULTS = {"amqp_cluster_mode": "spread", "queue_leader_locator": "balanced"}


def node_args(settings: Settings, serve_args: list[str], index: int, zookeeper: str,
              settings_file: str | None = None) -> list[str]:
    """The ``gateway serve`` arguments of node ``index`` (1-based): the launcher's own, with this
    node's identity, directory and ports after them (the last occurrence of an option wins)."""
    args = _without(serve_args, "--processes")
    for name, value in PROCESSES_DEFAULTS.items():
        if not _given(name, serve_args, settings_file):
            args += [f"--{name.replace('_', '-')}", value]
    args += ["--processes", "1", "--node-id", str(index), "--zookeeper", zookeeper,
             "--data-dir", str(Path(settings.data_dir) / f"node-{index}")]
    for name in LISTENERS:
        address = getattr(settings, f"{name}_listen")
        if address is not None:
            args += [f"--{name.replace('_', '-')}-listen", _shifted(address, index - 1)]
    for name in ADVERTISED:
        address = getattr(settings, f"{name}_advertised")
        if address is not None:
            args += [f"--{name.replace('_', '-')}-advertised", _shifted(address, index - 1)]
    return args


def run(settings: Settings, serve_args: list[str], config_file: str | None = None) -> int:
    data_dir = Path(settings.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    zk_node = None
    zookeeper = settings.zookeeper
    if not zookeeper:
        from gateway.zookeeper_node import ZooKeeperNode, ZooKeeperUnavailable, ensure_chroot
        try:
            zk_node = ZooKeeperNode(data_dir / "zookeeper", force_sync=True)
            seconds = zk_node.start()
            ensure_chroot(zk_node.hosts, "/gateway")
        except (ZooKeeperUnavailable, OSError) as exc:
            print(f"gateway: error: --processes needs a ZooKeeper: cannot start a private one ({exc}); "
                  "install Debian's zookeeper package or give --zookeeper HOST:PORT", file=sys.stderr)
            if zk_node is not None:
                zk_node.stop()
            return 1
        zookeeper = f"{zk_node.hosts}/gateway"
        log.info("private ZooKeeper serving", extra=fields(zookeeper=zookeeper, seconds=round(seconds, 2)))
    extra = [] if _given("default_replication_factor", serve_args, config_file) else ["--default-replication-factor", "1"]
    children: dict[int, subprocess.Popen] = {}
    stopping = {"signal": None}

    def on_signal(signum, _frame):
        stopping["signal"] = signum
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    code = 0
    try:
        for index in range(1, settings.processes + 1):
            listeners_path(data_dir, index).unlink(missing_ok=True)  # a killed run's
            argv = [sys.executable, "-m", "gateway", "serve", *extra,
                    *node_args(settings, serve_args, index, zookeeper, config_file)]
            children[index] = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
        _announce(data_dir, children, stopping)
        while stopping["signal"] is None:
            gone = {i: p.returncode for i, p in children.items() if p.poll() is not None}
            if gone:
                for index, status in gone.items():
                    log.error("broker node %d exited on its own with status %s; stopping the others", index, status,
                              extra=fields(node_id=index, status=status))
                code = 1
                break
            time.sleep(0.2)
    finally:
        for process in children.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for index, process in children.items():
            try:
                status = process.wait(max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                log.error("broker node %d did not stop within %d s; killing it", index, STOP_TIMEOUT_S)
                process.kill()
                status = process.wait()
            if status not in (0, None) and stopping["signal"] is not None:
                code = 1
        if zk_node is not None:
            zk_node.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code


def _announce(data_dir: Path, children: dict[int, subprocess.Popen], stopping: dict, timeout: float = 120) -> None:
    """Log each node's listeners once it has written them (the node's listeners.json)."""
    waiting = set(children)
    deadline = time.monotonic() + timeout
    while waiting and stopping["signal"] is None and time.monotonic() < deadline:
        for index in sorted(waiting):
            if children[index].poll() is not None:
                waiting.discard(index)
                continue
            listeners = read_listeners(listeners_path(data_dir, index))
            if listeners is None:
                continue
            waiting.discard(index)
            log.info("broker node %d listening: %s", index,
                     ", ".join(f"{name} {address}" for name, address in sorted(listeners.items())))
        time.sleep(0.2)
    if waiting and stopping["signal"] is None:
        log.warning("broker node(s) %s not listening after %d s", sorted(waiting), timeout)
