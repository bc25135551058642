"""The fused distance kernels' launches: tiles, shapes and strides, attention dropout's seed.

:class:`Tiles` and the three launches (:data:`FORWARD`, :data:`BACKWARD_DKDV`,
:data:`BACKWARD_DQ`; tests and ``posenc-kernels --launch`` set them here), the arguments
the kernels share (:class:`_Shape`, the term's type among them: :class:`.term_types.Term`),
the forward's and the backward's launches with their outputs and gradients
(:func:`_forward`, :func:`_backward`), the seed of attention dropout
(:func:`dropout_seed`) and its mask written out (:func:`dropout_keep`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from .. import on_device_of
from .term_types import Term
from .tile import triton

if triton is not None:
    from .backward import _backward_dkdv_kernel, _backward_dq_kernel, _delta_kernel
    from .forward import _forward_kernel
    from .tile import _keep_kernel


def _check_triton() -> None:
    if triton is None:
        raise RuntimeError("the fused distance kernel needs Triton (pip install triton, or "
                           "a CUDA build of torch, which brings it)")


@dataclass(frozen=True)
class Tiles:
    """One kernel's launch: ``block_m`` queries by ``block_n`` keys per tile, and Triton's
    warps per program and software-pipelining depth."""

    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 3


#: The three kernels' launches (``docs/decisions.md``, "Launch configuration"). The dQ
#: kernel's tiles are square (its diagonal sums); Shaw's rows must fit ``FORWARD.block_n``
#: and ``BACKWARD_DQ.block_n`` (:func:`.tables.clipped_rows_fit`).
FORWARD = Tiles(64, 64)
BACKWARD_DKDV = Tiles(64, 64)
BACKWARD_DQ = Tiles(64, 64)


def _strides(x: Tensor) -> tuple[int, int, int, int]:
    return x.stride(0), x.stride(1), x.stride(2), x.stride(3)


def _block_dim(d: int) -> int:
    """Head dimensions padded (masked) to a power of two, at least 16 (``tl.dot``)."""
    return max(16, 1 << (d - 1).bit_length())


def _query_block(tiles: Tiles, q_len: int) -> int:
    """Fewer query rows per tile for a short query block (a decoding step: one row), at
    least 16 (``tl.dot``)."""
    return min(tiles.block_m, max(16, 1 << (q_len - 1).bit_length()))


class _Shape:
    """The scalar and compile-time arguments the three kernels share."""

    def __init__(self, heads: int, q_len: int, k_len: int, q_offset: int, r_lo: int,
                 table: Tensor, d_qk: int, d_v: int, has_pad: bool, causal: bool,
                 term: Term, ieee: bool, key_table: Optional[Tensor] = None,
                 dropout_p: float = 0.0) -> None:
        if term.per_row != (table.dim() == 4) or term.key_rows != (key_table is not None):
            raise ValueError(f"a {term.name} term with a table of shape {tuple(table.shape)}"
                             f" and {'a' if key_table is not None else 'no'} key table")
        self.heads, self.q_len, self.k_len, self.q_offset = heads, q_len, k_len, q_offset
        self.r_lo, self.r, self.term = r_lo, table.size(-1), term
        self.s_table_h = table.stride(0) if table.dim() == 2 and table.size(0) > 1 else 0
        # A table per row: its (B, H, q_len) strides, R contiguous. The key columns' table
        # shares the batch and position strides; only its heads' stride differs.
        self.s_rows = (table.stride(0), table.stride(1), table.stride(2)) if term.per_row \
            else (0, 0, 0)
        self.s_key_h = key_table.stride(1) if key_table is not None else 0
        if key_table is not None and (key_table.stride(0), key_table.stride(2)) != (
                self.s_rows[0], self.s_rows[2]):
            raise ValueError("the key columns' table must be laid out as the query rows'")
        self.d_qk, self.d_v, self.has_pad, self.causal, self.ieee = (
            d_qk, d_v, has_pad, causal, ieee)
        self.dropout_p = dropout_p

    @classmethod
    def of(cls, q: Tensor, k: Tensor, v: Tensor, q_offset: int, r_lo: int, table: Tensor,
           has_pad: bool, causal: bool, term: Term, key_table: Optional[Tensor] = None,
           dropout_p: float = 0.0) -> "_Shape":
        return cls(q.size(1), q.size(2), k.size(2), q_offset, r_lo, table, q.size(3),
                   v.size(3), has_pad, causal, term, q.dtype == torch.float32, key_table,
                   dropout_p)

    def args(self) -> tuple:
        return (self.s_table_h, *self.s_rows, self.s_key_h, self.heads, self.q_len,
                self.k_len, self.q_offset, self.r_lo, self.r, self.d_qk, self.d_v,
                _block_dim(self.d_qk), _block_dim(self.d_v), int(self.term), self.has_pad,
                self.causal, self.ieee, self.dropout_p, 1.0 / (1.0 - self.dropout_p),
                self.dropout_p > 0.0)


def _forward(q: Tensor, k: Tensor, v: Tensor, table: Tensor, key_table: Optional[Tensor],
             pad: Tensor, seed: Tensor, shape: _Shape) -> tuple[Tensor, Tensor, Tensor]:
    """The forward kernel's launch: the output, the rows' log-sum-exp and, where the term
    has them (``Term.sums``), the probabilities summed by clipped distance (else ``lse``
    again)."""
    batch, heads, q_len, _ = q.shape
    out = q.new_empty(batch, heads, q_len, shape.d_v)
    lse = torch.empty(batch, heads, q_len, dtype=torch.float32, device=q.device)
    by_distance = (torch.empty(batch, heads, q_len, shape.r, dtype=torch.float32,
                               device=q.device) if shape.term.sums else lse)
    block_m = _query_block(FORWARD, q_len)
    with on_device_of(q):
        _forward_kernel[(triton.cdiv(q_len, block_m), batch * heads)](
            q, k, v, table, table if key_table is None else key_table, pad, seed, out, lse,
            by_distance, *_strides(q), *_strides(k), *_strides(v), *shape.args(),
            BLOCK_M=block_m, BLOCK_N=FORWARD.block_n, num_warps=FORWARD.num_warps,
            num_stages=FORWARD.num_stages)
    return out, lse, by_distance


def _backward(q: Tensor, k: Tensor, v: Tensor, table: Tensor, key_table: Optional[Tensor],
              pad: Tensor, seed: Tensor, out: Tensor, lse: Tensor, by_distance: Tensor,
              d_out: Tensor, d_by_distance: Optional[Tensor], shape: _Shape, table_grad: bool
              ) -> tuple[Tensor, Tensor, Tensor, Optional[Tensor], Optional[Tensor]]:
    """The backward kernels' launches: the gradients of ``q``, ``k``, ``v``, the table
    (with ``table_grad``) and the key columns' table (where there is one)."""
    batch, heads, q_len, d_qk = q.shape
    k_len = k.size(2)
    term = shape.term
    d_out = d_out.contiguous()
    delta = torch.empty_like(lse)  # rowsum(dP * P) = rowsum(dO * O) (+ the sums')
    _delta_kernel[(triton.cdiv(q_len, 64), batch * heads)](  # rows are independent
        out, d_out, delta, q_len, D_V=shape.d_v, BD_V=_block_dim(shape.d_v), BLOCK_M=64)
    d_sums = lse  # not read where the term has no sums
    if term.sums:
        d_sums = (torch.zeros_like(by_distance) if d_by_distance is None
                  else d_by_distance.float().contiguous())
        delta += (by_distance * d_sums).sum(-1)
    dq = torch.empty(batch, heads, q_len, d_qk, dtype=q.dtype, device=q.device)
    dk = torch.empty(batch, heads, k_len, d_qk, dtype=k.dtype, device=k.device)
    dv = torch.empty(batch, heads, k_len, v.size(3), dtype=v.dtype, device=v.device)
    block = BACKWARD_DQ.block_n
    q_blocks = triton.cdiv(q_len, block)
    d_key_table = None
    if term.full:  # dS itself where a pair read the rows, zeros elsewhere; same layout
        d_table = torch.zeros_like(table) if table_grad else lse
        if key_table is not None and table_grad:
            d_key_table = torch.zeros_like(key_table)
    else:
        d_table = torch.zeros((batch * heads * (q_len if term.per_row else q_blocks),
                               shape.r if table_grad else 1),
                              dtype=torch.float32, device=q.device)
    key_table = table if key_table is None else key_table
    common = (q, k, v, table, key_table, pad, seed, d_out, lse, delta, d_sums)
    strides = (*_strides(q), *_strides(k), *_strides(v), *_strides(d_out))
    dkdv = BACKWARD_DKDV
    _backward_dkdv_kernel[(triton.cdiv(k_len, dkdv.block_n), batch * heads)](
        *common, dk, dv, *strides, *shape.args(), BLOCK_M=_query_block(dkdv, q_len),
        BLOCK_N=dkdv.block_n, num_warps=dkdv.num_warps, num_stages=dkdv.num_stages)
    _backward_dq_kernel[(q_blocks, batch * heads)](
        *common, dq, d_table, d_table if d_key_table is None else d_key_table,
        *strides, *shape.args(), TABLE_GRAD=table_grad, BLOCK=block,
        num_warps=BACKWARD_DQ.num_warps, num_stages=BACKWARD_DQ.num_stages)
    grad_table = None
    if table_grad and term.full:
        grad_table = d_table
    elif table_grad and term.per_row:
        grad_table = d_table.view(table.shape).to(table.dtype)
    elif table_grad:
        grad_table = d_table.view(batch, heads, q_blocks, shape.r).sum((0, 2))
        if table.size(0) == 1:  # one table for every head
            grad_table = grad_table.sum(0, keepdim=True)
        grad_table = grad_table.to(table.dtype)
    return dq, dk, dv, grad_table, d_key_table


def _padding_mask(key_padding_mask: Optional[Tensor], device: torch.device) -> Tensor:
    return (key_padding_mask.to(torch.int8).contiguous() if key_padding_mask is not None
            else torch.zeros(1, dtype=torch.int8, device=device))


def dropout_seed(device: torch.device) -> Tensor:
    """A seed for the kernels' attention dropout, ``(1,)`` int64 on ``device``, drawn from
    torch's generator there, without a synchronization: ``torch.manual_seed`` makes a run
    repeatable, and activation checkpointing, which restores the generator's state before
    it recomputes a forward, redraws the same mask."""
    return torch.randint(2 ** 62, (1,), dtype=torch.int64, device=device)


def _dropout(dropout_p: float, seed: Optional[Tensor], device: torch.device) -> Tensor:
    """The seed the kernels read (without dropout an unread placeholder: ``empty``
    launches no kernel)."""
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    if dropout_p == 0.0:
        return torch.empty(1, dtype=torch.int64, device=device)
    if seed is None:
        return dropout_seed(device)
    if seed.shape != (1,) or seed.dtype != torch.int64 or seed.device != device:
        raise ValueError(f"seed must be a (1,) int64 tensor on {device}, got "
                         f"{tuple(seed.shape)} {seed.dtype} on {seed.device}")
    return seed


def dropout_keep(seed: Tensor, batch: int, heads: int, q_len: int, k_len: int,
                 dropout_p: float) -> Tensor:
    """The pairs the kernels keep under attention dropout with ``seed`` and
    ``dropout_p``, ``(B, H, q_len, k_len)`` bool: the mask they draw inside their tiles
    (:func:`.tile._kept`), written out, for references and checks."""
    _check_triton()
    keep = torch.empty(batch, heads, q_len, k_len, dtype=torch.int8, device=seed.device)
    with on_device_of(seed):
        _keep_kernel[(triton.cdiv(q_len, 64), triton.cdiv(k_len, 64), batch * heads)](
            seed, keep, q_len, k_len, dropout_p, BLOCK_M=64, BLOCK_N=64)
    return keep.bool()
