"""A private network for fault tests: one network namespace per host on a bridge of our own.

Layout (``idx`` keeps concurrent runs apart; every name and address is ours, nothing leaves
the machine)::

    root namespace            bridge gwbr<idx>   10.78.<idx>.1/24   (the tests' clients)
    namespace gw<idx>-zk      eth0               10.78.<idx>.2      (ZooKeeper)
    namespace gw<idx>-b<N>    eth0               10.78.<idx>.1<N>   (broker N)

Processes are started inside a host's namespace with ``ip netns exec`` (which execs, so the
pid the test holds is the server's own and SIGKILL/SIGSTOP reach it). Faults are nftables
rules in the hosts' own namespaces (a table ``nemesis`` with an input and an output chain), so
a cut between two brokers leaves both of them reachable from the clients in the root
namespace: that is what tells a partition from a freeze. :meth:`Network.heal` flushes them.

This kernel has no ``sch_netem`` (CONFIG_NET_SCH_NETEM is not set), so netem's faults are built
from what it has: :meth:`Network.delay` (``delay 50ms loss 5%``) queues a host's outgoing packets
to user space with iptables' NFQUEUE target, where nfqdelay.py releases them that much later or
drops them; :meth:`Network.lossy` drops at random with nftables' ``numgen``; :meth:`Network.slow`
is a rate-limited link (``tc qdisc ... tbf``). Needs root, ``ip`` and ``tc`` (iproute2), ``nft``
(Debian's nftables) and ``iptables``; :func:`unavailable` says why not, or None.
"""
from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_live: set["Network"] = set()


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def unavailable() -> str | None:
    """Why namespaces cannot be made here (None if they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI and sessions run as root)"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables"), ("tc", "iproute2"), ("iptables", "iptables")):
        if shutil.which(tool) is None:
            return f"`{tool}` is missing: apt-get install -y {package} (.ci/run does)"
    probe = f"gwprobe{os.getpid() % 100000}"
    made = _run("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    _run("ip", "netns", "del", probe, check=False)
    return None


def network_or_skip(suite: str) -> "Network":
    """A new Network for a test, or a pytest skip that says why namespaces cannot be made here."""
    import pytest

    reason = unavailable()
    if reason:
        pytest.skip(f"the {suite} needs network namespaces: {reason}")
    return Network()


@dataclass(frozen=True)
class Host:
    name: str  # "zk", "b1", ...
    netns: str
    ip: str

    def prefix(self) -> list[str]:
        """argv prefix that runs a command inside this host's namespace."""
        return ["ip", "netns", "exec", self.netns]

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return _run(*self.prefix(), *argv, check=check)


class Network:
    """The bridge, the hosts on it, and the faults currently applied (see the module docstring)."""

    def __init__(self, idx: int | None = None):
        self.idx = idx if idx is not None else 100 + os.getpid() % 150
        self.bridge = f"gwbr{self.idx}"
        self.gateway_ip = f"10.78.{self.idx}.1"
        self.hosts: dict[str, Host] = {}
        self.shaped: set[str] = set()
        self.delayers: dict[str, subprocess.Popen] = {}  # host -> its nfqdelay process
        self._clear_leftovers()
        # Our addresses stay ours: once a bridge is gone, a client still retrying one of its
        # addresses must get "unreachable" here, not follow the default route off the machine.
        _run("ip", "route", "replace", "unreachable", "10.78.0.0/16")
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.gateway_ip}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        _live.add(self)

    def _clear_leftovers(self) -> None:
        prefix = f"gw{self.idx}-"
        for line in _run("ip", "netns", "list", check=False).stdout.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith(prefix):
                _run("ip", "netns", "del", name, check=False)
        _run("ip", "link", "del", self.bridge, check=False)

    def add_host(self, name: str, last_octet: int) -> Host:
        host = Host(name, f"gw{self.idx}-{name}", f"10.78.{self.idx}.{last_octet}")
        veth = f"gwv{self.idx}{name}"[:15]
        _run("ip", "netns", "add", host.netns)
        # An earlier network of this process's index may still hold the name: a deleted namespace
        # goes away (with its end of the pair) only once its last process has, and the kernel
        # finishes that cleanup later. Deleting our end removes the pair at once.
        _run("ip", "link", "del", veth, check=False)
        _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", host.netns)
        _run("ip", "link", "set", veth, "master", self.bridge, "up")
        host.run("ip", "addr", "add", f"{host.ip}/24", "dev", "eth0")
        host.run("ip", "link", "set", "eth0", "up")
        host.run("ip", "link", "set", "lo", "up")
        host.run("nft", "add table inet nemesis; "
                 "add chain inet nemesis in { type filter hook input priority 0 ; policy accept ; }; "
                 "add chain inet nemesis out { type filter hook output priority 0 ; policy accept ; }")
        self.hosts[name] = host
        return host

    # ------------------------------------------------------------------ faults

    def _rules(self, host: Host, *rules: str) -> None:
        host.run("nft", "; ".join(f"add rule inet nemesis {r}" for r in rules))

    def drop(self, src: str, dst: str) -> None:
        """Drop what ``src`` sends to ``dst`` (one direction: asymmetric)."""
        a, b = self.hosts[src], self.hosts[dst]
        self._rules(a, f"out ip daddr {b.ip} drop")
        self._rules(b, f"in ip saddr {a.ip} drop")

    def cut(self, a: str, b: str) -> None:
        """No packet between hosts ``a`` and ``b``, either way."""
        self.drop(a, b)
        self.drop(b, a)

    def split(self, side_a: list[str], side_b: list[str]) -> None:
        """Every host of one side cut from every host of the other (clients still reach all)."""
        for a in side_a:
            for b in side_b:
                self.cut(a, b)

    def cut_clients(self, name: str) -> None:
        """No packet between host ``name`` and the clients in the root namespace (the bridge's address)."""
        self._rules(self.hosts[name], f"out ip daddr {self.gateway_ip} drop", f"in ip saddr {self.gateway_ip} drop")

    def lossy(self, name: str, percent: int) -> None:
        """Drop ``percent`` of the packets ``name`` sends and receives, at random."""
        host = self.hosts[name]
        self._rules(host, f"out numgen random mod 100 < {percent} drop",
                    f"in numgen random mod 100 < {percent} drop")

    def slow(self, name: str, rate: str = "2mbit") -> None:
        """Rate-limit what ``name`` sends: its queue delays packets under load (no netem here)."""
        self.hosts[name].run("tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", rate,
                             "burst", "32kbit", "latency", "400ms")
        self.shaped.add(name)

    def delay(self, name: str, ms: float = 50, loss: float = 0, seed: int = 0) -> None:
        """Hold every packet ``name`` sends for ``ms`` and drop ``loss`` percent (netem's delay/loss)."""
        host = self.hosts[name]
        proc = subprocess.Popen([*host.prefix(), sys.executable, "-m", "compat_tests.cluster.nfqdelay", "--queue", "1",
                                 "--delay-ms", str(ms), "--loss", str(loss), "--seed", str(seed)],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if not (proc.stdout.readline() or "").startswith("nfqdelay: queue 1 bound"):
            proc.kill()
            raise RuntimeError(f"nfqdelay did not start in {host.netns} (exit {proc.wait()})")
        self.delayers[name] = proc
        host.run("iptables", "-A", "OUTPUT", "-o", "eth0", "-j", "NFQUEUE", "--queue-num", "1", "--queue-bypass")

    def heal(self) -> None:
        for host in self.hosts.values():
            host.run("nft", "flush chain inet nemesis in; flush chain inet nemesis out", check=False)
        for name, proc in self.delayers.items():
            self.hosts[name].run("iptables", "-F", "OUTPUT", check=False)
            proc.send_signal(signal.SIGTERM)  # it lets the packets it holds go, then exits
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.delayers.clear()
        for name in self.shaped:
            self.hosts[name].run("tc", "qdisc", "del", "dev", "eth0", "root", check=False)
        self.shaped.clear()

    def close(self) -> None:
        self.heal()
        for host in self.hosts.values():
            _run("ip", "netns", "del", host.netns, check=False)
        _run("ip", "link", "del", self.bridge, check=False)
        self.hosts.clear()
        _live.discard(self)


@atexit.register
def _remove_leftovers() -> None:
    for net in list(_live):
        try:
            net.close()
        except Exception:
            pass
