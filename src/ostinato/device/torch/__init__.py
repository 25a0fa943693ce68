"""The torch backend of :mod:`ostinato.device`: composable pieces and the two buffers.

Importing this module imports torch. The pieces can be used on their own (TorchRL style):

* :class:`TensorStorage` -- columns on a device, written as a FIFO ring, validated;
* :class:`UniformSampler` -- uniform slot draws (with or without replacement);
* :class:`PrioritizedSampler` -- stratified proportional draws and importance weights over
  a :class:`SumMinTree`, or :class:`FusedPrioritizedSampler` -- the same over flat leaves
  in fused Triton kernels (the default on CUDA);

and every stateful piece has ``state_dict()`` / ``load_state_dict()``.
"""

from ostinato.device.torch.buffers import TorchPriorityReplayBuffer, TorchUniformReplayBuffer
from ostinato.device.torch.device import resolve_device
from ostinato.device.torch.fused import FusedPrioritizedSampler
from ostinato.device.torch.prioritized import PrioritizedSampler, make_prioritized_sampler
from ostinato.device.torch.sampler import UniformSampler
from ostinato.device.torch.storage import TensorStorage
from ostinato.device.torch.sum_tree import SumMinTree

__all__ = [
    "FusedPrioritizedSampler",
    "PrioritizedSampler",
    "SumMinTree",
    "TensorStorage",
    "TorchPriorityReplayBuffer",
    "TorchUniformReplayBuffer",
    "UniformSampler",
    "make_prioritized_sampler",
    "resolve_device",
]
