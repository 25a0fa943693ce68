"""Fused Triton kernels of the GPU prioritized path (:mod:`~ostinato.device.torch.fused`).

Importing this module imports Triton. On a machine without a GPU the kernels run through
Triton's interpreter when ``TRITON_INTERPRET=1`` is set before this module is imported (the
CPU test-suite does that), on CPU tensors.

Four kernels, each one launch:

* :func:`write_leaves` -- an insert: the leaves of up to two slot ranges (a ring write that
  wraps) from per-row priorities (or one for all, read with stride 0), or from the running
  maximum; raises the running maximum and advances the device-side insertion counter.
* :func:`update_leaves` -- a priority update: drops ids of rows overwritten since they were
  sampled and invalid priorities, keeps the last of repeated ids, raises the running maximum.
* :func:`block_stats` -- per block of ``B`` leaves: the sum and the minimum positive leaf.
* :func:`query` -- one program per draw: the stratified mass, the block then the leaf whose
  prefix-sum interval holds it, the row id and the importance weight.

Zero leaves (free slots) are never chosen, whatever rounding the prefix sums carry: a zero
leaf's boundary is replaced by ``-1`` before the first boundary reaching the mass is taken,
and the mass is capped at the largest boundary (the same rule as the jax tree).

The running maximum is raised with an integer ``atomic_max`` on the float's bits: priorities
that reach it are finite and non-negative, and such floats order like their bit patterns.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _leaf(p, alpha, FLOOR: tl.constexpr, LEAF: tl.constexpr):
    # max(p ** alpha, FLOOR); p >= 0 here. alpha is in [0, 1]; 0 ** 0 is 1, like torch.pow.
    # FLOOR is a compile-time constant: a float argument would be passed as float32, which
    # flushes float64's floor (about 1e-292) to zero.
    p = p.to(LEAF)
    safe = tl.where(p > 0, p, 1.0)
    leaf = tl.where(p > 0, tl.exp(tl.log(safe.to(tl.float32)) * alpha).to(LEAF), 0.0)
    leaf = tl.where((p > 0) | (alpha > 0), leaf, 1.0)
    # float32 log/exp lose a few ulps; recover the exact value where pow is exact (alpha 1).
    leaf = tl.where(alpha == 1.0, p, leaf)
    return tl.maximum(leaf, tl.full((1,), FLOOR, LEAF))


# Integer arguments that change from call to call are not specialised on (Triton would
# otherwise compile a variant per alignment and for the value 1).
@triton.jit(
    do_not_specialize=["slot0", "src0", "len0", "slot1", "src1", "len1", "prio_stride", "inc"]
)
def write_leaves(
    leaves_ptr,
    prio_ptr,
    maxbits_ptr,
    counters_ptr,
    slot0,
    src0,
    len0,
    slot1,
    src1,
    len1,
    prio_stride,
    inc,
    alpha,
    FLOOR: tl.constexpr,
    MODE: tl.constexpr,  # 0: the running maximum, 1: priorities read (stride 0: one for all)
    BLOCK: tl.constexpr,
):
    """Writes the leaves of an insert (one program). ``prio_ptr`` rows ``src + i`` go to
    slots ``slot + i`` for the two segments; invalid priorities count as 0. Advances the
    insertion counter by ``inc``."""
    LEAF: tl.constexpr = leaves_ptr.dtype.element_ty
    BITS: tl.constexpr = maxbits_ptr.dtype.element_ty
    offs = tl.arange(0, BLOCK)
    if MODE == 0:
        maxp = tl.load(maxbits_ptr).to(LEAF, bitcast=True)
        fill = _leaf(tl.full((BLOCK,), 0.0, LEAF) + maxp, alpha, FLOOR, LEAF)
    best = tl.zeros((BLOCK,), LEAF)
    for seg in tl.static_range(2):
        if seg == 0:
            slot, src, n = slot0, src0, len0
        else:
            slot, src, n = slot1, src1, len1
        for start in range(0, n, BLOCK):
            i = start + offs
            mask = i < n
            if MODE == 1:
                p = tl.load(prio_ptr + (src + i) * prio_stride, mask=mask, other=0.0).to(LEAF)
                p = tl.where((p >= 0) & (p < float("inf")), p, 0.0)
                best = tl.maximum(best, p)
                leaf = _leaf(p, alpha, FLOOR, LEAF)
            else:
                leaf = fill
            tl.store(leaves_ptr + slot + i, leaf, mask=mask)
    if MODE == 1:
        tl.atomic_max(maxbits_ptr, tl.max(best, 0).to(BITS, bitcast=True))
    tl.store(counters_ptr, tl.load(counters_ptr) + inc)


@triton.jit(do_not_specialize=["n", "capacity"])
def update_leaves(
    leaves_ptr,
    ids_ptr,
    prio_ptr,
    maxbits_ptr,
    counters_ptr,
    n,
    capacity,
    alpha,
    FLOOR: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Sets the leaves of sampled rows (``BLOCK`` entries per program). An entry is written
    when its row is still stored, its priority is finite and >= 0, and no later entry of
    the same row is."""
    LEAF: tl.constexpr = leaves_ptr.dtype.element_ty
    BITS: tl.constexpr = maxbits_ptr.dtype.element_ty
    total = tl.load(counters_ptr)
    base = tl.load(counters_ptr + 1)
    size = tl.minimum(total - base, capacity)
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < n
    ids = tl.load(ids_ptr + i, mask=mask, other=-1).to(tl.int64)
    p = tl.load(prio_ptr + i, mask=mask, other=0.0).to(LEAF)
    keep = mask & (ids >= total - size) & (ids < total) & (p >= 0) & (p < float("inf"))
    slot = ids % capacity
    slot = tl.where(slot < 0, slot + capacity, slot)
    # Drop an entry when a later kept entry has the same slot (the last one wins).
    later = tl.zeros((BLOCK,), tl.int1)
    for start in range(tl.program_id(0) * BLOCK, n, BLOCK):
        j = start + tl.arange(0, BLOCK)
        jmask = j < n
        jids = tl.load(ids_ptr + j, mask=jmask, other=-1).to(tl.int64)
        jp = tl.load(prio_ptr + j, mask=jmask, other=0.0).to(LEAF)
        jkeep = jmask & (jids >= total - size) & (jids < total) & (jp >= 0) & (jp < float("inf"))
        same = (ids[:, None] == jids[None, :]) & jkeep[None, :] & (j[None, :] > i[:, None])
        later = later | (tl.max(same.to(tl.int32), 1) > 0)
    win = keep & ~later
    leaf = _leaf(tl.where(keep, p, 0.0), alpha, FLOOR, LEAF)
    tl.store(leaves_ptr + slot, leaf, mask=win)
    top = tl.max(tl.where(keep, p, 0.0), 0)
    tl.atomic_max(maxbits_ptr, top.to(BITS, bitcast=True))


@triton.jit
def block_stats(leaves_ptr, bsum_ptr, bmin_ptr, B: tl.constexpr):
    """Sum and minimum positive leaf (``inf`` if none) of block ``program_id``."""
    b = tl.program_id(0)
    x = tl.load(leaves_ptr + b * B + tl.arange(0, B))
    tl.store(bsum_ptr + b, tl.sum(x, 0))
    tl.store(bmin_ptr + b, tl.min(tl.where(x > 0, x, float("inf")), 0))


@triton.jit
def _first_reaching(bounds, mass, idx, N: tl.constexpr):
    # bounds: (1 or QB, N) masked inclusive prefix sums; mass: (QB,). The first entry whose
    # boundary reaches the mass, after capping the mass at the largest boundary.
    mass = tl.minimum(mass, tl.max(bounds, 1))
    return tl.min(tl.where(bounds >= mass[:, None], idx[None, :], N), 1), mass


@triton.jit(do_not_specialize=["count", "nblocks", "capacity"])
def query(
    leaves_ptr,
    bsum_ptr,
    bmin_ptr,
    u_ptr,
    slots_ptr,
    ids_ptr,
    weights_ptr,
    counters_ptr,
    count,
    nblocks,
    capacity,
    beta,
    NB: tl.constexpr,
    B: tl.constexpr,
    QB: tl.constexpr,
):
    """Draws ``QB * program_id`` to ``QB * (program_id + 1)``: draw ``q`` falls in stratum
    ``q`` of ``count`` equal strata of the total mass. (One draw per program on a GPU;
    the interpreter takes many, since it pays per program.)"""
    LEAF: tl.constexpr = leaves_ptr.dtype.element_ty
    q = tl.program_id(0) * QB + tl.arange(0, QB)
    qmask = q < count
    bidx = tl.arange(0, NB)
    bmask = bidx < nblocks
    sums = tl.load(bsum_ptr + bidx, mask=bmask, other=0.0)
    total = tl.sum(sums, 0)
    u = tl.load(u_ptr + q, mask=qmask, other=0.0).to(LEAF)
    mass = (q + 1 - u) * (total / count)
    # The block: the same boundaries for every draw.
    bounds = tl.where(sums > 0, tl.cumsum(sums, 0), -1.0)[None, :]
    block, mass = _first_reaching(bounds, mass, bidx, NB)
    before = tl.sum(tl.where(bidx[None, :] == block[:, None], bounds - sums[None, :], 0.0), 1)
    mass = mass - before
    # The leaf inside the block.
    lidx = tl.arange(0, B)
    rows = tl.load(leaves_ptr + block[:, None] * B + lidx[None, :], mask=qmask[:, None], other=0.0)
    bounds = tl.where(rows > 0, tl.cumsum(rows, 1), -1.0)
    leaf_i, mass = _first_reaching(bounds, mass, lidx, B)
    slot = block * B + leaf_i
    leaf = tl.sum(tl.where(lidx[None, :] == leaf_i[:, None], rows, 0.0), 1)
    low = tl.min(tl.load(bmin_ptr + bidx, mask=bmask, other=float("inf")), 0)
    ratio = (low / tl.where(leaf > 0, leaf, low)).to(tl.float32)  # masked draws: 1
    weight = tl.exp(tl.log(ratio) * beta)
    weight = tl.where(beta == 0.0, 1.0, weight)
    newest = tl.load(counters_ptr) - 1
    back = (newest - slot) % capacity
    back = tl.where(back < 0, back + capacity, back)
    tl.store(slots_ptr + q, slot.to(tl.int64), mask=qmask)
    tl.store(ids_ptr + q, (newest - back).to(tl.int64), mask=qmask)
    tl.store(weights_ptr + q, weight, mask=qmask)
