"""The AMQP load generator's workloads over many queues (and many brokers): ``spread`` and
``random_brokers`` modes of ``bench.amqp_load`` (its raw-socket client, its frames), with the
brokers' CPU read from /proc per process, for the cores and spread rows of ``bench scale``."""
from __future__ import annotations

import itertools
import json
import random
import struct
import threading
import time

from pamqp import commands, frame, header

from bench.amqp_load import (ACK_EVERY, CHUNK, PREFETCH, WINDOW, Conn, ServerClosed, _deliveries, expect_many,
                             publish_frames)


def broker_cpu(pids: list[int]) -> list[float]:
    """CPU seconds of each broker process so far (from /proc)."""
    from bench.peers import cpu_seconds
    return [cpu_seconds(pid) for pid in pids]


def _publish_confirmed(conn: Conn, n: int, chunk) -> None:
    """Publish ``n`` messages on channel 1 (in confirm mode), ``chunk(published, k)`` giving the
    bytes of the next ``k``, keeping at most WINDOW unconfirmed; return once all are confirmed
    (a Basic.Nack raises)."""
    published = upto = 0  # every tag <= upto is confirmed
    singles: set[int] = set()  # confirmed tags above upto: RabbitMQ mixes single and multiple acks
    unpack = struct.unpack_from
    while upto < n:
        while published < n and published - upto - len(singles) + CHUNK <= WINDOW:
            k = min(CHUNK, n - published)
            conn.sock.sendall(chunk(published, k))
            published += k
        conn._recv()
        for ftype, ch, s, e in conn.frames():
            if ftype != 1:
                continue
            cls, meth = unpack(">HH", conn.buf, s)
            if cls == 60 and meth in (80, 120):
                tag = unpack(">Q", conn.buf, s + 4)[0]
                if meth == 120:
                    raise RuntimeError("Basic.Nack")
                if conn.buf[s + 12] & 1:
                    if tag > upto:
                        upto = tag
                        singles = {t for t in singles if t > upto}
                else:
                    singles.add(tag)
                while upto + 1 in singles:
                    upto += 1
                    singles.discard(upto)
            else:
                conn._check_close(s)


def run_spread(conn: Conn, name: str, n: int, size: int, queues: int, pids: list[int], durable: bool = False,
               consume: bool = False) -> dict:
    """Exclusive queues (they go with the connection), then confirmed publishes round robin;
    ``durable``: durable queues and persistent messages (the first reaches each queue's new log);
    ``consume``: then every message is consumed back (a consumer per queue, one channel).
    ``pids``: the broker processes (all brokers of a cluster) whose CPU is counted."""
    names = [f"{name}-{i}" for i in range(queues)]
    declared = time.perf_counter()
    for i in range(0, queues, 500):
        conn.sock.sendall(b"".join(frame.marshal(commands.Queue.Declare(queue=q, exclusive=True, durable=durable), 1)
                                   for q in names[i:i + 500]))
        expect_many(conn, 50, 11, len(names[i:i + 500]))
    declared = time.perf_counter() - declared
    conn.send(1, commands.Confirm.Select())
    conn.expect(commands.Confirm.SelectOk)
    frames = [publish_frames("", q, size, persistent=durable) for q in names]
    cpu0, start = broker_cpu(pids), time.perf_counter()
    _publish_confirmed(conn, n, lambda published, k: b"".join(frames[(published + j) % queues] for j in range(k)))
    elapsed, cpus = time.perf_counter() - start, [b - a for a, b in zip(cpu0, broker_cpu(pids))]
    out = {"declare_seconds": declared, "seconds": elapsed, "msgs_s": n / elapsed,
           "cpu_us_per_msg": sum(cpus) / n * 1e6, "cpu_seconds_by_broker": cpus}
    if consume:
        out.update(_consume_spread(conn, names, n, pids))
    return out


def _consume_spread(conn: Conn, names: list[str], n: int, pids: list[int]) -> dict:
    """One consumer on each queue of one channel, acks every ACK_EVERY deliveries (multiple)."""
    conn.send(1, commands.Basic.Qos(prefetch_count=PREFETCH))
    conn.expect(commands.Basic.QosOk)
    cpu0, start = sum(broker_cpu(pids)), time.perf_counter()
    for i in range(0, len(names), 500):
        conn.sock.sendall(b"".join(frame.marshal(commands.Basic.Consume(queue=q, consumer_tag=q), 1)
                                   for q in names[i:i + 500]))
    elapsed = _deliveries(conn, n, start)
    cpu = sum(broker_cpu(pids)) - cpu0
    return {"consume_msgs_s": n / elapsed, "consume_cpu_us_per_msg": cpu / n * 1e6}


BALANCED = {"x-queue-leader-locator": "balanced"}


def _listed(http: str) -> list[dict]:
    """The management API's queues of vhost '/' at ``http`` (name and node)."""
    import base64
    import urllib.request
    request = urllib.request.Request(f"http://{http}/api/queues/%2F?columns=name,node",
                                     headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def _known_everywhere(http: list[str], names: set[str], longest: float = 60.0) -> float:
    """Wait until every broker knows the queues ``names`` (a cluster's others learn a declaration
    from the replicated state topic, a moment after its declare-ok), so that no client's first
    consume or publish finds a queue missing; return the seconds it took."""
    started = time.monotonic()
    for address in http:
        while not names <= {q["name"] for q in _listed(address)}:
            if time.monotonic() - started > longest:
                raise RuntimeError(f"broker at {address} does not know every declared queue after {longest:g} s")
            time.sleep(0.1)
    return time.monotonic() - started


def _serving(addresses: list[str], http: list[str], longest: float = 60.0) -> None:
    """Wait until every broker serves AMQP (a cluster's brokers listen before their AMQP model is
    open: a connection is refused, the management API answers 421, until then)."""
    import urllib.error
    deadline = time.monotonic() + longest
    for address, api in itertools.zip_longest(addresses, http):
        while True:
            try:
                if address is not None:
                    Conn(address).close()
                if api is not None:
                    _listed(api)
                break
            except (OSError, ServerClosed, urllib.error.HTTPError) as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"broker at {address} does not serve AMQP after {longest:g} s: {exc!r}") from None
                time.sleep(0.2)


def _leaders(http: str, names: set[str]) -> dict[str, int]:
    """How many of the queues ``names`` each broker leads: RabbitMQ's ``node`` of each queue in
    the management API's list (every broker knows every queue and its leader)."""
    counts: dict[str, int] = {}
    for q in _listed(http):
        if q["name"] in names:
            counts[q["node"]] = counts.get(q["node"], 0) + 1
    return dict(sorted(counts.items()))


def _settle(pids: list[int], quiet: float = 0.05, longest: float = 20.0) -> None:
    """Wait (up to ``longest`` s) until the brokers together use under ``quiet`` CPU seconds in a
    half second: a cluster still places and replicates just-declared queues after the declare-oks,
    work that would otherwise land in the measured window."""
    deadline = time.monotonic() + longest
    while time.monotonic() < deadline:
        before = sum(broker_cpu(pids))
        time.sleep(0.5)
        if sum(broker_cpu(pids)) - before < quiet:
            return


# Placements other than "random" take the cluster's workload apart: client i's queue slice is led
# by broker i mod N (declared there, client-local), and its publisher, its consumer, or neither,
# is on the next broker; the CPU each costs above "local" is what forwarding publishes, or serving
# consumers over links, adds. "aligned" puts every client on a random broker, as "random" does, but
# leaves each slice on one leader: as many messages cross as in "random", each client talks to one
# leader only. "consumer-declared" puts the clients where "random" does (the same seed, the same
# brokers) but has each consumer declare its slice with the default locator, client-local, as an
# AMQP consumer that declares its own queue does: deliveries stay on one broker, publishes cross.
PLACEMENTS = ("random", "local", "publishers-remote", "consumers-remote", "aligned", "consumer-declared")


def _declare(addresses: list[str], names: list[str], arguments: dict, rng: random.Random) -> None:
    admin = Conn(rng.choice(addresses))
    for i in range(0, len(names), 500):
        admin.sock.sendall(b"".join(frame.marshal(commands.Queue.Declare(queue=q, durable=True, arguments=arguments), 1)
                                    for q in names[i:i + 500]))
        expect_many(admin, 50, 11, len(names[i:i + 500]))
    admin.close()


def run_random_brokers(addresses: list[str], name: str, n: int, size: int, queues: int, clients: int, seed: int,
                       pids: list[int], http: list[str] | None = None, started_file: str | None = None,
                       placement: str = "random", arguments: dict | None = None) -> dict:
    """``queues`` durable queues, placed by ``x-queue-leader-locator: balanced`` (a cluster leads
    about a third each of them on each of 3 brokers, as RabbitMQ's balanced locator would; a
    single broker leads them all); ``clients`` publishers (persistent messages, confirms) and as many
    acking consumers, all at once, each client on its own connection to a broker picked at random
    (``seed``) from ``addresses``. Publisher i sends n / clients messages round robin over its
    slice of the queues, consumer i takes that slice's messages. Each body carries (publisher,
    sequence number), so every confirmed message is checked off when consumed: one missing raises.
    Reports the CPU seconds of each broker process in ``pids`` over publish and consume (from when
    the brokers are quiet after the declarations until the last consumer is done), and how many
    of the queues each broker leads (from the management API at ``http``, the first broker's).
    ``started_file``: written when the measured phase starts and again when it ends (for a profiler).
    ``placement``: one of :data:`PLACEMENTS` (see there); "random" is the workload above.
    ``arguments``: the random placement's queue arguments instead of :data:`BALANCED` (another
    broker's way to spread queues)."""
    rng = random.Random(seed)
    names = [f"{name}-{i}" for i in range(queues)]
    slices = [names[i::clients] for i in range(clients)]
    counts = [n // clients + (i < n % clients) for i in range(clients)]
    _serving(addresses, http or [])
    if placement not in PLACEMENTS:
        raise ValueError(f"unknown placement {placement!r}: one of {', '.join(PLACEMENTS)}")
    home = [addresses[i % len(addresses)] for i in range(clients)]
    local = {"x-queue-leader-locator": "client-local"}
    if placement == "random":
        _declare(addresses, names, BALANCED if arguments is None else arguments, rng)
    elif placement == "consumer-declared":
        rng.choice(addresses)  # the draw "random" makes for its declaring broker: its clients land the same
    else:
        for i in range(clients):
            _declare([home[i]], slices[i], local, rng)
    if placement in ("random", "aligned", "consumer-declared"):
        where = {"publishers": [rng.choice(addresses) for _ in range(clients)],
                 "consumers": [rng.choice(addresses) for _ in range(clients)]}
    else:
        other = [addresses[(i + 1) % len(addresses)] for i in range(clients)]
        where = {"publishers": other if placement == "publishers-remote" else home,
                 "consumers": other if placement == "consumers-remote" else home}
    if placement == "consumer-declared":
        for i in range(clients):
            _declare([where["consumers"][i]], slices[i], local, rng)
    known = _known_everywhere(http, set(names)) if http else 0.0
    _settle(pids)
    leaders = _leaders(http[0], set(names)) if http else {}
    confirmed = [0] * clients
    received = [set() for _ in range(clients)]
    redelivered = [0] * clients
    duplicates = [0] * clients
    published = [threading.Event() for _ in range(clients)]
    errors: list[str] = []

    def publisher(i: int) -> None:
        try:
            conn = Conn(where["publishers"][i])
            conn.send(1, commands.Confirm.Select())
            conn.expect(commands.Confirm.SelectOk)
            heads = [(frame.marshal(commands.Basic.Publish(exchange="", routing_key=q), 1)
                      + frame.marshal(header.ContentHeader(0, size, commands.Basic.Properties(delivery_mode=2)), 1))
                     for q in slices[i]]
            body_head, pad = struct.pack(">BHI", 3, 1, size), b"x" * (size - 8)

            def chunk(done: int, k: int) -> bytes:
                return b"".join(heads[seq % len(heads)] + body_head + struct.pack(">II", i, seq) + pad + b"\xce"
                                for seq in range(done, done + k))
            _publish_confirmed(conn, counts[i], chunk)
            confirmed[i] = counts[i]
            conn.close()
        except Exception as exc:
            errors.append(f"publisher {i}: {exc!r}")
        finally:
            published[i].set()

    def consumer(i: int) -> None:
        try:
            conn = Conn(where["consumers"][i])
            conn.send(1, commands.Basic.Qos(prefetch_count=PREFETCH))
            conn.expect(commands.Basic.QosOk)
            conn.sock.sendall(b"".join(frame.marshal(commands.Basic.Consume(queue=q, consumer_tag=q), 1)
                                       for q in slices[i]))
            conn.sock.settimeout(0.5)
            got = acked = tag = 0
            quiet_since, unpack = None, struct.unpack_from
            while not (published[i].is_set() and len(received[i]) >= confirmed[i]):
                try:
                    conn._recv()
                    quiet_since = None
                except TimeoutError:
                    if published[i].is_set():  # nothing more arrives: give up after 60 quiet seconds
                        quiet_since = quiet_since or time.monotonic()
                        if time.monotonic() - quiet_since > 60:
                            break
                    if errors:
                        break
                    continue
                buf = conn.buf
                for ftype, ch, s, e in conn.frames():
                    if ftype == 3:  # the body: (publisher, sequence) first
                        key = unpack(">II", buf, s)
                        if key in received[i]:
                            duplicates[i] += 1
                        received[i].add(key)
                    elif ftype == 1:
                        cls, meth = unpack(">HH", buf, s)
                        if cls == 60 and meth == 60:  # Basic.Deliver
                            got += 1
                            at = s + 5 + buf[s + 4]
                            tag = unpack(">Q", buf, at)[0]
                            redelivered[i] += buf[at + 8] & 1
                            if got - acked >= ACK_EVERY:
                                conn.send(1, commands.Basic.Ack(delivery_tag=tag, multiple=True))
                                acked = got
                        elif not (cls == 60 and meth == 21):
                            conn._check_close(s)
            if got > acked:
                conn.send(1, commands.Basic.Ack(delivery_tag=tag, multiple=True))
            conn.sock.settimeout(600)
            conn.close()
        except Exception as exc:
            errors.append(f"consumer {i}: {exc!r}")

    threads = [threading.Thread(target=f, args=(i,)) for f in (consumer, publisher) for i in range(clients)]
    if started_file:
        with open(started_file, "w") as marker:
            marker.write("started\n")
    cpu0, start = broker_cpu(pids), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed, cpus = time.perf_counter() - start, [b - a for a, b in zip(cpu0, broker_cpu(pids))]
    if started_file:
        with open(started_file, "a") as marker:
            marker.write("done\n")
    admin = Conn(addresses[0])
    for i in range(0, queues, 500):
        admin.sock.sendall(b"".join(frame.marshal(commands.Queue.Delete(queue=q), 1) for q in names[i:i + 500]))
        expect_many(admin, 50, 41, len(names[i:i + 500]))
    admin.close()
    consumed = sum(len(r & {(i, seq) for seq in range(confirmed[i])}) for i, r in enumerate(received))
    out = {"seconds": elapsed, "msgs_s": n / elapsed, "cpu_us_per_msg": sum(cpus) / n * 1e6,
           "cpu_seconds_by_broker": cpus, "confirmed": sum(confirmed), "consumed": consumed,
           "redelivered": sum(redelivered), "duplicates": sum(duplicates),
           "clients_per_broker": [where["publishers"].count(a) + where["consumers"].count(a) for a in addresses],
           "queues_per_broker": leaders, "declarations_known_everywhere_s": known}
    if errors or consumed < sum(confirmed) or sum(confirmed) < n:
        raise RuntimeError(f"{sum(confirmed):,} of {n:,} messages confirmed, {consumed:,} of them consumed"
                           f"{': ' + '; '.join(errors) if errors else ''} ({json.dumps(out)})")
    return out
