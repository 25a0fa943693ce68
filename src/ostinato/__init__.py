"""Ostinato: experience replay with DeepMind Reverb's Python API.

``import ostinato as reverb`` runs Reverb code. Importing the package loads numpy and optree
only; frameworks (TensorFlow, PyTorch, JAX) and gRPC are imported when a feature needs them.
"""

from ostinato import checkpointers, errors, rate_limiters, selectors, structured_writer
from ostinato import structured_writer as structured
from ostinato.client import Client
from ostinato.compat import install_as_reverb
from ostinato.core.extensions import TableExtension
from ostinato.core.specs import TensorSpec
from ostinato.core.table import Table
from ostinato.core.table_info import TableInfo
from ostinato.errors import DeadlineExceededError, RateLimiterTimeout, ReverbError
from ostinato.replay_sample import ReplaySample, SampleInfo
from ostinato.server import Server, ServerTLS, TableExtensionBase
from ostinato.writers.columns import TrajectoryColumn
from ostinato.writers.legacy_writer import Writer
from ostinato.writers.trajectory_writer import TrajectoryWriter

__version__ = "0.1.0"

# Framework adapters load their framework on first use (TensorFlow, PyTorch, JAX).
_LAZY = {
    "TrajectoryDataset": "ostinato.datasets.tf_dataset",
    "TimestepDataset": "ostinato.datasets.tf_dataset",
    "TFClient": "ostinato.datasets.tf_client",
    "PatternDataset": "ostinato.datasets.pattern_dataset",
    "datasets": "ostinato.datasets",
    "observers": "ostinato.observers",
    "rlds": "ostinato.rlds",
}
_LAZY_MODULES = {"datasets", "observers", "rlds"}


def __getattr__(name: str):  # module-level lazy attributes
    import importlib

    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ostinato' has no attribute {name!r}")
    mod = importlib.import_module(module)
    value = mod if name in _LAZY_MODULES else getattr(mod, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "Client",
    "DeadlineExceededError",
    "RateLimiterTimeout",
    "ReplaySample",
    "ReverbError",
    "SampleInfo",
    "PatternDataset",
    "Server",
    "ServerTLS",
    "Table",
    "TableExtension",
    "TableExtensionBase",
    "TFClient",
    "TableInfo",
    "TensorSpec",
    "TimestepDataset",
    "TrajectoryDataset",
    "TrajectoryColumn",
    "TrajectoryWriter",
    "Writer",
    "checkpointers",
    "install_as_reverb",
    "observers",
    "rlds",
    "datasets",
    "errors",
    "rate_limiters",
    "selectors",
    "structured",
    "structured_writer",
]
