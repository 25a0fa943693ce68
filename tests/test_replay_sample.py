"""``SampleInfo``/``ReplaySample``: Reverb 0.7's four-field ``SampleInfo`` still builds."""

from __future__ import annotations

import ostinato as reverb


def test_times_sampled_defaults_to_zero_for_reverb_07_code():
    # Acme 0.4 (written against Reverb 0.7): reverb.SampleInfo((), (), (), ()).
    info = reverb.SampleInfo((), (), (), ())
    assert info.times_sampled == 0 and len(info) == 5
    info = reverb.SampleInfo(key=1, probability=0.5, table_size=2, priority=1.0)
    assert info == (1, 0.5, 2, 1.0, 0)
    sample = reverb.ReplaySample(info=info, data=[1])
    assert sample.info.times_sampled == 0


def test_sampled_items_report_times_sampled(make_server):
    server = make_server(reverb.Table.queue("q", 10))
    client = server.localhost_client()
    client.insert([1], {"q": 1.0})
    (sample,) = client.sample("q", 1, emit_timesteps=False)
    assert sample.info.times_sampled == 1  # >= 1 for a real sample: 0 reads "not reported"
    assert reverb.SampleInfo._fields[-1] == "times_sampled"
