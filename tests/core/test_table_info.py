"""TableInfo's parts behave like the protobuf messages they stand for in Reverb: fields can be
assigned (Acme 0.4: ``info.table_worker_time.sleeping_ms = ...``), typed and named errors, the
``distribution`` oneof, ``CopyFrom``; and they still compare, print, pickle and checkpoint."""

from __future__ import annotations

import copy
import pickle

import pytest

import ostinato as reverb
from ostinato.core.table_info import (
    HeapOptions,
    KeyDistributionOptions,
    PrioritizedOptions,
    RateLimiterCallStats,
    RateLimiterInfo,
    TableWorkerTime,
)


def _table(name: str = "t") -> reverb.Table:
    return reverb.Table(
        name,
        reverb.selectors.Prioritized(0.6),
        reverb.selectors.Fifo(),
        10,
        reverb.rate_limiters.SampleToInsertRatio(1.0, 2, (0.0, 10.0)),
    )


def test_fields_of_the_parts_can_be_assigned_and_compare_by_value():
    table = _table()
    info = table.info
    assert info == table.info
    info.table_worker_time.sleeping_ms = 5
    info.rate_limiter_info.insert_stats.completed = 3
    info.sampler_options.prioritized.priority_exponent = 0.9
    assert info.table_worker_time.sleeping_ms == 5
    assert info != table.info  # each snapshot has its own parts
    other = table.info
    other.table_worker_time.sleeping_ms = 5
    other.rate_limiter_info.insert_stats.completed = 3
    other.sampler_options.prioritized.priority_exponent = 0.9
    assert info == other
    assert "sleeping_ms=5" in repr(info) and "priority_exponent=0.9" in str(info)


def test_acme_rebuilds_a_table_from_its_info():
    # What acme.utils.reverb_utils.make_replay_table_from_info and its test do.
    table = _table()
    info = table.info
    rl = info.rate_limiter_info
    assert info.sampler_options.WhichOneof("distribution") == "prioritized"
    assert info.remover_options.WhichOneof("distribution") == "fifo"
    rebuilt = reverb.Table(
        name=info.name,
        sampler=reverb.selectors.Prioritized(info.sampler_options.prioritized.priority_exponent),
        remover=reverb.selectors.Fifo(),
        max_size=info.max_size,
        rate_limiter=reverb.rate_limiters.SampleToInsertRatio(
            samples_per_insert=rl.samples_per_insert,
            min_size_to_sample=rl.min_size_to_sample,
            error_buffer=(rl.min_diff, rl.max_diff),
        ),
        max_times_sampled=info.max_times_sampled,
        signature=info.signature,
    )
    new_info = rebuilt.info
    new_info.table_worker_time.sleeping_ms = info.table_worker_time.sleeping_ms
    assert new_info == info


def test_values_are_converted_like_protobuf_does():
    rl = RateLimiterInfo(1, 0, 10, 2)
    assert rl.samples_per_insert == 1.0 and isinstance(rl.samples_per_insert, float)
    rl.min_diff = 3
    assert isinstance(rl.min_diff, float)
    import numpy as np

    t = TableWorkerTime()
    t.running_ms = np.int64(7)
    assert t.running_ms == 7 and type(t.running_ms) is int
    h = HeapOptions()
    h.min_heap = 1
    assert h.min_heap is True


@pytest.mark.parametrize(
    "message, field, value, match",
    [
        (
            TableWorkerTime(),
            "sleeping_ms",
            1.5,
            r"TableWorkerTime\.sleeping_ms must be an integer, got 1\.5 \(float\)",
        ),
        (
            TableWorkerTime(),
            "sleeping_ms",
            "5",
            r"TableWorkerTime\.sleeping_ms must be an integer, got '5' \(str\)",
        ),
        (
            RateLimiterInfo(),
            "samples_per_insert",
            "x",
            r"RateLimiterInfo\.samples_per_insert must be a number, got 'x'",
        ),
        (
            RateLimiterInfo(),
            "insert_stats",
            3,
            r"RateLimiterInfo\.insert_stats must be a RateLimiterCallStats, got 3 \(int\)",
        ),
        (
            KeyDistributionOptions(),
            "heap",
            PrioritizedOptions(1.0),
            r"KeyDistributionOptions\.heap must be a HeapOptions or None",
        ),
    ],
)
def test_a_value_of_the_wrong_type_raises_naming_field_and_value(message, field, value, match):
    before = copy.deepcopy(message)
    with pytest.raises(TypeError, match=match):
        setattr(message, field, value)
    assert message == before


def test_an_unknown_field_raises_attribute_error_naming_it():
    with pytest.raises(
        AttributeError, match=r"TableWorkerTime has no field 'sleeping' \(fields: running_ms"
    ):
        TableWorkerTime().sleeping = 1


def test_setting_a_distribution_member_clears_the_others():
    options = _table().info.sampler_options
    assert options.WhichOneof("distribution") == "prioritized"
    options.uniform = True
    assert options.WhichOneof("distribution") == "uniform" and options.prioritized is None
    options.heap = HeapOptions(min_heap=True)
    assert options.WhichOneof("distribution") == "heap" and not options.uniform
    assert options.HasField("heap") and not options.HasField("fifo")


def test_copy_from_copies_in_place():
    info = _table().info
    target = info.table_worker_time
    target.CopyFrom(TableWorkerTime(running_ms=4))
    assert info.table_worker_time is target and target.running_ms == 4
    stats = RateLimiterInfo(insert_stats=RateLimiterCallStats(2))
    copied = RateLimiterInfo()
    copied.CopyFrom(stats)
    assert copied == stats and copied.insert_stats is not stats.insert_stats
    with pytest.raises(
        TypeError,
        match=r"TableWorkerTime\.CopyFrom\(\) needs a TableWorkerTime, got RateLimiterInfo",
    ):
        target.CopyFrom(stats)


def test_parts_are_not_hashable_like_protobuf_messages_but_pickle_and_copy():
    info = _table().info
    info.table_worker_time.sleeping_ms = 2
    with pytest.raises(TypeError):
        hash(info.table_worker_time)
    assert pickle.loads(pickle.dumps(info)) == info
    assert copy.deepcopy(info) == info and copy.copy(info) == info


def test_table_info_itself_stays_immutable():
    info = _table().info
    with pytest.raises(AttributeError):
        info.max_size = 3  # type: ignore[misc]


def test_parts_are_assignable_over_the_network_and_a_checkpoint_round_trips(tmp_path):
    checkpointer = reverb.checkpointers.DefaultCheckpointer(str(tmp_path))
    server = reverb.Server([_table("replay")], checkpointer=checkpointer)
    try:
        client = reverb.Client(f"localhost:{server.port}", in_process=False)
        info = client.server_info()["replay"]
        info.table_worker_time.sleeping_ms = 9
        info.rate_limiter_info.delete_count = 1
        assert client.server_info()["replay"].table_worker_time.sleeping_ms == 0
        client.insert([1], {"replay": 1.0})
        before = server.localhost_client().server_info()["replay"]
        client.checkpoint()
        client.close()
    finally:
        server.stop()
    restored = reverb.Server([_table("replay")], checkpointer=checkpointer)
    try:
        after = restored.localhost_client().server_info()["replay"]
        assert after.current_size == 1
        assert after.sampler_options == before.sampler_options
        assert after.rate_limiter_info == before.rate_limiter_info
    finally:
        restored.stop()
