"""Run a private ZooKeeper node as a child JVM: the metadata store of ``gateway serve
--processes N`` (gateway.processes) and of the cluster tests.

The server is Debian's ``zookeeper`` package (3.8.x; ``apt-get install -y zookeeper``, which
``.ci/run`` does), started straight from its jar as ``java -cp ... QuorumPeerMain zoo.cfg``
rather than through the package's service (which runs as the ``zookeeper`` user on
``/var/lib/zookeeper`` and port 2181, shared with whatever else is on the machine). Everything
the node owns lives under one base directory:

    <base>/zoo.cfg      standalone: clientPort on 127.0.0.1, admin server off, four-letter words on
    <base>/data/        dataDir (snapshots and the transaction log)
    <base>/node.log     the JVM's output (appended across restarts)

The client port is picked free at construction and kept across restarts. Start-up is ready
when the node answers the ``ruok`` four-letter word with ``imok`` and ``srvr`` with its
version (it says "not currently serving requests" until then). :meth:`ZooKeeperNode.stop`
sends SIGTERM; :meth:`ZooKeeperNode.close` also removes the base directory if the node made it.
Nothing outlives the process that started it: leftovers are killed at interpreter exit.

Self-test: ``.venv/bin/python -m gateway.zookeeper_node`` starts a node, creates and reads a
znode with kazoo, and stops it.
"""
from __future__ import annotations

import atexit
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path

INSTALL_HINT = "apt-get install -y zookeeper"
SERVER_JAR = Path("/usr/share/java/zookeeper.jar")
# ZooKeeper logs through slf4j; with no binding on the class path it logs nothing at all.
LOG_BINDING = Path("/usr/share/java/slf4j-simple.jar")
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
_live: set["ZooKeeperNode"] = set()


class ZooKeeperUnavailable(RuntimeError):
    """ZooKeeper is not installed, or the node did not come up; the message says why."""


def class_path() -> str:
    """The server jar, the jars its manifest names (Debian lists the dependencies there)
    and an slf4j binding, so that the node's log says something."""
    if not SERVER_JAR.is_file():
        raise ZooKeeperUnavailable(
            f"ZooKeeper is not installed: no {SERVER_JAR}. Install Debian's package with "
            f"`{INSTALL_HINT}` (as root); .ci/run does this.")
    with zipfile.ZipFile(SERVER_JAR) as jar:
        manifest = jar.read("META-INF/MANIFEST.MF").decode()
    # Manifest lines are folded at 72 bytes: a continuation line starts with one space.
    unfolded = manifest.replace("\r\n", "\n").replace("\n ", "")
    deps = next((line.split(":", 1)[1].split() for line in unfolded.splitlines()
                 if line.startswith("Class-Path:")), [])
    # Some are for the command-line shell only (jline is not a dependency of the package):
    # skip what is absent, as the JVM does; a server class missing shows in start()'s error.
    deps = [d for d in deps if Path(d).is_file()]
    jars = [str(SERVER_JAR), *deps] + ([str(LOG_BINDING)] if LOG_BINDING.is_file() else [])
    return ":".join(jars)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def four_letter(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    """Send a four-letter command (``ruok``, ``srvr``, ...) and return the reply ('' on error)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(word.encode())
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
            return reply.decode(errors="replace")
    except OSError:
        return ""


class ZooKeeperNode:
    """One private standalone ZooKeeper under ``base_dir``; see the module docstring."""

    def __init__(self, base_dir: Path | None = None, *, tick_ms: int = 500, host: str = "127.0.0.1",
                 prefix: list[str] | None = None, force_sync: bool = False):
        self.cp = class_path()
        self.java = shutil.which("java") or "/usr/bin/java"
        self._own_base = base_dir is None
        self.base = Path(base_dir) if base_dir else Path(tempfile.mkdtemp(prefix="zk-test-"))
        self.host = host
        self.prefix = list(prefix or ())  # e.g. ``ip netns exec <ns>``: the node in its own namespace
        self.port = _free_port() if host == "127.0.0.1" else 2181
        self.tick_ms = tick_ms
        self.force_sync = force_sync  # fsync each transaction: on for a broker's metadata, off in tests
        self.proc: subprocess.Popen | None = None
        self.log_path = self.base / "node.log"
        self._write_config()

    def _write_config(self) -> None:
        (self.base / "data").mkdir(parents=True, exist_ok=True)
        (self.base / "zoo.cfg").write_text("\n".join([
            f"dataDir={self.base / 'data'}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            # A short tick lets brokers ask for short sessions (min = 2 ticks), so a killed
            # broker's ephemeral znodes go within seconds; the max leaves their choice alone.
            f"tickTime={self.tick_ms}",
            "minSessionTimeout=1000",
            "maxSessionTimeout=60000",
            "maxClientCnxns=0",
            "admin.enableServer=false",  # its Jetty would take port 8080
            "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons",
            f"forceSync={'yes' if self.force_sync else 'no'}",
            "",
        ]))

    @property
    def hosts(self) -> str:
        """The connect string, ``127.0.0.1:<port>`` (append a chroot for one cluster)."""
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def serving(self) -> bool:
        # ``ruok`` answers imok as soon as the port is open, before the server takes requests;
        # ``srvr`` answers with its version only once it serves.
        return (four_letter(self.host, self.port, "ruok") == "imok"
                and four_letter(self.host, self.port, "srvr").startswith("Zookeeper version"))

    def start(self, timeout: float = 60) -> float:
        """Start on the (kept) data and port; return the seconds until it serves."""
        if self.running:
            raise RuntimeError(f"ZooKeeper on port {self.port} is already running")
        began = time.monotonic()
        argv = [*self.prefix, self.java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Dzookeeper.admin.enableServer=false", "-Dzookeeper.jmx.log4j.disable=true",
                "-Dorg.slf4j.simpleLogger.showDateTime=true",
                "-cp", self.cp, MAIN_CLASS, str(self.base / "zoo.cfg")]
        with open(self.log_path, "ab") as log:
            log.write(f"\n==== starting ZooKeeper on port {self.port}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(argv, cwd=self.base, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        _live.add(self)
        while not self.serving():
            if self.proc.poll() is not None:
                raise ZooKeeperUnavailable(f"ZooKeeper exited with {self.proc.returncode} during start-up:\n"
                                           + self.output()[-5000:])
            if time.monotonic() - began > timeout:
                self.kill()
                raise ZooKeeperUnavailable(f"ZooKeeper did not serve on port {self.port} within "
                                           f"{timeout}s:\n" + self.output()[-5000:])
            time.sleep(0.1)
        return time.monotonic() - began

    def stop(self, timeout: float = 30) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(15)

    def close(self) -> None:
        """Stop the node; remove its files if this object made the base directory."""
        try:
            self.stop()
        finally:
            self.kill()
            _live.discard(self)
            if self._own_base:
                shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> "ZooKeeperNode":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def ensure_chroot(hosts: str, chroot: str, timeout: float = 15) -> None:
    """Create ``chroot`` (e.g. ``/gw-test-1``) so brokers connecting under it find their root."""
    from kazoo.client import KazooClient
    zk = KazooClient(hosts=hosts, timeout=timeout)
    zk.start(timeout=timeout)
    try:
        zk.ensure_path(chroot)
    finally:
        zk.stop()
        zk.close()


@atexit.register
def _kill_leftovers() -> None:
    for node in list(_live):  # a run that dies without finalizers must not leave a JVM behind
        try:
            node.close()
        except Exception:
            pass


def _self_test() -> None:
    from kazoo.client import KazooClient
    with ZooKeeperNode() as node:
        print(f"ZooKeeper up on {node.hosts}; srvr says: "
              f"{four_letter(node.host, node.port, 'srvr').splitlines()[0]}")
        ensure_chroot(node.hosts, "/selftest")
        zk = KazooClient(hosts=node.hosts + "/selftest")
        zk.start(timeout=10)
        zk.create("/hello/world", b"payload", makepath=True)
        data, stat = zk.get("/hello/world")
        assert data == b"payload", data
        eph = zk.create("/eph", b"", ephemeral=True)
        print(f"read back {data!r} (version {stat.version}); ephemeral {eph}; children {zk.get_children('/')}")
        zk.stop()
        zk.close()
        base = node.base
    assert not node.running and not base.exists()
    print("stopped and cleaned")


if __name__ == "__main__":
    _self_test()
