"""PaTH's products of Householder-like transforms, blockwise in torch (Yang, Shen, Wen, Tan,
Mishra, Ren, Panda and Kim 2025, NeurIPS, arXiv 2505.16381, "PaTH Attention: Position
Encoding via Accumulating Householder Transformations", sections 2 and 3).

For every position ``t`` a transform ``H_t = I - beta_t w_t w_t^T`` (``w_t`` of unit norm,
``beta_t`` in ``(0, 2)``), and for a query ``i`` and a key ``j <= i``

    logit(i, j) = q_i^T H_i H_{i-1} ... H_{j+1} k_j          (the empty product is I)

Written out, the products are ``d x d`` matrices per pair. The paper's algorithm never forms
them (section 3): within a block of ``c`` positions the UT transform gives any product of
consecutive transforms of the block from the block's ``c x c`` matrix

    H_r H_{r+1} ... H_s = I - W_R^T T_R W_R,     T = (I + striu(diag(beta) W W^T))^-1 diag(beta)

(``W`` the block's ``w_t`` as rows, ``striu`` the strictly upper triangle, ``R = r..s`` and
``T_R`` the principal sub-block of ``T``: the inverse of a triangular matrix restricted to
consecutive rows and columns is the inverse of the restriction). Our products run the other
way, ``H_i ... H_{j+1} = (H_{j+1} ... H_i)^T``; so within a block

    logit(i, j) = q_i.k_j - sum_{j < t <= s <= i} (q_i.w_s) T_ts (w_t.k_j),

and across blocks each key is carried to the end of its block, each query back to the start
of its block, and the queries across the whole blocks between, one block at a time from
right to left, as the paper's FlashAttention-style scan does. Work: ``O(L c^2 + L^2 (c +
d))`` per head for ``L`` positions, no loop over tokens (a loop over block offsets, ``L /
c`` of them). Block size :data:`BLOCK`, the paper's 64.

A cached key, while decoding, is already carried to the latest position; a call with a cache
reads it with ``beta = 0`` at the cached positions (:func:`pad_cached`), which makes their
transforms the identity.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

#: Positions per block (the paper's kernel's block size).
BLOCK = 64


class Blocks(NamedTuple):
    """A sequence's transforms in blocks: ``w`` ``(B, H, n, c, d)``, ``t`` the UT transform
    of each block ``(B, H, n, c, c)`` (upper triangular)."""

    w: Tensor
    t: Tensor


def _in_blocks(x: Tensor, size: int) -> Tensor:
    """``(B, H, L, ...)`` -> ``(B, H, n, size, ...)``, zeros after the last position (beta
    0 there: no transform; a zero key or query: no logit that is kept)."""
    length = x.size(2)
    extra = -length % size
    if extra:
        pad = [0, 0] * (x.dim() - 3) + [0, extra]
        x = F.pad(x, pad)
    return x.view(*x.shape[:2], -1, size, *x.shape[3:])


def ut_transform(w: Tensor, beta: Tensor) -> Tensor:
    """``T = (I + striu(diag(beta) W W^T))^-1 diag(beta)`` of each block: ``w`` ``(..., c,
    d)``, ``beta`` ``(..., c)``; ``(..., c, c)``, upper triangular."""
    gram = torch.matmul(w, w.transpose(-1, -2)) * beta.unsqueeze(-1)
    upper = torch.triu(gram, diagonal=1)
    eye = torch.eye(w.size(-2), dtype=w.dtype, device=w.device)
    return torch.linalg.solve_triangular(eye + upper, torch.diag_embed(beta), upper=True,
                                         unitriangular=True)


def blocks_of(w: Tensor, beta: Tensor, size: int = BLOCK) -> Blocks:
    """``w`` ``(B, H, L, d)`` and ``beta`` ``(B, H, L)`` in blocks, with each block's UT
    transform."""
    wb = _in_blocks(w, size)
    return Blocks(wb, ut_transform(wb, _in_blocks(beta, size)))


def _masks(size: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """``[s <= i]`` and ``[t > j]`` over a block, as float-free bool masks."""
    ones = torch.ones(size, size, dtype=torch.bool, device=device)
    return ones.tril(), ones.tril(-1)


def _carried(q: Tensor, k: Tensor, b: Blocks) -> tuple[Tensor, Tensor, Tensor]:
    """Within each block: the logits of its own keys, each query carried back to the block's
    start (``q~_i = H_start ... H_i q_i``), each key to its end (``k~_j = H_end ... H_{j+1}
    k_j``)."""
    upto, after = _masks(q.size(-2), q.device)
    zero = q.new_zeros(())
    a = torch.where(upto, torch.matmul(q, b.w.transpose(-1, -2)), zero)   # (q_i.w_s)[s<=i]
    c = torch.where(after, torch.matmul(b.w, k.transpose(-1, -2)), zero)  # (w_t.k_j)[t>j]
    a_t = torch.matmul(a, b.t.transpose(-1, -2))                           # A T^T
    inner = torch.matmul(q, k.transpose(-1, -2)) - torch.matmul(a_t, c)
    q_start = q - torch.matmul(a_t, b.w)
    k_end = k - torch.matmul(torch.matmul(c.transpose(-1, -2), b.t), b.w)
    return inner, q_start, k_end


def _through_block(x: Tensor, w: Tensor, t: Tensor, transposed: bool) -> Tensor:
    """``x`` (rows) through a whole block's product ``P = H_end ... H_start = I - W^T T^T
    W``: ``P^T x`` for queries (``transposed``), ``P x`` for keys."""
    xw = torch.matmul(x, w.transpose(-1, -2))
    return x - torch.matmul(torch.matmul(xw, t.transpose(-1, -2) if transposed else t), w)


def _at_least_float32(*xs: Tensor) -> list[Tensor]:
    """The operands in float32 at least: the triangular solve has no half-precision
    kernel, and the products of many transforms want the precision."""
    dtype = torch.promote_types(xs[0].dtype, torch.float32)
    return [x.to(dtype) for x in xs]


def path_logits(q: Tensor, k: Tensor, w: Tensor, beta: Tensor,
                size: int = BLOCK) -> Tensor:
    """``(B, H, L, L)``: ``q_i^T H_i ... H_{j+1} k_j`` for ``j <= i`` (other entries are
    left for the causal mask: any finite value) of ``q``, ``k``, ``w`` ``(B, H, L, d)``
    and ``beta`` ``(B, H, L)``, in ``q``'s dtype (computed in float32 at least). ``q`` as
    given (scale it first)."""
    dtype = q.dtype
    return _path_logits(*_at_least_float32(q, k, w, beta), size).to(dtype)


def _path_logits(q: Tensor, k: Tensor, w: Tensor, beta: Tensor, size: int) -> Tensor:
    length = q.size(2)
    size = min(size, length)  # one block for a short sentence, no padding to 64
    b = blocks_of(w, beta, size)
    inner, q_hat, k_end = _carried(_in_blocks(q, size), _in_blocks(k, size), b)
    n = b.w.size(2)
    if n == 1:
        return inner[:, :, 0]
    out = q.new_zeros(*q.shape[:2], n, n, size, size)
    out.diagonal(dim1=2, dim2=3).copy_(inner.permute(0, 1, 3, 4, 2))
    for offset in range(1, n):  # key blocks ``offset`` blocks before the query's
        rows = torch.matmul(q_hat[:, :, offset:], k_end[:, :, :n - offset].transpose(-1, -2))
        out.diagonal(offset=-offset, dim1=2, dim2=3).copy_(rows.permute(0, 1, 3, 4, 2))
        if offset + 1 < n:  # carry the queries back across the block just read
            q_hat = torch.cat([q_hat[:, :, :offset + 1], _through_block(
                q_hat[:, :, offset + 1:], b.w[:, :, 1:n - offset], b.t[:, :, 1:n - offset],
                transposed=True)], dim=2)
    out = out.permute(0, 1, 2, 4, 3, 5).reshape(*q.shape[:2], n * size, n * size)
    return out[:, :, :length, :length]


def keys_to_end(k: Tensor, w: Tensor, beta: Tensor, size: int = BLOCK) -> Tensor:
    """``(B, H, L, d)``: every key carried to the last position, ``H_{L-1} ... H_{j+1} k_j``
    (what a decoding cache keeps after a call of ``L`` positions), in ``k``'s dtype."""
    length, dtype = k.size(2), k.dtype
    if length == 1:
        return k
    k, w, beta = _at_least_float32(k, w, beta)
    size = min(size, length)
    b = blocks_of(w, beta, size)
    k_end = _carried(torch.zeros_like(_in_blocks(k, size)), _in_blocks(k, size), b)[2]
    n = b.w.size(2)
    for offset in range(1, n):  # through block ``j + offset`` for the keys of block ``j``
        k_end = torch.cat([_through_block(k_end[:, :, :n - offset], b.w[:, :, offset:],
                                          b.t[:, :, offset:], transposed=False),
                           k_end[:, :, n - offset:]], dim=2)
    return k_end.reshape(*k.shape[:2], n * size, k.size(-1))[:, :, :length].to(dtype)


def step_keys(k: Tensor, w: Tensor, beta: Tensor) -> Tensor:
    """A decoding step's cached keys ``(B, H, len, d)`` through its one transform: ``k -
    beta (k.w) w`` (a rank-1 update; ``w`` ``(B, H, 1, d)``, ``beta`` ``(B, H, 1)``)."""
    return k - (beta.unsqueeze(-1) * torch.matmul(k, w.transpose(-1, -2))) * w


def pad_cached(w: Tensor, beta: Tensor, cached: int) -> tuple[Tensor, Tensor]:
    """``w`` and ``beta`` of a call's new positions preceded by ``cached`` identity
    transforms (``beta = 0``), for keys carried already."""
    if not cached:
        return w, beta
    return F.pad(w, (0, 0, cached, 0)), F.pad(beta, (cached, 0))


def path_attention(q: Tensor, k: Tensor, v: Tensor, w: Tensor, beta: Tensor, *,
                   log_gates: Optional[Tensor] = None,
                   key_padding_mask: Optional[Tensor] = None) -> Tensor:
    """Causal PaTH attention, ``(B, H, T, d_h)``: ``softmax_j(q_i^T H_i ... H_{j+1} k_j /
    sqrt(d_h) + sum_{t=j+1..i} log f_t) v_j`` over ``j <= i``.

    ``q, k, v, w``: ``(B, H, T, d_h)``, ``w`` of unit norm; ``beta``: ``(B, H, T)``;
    ``log_gates``: ``(B, H, T)``, FoX's ``log f_t`` (PaTH-FoX), or None;
    ``key_padding_mask``: ``(B, T)``, True at padding: a padded position transforms nothing
    and adds no gate (``beta = 0``, ``log f = 0``), and is masked as a key; a query that
    sees only padding gets zeros. The layers' logits are :func:`path_logits`'s."""
    scale = 1.0 / math.sqrt(q.size(-1))
    if key_padding_mask is not None:
        beta = beta.masked_fill(key_padding_mask[:, None, :], 0.0)
    logits = path_logits(q * scale, k, w, beta)
    if log_gates is not None:
        if key_padding_mask is not None:
            log_gates = log_gates.masked_fill(key_padding_mask[:, None, :], 0.0)
        sums = torch.cumsum(log_gates, dim=-1)
        logits = logits + (sums[..., :, None] - sums[..., None, :])
    length = q.size(2)
    blocked = torch.ones(length, length, dtype=torch.bool, device=q.device).triu(1)
    if key_padding_mask is not None:
        blocked = blocked | key_padding_mask[:, None, None, :]
    logits = logits.masked_fill(blocked, float("-inf"))
    unattended = blocked.all(dim=-1, keepdim=True)
    probs = torch.softmax(logits.masked_fill(unattended, 0.0), dim=-1)
    return torch.matmul(probs.masked_fill(unattended, 0.0), v)
