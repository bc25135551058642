"""Naive references written from the papers' formulas, and the layer under test run on
the same input.

The references index tables by ``r = j - i`` (docs/conventions.md) and loop over batch,
head, query and key in plain Python; they share nothing with the code under test but the
parameter tensors. float64, tolerance :data:`TOL`.
"""

from __future__ import annotations

import math

import torch

TOL = 1e-9


def naive_t5_bucket(r: int, num_buckets: int, max_distance: int, bidirectional: bool) -> int:
    """T5 paper / mesh-tensorflow description, scalar by scalar."""
    bucket = 0
    if bidirectional:
        num_buckets //= 2
        if r > 0:
            bucket += num_buckets
        n = abs(r)
    else:
        n = max(-r, 0)
    exact = num_buckets // 2
    if n < exact:
        return bucket + n
    scaled = math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact)
    return bucket + min(exact + int(scaled), num_buckets - 1)


def naive_sinusoid(p: int, d: int) -> list[float]:
    """fairseq / tensor2tensor sinusoid: sines then cosines, rates 10000^(-i/(h-1))."""
    h = d // 2
    rates = [10000 ** (-i / (h - 1)) for i in range(h)]
    return [math.sin(p * w) for w in rates] + [math.cos(p * w) for w in rates]


def naive_rope(vec, p, base=10000.0):
    """Su et al. eq. 34: pair (2i, 2i+1) turned by p * base^(-2i/d)."""
    d = vec.numel()
    return turn_pairs(vec, [p * base ** (-2 * i / d) for i in range(d // 2)])


def turn_pairs(vec, angles):
    """Pair (2i, 2i+1) of ``vec`` turned by ``angles[i]``."""
    out = vec.clone()
    for i, a in enumerate(angles):
        x0, x1 = float(vec[2 * i]), float(vec[2 * i + 1])
        out[2 * i] = x0 * math.cos(a) - x1 * math.sin(a)
        out[2 * i + 1] = x0 * math.sin(a) + x1 * math.cos(a)
    return out


def heads(attn, x):
    """Queries, keys and values of every head, ``(T, B, H, d_h)`` each, unscaled."""
    T, B, _ = x.shape
    shape = (T, B, attn.num_heads, attn.head_dim)
    return (attn.q_proj(x).view(shape), attn.k_proj(x).view(shape),
            attn.v_proj(x).view(shape))


@torch.no_grad()
def naive_attention(attn, x, causal, logit_term, value_term=None, rotate=None,
                    key_padding=None, positions=None, rotate_key=None, logit_scale=1.0):
    """softmax_j(s q_i.k_j / sqrt(d_h) + logit_term(b, h, i, j, q_i)) and sum_j p_ij (v_j + value_term);
    ``rotate(vector, position)`` first transforms every query and key (RoPE), at index
    ``t`` or, given ``positions``, at ``positions[b][t]``; ``rotate_key`` the keys where
    theirs differs (xPos); ``s``: ``logit_scale``; ``value_term(h, i, j)``, or
    ``value_term(b, h, i, j)`` given ``positions``."""
    T, B, C = x.shape
    H, D = attn.num_heads, attn.head_dim
    q, k, v = heads(attn, x)

    def at(b, t):
        return t if positions is None else int(positions[b][t])

    def transformed(x, f):
        return torch.stack([torch.stack([torch.stack([f(x[t, b, h], at(b, t))
                                                      for h in range(H)])
                                         for b in range(B)]) for t in range(T)])

    if rotate is not None:
        q, k = transformed(q, rotate), transformed(k, rotate_key or rotate)
    out = torch.zeros(T, B, H, D, dtype=x.dtype)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                keys = [j for j in (range(i + 1) if causal else range(T))
                        if key_padding is None or not key_padding[b, j]]
                e = [logit_scale * float(q[i, b, h] @ k[j, b, h]) / math.sqrt(D)
                     + logit_term(b, h, i, j, q[i, b, h])
                     for j in keys]
                m = max(e)
                w = [math.exp(x_ - m) for x_ in e]
                s = sum(w)
                for j, wj in zip(keys, w):
                    term = (0 if value_term is None else value_term(h, i, j)
                            if positions is None else value_term(b, h, i, j))
                    vj = v[j, b, h] + term
                    out[i, b, h] += wj / s * vj
    return attn.out_proj(out.reshape(T, B, C))


def run(attn, x, causal, key_padding=None):
    T = x.size(0)
    mask = torch.triu(torch.full((T, T), float("-inf"), dtype=x.dtype), 1) if causal else None
    with attn.scope.open():
        out, _ = attn(x, x, x, key_padding_mask=key_padding, attn_mask=mask,
                      need_weights=False)
    return out


def fairseq_padding(batch: int, length: int, causal: bool, pad: int = 3):
    """``(batch, length)``, True at padding: row 1 padded by ``pad`` on the side fairseq
    pads it (sources on the left, targets, ``causal``, on the right)."""
    padding = torch.zeros(batch, length, dtype=torch.bool)
    if causal:
        padding[1, length - pad:] = True
    else:
        padding[1, :pad] = True
    return padding


def run_steps(attn, x):
    """``x`` fed one position at a time, as decoding steps (one incremental state and one
    position context for the sequence, as the decoder keeps them): ``(T, B, C)``."""
    from fairseq_posenc.core.context import PositionContext

    state: dict = {}
    context = PositionContext(incremental=True)
    steps = []
    for t in range(x.size(0)):
        with torch.no_grad(), attn.scope.open(context):
            step, _ = attn(x[t:t + 1], x[t:t + 1], x[t:t + 1], incremental_state=state,
                           need_weights=False)
        steps.append(step[0])
    return torch.stack(steps)


def clip(r: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, r))
