"""The fused attention with content read by distance: Transformer-XL's and Huang et al.'s.

``softmax(q k^T + (x_q A_q)[b, h, i, j - i] + (x_k A_k)[b, h, j, j - i] + mask) v``
(:func:`distance_rows_attention`): tables per query row (and key column) with a column for
every distance (``Term.ROWS``, ``Term.ROWS_BOTH``), made here as batched products before
the kernels and again in their backward, never kept; in bidirectional attention in bands
of :data:`ROW_BAND` rows, each over only the distances its rows meet
(``docs/decisions.md``, "Tables per row by distance").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import Tensor

from .. import on_device_of
from .launch import _backward, _check_triton, _dropout, _forward, _padding_mask, _Shape
from .terms import Term

#: Tables per row that cover every distance (:func:`distance_rows_attention`: ``xl``,
#: ``huang4``) are made in bands of ``ROW_BAND`` query rows (key columns for a key
#: side), each band's products over only the distances its rows meet: ``k_len +
#: ROW_BAND - 1`` columns (rounded up to 16) where one table over the attention's
#: distances has ``q_len + k_len - 1``, about half as many in the encoder, so about half
#: the memory traffic in making them, zeroing and storing their gradient and multiplying
#: it back. Bidirectional attention only: a causal band meets fewer distances the nearer
#: it is to the start (ragged), and a causal table already has only ``k_len``. 0: one
#: table (``docs/decisions.md``, "Tables per row by distance").
ROW_BAND = 16


def _heads_as_rows(x: Tensor) -> Tensor:
    """``(B, H, len, d)`` as ``(H, len * B, d)``: a view of fairseq's ``(len, B, H * d)``
    projections."""
    batch, heads, length, d = x.shape
    return x.permute(1, 2, 0, 3).reshape(heads, length * batch, d)


def _band_windows(a: Tensor, start: int, step: int, count: int, width: int) -> Tensor:
    """Columns ``start + n * step + [0, width)`` of ``a`` ``(H, d, R)`` for ``n < count``,
    zeros outside ``[0, R)``, as ``(H * count, d, width)``: a copy the size of ``a``
    times ``width / |step|``, not of the batch. Differentiable (its backward adds the
    overlapping windows back)."""
    if step < 0:  # the same windows, taken from the reversed columns and turned back
        return _band_windows(a.flip(-1), a.size(-1) - width - start, -step, count,
                             width).flip(-1)
    span = (count - 1) * step + width
    left, right = max(0, -start), max(0, start + span - a.size(-1))
    a = torch.nn.functional.pad(a, (left, right)).narrow(-1, start + left, span)
    return a.unfold(-1, width, step).transpose(1, 2).reshape(-1, a.size(1), width)


@dataclass(frozen=True)
class _RowTables:
    """How the tables per row are made from ``A_q`` (and ``A_k``): windows of its columns,
    ``(H * count, d, width)``, each multiplied by the rows of its band (:func:`_table_rows`).

    ``band = 0``: one table over every distance, ``A`` itself with zero columns up to a
    multiple of 16 (never read unmasked: aligned rows for the products and the kernel's
    loads, as Triton specializes integers divisible by 16), the key side's distances
    reversed, its zeros first (:func:`.tile._key_rows_start`). Else bands of ``band`` rows
    (:data:`ROW_BAND`): band ``n`` of the queries (rows ``t`` in ``n * band + [0,
    band)``) meets the distances from ``-(q_offset + n * band + band - 1)`` on, pair ``(t,
    j)`` at column ``j + band - 1 - t % band``; band ``n`` of the keys meets them from ``n *
    band + band - 1 - q_offset`` down (reversed, so that a key column's addresses run along
    the queries), pair ``(t, j)`` at column ``t + band - 1 - j % band``."""

    band: int
    width: int
    q_start: int = 0  # bands: the first query window's first column of A_q
    k_start: int = 0  # bands: the first key window's first column of A_k (before reversing)
    q_bands: int = 1
    k_bands: int = 1

    @classmethod
    def one(cls, r: int) -> "_RowTables":
        return cls(0, r + -r % 16)

    @classmethod
    def banded(cls, band: int, q_len: int, k_len: int, q_offset: int,
               r_lo: int) -> "_RowTables":
        width = -(-(max(q_len, k_len) + band - 1) // 16) * 16  # aligned rows
        return cls(band, width, -(q_offset + band - 1) - r_lo,
                   band - 1 - q_offset - (width - 1) - r_lo, -(-q_len // band),
                   -(-k_len // band))

    def query_windows(self, a_q: Tensor) -> Tensor:
        if self.band == 0:
            return torch.nn.functional.pad(a_q, (0, self.width - a_q.size(-1)))
        return _band_windows(a_q, self.q_start, -self.band, self.q_bands, self.width)

    def key_windows(self, a_k: Tensor) -> Tensor:
        if self.band == 0:
            return torch.nn.functional.pad(a_k.flip(-1), (self.width - a_k.size(-1), 0))
        return _band_windows(a_k, self.k_start, self.band, self.k_bands, self.width).flip(-1)


def _table_rows(x: Tensor, windows: Tensor, band: int) -> tuple[Tensor, Tensor]:
    """``x`` ``(B, H, len, d)`` as ``(H * bands, band * B, d)`` (zero rows after ``len``;
    ``band = 0``: one band, ``(H, len * B, d)``, a view of fairseq's ``(len, B, H * d)``
    projections) and each band's products with its window of ``windows`` ``(H * bands, d,
    W)``: one batched product, no copy of a window per sentence, laid out ``(H, bands *
    band, B, W)`` and returned as its ``(B, H, bands * band, W)`` view."""
    batch, heads, length, d = x.shape
    bands = windows.size(0) // heads
    band = band or length
    x_heads = _heads_as_rows(x)
    extra = bands * band - length
    if extra:
        x_heads = torch.nn.functional.pad(x_heads, (0, 0, 0, extra * batch))
    x_bands = x_heads.reshape(heads * bands, band * batch, d)  # in bands, a copy
    rows = torch.bmm(x_bands, windows).view(heads, bands * band, batch, -1)
    return x_bands, rows.permute(2, 0, 1, 3)


def _table_grads(x: Tensor, x_bands: Tensor, windows: Tensor, d_rows: Tensor,
                 need_x: bool, need_windows: bool
                 ) -> tuple[Optional[Tensor], Optional[Tensor]]:
    """The gradients of :func:`_table_rows`' ``x`` and ``windows`` from ``d_rows``, where
    needed: one product each per window, the batch folded into the rows."""
    batch, heads, length, _ = x.shape
    d_bands = d_rows.permute(1, 2, 0, 3).reshape(x_bands.size(0), x_bands.size(1), -1)
    d_x = d_windows = None
    if need_x:  # (H * bands, band * B, d) back to (B, H, len, d)
        d_x = torch.bmm(d_bands, windows.transpose(1, 2)).view(
            heads, -1, batch, x.size(3))[:, :length].permute(2, 0, 1, 3)
    if need_windows:
        d_windows = torch.bmm(x_bands.transpose(1, 2), d_bands)
    return d_x, d_windows


@dataclass
class _Side:
    """One side's tables made again for the backward: ``A``'s windows through autograd
    (``a_grad`` to ``windows_grad``; in float32 for bands, whose overlapping windows'
    gradients add up), the windows in ``A``'s dtype (its own values: exact), ``x`` in
    bands and the tables."""

    a_grad: Tensor
    windows_grad: Tensor
    windows: Tensor
    x_bands: Tensor
    rows: Tensor

    @classmethod
    def of(cls, x: Tensor, a: Tensor, windows_of: Callable[[Tensor], Tensor],
           band: int) -> "_Side":
        with torch.enable_grad():
            a_grad = (a.detach().float() if band else a.detach()).requires_grad_()
            windows_grad = windows_of(a_grad)
        windows = windows_grad.detach().to(a.dtype)
        return cls(a_grad, windows_grad, windows, *_table_rows(x, windows, band))

    def grad_of_a(self, d_windows: Tensor) -> Tensor:
        """``A``'s gradient from its windows'."""
        d_a = torch.autograd.grad(self.windows_grad, self.a_grad,
                                  d_windows.to(self.a_grad.dtype))[0]
        return d_a.to(self.windows.dtype)


class _RowsAttention(torch.autograd.Function):
    """Tables per query row and per key column that are products, ``x_q A_q`` and
    ``x_k A_k`` (``(B, H, len, d) @ (H, d, R)``), made as :class:`_RowTables` says: in
    the forward for the kernel and again in the backward, never kept (``B x H x len x
    W`` each: ``W`` about ``2 len`` in one bidirectional table, about ``len`` in bands
    or causally); their gradients ``dS`` (stored in place) go to ``x`` and ``A``'s
    windows by one product each per window, and on to ``A`` through the windows' own
    backward (autograd)."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, x_q: Tensor, a_q: Tensor,
                x_k: Optional[Tensor], a_k: Optional[Tensor], r_lo: int, q_offset: int,
                key_padding_mask: Optional[Tensor], causal: bool, dropout_p: float,
                seed: Tensor, tables: _RowTables):
        pad = _padding_mask(key_padding_mask, q.device)
        rows_q = _table_rows(x_q, tables.query_windows(a_q), tables.band)[1]
        rows_k = None if x_k is None else _table_rows(x_k, tables.key_windows(a_k),
                                                      tables.band)[1]
        shape = _Shape.of(q, k, v, q_offset, r_lo, rows_q, key_padding_mask is not None,
                          causal, Term.ROWS if rows_k is None else Term.ROWS_BOTH,
                          key_table=rows_k, dropout_p=dropout_p, band=tables.band)
        out, lse, _ = _forward(q, k, v, rows_q, rows_k, pad, seed, shape)
        ctx.save_for_backward(q, k, v, x_q, a_q, x_k, a_k, pad, seed, out, lse)
        ctx.shape, ctx.tables = shape, tables
        return out

    @staticmethod
    def backward(ctx, d_out: Tensor):
        q, k, v, x_q, a_q, x_k, a_k, pad, seed, out, lse = ctx.saved_tensors
        tables, needs = ctx.tables, ctx.needs_input_grad
        query = _Side.of(x_q, a_q, tables.query_windows, tables.band)
        key = None if x_k is None else _Side.of(x_k, a_k, tables.key_windows, tables.band)
        with on_device_of(d_out):
            dq, dk, dv, d_rows_q, d_rows_k = _backward(
                q, k, v, query.rows, key and key.rows, pad, seed, out, lse, lse, d_out,
                None, ctx.shape, True)
        grads = [dq, dk, dv, None, None, None, None]
        for x, side, d_rows, n in ((x_q, query, d_rows_q, 3), (x_k, key, d_rows_k, 5)):
            if side is None:
                continue
            d_x, d_windows = _table_grads(x, side.x_bands, side.windows, d_rows, needs[n],
                                          needs[n + 1])
            grads[n] = d_x
            if d_windows is not None:
                grads[n + 1] = side.grad_of_a(d_windows)
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
    tables = _RowTables.one(r)
    if ROW_BAND > 0 and not causal:
        bands = _RowTables.banded(ROW_BAND, q_len, k_len, q_offset, r_lo)
        if bands.width < tables.width:  # not for a short block of queries
            tables = bands
    return _RowsAttention.apply(q, k, v, x_q, a_q, x_k, a_k, r_lo, q_offset,
                                key_padding_mask, causal, dropout_p,
                                _dropout(dropout_p, seed, q.device), tables)
