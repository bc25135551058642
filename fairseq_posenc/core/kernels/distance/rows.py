"""The fused attention with content read by distance: Transformer-XL's and Huang et al.'s.

``softmax(q k^T + (x_q A_q)[b, h, i, j - i] + (x_k A_k)[b, h, j, j - i] + mask) v``
(:func:`distance_rows_attention`): tables per query row (and key column) with a column for
every distance (``Term.ROWS``, ``Term.ROWS_BOTH``), made here as batched products before
the kernels and again in their backward, never kept (``docs/decisions.md``, "Tables per row
by distance").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from .. import on_device_of
from .launch import _backward, _check_triton, _dropout, _forward, _padding_mask, _Shape
from .term_types import Term


def _heads_as_rows(x: Tensor) -> Tensor:
    """``(B, H, len, d)`` as ``(H, len * B, d)``: a view of fairseq's ``(len, B, H * d)``
    projections."""
    batch, heads, length, d = x.shape
    return x.permute(1, 2, 0, 3).reshape(heads, length * batch, d)


def _columns(a: Tensor, width: int, key: bool) -> Tensor:
    """``A`` ``(H, d, R)`` as the ``(H, d, width)`` columns its table is the product with:
    zero columns up to ``width``, a multiple of 16 (never read unmasked: aligned rows for
    the products and the kernel's loads, as Triton specializes integers divisible by 16);
    a key side's (``key``) distances reversed, its zeros first
    (:func:`.tile._key_rows_start`)."""
    if key:
        return torch.nn.functional.pad(a.flip(-1), (width - a.size(-1), 0))
    return torch.nn.functional.pad(a, (0, width - a.size(-1)))


def _columns_grad(d_columns: Tensor, r: int, key: bool) -> Tensor:
    """The gradient of :func:`_columns`' ``A`` (``r`` distances) from its columns'."""
    if key:
        return d_columns[..., d_columns.size(-1) - r:].flip(-1)
    return d_columns[..., :r]


def _table_rows(x: Tensor, columns: Tensor) -> tuple[Tensor, Tensor]:
    """``x`` ``(B, H, len, d)`` as ``(H, len * B, d)`` (:func:`_heads_as_rows`) and its
    products with ``columns`` ``(H, d, W)``: one batched product, no copy of the columns
    per sentence, laid out ``(H, len, B, W)`` and returned as its ``(B, H, len, W)``
    view."""
    batch, heads, length, _ = x.shape
    x_heads = _heads_as_rows(x)
    rows = torch.bmm(x_heads, columns).view(heads, length, batch, -1)
    return x_heads, rows.permute(2, 0, 1, 3)


def _table_grads(x: Tensor, x_heads: Tensor, columns: Tensor, d_rows: Tensor,
                 need_x: bool, need_columns: bool
                 ) -> tuple[Optional[Tensor], Optional[Tensor]]:
    """The gradients of :func:`_table_rows`' ``x`` and ``columns`` from ``d_rows``, where
    needed: one product each, the batch folded into the rows."""
    batch, heads, length, d = x.shape
    d_heads = d_rows.permute(1, 2, 0, 3).reshape(heads, length * batch, -1)
    d_x = d_columns = None
    if need_x:  # (H, len * B, d) back to (B, H, len, d)
        d_x = torch.bmm(d_heads, columns.transpose(1, 2)).view(
            heads, length, batch, d).permute(2, 0, 1, 3)
    if need_columns:
        d_columns = torch.bmm(x_heads.transpose(1, 2), d_heads)
    return d_x, d_columns


@dataclass
class _Side:
    """One side's table made again for the backward: ``A``'s columns
    (:func:`_columns`), ``x`` as rows per head and the table."""

    columns: Tensor
    x_heads: Tensor
    rows: Tensor

    @classmethod
    def of(cls, x: Tensor, a: Tensor, width: int, key: bool) -> "_Side":
        columns = _columns(a, width, key)
        return cls(columns, *_table_rows(x, columns))


class _RowsAttention(torch.autograd.Function):
    """Tables per query row and per key column that are products, ``x_q A_q`` and
    ``x_k A_k`` (``(B, H, len, d) @ (H, d, W)``, ``W``: every distance of ``A``, rounded
    up to 16), made in the forward for the kernel and again in the backward, never kept
    (``B x H x len x W`` each: ``W`` about ``2 len`` in bidirectional attention, ``len``
    in causal); their gradients ``dS`` (stored in place) go to ``x`` and ``A``'s columns
    by one product each, and on to ``A`` (:func:`_columns_grad`)."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, x_q: Tensor, a_q: Tensor,
                x_k: Optional[Tensor], a_k: Optional[Tensor], r_lo: int, q_offset: int,
                key_padding_mask: Optional[Tensor], causal: bool, dropout_p: float,
                seed: Tensor, width: int):
        pad = _padding_mask(key_padding_mask, q.device)
        rows_q = _table_rows(x_q, _columns(a_q, width, False))[1]
        rows_k = None if x_k is None else _table_rows(x_k, _columns(a_k, width, True))[1]
        shape = _Shape.of(q, k, v, q_offset, r_lo, rows_q, key_padding_mask is not None,
                          causal, Term.ROWS if rows_k is None else Term.ROWS_BOTH,
                          key_table=rows_k, dropout_p=dropout_p)
        out, lse, _ = _forward(q, k, v, rows_q, rows_k, pad, seed, shape)
        ctx.save_for_backward(q, k, v, x_q, a_q, x_k, a_k, pad, seed, out, lse)
        ctx.shape, ctx.width = shape, width
        return out

    @staticmethod
    def backward(ctx, d_out: Tensor):
        q, k, v, x_q, a_q, x_k, a_k, pad, seed, out, lse = ctx.saved_tensors
        needs = ctx.needs_input_grad
        query = _Side.of(x_q, a_q, ctx.width, False)
        key = None if x_k is None else _Side.of(x_k, a_k, ctx.width, True)
        with on_device_of(d_out):
            dq, dk, dv, d_rows_q, d_rows_k = _backward(
                q, k, v, query.rows, key and key.rows, pad, seed, out, lse, lse, d_out,
                None, ctx.shape, True)
        grads = [dq, dk, dv, None, None, None, None]
        for x, a, side, d_rows, n in ((x_q, a_q, query, d_rows_q, 3),
                                      (x_k, a_k, key, d_rows_k, 5)):
            if side is None:
                continue
            d_x, d_columns = _table_grads(x, side.x_heads, side.columns, d_rows, needs[n],
                                          needs[n + 1])
            grads[n] = d_x
            if d_columns is not None:
                grads[n + 1] = _columns_grad(d_columns, a.size(-1), n == 5).to(a.dtype)
        return (*grads, None, None, None, None, None, None, None)


def distance_rows_attention(q: Tensor, k: Tensor, v: Tensor, query_rows: tuple[Tensor, Tensor],
                            r_lo: int, q_offset: int = 0,
                            key_padding_mask: Optional[Tensor] = None, causal: bool = False,
                            key_rows: Optional[tuple[Tensor, Tensor]] = None,
                            dropout_p: float = 0.0, seed: Optional[Tensor] = None) -> Tensor:
    """Attention with terms that read the content by distance (Transformer-XL's ``q_i.W_R
    R_{i-j}``, Huang et al.'s method 4), every distance its own table column:
    ``softmax(q k^T + (x_q A_q)[b, h, i, r_ij] + (x_k A_k)[b, h, j, r_ij] + mask) v`` with
    ``r_ij = j - (q_offset + i) - r_lo``, no scaling.

    ``query_rows = (x_q, A_q)``: ``(B, H, q_len, d)`` and ``(H, d, R)``, the column of
    ``A_q`` for distance ``r_lo + c`` at ``c``; ``key_rows = (x_k, A_k)`` (or None):
    ``(B, H, k_len, d)`` and ``(H, d, R)``. ``R`` must cover every distance the attention
    has (``j > q_offset + i`` only up to 0 with ``causal``): no clipping. Rows with no key
    to attend to get zeros. Differentiable in every tensor.
    ``dropout_p``: attention dropout on the probabilities (each kept one scaled by ``1 /
    (1 - dropout_p)``), its mask drawn in the tiles from ``seed``
    (:func:`.launch.dropout_keep`; None: :func:`.launch.dropout_seed`).
    """
    _check_triton()
    q_len, k_len = q.size(2), k.size(2)
    x_q, a_q = query_rows
    x_k, a_k = key_rows if key_rows is not None else (None, None)
    r = a_q.size(-1)
    r_hi = 0 if causal else k_len - 1 - q_offset
    if r_lo > -(q_offset + q_len - 1) or r_lo + r - 1 < r_hi:
        raise ValueError(
            f"the rows cover distances {r_lo}..{r_lo + r - 1}; this attention needs "
            f"{-(q_offset + q_len - 1)}..{r_hi} (no clipping)")
    if a_k is not None and a_k.size(-1) != r:
        raise ValueError(f"the key rows have {a_k.size(-1)} distances, the query rows {r}")
    return _RowsAttention.apply(q, k, v, x_q, a_q, x_k, a_k, r_lo, q_offset,
                                key_padding_mask, causal, dropout_p,
                                _dropout(dropout_p, seed, q.device), r + -r % 16)
