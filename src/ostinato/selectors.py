"""Item selectors (Reverb's ``reverb.selectors``): Uniform, Prioritized, Fifo, Lifo, MinHeap,
MaxHeap."""

from ostinato.core.selectors import (
    Fifo,
    HeapSelector,
    ItemSelector,
    Lifo,
    MaxHeap,
    MinHeap,
    Prioritized,
    Uniform,
)

__all__ = [
    "Fifo",
    "HeapSelector",
    "ItemSelector",
    "Lifo",
    "MaxHeap",
    "MinHeap",
    "Prioritized",
    "Uniform",
]
