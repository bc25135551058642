"""``INPUT_GATES`` terms in the attention: the cumulative sums of their log-gates, kept for
every cached key, and what the sums add to the logits, as a bias or as extra query and key
dimensions.

A term of the kind (:class:`~fairseq_posenc.core.encodings.kinds.InputGates`, FoX's forget
gate) gives ``log f_t`` for every position of the layer's input; here

    c_i = sum_{t <= i} log f_t        (per batch row and gate, in float32 at least)

over the real tokens (a padded position's log-gate is 0, so padding on either side leaves
the sums of the real tokens' differences as they are), continued from the sums of the
cached keys while decoding. The cache holds ``c_j`` of every cached key in the layer's
incremental buffer (:data:`CACHE_KEY`, ``(B, G, len)``), the dict that beam search reorders
along its first dimension with the keys; a step appends one column and reads ``c_i - c_j``
from it, ``O(1)`` per key, nothing recomputed over the prefix.

The bias: ``D_ij = c_i - c_j`` for keys up to the query; a bidirectional term's keys after
the query read its second ``H`` gates, ``D_ij = c'_j - c'_i`` (:func:`gate_bias`).

Under the causal mask ``c_i`` is the same for every key of a row, which the softmax drops,
so the bias is the extra dimensions ``[1, 1] . [-c_hi_j, -c_lo_j]`` on torch's fused
attention (:func:`gate_dimensions`, ``KernelFamily.CAUSAL_SUMS``), with ``c`` split so that
half precision holds it (:func:`split_sums`): ``c_hi`` on a grid of step ``g``, a power of
two, exactly representable, and ``c_lo = c - c_hi`` (``|c_lo| <= g/2``) rounded once. With
``p`` the significand's bits of the dtype (11 for float16, 8 for bfloat16, 24 for float32)
and ``g = 2^ceil(log2(m / 2^p))`` for ``m = max_j |c_j|`` of the row (per batch row and
head), ``c_hi / g`` is an integer of at most ``2^p`` (exact), and

    |(c_hi + round(c_lo)) - c| <= (g / 2) 2^-p <= m 2^-2p      (+ 2^-25 in float16's
                                                                   subnormal range)

against the float32 sums: ``m = 500`` gives ``1.2e-4`` in float16 and ``7.6e-3`` in
bfloat16, where ``c`` rounded to float16 alone would be off by up to ``0.25``
(:func:`split_bound`). The kernel adds ``1 * c_hi`` and ``1 * c_lo`` to ``q.k`` in its own
float32 accumulation.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
from torch import Tensor

from .outputs import LOG_GATES

#: The key of the sums in a layer's incremental buffer.
CACHE_KEY = "prev_gate_sums"

#: Significand bits (the implicit one included) of the dtypes the split is for.
_SIGNIFICAND = {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24, torch.float64: 53}


def gate_sums(term: Any, x: Tensor, key_padding_mask: Optional[Tensor],
              saved: Optional[dict], heads: Optional[int] = None) -> Tensor:
    """``(B, G, k_len)`` for an ``InputGates`` ``term``: ``c_j`` of every key, the cached
    ones first, from this call's input ``x`` (``(T, B, C)``) and its padding (``(B, T)``,
    True at padding, or None); appended to ``saved`` (the layer's incremental buffer), in place, when decoding. The
    log-gates are checked against :data:`~.encodings.outputs.LOG_GATES` (with ``heads``,
    the layer's, their number of gates too)."""
    gates = None if heads is None else heads * (2 if term.bidirectional else 1)
    log_f = LOG_GATES.check(term, term.log_gates(x), (x.size(1), gates, x.size(0)))
    if key_padding_mask is not None:
        log_f = log_f.masked_fill(key_padding_mask.to(torch.bool)[:, None, :], 0.0)
    sums = torch.cumsum(log_f, dim=-1)
    if saved is None:
        return sums
    prev = saved.get(CACHE_KEY)
    if prev is not None:
        sums = torch.cat([prev, sums + prev[..., -1:]], dim=-1)
    saved[CACHE_KEY] = sums
    return sums


def gate_bias(sums: Tensor, heads: int, q_len: int, bidirectional: bool) -> Tensor:
    """``(B, H, q_len, k_len)``: ``c_i - c_j`` for the last ``q_len`` positions ``i`` of
    the ``k_len`` keys; bidirectional, ``c'_j - c'_i`` of the second ``H`` gates for keys
    after the query. A broadcast subtraction of the sums, no sum per pair."""
    k_len = sums.size(-1)
    forward = sums[:, :heads]
    bias = forward[..., k_len - q_len:, None] - forward[..., None, :]
    if not bidirectional:
        return bias
    backward = sums[:, heads:]
    after = backward[..., None, :] - backward[..., k_len - q_len:, None]
    later = torch.ones(q_len, k_len, dtype=torch.bool, device=sums.device).triu(
        k_len - q_len + 1)
    return torch.where(later, after, bias)


def step_gate_bias(sums: Tensor, heads: int) -> Tensor:
    """``(B, H, 1, k_len)``: the bias of one query, the last key (a decoding step)."""
    forward = sums[:, :heads]
    return (forward[..., -1:] - forward).unsqueeze(2)


def split_sums(sums: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """``c_hi, c_lo``, in the sums' dtype: ``c_hi`` a multiple of the row's grid step
    ``g`` (a power of two) that ``dtype`` holds exactly, ``c_lo = c - c_hi`` with
    ``|c_lo| <= g / 2`` (the module's docstring gives the error of ``c_lo`` rounded)."""
    bits = _SIGNIFICAND.get(dtype)
    if bits is None:
        raise ValueError(f"gate sums split for float16, bfloat16, float32 or float64, got "
                         f"{dtype}")
    largest = sums.abs().amax(dim=-1, keepdim=True).clamp_min(2.0 ** -14)
    step = torch.exp2(torch.ceil(torch.log2(largest) - bits))
    high = torch.round(sums / step) * step
    return high, sums - high


def split_bound(largest: float, dtype: torch.dtype) -> float:
    """The largest error of ``c_hi + c_lo`` rounded to ``dtype`` against ``c``, for a row
    whose largest ``|c_j|`` is ``largest`` (float16's subnormal spacing included)."""
    bits = _SIGNIFICAND[dtype]
    step = 2.0 ** math.ceil(math.log2(max(largest, 2.0 ** -14)) - bits)
    subnormal = 2.0 ** -25 if dtype is torch.float16 else 0.0
    return step / 2 * 2.0 ** -bits + subnormal


def gate_dimensions(sums: Tensor, heads: int, q_len: int,
                    dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """The causal bias less ``c_i`` as extra dimensions: ``P_Q = [1, 1]`` ``(1, 1, q_len,
    2)`` and ``P_K = [-c_hi, -c_lo]`` ``(B, H, k_len, 2)`` in ``dtype``, for
    :func:`~fairseq_posenc.core.attention_core.concat_low_rank`."""
    high, low = split_sums(sums[:, :heads], dtype)
    p_k = torch.stack([-high, -low], dim=-1).to(dtype)
    p_q = torch.ones(1, 1, q_len, 2, dtype=dtype, device=sums.device)
    return p_q, p_k
