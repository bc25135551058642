"""Stick-breaking attention weights in place of the softmax (Tan, Shen, Yang, Courville and
Panda 2025, ICLR, arXiv 2410.17980, "Scaling Stick-Breaking Attention: An Efficient
Implementation and In-depth Study", section 2).

For a query ``i`` each key, from the nearest to the farthest, breaks off the fraction
``beta_ij = sigmoid(z_ij)`` (``z_ij = q_i.k_j / sqrt(d_h)``) of what is left of a stick of
length 1:

    A_ij = beta_ij prod_{j < l < i} (1 - beta_il)       (keys j < i)
    A_ij = beta_ij prod_{j < l <= i} (1 - beta_il)      (keys j <= i: ``attend_current``)

and what is left, ``prod_l (1 - beta_il)`` over the keys attended, is the remaining stick.
In log space (section 3, the paper's numerically stable form), with ``log(1 - sigmoid(z))
= logsigmoid(-z)``:

    log A_ij = logsigmoid(z_ij) + sum_{l > j} logsigmoid(-z_il)

the sum over the row's later keys (a reverse cumulative sum, read one key to the right, so
that no sum is subtracted from another). A key masked in the logits (``-inf``: after the
query, padding, the current token without ``attend_current``) breaks no stick: its weight
is 0 and its ``log(1 - beta)`` is 0.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor


def stick_weights(logits: Tensor, q_offset: int,
                  attend_current: bool) -> tuple[Tensor, Tensor]:
    """The weights ``A`` ``(..., q_len, k_len)`` and the remaining stick ``(..., q_len)`` of
    ``logits`` (``z``, ``-inf`` where a key is masked), the queries at positions
    ``q_offset + i`` of the keys; without ``attend_current`` the key at the query's own
    position is masked here too. Computed in float32 at least."""
    dtype = torch.promote_types(logits.dtype, torch.float32)
    z = logits.to(dtype)
    masked = torch.isneginf(z)
    if not attend_current:
        q_len, k_len = z.shape[-2:]
        rows = torch.arange(q_len, device=z.device)[:, None] + q_offset
        masked = masked | (rows == torch.arange(k_len, device=z.device))
    z = z.masked_fill(masked, 0.0)
    log_beta = F.logsigmoid(z).masked_fill(masked, float("-inf"))
    log_rest = F.logsigmoid(-z).masked_fill(masked, 0.0)
    later = torch.flip(torch.cumsum(torch.flip(log_rest, [-1]), dim=-1), [-1])
    after = F.pad(later[..., 1:], (0, 1))  # sum over l > j
    weights = torch.exp(log_beta + after)
    remaining = torch.exp(later[..., 0])
    return weights.to(logits.dtype), remaining.to(logits.dtype)


def stickbreaking_attention(q: Tensor, k: Tensor, v: Tensor, *, attend_current: bool = False,
                            key_padding_mask: Optional[Tensor] = None
                            ) -> tuple[Tensor, Tensor]:
    """Causal stick-breaking attention: ``sum_j A_ij v_j`` ``(B, H, T, d_h)`` and the
    remaining stick ``(B, H, T)``. ``q, k, v``: ``(B, H, T, d_h)`` (``1/sqrt(d_h)`` applied
    here); ``attend_current``: keys ``j <= i`` (else ``j < i``: the first query attends to
    nothing, output 0 and stick 1); ``key_padding_mask``: ``(B, T)``, True at padding, which
    breaks no stick. What a layer does with the remaining stick is the layer's
    (:mod:`fairseq_posenc.core.encodings.stickbreaking`)."""
    length = q.size(2)
    logits = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.size(-1))
    blocked = torch.ones(length, length, dtype=torch.bool, device=q.device).triu(1)
    if key_padding_mask is not None:
        blocked = blocked | key_padding_mask[:, None, None, :]
    weights, remaining = stick_weights(logits.masked_fill(blocked, float("-inf")), 0,
                                       attend_current)
    return torch.matmul(weights, v), remaining
