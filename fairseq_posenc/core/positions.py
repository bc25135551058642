"""Shared position machinery: relative distances, T5 buckets, per-distance tables, RoPE's
rotation of pairs.

Pure tensor functions (no fairseq). Conventions (``docs/conventions.md``):

* ``i`` is the query position, ``j`` the key position, and the relative distance is
  ``r = j - i`` (tensor2tensor, HF T5, the TUPE and AT5 code). Papers that write
  ``R_{i-j}`` index the same table with the sign flipped; the set of parameters is the same.
* Positions count real tokens. fairseq pads a batch on one side only (sources on the left,
  targets on the right), so the real tokens of a row are contiguous and the distance
  between two real tokens equals the difference of their indices in the padded row:
  relative terms can be computed on indices and are padding-invariant by construction.
* In incremental decoding the queries are the last ``q_len`` of ``k_len`` positions, i.e.
  query ``i`` sits at position ``q_offset + i`` with ``q_offset = k_len - q_len``.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor


def relative_positions(
    q_len: int, k_len: int, q_offset: int = 0, device: Optional[torch.device] = None
) -> Tensor:
    """``r[i, j] = j - (q_offset + i)`` as a ``(q_len, k_len)`` long tensor."""
    q = torch.arange(q_offset, q_offset + q_len, device=device)
    k = torch.arange(k_len, device=device)
    return k[None, :] - q[:, None]


def real_positions(padding_mask: Optional[Tensor], length: int,
                   device: Optional[torch.device] = None) -> Tensor:
    """Absolute position of every token counted over real tokens only: ``(B, length)``, or
    ``(1, length)`` when there is no padding. Padding gets 0 (it is masked as a key, and its
    output as a query is never used)."""
    if padding_mask is None:
        return torch.arange(length, device=device)[None, :]
    real = (~padding_mask.to(torch.bool)).long()
    return (real.cumsum(dim=1) - 1).clamp(min=0)


def gather_absolute_pairs(table: Tensor, positions: Tensor, q_offset: int) -> Tensor:
    """``table[h, pos[b, q_offset + i], pos[b, j]]``: an ``(H, n, n)`` table indexed by
    absolute positions, read at each row's ``positions`` (``(B, k_len)``, e.g. from
    :func:`real_positions`) for the last ``k_len - q_offset`` queries and every key.
    Returns ``(B, H, q_len, k_len)``.

    One ``gather`` over the flattened table (broadcast over the batch, not copied): its
    backward is a ``scatter_add``, cheaper on CPU than the accumulating ``index_put``
    that indexing with two index tensors (``table[:, q_pos, k_pos]``) gives."""
    heads, n = table.size(0), table.size(-1)
    batch, k_len = positions.shape
    q_pos = positions[:, q_offset:]
    pair = (q_pos[:, :, None] * n + positions[:, None, :]).view(batch, 1, -1)
    flat = table.reshape(heads, n * n).unsqueeze(0).expand(batch, heads, n * n)
    return flat.gather(-1, pair.expand(batch, heads, -1)).view(batch, heads, -1, k_len)


def distance_range(q_len: int, k_len: int, q_offset: int = 0) -> tuple[int, int]:
    """Smallest and largest ``r = j - i`` that a ``(q_len, k_len)`` attention needs."""
    return -(q_offset + q_len - 1), k_len - 1 - q_offset


def t5_bucket(
    r: Tensor, num_buckets: int = 32, max_distance: int = 128, bidirectional: bool = True
) -> Tensor:
    """T5's logarithmic bucket of each relative distance ``r = j - i`` (Raffel et al. 2020).

    Follows HF ``T5Attention._relative_position_bucket``: with ``bidirectional`` half of the
    buckets are for keys after the query (``r > 0``); otherwise (causal) all positive
    distances fall into bucket 0 and ``n = max(-r, 0)``. Distances below
    ``max_exact = nb // 2`` get a bucket each; larger ones share logarithmically wider
    buckets up to ``max_distance``, beyond which everything lands in the last bucket.

    The arithmetic keeps HF's order of operations, ``log(n / max_exact) / log(max_distance /
    max_exact) * (nb - max_exact)``: bucket boundaries sit exactly on integers (n = 16, 64)
    and a reordered product (``log(..) * precomputed_scale``) rounds 6.0 down to 5.99...
    """
    if bidirectional:
        num_buckets //= 2
        offset = (r > 0).long() * num_buckets
        n = r.abs()
    else:
        offset = torch.zeros_like(r)
        n = (-r).clamp(min=0)
    max_exact = num_buckets // 2
    large = max_exact + (
        torch.log(n.float().clamp(min=max_exact) / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).long()
    large = large.clamp(max=num_buckets - 1)
    return offset + torch.where(n < max_exact, n, large)


def clipped_index(r: Tensor, lo: int, hi: int) -> Tensor:
    """Row of a per-distance table covering ``r`` in ``[lo, hi]``: clip, then shift to 0."""
    return r.clamp(min=lo, max=hi) - lo


def expand_distance_bias(
    per_distance: Tensor, r_lo: int, q_len: int, k_len: int, q_offset: int
) -> Tensor:
    """Turn ``per_distance[..., r - r_lo]`` into a ``(..., q_len, k_len)`` bias ``b[.., i, j]``.

    Row ``i`` reads ``k_len`` consecutive distances ``-(q_offset + i) .. k_len - 1 - q_offset
    - i``, so the rows are overlapping windows of the table: ``unfold`` makes them a view,
    one copy (the flip that orders them by ``i``) materializes the bias, and the backward
    is ``unfold``'s summing kernel. A gather would be slower forward, and its backward
    (an accumulating ``index_put``) slower still.
    """
    start = -(q_offset + q_len - 1) - r_lo  # the table entry of row q_len - 1, key 0
    if q_len == 1:  # one decoding step: a slice
        return per_distance[..., start : start + k_len].unsqueeze(-2)
    windows = per_distance[..., start : start + q_len + k_len - 1].unfold(-1, k_len, 1)
    return windows.flip(-2)  # windows[a] is row q_len - 1 - a


def read_by_distance(table: Tensor, index: Tensor) -> Tensor:
    """``table[h, index[b, 0, i, j]]``: a per-head table ``(H, R)`` read at a row of it per
    pair and sequence (``(B, 1, q_len, k_len)``, e.g. distances between positions chosen per
    sequence less the table's first), as ``(B, H, q_len, k_len)``. An embedding lookup, whose
    backward sums the pairs' gradients into the rows in one pass."""
    rows = F.embedding(index.squeeze(1), table.t())  # (B, q_len, k_len, H)
    return rows.permute(0, 3, 1, 2)


def sum_by_clipped_distance(x: Tensor, index: Tensor, q_offset: int, r_lo: int,
                            r_hi: int) -> Tensor:
    """``out[..., i, c - r_lo] = sum of x[..., i, j]`` over the keys ``j`` with
    ``clip(j - (q_offset + i), r_lo, r_hi) = c``: ``(..., q_len, r_hi - r_lo + 1)``;
    ``index`` is :func:`clipped_index` of :func:`relative_positions` ``(q_len, k_len)``.

    Two ways to the same sums, by device. On CUDA :func:`sum_by_masks`: ``scatter_add``'s
    atomic adds serialize where most keys of a row share one of the two clipped rows
    (Shaw's ``k = 16`` at 512 tokens: about 480 keys per row), so on a GPU they would
    dominate Shaw's training step. Elsewhere ``scatter_add`` along ``index``: one pass
    over ``x``, where the masked sums take five (``docs/benchmark-cpu-runs/``). An index
    per sequence (``(B, 1, q_len, k_len)``, distances between positions chosen per
    sequence, :attr:`~fairseq_posenc.core.context.PositionContext.positions`) is not the
    consecutive distances the masked sums assume: ``scatter_add`` there too."""
    if x.is_cuda and index.dim() == 2:
        return sum_by_masks(x, q_offset, r_lo, r_hi)
    out = x.new_zeros(*x.shape[:-1], r_hi - r_lo + 1)
    return out.scatter_add_(-1, index.expand_as(x), x)


def sum_by_masks(x: Tensor, q_offset: int, r_lo: int, r_hi: int) -> Tensor:
    """:func:`sum_by_clipped_distance` without ``scatter_add``: each distance strictly
    inside the clip range is one key (a gather, or none), and the two clipped rows are
    masked sums."""
    q_len, k_len = x.shape[-2:]
    r = relative_positions(q_len, k_len, q_offset, x.device)
    low = x.masked_fill(r > r_lo, 0).sum(-1, keepdim=True)
    high = x.masked_fill(r < r_hi, 0).sum(-1, keepdim=True)
    if r_hi - r_lo < 2:
        return torch.cat([low, high], -1)
    inner = torch.arange(r_lo + 1, r_hi, device=x.device)
    keys = torch.arange(q_offset, q_offset + q_len, device=x.device)[:, None] + inner[None, :]
    outside = (keys < 0) | (keys >= k_len)
    index = keys.clamp(0, k_len - 1).expand(*x.shape[:-1], inner.numel())
    middle = x.gather(-1, index).masked_fill(outside, 0)
    return torch.cat([low, middle, high], -1)


class _ReadByClippedDistance(torch.autograd.Function):
    """``per_distance[..., i, clip(j - (q_offset + i), r_lo, r_hi) - r_lo]`` for every key:
    a gather whose backward is :func:`sum_by_clipped_distance` (on CUDA not
    ``scatter_add``, which autograd would use)."""

    @staticmethod
    def forward(ctx, per_distance: Tensor, index: Tensor, q_offset: int,  # type: ignore[override]
                r_lo: int, r_hi: int) -> Tensor:
        ctx.save_for_backward(index)
        ctx.window = (q_offset, r_lo, r_hi)
        return per_distance.gather(-1, index.expand(*per_distance.shape[:-1], index.size(-1)))

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        index, = ctx.saved_tensors
        return sum_by_clipped_distance(grad, index, *ctx.window), None, None, None, None


def read_by_clipped_distance(per_distance: Tensor, index: Tensor, q_offset: int, r_lo: int,
                             r_hi: int) -> Tensor:
    """``(..., q_len, k_len)`` from ``(..., q_len, r_hi - r_lo + 1)`` rows per clipped
    distance, ``index`` being :func:`clipped_index` of :func:`relative_positions`
    ``(q_len, k_len)``; gradients by :func:`sum_by_clipped_distance`."""
    return _ReadByClippedDistance.apply(per_distance, index, q_offset, r_lo, r_hi)


def rotate_pairs(x: Tensor, rotation: Tensor) -> Tensor:
    """Rotate pairs ``(x[..., 2i], x[..., 2i+1])`` by the complex numbers ``rotation``
    (``(..., d/2)``, broadcast against ``x``'s leading dimensions): the pair read as
    ``x_2i + i x_2i+1`` times ``e^(i angle)`` is RoPE's 2x2 rotation (Su et al. 2021, eq.
    34), done as one complex product (a view, no copy of ``x``) instead of slices, four
    products and a stack; a number of modulus ``r`` also scales the pair by ``r`` (xPos's
    decay). The encodings (``encodings/rope.py``, ``encodings/xpos.py``) and the fused
    rotation's self-check (``kernels/self_check.py``) use it.
    """
    if x.dtype not in (torch.float32, torch.float64):
        # half precision has no complex CPU kernels; rotate in float32 (as LLaMA does)
        return rotate_pairs(x.float(), rotation).to(x.dtype)
    pairs = x.unflatten(-1, (-1, 2))
    if any(stride % 2 for stride in pairs.stride()[:-1]) or pairs.storage_offset() % 2:
        pairs = pairs.contiguous()  # view_as_complex needs even strides
    return torch.view_as_real(torch.view_as_complex(pairs) * rotation).flatten(-2)
