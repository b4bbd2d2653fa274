from core.config import TopicConfig
from core.log import PartitionLog
from core.producers import PartitionProducers, ProducerIdAllocator, ProducerStates
from kio.schema.errors import ErrorCode
from wire.records import encode_batch, Record, read_batch_header


def idem_batch(pid, epoch, seq, n=2):
    records = [Record(offset=i, timestamp=1000, key=None, value=b"v%d" % (seq + i)) for i in range(n)]
    return encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_duplicates_and_gaps(tmp_path):
    plog = PartitionLog(tmp_path / "t-0", TopicConfig.from_strings({}))
    state = PartitionProducers()

    def produce(data):
        header = read_batch_header(data)
        verdict = state.check(header)
        if verdict.error or verdict.duplicate_of:
            return verdict
        info = plog.append(data)
        state.record(header, info.first_offset)
        return info

    assert produce(idem_batch(7, 0, 0)).first_offset == 0
    assert produce(idem_batch(7, 0, 2)).first_offset == 2
    assert produce(idem_batch(7, 0, 0)).duplicate_of == (0, 1)   # a retry of the first batch
    assert produce(idem_batch(7, 0, 2)).duplicate_of == (2, 3)
    assert produce(idem_batch(7, 0, 9)).error == ErrorCode.out_of_order_sequence_number
    assert produce(idem_batch(7, 1, 5)).error == ErrorCode.out_of_order_sequence_number  # new epoch starts at 0
    assert produce(idem_batch(7, 1, 0)).first_offset == 4
    assert produce(idem_batch(7, 0, 4)).error == ErrorCode.invalid_producer_epoch
    assert plog.next_offset == 6
    # after a restart the state comes back from the log's batch headers
    rebuilt = PartitionProducers.rebuild(plog)
    assert rebuilt.check(read_batch_header(idem_batch(7, 1, 0))).duplicate_of == (4, 5)
    assert rebuilt.check(read_batch_header(idem_batch(7, 1, 2))).error == ErrorCode.none


def test_producer_ids_never_repeat_across_restarts(tmp_path):
    first = ProducerIdAllocator(tmp_path)
    ids = [first.allocate() for _ in range(3)]
    again = ProducerIdAllocator(tmp_path)
    assert again.allocate() > max(ids)
    states = ProducerStates(tmp_path)
    pid, epoch = states.init_producer()
    assert epoch == 0 and states.init_producer(pid, epoch) == (pid, 1)
