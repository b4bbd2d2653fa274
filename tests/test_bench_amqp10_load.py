"""The AMQP 1.0 load generator of ``python -m bench amqp`` against a real broker, with small
counts: every mode finishes only when the broker has every message (pre-settled: a passive
declare counts them; unsettled: each disposition accepted; consume: each delivery arrived), so a
broker that loses, refuses or stalls messages, or a generator that miscounts, fails here. The
in-process hot-path rig's AMQP 1.0 modes run too."""
from __future__ import annotations

from bench import amqp10_load, amqp_load, hotpath


def test_each_mode_moves_every_message(broker):
    address = "%s:%d" % broker.address("amqp")
    # more than a session's half window (32,767 transfers): the session flow (no link fields) is read too
    settled = amqp10_load.main({"address": address, "queue": "b10-settled", "messages": 40_000, "size": 100,
                                "mode": "settled"})
    assert settled["messages"] == 40_000 and settled["msgs_s"] > 0
    for size in (100, 1024):
        queue = f"b10-{size}"
        r = amqp10_load.main({"address": address, "queue": queue, "messages": 3_000, "size": size,
                              "mode": "unsettled"})
        assert r["msgs_s"] > 0
        side = amqp_load.Conn(address)
        assert amqp_load.declare(side, queue, passive=True) == 3_000
        side.close()
        r = amqp10_load.main({"address": address, "queue": queue, "messages": 3_000, "mode": "consume"})
        assert r["msgs_s"] > 0


def test_hotpath_amqp10_modes(tmp_path):
    rig = hotpath.Rig(tmp_path)
    for mode in ("amqp10-settled", "amqp10-unsettled", "amqp10-consume"):
        assert hotpath.run_mode(rig, mode, 2_000, 100, mode) > 0
        new = rig.r10.conn.dataReceived.__self__
        assert new.state == "opened" and 0 in new.sessions, f"{mode}: {rig.r10.transport.value()[-300:]!r}"
    queues = rig.router.vhosts["/"].queues
    assert queues["hp-amqp10-settled"].stats.published == 2_000
    assert queues["hp-amqp10-unsettled"].stats.published == 2_000
    assert queues["hp-amqp10-consume"].stats.acked == 2_000
