"""Run a private RabbitMQ node as a child process: the reference peer of the AMQP suites.

The node is Debian's ``rabbitmq-server`` (3.10.x; ``apt-get install -y rabbitmq-server``),
started straight from ``/usr/lib/rabbitmq/bin/rabbitmq-server`` rather than the
``/usr/sbin`` wrapper (which, run as root, ``su``\\ s to the ``rabbitmq`` user and writes to
``/var/lib/rabbitmq``). Everything the node owns lives under one base directory:

    <base>/home/            HOME: Erlang creates its ``.erlang.cookie`` here
    <base>/rabbitmq.conf    listeners.tcp.1 = 127.0.0.1:<amqp port>, console logging
    <base>/advanced.config  a 2 s retry for at-least-once dead letters (see _write_config)
    <base>/rabbitmq-env.conf, enabled_plugins   empty: /etc/rabbitmq is not read
    <base>/mnesia/          RABBITMQ_MNESIA_BASE: definitions and message stores
    <base>/log/             RABBITMQ_LOG_BASE
    <base>/node.log         the node's console output (appended across restarts)

Ports are picked free at construction and kept across restarts (so a robust client can
reconnect to the same address): the AMQP listener, the Erlang distribution port and a
private ``epmd`` (started here as a child on its own port, ``ERL_EPMD_PORT``, loopback only),
so nothing is shared with a system RabbitMQ or another test run, and nothing outlives it. The node name is ``rabbit-compat-<pid>-<n>@localhost``.

Start-up is ready when a real AMQP handshake (protocol header, connection.start) succeeds and
the default vhost answers ``connection.open``. :meth:`RabbitMQNode.stop` sends SIGTERM to the
start script, which stops the broker cleanly (exit 0); :meth:`RabbitMQNode.kill` sends SIGKILL
to the Erlang VM itself (``beam.smp``), a crash. :meth:`RabbitMQNode.close` also ends the
private epmd.
"""
from __future__ import annotations

import atexit
import itertools
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

from compat_tests.support import kept_port

INSTALL_HINT = "apt-get install -y rabbitmq-server"
_SCRIPT_DIRS = ("/usr/lib/rabbitmq/bin",)
_SCRIPT_GLOBS = ("/usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin",)
_counter = itertools.count(1)
_live: set["RabbitMQNode"] = set()


class RabbitMQUnavailable(RuntimeError):
    """RabbitMQ is not installed, or a node could not be started; the message says why."""


def find_server_script() -> Path:
    """The real ``rabbitmq-server`` start script (not Debian's su-ing wrapper).

    ``RABBITMQ_SERVER`` overrides the search. Raises :class:`RabbitMQUnavailable` naming the
    package to install.
    """
    override = os.environ.get("RABBITMQ_SERVER")
    if override:
        path = Path(override)
        if not path.is_file():
            raise RabbitMQUnavailable(f"RABBITMQ_SERVER={override} does not exist")
        return path
    candidates = [Path(d) / "rabbitmq-server" for d in _SCRIPT_DIRS]
    for pattern in _SCRIPT_GLOBS:
        candidates += sorted(Path("/").glob(pattern.lstrip("/") + "/rabbitmq-server"), reverse=True)
    for path in candidates:
        if path.is_file():
            return path
    raise RabbitMQUnavailable(
        "RabbitMQ is not installed: no rabbitmq-server under /usr/lib/rabbitmq. "
        f"Install Debian's package with `{INSTALL_HINT}` (as root), or set RABBITMQ_SERVER "
        "to a rabbitmq-server start script, or AMQP_COMPAT_TARGETS=gateway to leave RabbitMQ out.")


def installed_version() -> tuple[int, ...] | None:
    """The version of the installed RabbitMQ (from its lib directory's name), or None.

    Known without starting a node, so tests that need a newer RabbitMQ can be deselected at
    collection time rather than skipped.
    """
    try:
        script = find_server_script().resolve()
    except RabbitMQUnavailable:
        return None
    dirs = [script.parent.parent] if script.parent.parent.name.startswith("rabbitmq_server-") else []
    dirs += sorted(Path("/usr/lib/rabbitmq/lib").glob("rabbitmq_server-*"), reverse=True)
    for d in dirs:
        match = re.fullmatch(r"rabbitmq_server-(\d+(?:\.\d+)*)", d.name)
        if match:
            return tuple(int(p) for p in match.group(1).split("."))
    return None


def _free_port() -> int:
    return kept_port()  # kept across restarts: from outside the ephemeral range


def amqp_greets(host: str, port: int, timeout: float = 1.0) -> bool:
    """True if something at host:port answers the AMQP 0-9-1 header with connection.start."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"AMQP\x00\x00\x09\x01")
            head = b""
            while len(head) < 11:
                chunk = s.recv(11 - len(head))
                if not chunk:
                    return False
                head += chunk
            frame_type, channel, _size, class_id, method_id = struct.unpack(">BHIHH", head)
            return frame_type == 1 and channel == 0 and (class_id, method_id) == (10, 10)
    except OSError:
        return False


class RabbitMQNode:
    """One private RabbitMQ node under ``base_dir``; see the module docstring."""

    def __init__(self, base_dir: Path, name: str | None = None, *, management: bool = False, stream: bool = False,
                 amqp10: bool = False):
        self.script = find_server_script()
        self.management = management  # the rabbitmq_management plugin (HTTP API) on http_port
        self.stream = stream  # the rabbitmq_stream plugin (stream protocol) on stream_port
        self.amqp10 = amqp10  # the rabbitmq_amqp1_0 plugin (AMQP 1.0 on the AMQP port)
        self.base = Path(base_dir)
        self.node_name = name or f"rabbit-compat-{os.getpid()}-{next(_counter)}@localhost"
        self.host = "127.0.0.1"
        self.port = _free_port()
        self.dist_port = _free_port()
        self.epmd_port = _free_port()
        self.http_port = _free_port() if management else None
        self.stream_port = _free_port() if stream else None
        self.proc: subprocess.Popen | None = None
        self.epmd: subprocess.Popen | None = None
        self.log_path = self.base / "node.log"
        self.start_seconds: list[float] = []
        self._write_config()

    # ------------------------------------------------------------------ configuration

    def _write_config(self) -> None:
        for sub in ("home", "mnesia", "log"):
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        (self.base / "rabbitmq.conf").write_text("\n".join([
            f"listeners.tcp.1 = {self.host}:{self.port}",
            "loopback_users.guest = true",
            "log.console = true",
            "log.console.level = info",
            "log.file = false",
            # CI disks can be small; the default limit (50 MB) would block publishers.
            "disk_free_limit.absolute = 1MB",
            *([f"management.tcp.ip = {self.host}", f"management.tcp.port = {self.http_port}"]
              if self.management else []),
            *([f"stream.listeners.tcp.1 = {self.host}:{self.stream_port}", f"stream.advertised_host = {self.host}",
               f"stream.advertised_port = {self.stream_port}"] if self.stream else []),
            "",
        ]))
        (self.base / "rabbitmq-env.conf").write_text("")
        # At-least-once dead-lettering retries a dead letter that found no route every
        # dead_letter_worker_publisher_confirm_timeout (180 s by default, not a rabbitmq.conf key):
        # 2 s lets the suite see a dead letter arrive once its binding appears.
        (self.base / "advanced.config").write_text(
            "[{rabbit, [{dead_letter_worker_publisher_confirm_timeout, 2000}]}].\n")
        plugins = (["rabbitmq_management"] * self.management + ["rabbitmq_stream"] * self.stream
                   + ["rabbitmq_amqp1_0"] * self.amqp10)
        (self.base / "enabled_plugins").write_text(f"[{','.join(plugins)}].\n")

    def _env(self) -> dict:
        keep = ("PATH", "LANG", "LC_ALL", "TMPDIR")
        env = {k: os.environ[k] for k in keep if k in os.environ}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
        env.setdefault("LANG", "C.UTF-8")
        base = self.base
        env.update({
            "HOME": str(base / "home"),
            "RABBITMQ_NODENAME": self.node_name,
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_PID_FILE": str(base / "node.pid"),
            "RABBITMQ_LOGS": "-",
            # the distribution listener on loopback only
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        })
        return env

    def ctl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """``rabbitmqctl -n <this node> ARGS...`` (raises CalledProcessError on failure)."""
        ctl = Path(self.script).with_name("rabbitmqctl")
        return subprocess.run([str(ctl), "-n", self.node_name, *args], env=self._env(), check=True,
                              capture_output=True, text=True, timeout=timeout)

    # ------------------------------------------------------------------ life cycle

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}/%2F"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def start(self, timeout: float = 90) -> float:
        """Start the node on its (kept) data and ports; return once it serves AMQP.

        Returns the seconds it took. Raises :class:`RabbitMQUnavailable` if it exits or does
        not come up within ``timeout``.
        """
        if self.running:
            raise RuntimeError(f"{self.node_name} is already running")
        began = time.monotonic()
        self._start_epmd()
        with open(self.log_path, "ab") as log:
            log.write(f"\n==== starting {self.node_name} on port {self.port}\n".encode())
            log.flush()
            self.proc = subprocess.Popen([str(self.script)], cwd=self.base, env=self._env(),
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        _live.add(self)
        deadline = began + timeout
        while True:
            if self.proc.poll() is not None:
                raise RabbitMQUnavailable(
                    f"rabbitmq-server ({self.script}) exited with {self.proc.returncode} during start-up:\n"
                    + self.output()[-5000:])
            if amqp_greets(self.host, self.port) and self._vhost_ready():
                break
            if time.monotonic() > deadline:
                self.kill()
                raise RabbitMQUnavailable(f"{self.node_name} did not accept AMQP connections on port "
                                          f"{self.port} within {timeout}s:\n" + self.output()[-5000:])
            time.sleep(0.1)
        took = time.monotonic() - began
        self.start_seconds.append(took)
        return took

    def _start_epmd(self) -> None:
        """Our own epmd as a child process (not the daemon erl would fork, which outlives us)."""
        if self.epmd is not None and self.epmd.poll() is None:
            return
        epmd = shutil.which("epmd") or "/usr/lib/erlang/bin/epmd"
        if not os.path.exists(epmd):
            raise RabbitMQUnavailable(f"no epmd (Erlang) next to rabbitmq-server; `{INSTALL_HINT}` installs it")
        self.epmd = subprocess.Popen([epmd, "-port", str(self.epmd_port), "-address", "127.0.0.1"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.epmd_port), timeout=1).close()
                return
            except OSError:
                if self.epmd.poll() is not None or time.monotonic() > deadline:
                    raise RabbitMQUnavailable(f"epmd did not start on port {self.epmd_port}")
                time.sleep(0.02)

    def _vhost_ready(self) -> bool:
        import pika  # a test dependency; only needed once the port answers
        params = pika.URLParameters(self.url + "?connection_attempts=1&socket_timeout=2&stack_timeout=5")
        try:
            pika.BlockingConnection(params).close()
            return True
        except pika.exceptions.AMQPError:
            return False

    def stop(self, timeout: float = 60) -> int:
        """Stop cleanly (SIGTERM to the start script, which stops the VM); return its exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.node_name} did not stop within {timeout}s of SIGTERM:\n"
                                 + self.output()[-5000:])

    def beam_pid(self) -> int | None:
        """The pid of the Erlang VM (``beam.smp``), a child of the start script."""
        if not self.running:
            return None
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            if ppid == self.proc.pid and comm.startswith("beam"):
                return int(entry.name)
        return None

    def kill(self) -> None:
        """Crash the node: SIGKILL to the Erlang VM, then reap the start script."""
        if self.proc is None:
            return
        pid = self.beam_pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(15)

    def restart(self) -> float:
        code = self.stop()
        if code != 0:
            raise AssertionError(f"{self.node_name} exited with {code} on SIGTERM:\n" + self.output()[-5000:])
        return self.start()

    def close(self) -> None:
        """Stop the node (cleanly if it can) and the private epmd; keep the files."""
        try:
            if self.running:
                self.stop()
        finally:
            if self.running:
                self.kill()
            if self.epmd is not None and self.epmd.poll() is None:
                self.epmd.terminate()
                try:
                    self.epmd.wait(10)
                except subprocess.TimeoutExpired:
                    self.epmd.kill()
                    self.epmd.wait()
            _live.discard(self)


@atexit.register
def _kill_leftovers() -> None:
    # A test run that dies without finalizers must not leave nodes behind.
    for node in list(_live):
        try:
            node.kill()
            node.close()
        except Exception:
            pass
