from hypothesis import given, strategies as st

from routing.cursor import QueueCursor


def test_deliver_ack_out_of_order_moves_floor_over_gaps():
    c = QueueCursor(0, 5)
    taken = [c.take("ch1") for _ in range(5)]
    assert taken == [(i, False) for i in range(5)] and c.take("ch1") is None
    c.ack([1, 2])
    assert c.ack_floor == 0
    c.ack([0])
    assert c.ack_floor == 3
    c.ack([4, 4, 99])  # duplicates and unknown tags are ignored
    assert c.ack_floor == 3 and c.ack([3]) == [3] and c.ack_floor == 5


def test_requeued_messages_come_first_lowest_first_flagged_redelivered():
    c = QueueCursor(0, 6)
    for _ in range(4):
        c.take("a")
    c.requeue([2, 0])
    assert c.ready_count() == 4
    assert c.take("b") == (0, True)
    assert c.take("b") == (2, True)
    assert c.take("b") == (4, False)


def test_closing_a_channel_returns_its_deliveries():
    c = QueueCursor(0, 4)
    c.take("a"), c.take("b"), c.take("a")
    assert c.release_owner("a") == [0, 2]
    assert [c.take("c") for _ in range(3)] == [(0, True), (2, True), (3, False)]


def test_restart_redelivers_from_the_floor_flagged():
    c = QueueCursor(ack_floor=3, end_offset=8, redelivered_below=6)
    assert [c.take("x") for _ in range(5)] == [(3, True), (4, True), (5, True), (6, False), (7, False)]


def test_purge_keeps_unacked_and_counts_ready():
    c = QueueCursor(0, 10)
    c.take("a"), c.take("a")
    c.requeue([1])
    assert c.purge() == 9
    assert c.ready_count() == 0 and c.take("a") is None
    c.ack([0])
    assert c.ack_floor == 10
    c.log_end(12)
    assert c.take("a") == (10, False)


@given(st.lists(st.tuples(st.sampled_from(["take", "ack", "requeue", "grow"]), st.integers(0, 30)), max_size=200))
def test_every_offset_is_settled_once_and_never_lost(ops):
    c = QueueCursor(0, 0)
    acked = []
    end = 0
    for op, n in ops:
        if op == "grow":
            end += n % 5
            c.log_end(end)
        elif op == "take":
            c.take("o")
        elif op == "ack":
            acked += c.ack([n])
        else:
            c.requeue([n])
    # drain: everything not yet acked must still be deliverable
    while (got := c.take("o")) is not None:
        acked += c.ack([got[0]])
    acked += c.ack(list(c.unacked))
    assert sorted(acked) == list(range(end)) and c.ack_floor == end
