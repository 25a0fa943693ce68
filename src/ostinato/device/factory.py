"""Builds device buffers from MindSpore RL's ``replay_buffer`` config dictionaries."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ostinato.device.priority import PriorityReplayBuffer
from ostinato.device.uniform import UniformReplayBuffer
from ostinato.validate import positive_int

_TYPES: dict[str, type] = {
    "UniformReplayBuffer": UniformReplayBuffer,
    "uniform": UniformReplayBuffer,
    "PriorityReplayBuffer": PriorityReplayBuffer,
    "priority": PriorityReplayBuffer,
    "prioritized": PriorityReplayBuffer,
}

_KEYS = {"number", "type", "params", "data_shape", "data_type", "sample_size", "capacity"}


def _buffer_type(value: Any) -> type:
    if isinstance(value, type) and issubclass(value, (UniformReplayBuffer, PriorityReplayBuffer)):
        return value
    # A MindSpore class (or its name) maps to ours by name, without importing MindSpore.
    name = value if isinstance(value, str) else getattr(value, "__name__", None)
    if name in _TYPES:
        return _TYPES[name]
    raise ValueError(f"type ({value!r}) must be one of {sorted(_TYPES)} or one of those classes")


def _one(config: Mapping[str, Any], where: str) -> Any:
    if not isinstance(config, Mapping):
        raise TypeError(f"{where} ({config!r}) must be a dict")
    unknown = set(config) - _KEYS
    if unknown:
        raise ValueError(f"{where} has unknown keys {sorted(unknown)}; allowed: {sorted(_KEYS)}")
    if "type" not in config:
        raise ValueError(f"{where} needs a 'type'")
    cls = _buffer_type(config["type"])
    if "params" in config:
        if not isinstance(config["params"], Mapping):
            raise TypeError(f"{where}['params'] ({config['params']!r}) must be a dict")
        params = dict(config["params"])
    else:  # MSRL's legacy layout
        params = {"sample_size": config.get("sample_size", 1)}
        if "capacity" in config:
            params["capacity"] = config["capacity"]
    if "batch_size" in params:  # older MindSpore releases' name for sample_size
        params.setdefault("sample_size", params.pop("batch_size"))
    for key, arg in (("data_shape", "shapes"), ("data_type", "types")):
        if key in config:
            params[arg] = tuple(config[key])
        elif arg not in params:
            raise ValueError(f"{where} needs {key!r} (or params[{arg!r}])")
    number = config.get("number", 1)
    positive_int(f"{where}['number']", number)
    if number == 1:
        return cls(**params)
    seed = params.get("seed")
    buffers = []
    for i in range(number):
        if seed is not None:
            params["seed"] = seed + i  # identical buffers would draw identical samples
        buffers.append(cls(**params))
    return buffers


def create_buffer(config: Mapping[str, Any]) -> Any:
    """Builds the buffer(s) described by a MindSpore RL ``replay_buffer`` config.

    ``params`` holds constructor keyword arguments (``capacity``, ``sample_size``, ``alpha``,
    ``seed0``, ``device``, ``backend``...); ``data_shape`` and ``data_type`` become
    ``shapes`` and ``types``. Without ``params`` the legacy top-level ``sample_size``
    (default 1) and ``capacity`` are used. ``number`` defaults to 1 (MindSpore requires it);
    ``number > 1`` gives a list of buffers, whose seeds are ``seed + i`` when a seed is set.
    With ``"multi_type_replaybuffer": True`` every other key is a named sub-config and the
    result is a dict of buffers.

    Args:
        config: The config dictionary.

    Returns:
        A buffer, a list of buffers, or a dict of them.

    Raises:
        ValueError: For unknown keys or types, a missing shape/type list, or a bad
            ``number``; constructor errors propagate unchanged.
        TypeError: If the config or its ``params`` is not a dict.

    Example:
        >>> buf = create_buffer({
        ...     "type": "UniformReplayBuffer",
        ...     "params": {"capacity": 1000, "sample_size": 32},
        ...     "data_shape": [(4,), (1,), (1,), (4,)],
        ...     "data_type": ["float32", "int32", "float32", "float32"],
        ... })
        >>> buf.capacity
        1000
    """
    if not isinstance(config, Mapping):
        raise TypeError(f"config ({config!r}) must be a dict")
    if config.get("multi_type_replaybuffer"):
        return {
            name: _one(sub, f"config[{name!r}]")
            for name, sub in config.items()
            if name != "multi_type_replaybuffer"
        }
    return _one(config, "config")
