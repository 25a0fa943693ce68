"""Ostinato's pure core: tables, selectors, rate limiters, chunk store.

No I/O and no transport or ML framework imports happen here (a test enforces it).
"""

from ostinato.core.chunks import Chunk, ChunkStore
from ostinato.core.deadline import Deadline
from ostinato.core.extensions import TableExtension
from ostinato.core.rate_limiter import MinSize, Queue, RateLimiter, SampleToInsertRatio, Stack
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
from ostinato.core.sum_tree import SumTree
from ostinato.core.table import Table

__all__ = [
    "Chunk",
    "ChunkStore",
    "Deadline",
    "Fifo",
    "HeapSelector",
    "ItemSelector",
    "Lifo",
    "MaxHeap",
    "MinHeap",
    "MinSize",
    "Prioritized",
    "Queue",
    "RateLimiter",
    "SampleToInsertRatio",
    "Stack",
    "SumTree",
    "Table",
    "TableExtension",
    "Uniform",
]
