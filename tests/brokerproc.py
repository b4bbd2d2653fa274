"""Start real broker processes for tests: ``python -m gateway serve`` on free ports.

Each broker gets its own data directory and ports chosen by the OS (port 0); the test learns
them from ``<data-dir>/listeners.json``, so brokers can run in parallel.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from gateway.processes import NotListening, wait_for_listeners

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class BrokerProcess:
    proc: subprocess.Popen
    data_dir: Path
    log_path: Path
    addresses: dict = field(default_factory=dict)

    def address(self, name: str) -> tuple[str, int]:
        host, _, port = self.addresses[name].rpartition(":")
        return host.strip("[]"), int(port)

    @property
    def http_url(self) -> str:
        return f"http://{self.addresses['http']}"

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def rss_mb(self) -> float:
        """The broker process's resident memory now, in MB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError(f"no VmRSS for pid {self.proc.pid}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"broker did not exit within {timeout}s of signal {sig}:\n{self.output()}")


def spawn(data_dir: Path, *args: str, env: dict | None = None, ports: bool = True,
          prefix: list[str] | None = None) -> tuple[subprocess.Popen, Path]:
    """Start ``gateway serve`` without waiting; ``ports`` adds port-0 listeners unless given;
    ``prefix`` runs it through a wrapper that execs it (``ip netns exec <ns>``)."""
    argv = [*(prefix or ()), sys.executable, "-m", "gateway", "serve", "--data-dir", str(data_dir)]
    if ports:
        for name in ("kafka", "amqp", "http", "stream"):
            if f"--{name}-listen" not in args:
                argv += [f"--{name}-listen", "127.0.0.1:0"]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    full_env.update(env or {})
    log_path = Path(str(data_dir) + ".log")
    return subprocess.Popen(argv + list(args), cwd=ROOT, env=full_env, stdin=subprocess.DEVNULL,
                            stdout=open(log_path, "wb"), stderr=subprocess.STDOUT), log_path


def start_broker(data_dir: Path, *args: str, env: dict | None = None, timeout: float = 60,
                 prefix: list[str] | None = None) -> BrokerProcess:
    listeners = Path(data_dir) / "listeners.json"
    listeners.unlink(missing_ok=True)  # a killed broker's file must not be mistaken for this one's
    proc, log_path = spawn(data_dir, *args, env=env, prefix=prefix)
    broker = BrokerProcess(proc, Path(data_dir), log_path)
    try:
        broker.addresses = wait_for_listeners(listeners, timeout, alive=lambda: proc.poll() is None, interval=0.05)
    except NotListening as exc:
        if exc.exited:
            raise AssertionError(f"broker exited with {proc.returncode} during start-up:\n{broker.output()}") from None
        broker.stop(signal.SIGKILL)
        raise AssertionError(f"broker did not write {listeners} within {timeout}s:\n{broker.output()}") from None
    return broker
