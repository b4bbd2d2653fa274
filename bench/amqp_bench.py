"""AMQP 0-9-1 peer benchmark: our broker next to RabbitMQ (Debian's package), same clients.

Rows, each measured on broker and peer in alternation (who goes first flips each repetition),
``--repeat`` times (default 3), medians in the table:

* raw-socket client (``bench/amqp_load.py``, pre-encoded frames, so the broker sets the pace),
  ``--size``-byte bodies (default 100 B), a fresh durable queue per run:
  publish transient (no confirms); publish persistent + confirms (window 1,000); consume with
  prefetch 1,000 and a multiple ack every 500 (of the queue the persistent run filled);
  transient publish through a fanout exchange to 10 queues;
* pika (transient publish, consume) and aio-pika (persistent publish with confirms, consume),
  ``--client-messages`` each (``bench/client_load.py``): what applications get; small durable
  writes: 10 pika connections each waiting for a confirm per persistent 1 KB message, for
  ``--small-seconds``;
* end-to-end latency p50/p99 (publish -> delivery; a publisher and a consumer connection,
  send time in the body) at fixed offered rates for ``--latency-seconds`` each: raw frames at
  1,000 msg/s, at half RabbitMQ's median transient publish rate measured above
  (``--latency-rate`` overrides), persistent + confirms at half its confirmed median; pika
  transient and persistent with ``confirm_delivery`` at 1,000 msg/s.

AMQP 1.0 rows (``bench/amqp10_load.py``, raw frames made with ``wire/amqp10_frames.py``), our
broker only, each right after the 0-9-1 row it mirrors, with a ``ratio 1.0/0-9-1`` row (median
over median): publish pre-settled (vs transient), durable unsettled with outcomes, at most 1,000
in flight (vs persistent + confirms), at ``--size`` and ``--latency-size``; consume with credit
1,000 accepted every 500 (vs prefetch 1,000, multi-ack/500). RabbitMQ 4 is not packaged here and
Debian's 3.10 serves AMQP 1.0 through its old plugin, so no peer runs these. ``--only-raw``: our
broker alone, only the raw publish/consume rows of both protocols (a quick 1.0/0-9-1 check).

RabbitMQ is a private node started by ``compat_tests.rabbitmq.RabbitMQNode`` (free ports, its
own epmd); if it cannot start, our broker is measured alone.

    python -m bench amqp [--messages 100000] [--size 100] [--repeat 3] [--only-raw] [--json PATH]

Results go to ``.cache/bench/results/amqp.json`` (and ``amqp.png`` if matplotlib is importable).
"""
from __future__ import annotations

import itertools

from bench import peers

RAW = [("transient", "raw: publish transient"),
       ("confirm", "raw: publish persistent + confirms"),
       ("consume", "raw: consume prefetch 1000, multi-ack/500"),
       ("fanout", "raw: publish transient, fanout to 10 queues")]
CLIENTS = [("pika", "publish", "pika: publish transient"),
           ("pika", "consume", "pika: consume prefetch 1000, multi-ack"),
           ("aio-pika", "publish", "aio-pika: publish persistent + confirms"),
           ("aio-pika", "consume", "aio-pika: consume prefetch 1000, multi-ack")]
# AMQP 1.0 rows (bench/amqp10_load.py, our broker only): mode, label, the 0-9-1 row it is set against
AMQP10 = [("settled", "1.0 raw: publish pre-settled", "raw: publish transient"),
          ("unsettled", "1.0 raw: publish durable, unsettled (outcomes)", "raw: publish persistent + confirms"),
          ("consume", "1.0 raw: consume credit 1000, accept/500", "raw: consume prefetch 1000, multi-ack/500")]
AMQP10_NOTE = ("AMQP 1.0 rows: our broker only, set against our own 0-9-1 rows of the same run (ratio rows: "
               "median 1.0 / median 0-9-1); RabbitMQ 4 (native AMQP 1.0) is not packaged here and Debian's "
               "RabbitMQ 3.10 serves 1.0 through its old plugin, no fair peer")


def add_arguments(parser) -> None:
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--client-messages", type=int, default=20_000, help="per pika / aio-pika run")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--latency-rate", type=float, default=None,
                        help="msgs/s offered in the latency rows (default: half RabbitMQ's transient median)")
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--latency-size", type=int, default=1024, help="body bytes in the latency rows")
    parser.add_argument("--skip-clients", action="store_true", help="no pika / aio-pika rows")
    parser.add_argument("--small-seconds", type=float, default=5.0,
                        help="length of the confirm-per-message run (10 pika connections)")
    parser.add_argument("--only-raw", action="store_true",
                        help="our broker only, raw 0-9-1 and AMQP 1.0 rows at --size and 1 KB (no peer, "
                             "clients or latency rows): the quick 1.0 / 0-9-1 comparison")


def amqp10_rows(load, who, target, base: str, messages: int, size: int, suffix: str, modes) -> None:
    """AMQP 1.0 raw rows of one repetition, run right after the 0-9-1 rows they are compared with."""
    for mode, case, _ in AMQP10:
        if mode in modes:
            queue = f"{base}-10{suffix.replace(' ', '-')}-unsettled" if mode == "consume" else \
                f"{base}-10{suffix.replace(' ', '-')}-{mode}"
            load("bench.amqp10_load", who, target, {"address": target.address("amqp"), "queue": queue,
                 "messages": messages, "size": size, "mode": mode, "delete": mode == "unsettled" and suffix != ""},
                 case + suffix, size=size)


def add_ratios(samples, suffixes) -> None:
    """One ratio row per AMQP 1.0 row: its median over the median of the 0-9-1 row it mirrors."""
    for suffix in suffixes:
        for _, case, peer_case in AMQP10:
            ours = samples.values(case + suffix, "broker") if case + suffix in samples.cases else []
            theirs = samples.values(peer_case + suffix, "broker") if peer_case + suffix in samples.cases else []
            if ours and theirs:
                ratio = _median(ours) / _median(theirs)
                samples.add(f"ratio 1.0/0-9-1: {case[9:]}{suffix}", "broker", ratio, unit="x")
                print(f"  ratio 1.0/0-9-1 {case[9:]}{suffix}: {ratio:.2f}", flush=True)


def _median(values) -> float:
    return sorted(values)[len(values) // 2]


def _half_peer_median(samples, case: str) -> float:
    """Half the peer's median of a throughput row (ours when there is no peer), to 100 msg/s."""
    got = samples.values(case, "peer") or samples.values(case, "broker")
    return round(sorted(got)[len(got) // 2] / 2, -2)


def latency_runs(args, samples, target, names):
    """(row label, load module, spec) of every end-to-end latency row: raw frames at 1,000 msg/s,
    at half RabbitMQ's transient peak, and persistent + confirms at half its confirmed peak (both
    peaks measured with the latency rows' body size); pika
    transient and persistent (confirm_delivery) at 1,000 msg/s. ``--latency-rate`` replaces the
    half-peak transient rate."""
    transient = args.latency_rate or _half_peer_median(samples, f"raw: publish transient {args.latency_size} B")
    confirmed = _half_peer_median(samples, f"raw: publish persistent + confirms {args.latency_size} B")
    base = {"address": target.address("amqp"), "mode": "latency", "seconds": args.latency_seconds,
            "size": args.latency_size}
    runs = [(f"raw: transient {rate:,.0f} msg/s", {"rate": rate}) for rate in (1000, transient)]
    runs.append((f"raw: persistent + confirms {confirmed:,.0f} msg/s", {"rate": confirmed, "confirm": True}))
    for label, extra in runs:
        yield label, "bench.amqp_load", {**base, **extra, "queue": f"bench-lat-{next(names)}"}
    if args.skip_clients:
        return
    for label, confirm in (("pika: transient 1,000 msg/s", False), ("pika: persistent + confirm_delivery 1,000 msg/s", True)):
        yield label, "bench.client_load", {**base, "client": "pika", "rate": 1000, "confirm": confirm,
                                           "queue": f"bench-lat-{next(names)}"}


def start_peer():
    """(RabbitMQ or None, its label, a note when it is missing)."""
    print("starting RabbitMQ ...", flush=True)
    try:
        from compat_tests.rabbitmq import RabbitMQUnavailable
        peer = peers.RabbitMQ()
    except ImportError as exc:
        return None, "none", f"RabbitMQ unavailable, our broker measured alone: {exc}"
    except (RabbitMQUnavailable, OSError) as exc:
        return None, "none", f"RabbitMQ unavailable, our broker measured alone: {str(exc)[:300]}"
    return peer, f"RabbitMQ (Debian package, {peer.node.script}), started in {peer.node.start_seconds[-1]:.1f} s", None


def run(args) -> peers.SuiteResult:
    print("starting our broker ...", flush=True)
    ours = peers.OurBroker("amqp")
    peer, peer_label, peer_note = None, "none", None
    samples = peers.Samples("amqp", "rabbitmq")
    cpu = {"broker": 0.0, "peer": 0.0}
    names = itertools.count()
    try:
        if args.only_raw:
            peer_note = "--only-raw: our broker alone"
        else:
            peer, peer_label, peer_note = start_peer()
        if peer_note:
            print(peer_note, flush=True)
        targets = [("broker", ours)] + ([("peer", peer)] if peer else [])

        def load(module, who, target, spec, case, field="msgs_s", **kind):
            r, used = peers.measured(lambda: peers.run_load(module, spec), target.pid)
            cpu[who] += used
            samples.add(case, who, r[field], **kind)
            print(f"  {target.name:<8} {case:<46} {r[field]:>10,.0f} msg/s in {r['seconds']:.2f} s", flush=True)
            return r

        for rep, who, target in peers.alternate(targets, args.repeat):
            base = f"bench-{rep}-{next(names)}"
            for mode, case in RAW[:3] if args.only_raw else RAW:
                queue = f"{base}-confirm" if mode == "consume" else f"{base}-{mode}"
                load("bench.amqp_load", who, target, {"address": target.address("amqp"), "queue": queue,
                     "messages": args.messages, "size": args.size, "mode": mode}, case, size=args.size)
            if who == "broker":
                amqp10_rows(load, who, target, base, args.messages, args.size, "", ("settled", "unsettled", "consume"))
            for mode, case in RAW[:2]:  # the peaks the latency rows take half of, at their body size
                load("bench.amqp_load", who, target, {"address": target.address("amqp"), "queue": f"{base}-{mode}-lat",
                     "messages": args.messages // 2, "size": args.latency_size, "mode": mode, "delete": True},
                     f"{case} {args.latency_size} B", size=args.latency_size)
            if who == "broker":
                amqp10_rows(load, who, target, base, args.messages // 2, args.latency_size, f" {args.latency_size} B",
                            ("settled", "unsettled"))
            if args.skip_clients or args.only_raw:
                continue
            for client, mode, case in CLIENTS:
                load("bench.client_load", who, target, {"address": target.address("amqp"), "client": client,
                     "queue": f"{base}-{client}", "messages": args.client_messages, "size": args.size,
                     "mode": mode}, case, size=args.size)

        add_ratios(samples, ("", f" {args.latency_size} B"))
        if args.only_raw:
            return _result(args, samples, cpu, None, peer_label, [peer_note, AMQP10_NOTE])
        if not args.skip_clients:  # small durable writes: a confirm awaited per message, 10 connections
            for rep, who, target in peers.alternate(targets, args.repeat):
                load("bench.client_load", who, target, {"address": target.address("amqp"), "client": "pika",
                     "queue": f"bench-each-{next(names)}", "mode": "confirm-each", "seconds": args.small_seconds,
                     "size": 1024, "connections": 10}, "pika: 10 connections, persistent + confirm per message",
                     size=1024)
        for rep, who, target in peers.alternate(targets, args.repeat):
            for label, module, spec in latency_runs(args, samples, target, names):
                r, used = peers.measured(lambda: peers.run_load(module, spec), target.pid)
                cpu[who] += used
                samples.add(f"{label}: latency p50", who, r["p50_ms"], unit="ms", better="lower")
                samples.add(f"{label}: latency p99", who, r["p99_ms"], unit="ms", better="lower")
                print(f"  {target.name:<8} {label} (achieved {r['achieved_rate']:,.0f}/s): p50 {r['p50_ms']:.2f} ms, "
                      f"p99 {r['p99_ms']:.2f} ms, max {r['max_ms']:.1f} ms", flush=True)
    finally:
        ours.close()
        if peer is not None:
            peer.close()

    notes = [f"raw rows: {args.messages:,} messages of {args.size} B per run; pika/aio-pika rows: "
             f"{args.client_messages:,}; medians of {args.repeat} alternating runs",
             "fanout rows count publishes (each is stored 10 times)",
             f"latency: {args.latency_seconds:g} s at each fixed offered rate (1,000 msg/s; half RabbitMQ's "
             "transient median unless --latency-rate; persistent + confirms at half its confirmed median), "
             f"{args.latency_size} B, publisher and consumer on separate connections, prefetch 1000, after 0.5 s warm-up; "
             "publish -> delivery",
             f"broker CPU over all runs: ours {cpu['broker']:.1f} s, RabbitMQ (beam.smp) {cpu['peer']:.1f} s"]
    if peer_note:
        notes.append(peer_note)
    notes.append(AMQP10_NOTE)
    return _result(args, samples, cpu, peer, peer_label, notes)


def _result(args, samples, cpu, peer, peer_label: str, notes: list[str]) -> peers.SuiteResult:
    meta = {"peer": "rabbitmq" if peer else None, "peer_label": peer_label, "messages": args.messages,
            "size": args.size, "repeat": args.repeat, "cpu_seconds": cpu}
    return peers.SuiteResult("amqp", samples.rows(), notes, {"rabbitmq": peer_label} if peer else {}, meta)


def main(argv=None) -> int:
    return peers.suite_main("amqp", __doc__, add_arguments, run, argv)
