"""The fused attention with a table read by distance: a summand, a factor, Shaw's rows.

:func:`distance_attention` (one table per head, or for all, over a range of distances:
``Term.BIAS`` or, with ``factor``, ``Term.FACTOR``) and
:func:`clipped_relative_attention` (a table per query row read by clipped distance, and
the probabilities summed by it: ``Term.CLIPPED``, ``Term.CLIPPED_SUMS``), both through
one autograd Function that launches :mod:`.launch`'s kernels.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .. import on_device_of
from . import launch
from .launch import _backward, _check_triton, _dropout, _forward, _padding_mask, _Shape
from .term_types import Term


def clipped_rows_fit(rows: int) -> bool:
    """Whether a table of ``rows`` clipped distances fits :func:`clipped_relative_attention`'s
    tiles (its sums by clipped distance gather within one tile's width)."""
    return 2 <= rows <= min(launch.FORWARD.block_n, launch.BACKWARD_DQ.block_n)


class _DistanceAttention(torch.autograd.Function):
    """A table per head or per query row (``term``, one of :data:`.term_types.Term`'s first
    four), differentiable in ``q``, ``k``, ``v``, the table and the sums by distance."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, table: Tensor, r_lo: int,
                q_offset: int, key_padding_mask: Optional[Tensor], causal: bool, term: Term,
                dropout_p: float, seed: Tensor):
        pad = _padding_mask(key_padding_mask, q.device)
        table = table.contiguous()
        shape = _Shape.of(q, k, v, q_offset, r_lo, table, key_padding_mask is not None,
                          causal, term, dropout_p=dropout_p)
        out, lse, by_distance = _forward(q, k, v, table, None, pad, seed, shape)
        ctx.save_for_backward(q, k, v, table, pad, seed, out, lse, by_distance)
        ctx.shape = shape
        return (out, by_distance) if term.sums else out

    @staticmethod
    def backward(ctx, d_out: Tensor, d_by_distance: Optional[Tensor] = None):
        q, k, v, table, pad, seed, out, lse, by_distance = ctx.saved_tensors
        with on_device_of(d_out):
            dq, dk, dv, grad_table, _ = _backward(
                q, k, v, table, None, pad, seed, out, lse, by_distance, d_out,
                d_by_distance, ctx.shape, ctx.needs_input_grad[3])
        return dq, dk, dv, grad_table, None, None, None, None, None, None, None


def distance_attention(q: Tensor, k: Tensor, v: Tensor, table: Tensor, r_lo: int,
                       q_offset: int = 0, key_padding_mask: Optional[Tensor] = None,
                       causal: bool = False, factor: bool = False, dropout_p: float = 0.0,
                       seed: Optional[Tensor] = None) -> Tensor:
    """``softmax(q k^T + table[h, j - (q_offset + i) - r_lo] + mask) v``, no scaling; with
    ``factor``, ``softmax((q k^T) * table[h, j - (q_offset + i) - r_lo] + mask) v``.

    ``q``: ``(B, H, q_len, d_qk)``, already scaled; ``k``: ``(B, H, k_len, d_qk)``;
    ``v``: ``(B, H, k_len, d_v)``; ``table``: ``(H or 1, R)``, the bias of distances
    ``r_lo .. r_lo + R - 1``, which must cover every ``j - (q_offset + i)``;
    ``key_padding_mask``: ``(B, k_len)``, True at padding; ``causal``: mask keys
    ``j > q_offset + i``. Rows with no key to attend to get zeros. Differentiable in
    ``q``, ``k``, ``v`` and ``table``.
    ``dropout_p``: attention dropout on the probabilities (each kept one scaled by ``1 /
    (1 - dropout_p)``), its mask drawn in the tiles from ``seed``
    (:func:`.launch.dropout_keep`; None: :func:`.launch.dropout_seed`).
    """
    _check_triton()
    batch, heads, q_len, _ = q.shape
    k_len = k.size(2)
    if table.dim() != 2 or table.size(0) not in (1, heads):
        raise ValueError(f"table must be (heads or 1, R), got {tuple(table.shape)}")
    if r_lo > -(q_offset + q_len - 1) or r_lo + table.size(1) - 1 < k_len - 1 - q_offset:
        raise ValueError(
            f"the table covers distances {r_lo}..{r_lo + table.size(1) - 1}; this attention "
            f"needs {-(q_offset + q_len - 1)}..{k_len - 1 - q_offset}")
    return _DistanceAttention.apply(q, k, v, table, r_lo, q_offset, key_padding_mask,
                                    causal, Term.FACTOR if factor else Term.BIAS,
                                    dropout_p, _dropout(dropout_p, seed, q.device))


def clipped_relative_attention(q: Tensor, k: Tensor, v: Tensor, key_rows: Tensor,
                               r_lo: int, q_offset: int = 0,
                               key_padding_mask: Optional[Tensor] = None,
                               causal: bool = False, by_distance: bool = False,
                               dropout_p: float = 0.0, seed: Optional[Tensor] = None
                               ) -> tuple[Tensor, Optional[Tensor]]:
    """Shaw et al.'s attention with the relative terms read by clipped distance:
    ``softmax(q k^T + key_rows[b, h, i, c_ij] + mask) v`` with ``c_ij = clip(j - (q_offset +
    i), r_lo, r_lo + R - 1) - r_lo`` (``key_rows = q aK^T``, ``(B, H, q_len, R)``), and with
    ``by_distance`` also the probabilities summed by ``c``, ``(B, H, q_len, R)`` float32,
    which times ``aV`` is the value term. ``R`` may be at most the tiles' width (64).
    Differentiable in ``q``, ``k``, ``v``, ``key_rows`` and through the sums.
    ``dropout_p``, ``seed``: attention dropout, as for :func:`distance_attention`; the
    sums by distance add the dropped probabilities, as the value term reads them."""
    _check_triton()
    batch, heads, q_len, _ = q.shape
    if key_rows.shape[:3] != (batch, heads, q_len) or not clipped_rows_fit(key_rows.size(3)):
        raise ValueError(f"key_rows must be (B, H, q_len, R) with 2 <= R <= "
                         f"{min(launch.FORWARD.block_n, launch.BACKWARD_DQ.block_n)}, got "
                         f"{tuple(key_rows.shape)}")
    result = _DistanceAttention.apply(q, k, v, key_rows, r_lo, q_offset, key_padding_mask,
                                      causal, Term.CLIPPED_SUMS if by_distance
                                      else Term.CLIPPED, dropout_p,
                                      _dropout(dropout_p, seed, q.device))
    return result if by_distance else (result, None)
