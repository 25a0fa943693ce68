"""MindSpore RL's config-dict form through create_buffer."""

import pytest

from ostinato.device import PriorityReplayBuffer, UniformReplayBuffer, create_buffer

torch = pytest.importorskip("torch")


def config(**overrides):
    base = {
        "number": 1,
        "type": "UniformReplayBuffer",
        "params": {"capacity": 100, "sample_size": 8},
        "data_shape": [(4,), (1,), (1,), (4,)],
        "data_type": [torch.float32, torch.int32, torch.float32, torch.float32],
    }
    base.update(overrides)
    return base


def test_uniform_from_config():
    buf = create_buffer(config())
    assert isinstance(buf, UniformReplayBuffer)
    assert (buf.capacity, buf.sample_size, len(buf.specs)) == (100, 8, 4)
    assert buf.specs[1].shape == (1,) and buf.specs[1].dtype == "int32"


def test_priority_from_config_with_mindspore_seed():
    buf = create_buffer(
        config(
            type=PriorityReplayBuffer,
            params={"capacity": 64, "sample_size": 4, "alpha": 0.5, "seed0": 9},
        )
    )
    assert isinstance(buf, PriorityReplayBuffer)
    assert (buf.alpha, buf.seed) == (0.5, 9)


def test_number_defaults_to_one_and_lists_otherwise():
    cfg = config()
    del cfg["number"]  # MindSpore requires it; we default to 1
    assert isinstance(create_buffer(cfg), UniformReplayBuffer)
    bufs = create_buffer(config(number=3, params={"capacity": 10, "sample_size": 2, "seed": 4}))
    assert [b.seed for b in bufs] == [4, 5, 6]


def test_legacy_layout_and_batch_size_alias():
    cfg = config()
    del cfg["params"]
    cfg["capacity"] = 50
    buf = create_buffer(cfg)
    assert (buf.capacity, buf.sample_size) == (50, 1)
    buf = create_buffer(config(params={"capacity": 20, "batch_size": 5}))
    assert buf.sample_size == 5


def test_multi_type():
    bufs = create_buffer({"multi_type_replaybuffer": True, "a": config(), "b": config()})
    assert set(bufs) == {"a", "b"}


def test_mindspore_class_maps_by_name():
    class MindSporeUniform:  # stands in for mindspore_rl's class of that name
        pass

    MindSporeUniform.__name__ = "UniformReplayBuffer"
    assert isinstance(create_buffer(config(type=MindSporeUniform)), UniformReplayBuffer)


@pytest.mark.parametrize(
    ("cfg", "error", "match"),
    [
        (config(type="Reservoir"), ValueError, r"type \('Reservoir'\) must be one of"),
        (config(numbr=1), ValueError, r"unknown keys \['numbr'\]"),
        (config(number=0), ValueError, r"\['number'\] \(0\) must be a positive integer"),
        (config(params=[1]), TypeError, r"\['params'\] \(\[1\]\) must be a dict"),
        ({"type": "uniform", "params": {"capacity": 4}}, ValueError, "needs 'data_shape'"),
        ([1], TypeError, r"config \(\[1\]\) must be a dict"),
    ],
)
def test_bad_configs(cfg, error, match):
    with pytest.raises(error, match=match):
        create_buffer(cfg)


def test_constructor_errors_propagate():
    with pytest.raises(ValueError, match=r"capacity \(0\) must be a positive integer"):
        create_buffer(config(params={"capacity": 0, "sample_size": 1}))
