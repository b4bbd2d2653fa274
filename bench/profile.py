"""Profile our broker under one load: ``python -m bench.profile MODE [--messages N] [--top 25]``.

Starts ``gateway serve`` (as the peer benchmarks do), attaches ``py-spy record`` to it
(non-blocking sampling, collapsed stacks), runs one load generator run, stops py-spy and prints
the functions with the most samples, self and inclusive. The collapsed stacks stay in
``.cache/bench/profile/MODE.txt`` (flamegraph.pl and speedscope read them).

MODE: a ``bench.amqp_load`` mode (``transient``, ``confirm``, ``consume`` (after an unprofiled
confirm run fills the queue), ``fanout``, ``latency``, ``spread`` over ``--queues``) or ``kafka-produce`` / ``kafka-consume``
(1 KB, acks=1; the consume run reads a topic an unprofiled run filled), or ``random-brokers``: the
``bench scale`` spread workload (``--queues`` durable queues, ``--clients`` publishers and
consumers on random brokers) on ``gateway serve --processes --brokers``, every broker profiled
(``--brokers 1``: the single broker it is compared with).
"""
from __future__ import annotations

import argparse
import collections
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench import peers

OUT = peers.CACHE / "profile"
_FRAME = re.compile(r"^(?P<fn>.*?) \((?P<file>[^:()]*)(?::\d+)?\)$")


def summarize(collapsed: str, top: int) -> str:
    """The functions with the most samples, self (leaf) and inclusive, from collapsed stacks."""
    own, incl = collections.Counter(), collections.Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = []
        for frame in stack.split(";"):
            m = _FRAME.match(frame)
            frames.append(f"{m['fn']} ({m['file']})" if m else frame)
        own[frames[-1]] += n
        for frame in set(frames):
            incl[frame] += n
    lines = [f"{total} samples"]
    for title, counter in (("self", own), ("inclusive", incl)):
        lines.append(f"--- top {top} by {title} time")
        for name, n in counter.most_common(top):
            lines.append(f"{100 * n / max(total, 1):6.1f}%  {name}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rate", type=float, default=20_000, help="latency mode: offered msgs/s")
    parser.add_argument("--queues", type=int, default=1000, help="spread mode: queues the messages go round robin to")
    parser.add_argument("--brokers", type=int, default=3, help="random-brokers mode: --processes of the cluster")
    parser.add_argument("--clients", type=int, default=10, help="random-brokers mode: publishers (and consumers)")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--no-spy", action="store_true",
                        help="only the broker's CPU per message (an A/B check on a busy machine)")
    args = parser.parse_args(argv)
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not args.no_spy and not Path(spy).exists():
        raise SystemExit("py-spy is not installed (pip install py-spy)")
    OUT.mkdir(parents=True, exist_ok=True)
    cluster = args.mode == "random-brokers"
    ours = peers.OurCluster("profile", args.brokers) if cluster and args.brokers > 1 else peers.OurBroker("profile")
    pids = ours.broker_pids()
    spies, raws = [], []
    try:
        address = ours.address("kafka" if args.mode.startswith("kafka") else "amqp")
        if args.mode == "consume":  # fill the queue first, unprofiled
            peers.run_load("bench.amqp_load", {"address": address, "queue": "prof", "mode": "confirm",
                                               "messages": args.messages, "size": args.size})
        if args.mode == "kafka-consume":  # likewise the topic
            peers.run_load("bench.kafka_load", {"bootstrap": address, "topic": "prof", "messages": args.messages,
                                                "size": 1024, "acks": "1", "keep": True})
        def spy_on() -> None:
            for index, pid in enumerate([] if args.no_spy else pids, 1):
                raws.append(OUT / (f"{args.mode}.txt" if len(pids) == 1 else f"{args.mode}-node{index}.txt"))
                spies.append(subprocess.Popen([spy, "record", "--pid", str(pid), "--nonblocking", "--rate", "200",
                                               "--format", "raw", "--output", str(raws[-1])],
                                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
            time.sleep(0.2 if args.no_spy else 1.0)

        cpu0 = None
        if not cluster:
            spy_on()
            cpu0 = [peers.cpu_seconds(pid) for pid in pids]
        if args.mode.startswith("kafka"):
            reading = args.mode == "kafka-consume"
            r = peers.run_load("bench.kafka_load", {"bootstrap": address, "topic": "prof", "messages": args.messages,
                                                    "size": 1024, "acks": "1", "consume": reading,
                                                    "produce": not reading})
        elif cluster:  # the declarations are not profiled: py-spy starts with the measured phase
            started = OUT / "random-brokers.started"
            started.unlink(missing_ok=True)
            load = threading.Thread(target=lambda: results.append(peers.run_load("bench.amqp_load", {
                "addresses": ours.addresses("amqp"), "queue": "prof", "mode": "random_brokers",
                "messages": args.messages, "size": args.size, "queues": args.queues, "clients": args.clients,
                "seed": 0, "pids": pids, "http": ours.addresses("http"), "started_file": str(started)},
                timeout=1800)))
            results: list[dict] = []
            load.start()
            while load.is_alive() and not started.exists():
                time.sleep(0.05)
            cpu0 = [peers.cpu_seconds(pid) for pid in pids]
            spy_on()
            while load.is_alive() and "done" not in started.read_text():
                time.sleep(0.05)
            cpus = [peers.cpu_seconds(pid) - c0 for pid, c0 in zip(pids, cpu0)]
            for spy_proc in spies:  # the queues' deletion afterwards is not profiled either
                spy_proc.send_signal(signal.SIGINT)
            load.join()
            if not results:
                raise SystemExit("the random-brokers load failed (see above)")
            r = results[0]
        else:
            spec = {"address": address, "queue": "prof", "mode": args.mode, "messages": args.messages,
                    "size": args.size, "rate": args.rate, "seconds": args.messages / args.rate, "queues": args.queues, "pid": ours.pid}
            r = peers.run_load("bench.amqp_load", spec)
        if not cluster:
            time.sleep(0.3)  # deliveries and confirms still on their way count too
            cpus = [peers.cpu_seconds(pid) - c0 for pid, c0 in zip(pids, cpu0)]
            for spy_proc in spies:
                spy_proc.send_signal(signal.SIGINT)
        for spy_proc in spies:
            spy_proc.wait(60)
    finally:
        ours.close()
    print({k: v for k, v in r.items() if isinstance(v, (int, float))})
    cpu = sum(cpus)
    print(f"broker CPU: {cpu:.2f} s, {cpu / args.messages * 1e6:.1f} us/msg"
          + (f" (per broker: {' / '.join(f'{c:.2f}' for c in cpus)} s)" if len(cpus) > 1 else ""))
    if raws:
        print(summarize("\n".join(raw.read_text() for raw in raws), args.top))
        print("collapsed stacks in " + ", ".join(str(raw) for raw in raws))
    return 0


if __name__ == "__main__":
    sys.exit(main())
