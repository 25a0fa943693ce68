"""Pins the names Ostinato exports, so that `import ostinato as reverb` keeps running Reverb
code."""

import inspect

import ostinato
import ostinato as reverb

REVERB_NAMES = {
    "selectors",
    "rate_limiters",
    "checkpointers",
    "TrajectoryDataset",
    "TimestepDataset",
    "TFClient",
    "Client",
    "Writer",
    "DeadlineExceededError",
    "ReverbError",
    "ReplaySample",
    "SampleInfo",
    "Server",
    "Table",
    "TrajectoryColumn",
    "TrajectoryWriter",
    "PatternDataset",
    "structured",
    "structured_writer",
}
OSTINATO_NAMES = {
    "errors",
    "datasets",
    "RateLimiterTimeout",
    "TensorSpec",
    "TableInfo",
    "TableExtension",
    "ServerTLS",
    "install_as_reverb",
    "observers",
    "rlds",
    "TableExtensionBase",
}


#: Names whose module imports TensorFlow when they are first used.
TF_NAMES = {"TrajectoryDataset", "TimestepDataset", "TFClient", "PatternDataset"}


def test_exported_names_are_pinned():
    import importlib.util

    assert set(ostinato.__all__) == REVERB_NAMES | OSTINATO_NAMES
    has_tf = importlib.util.find_spec("tensorflow") is not None
    for name in ostinato.__all__:
        if name in TF_NAMES and not has_tf:
            assert name in dir(ostinato), name
            continue
        assert hasattr(ostinato, name), name


def test_selectors_and_rate_limiters_modules():
    assert {"Uniform", "Prioritized", "Fifo", "Lifo", "MinHeap", "MaxHeap"} <= set(
        dir(reverb.selectors)
    )
    for cls in (
        reverb.selectors.Uniform,
        reverb.selectors.Prioritized,
        reverb.selectors.Fifo,
        reverb.selectors.Lifo,
    ):
        assert inspect.isclass(cls)
    assert type(reverb.selectors.MinHeap()) is reverb.selectors.HeapSelector
    assert {"MinSize", "SampleToInsertRatio", "Queue", "Stack", "RateLimiter"} <= set(
        dir(reverb.rate_limiters)
    )


def test_selector_reprs_match_reverb():
    assert repr(reverb.selectors.Uniform()) == "UniformSelector"
    assert repr(reverb.selectors.Fifo()) == "FifoSelector"
    assert repr(reverb.selectors.Lifo()) == "LifoSelector"
    assert repr(reverb.selectors.Prioritized(0.8)) == "PrioritizedSelector(priority_exponent=0.8)"
    assert repr(reverb.selectors.Prioritized(1)) == "PrioritizedSelector(priority_exponent=1)"
    assert repr(reverb.selectors.MinHeap()) == "HeapSelector(sign=1)"
    assert repr(reverb.selectors.MaxHeap()) == "HeapSelector(sign=-1)"


def test_signatures_and_defaults():
    sig = inspect.signature(reverb.Table)
    assert list(sig.parameters) == [
        "name",
        "sampler",
        "remover",
        "max_size",
        "rate_limiter",
        "max_times_sampled",
        "extensions",
        "signature",
    ]
    assert sig.parameters["max_times_sampled"].default == 0
    assert list(inspect.signature(reverb.Server).parameters)[:3] == [
        "tables",
        "port",
        "checkpointer",
    ]
    c = reverb.Client
    assert list(inspect.signature(c.insert).parameters)[1:3] == ["data", "priorities"]
    s = inspect.signature(c.sample).parameters
    assert s["num_samples"].default == 1
    assert s["emit_timesteps"].default is True
    assert s["unpack_as_table_signature"].default is False
    w = inspect.signature(c.writer).parameters
    assert w["delta_encoded"].default is False and w["chunk_length"].default is None
    assert w["max_in_flight_items"].default == 25
    tw = inspect.signature(reverb.TrajectoryWriter.flush).parameters
    assert tw["block_until_num_items"].default == 0 and tw["timeout_ms"].default is None
    ee = inspect.signature(reverb.TrajectoryWriter.end_episode).parameters
    assert ee["clear_buffers"].default is True
    assert list(inspect.signature(c.mutate_priorities).parameters)[1:] == [
        "table",
        "updates",
        "deletes",
    ]


def test_error_tree():
    e = reverb.errors
    assert issubclass(e.DeadlineExceededError, e.ReverbError)
    assert issubclass(e.DeadlineExceededError, TimeoutError)
    assert issubclass(e.RateLimiterTimeout, e.DeadlineExceededError)
    assert issubclass(e.InvalidArgumentError, ValueError)
    assert issubclass(e.TableNotFoundError, RuntimeError)  # Reverb raised RuntimeError ...
    assert issubclass(e.TableNotFoundError, ValueError)  # ... or ValueError, depending on the call


def test_sample_info_fields():
    assert reverb.SampleInfo._fields == (
        "key",
        "probability",
        "table_size",
        "priority",
        "times_sampled",
    )
    assert reverb.SampleInfo.zeros() == (0, 0.0, 0, 0.0, 0)
    assert reverb.ReplaySample._fields == ("info", "data")
