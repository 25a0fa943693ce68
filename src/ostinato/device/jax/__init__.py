"""The jax backend of :mod:`ostinato.device`: a pure functional form and buffer objects.

Importing this module imports jax. The functional form (flashbax style) is a frozen set of
pure functions over an immutable state::

    buf = make_priority_buffer(alpha, capacity, sample_size, shapes, types).jit()
    state = buf.init()                               # on jax's default device
    state = buf.add(state, columns)                  # state donated: updated in place
    indices, weights, *columns = buf.sample(state, key, beta)
    state = buf.update_priorities(state, indices, priorities)

and :class:`JaxUniformReplayBuffer` / :class:`JaxPriorityReplayBuffer` wrap it in the
MindSpore-style object API (they are what ``UniformReplayBuffer(..., backend="jax")``
returns).
"""

from ostinato.device.jax.buffers import JaxPriorityReplayBuffer, JaxUniformReplayBuffer
from ostinato.device.jax.functional import (
    JittedBuffer,
    PriorityBuffer,
    PriorityState,
    UniformBuffer,
    UniformState,
    make_priority_buffer,
    make_uniform_buffer,
    resolve_device,
)
from ostinato.device.jax.sum_tree import TreeState

__all__ = [
    "JaxPriorityReplayBuffer",
    "JaxUniformReplayBuffer",
    "JittedBuffer",
    "PriorityBuffer",
    "PriorityState",
    "TreeState",
    "UniformBuffer",
    "UniformState",
    "make_priority_buffer",
    "make_uniform_buffer",
    "resolve_device",
]
