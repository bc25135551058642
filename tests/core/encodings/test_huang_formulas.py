"""Huang et al.'s methods 1, 2 (multiplicative factors) and 4 (content terms by distance),
and the one-query rows that method 4 and Transformer-XL decode with, against naive loops
written from the paper's equations (``support/naive.py``; method 3 and Transformer-XL:
``test_huang3_xl.py``). float64, tolerance 1e-9.
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.support.model_utils import build_attention
from tests.support.naive import TOL, heads, naive_attention, run


@torch.no_grad()
def naive_multiplicative_attention(attn, x, causal, factor):
    """Huang et al. eq. 12: softmax_j((q_i.k_j) * a_ij / sqrt(d_h))."""
    T, B, C = x.shape
    H, D = attn.num_heads, attn.head_dim
    q, k, v = heads(attn, x)
    out = torch.zeros(T, B, H, D, dtype=x.dtype)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                keys = range(i + 1) if causal else range(T)
                e = [float(q[i, b, h] @ k[j, b, h]) * factor(h, i, j) / math.sqrt(D) for j in keys]
                w = [math.exp(x_ - max(e)) for x_ in e]
                for j, wj in zip(keys, w):
                    out[i, b, h] += wj / sum(w) * v[j, b, h]
    return attn.out_proj(out.reshape(T, B, C))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("clip", [None, 2])
def test_huang1_attention(causal, clip):
    attn = build_attention("huang1", causal=causal, max_positions=12, huang1_clip=clip)
    a = attn.encoding.rel_scale  # heads x (|r| = 0 .. K)
    K = clip if clip else 11
    assert a.shape == (2, K + 1)
    x = torch.randn(7, 2, 8, dtype=torch.float64)
    want = naive_multiplicative_attention(attn, x, causal,
                                          lambda h, i, j: float(a[h, min(abs(j - i), K)]))
    assert (run(attn, x, causal) - want).abs().max() < TOL


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("clip", [None, 2])
def test_huang2_attention(causal, clip):
    attn = build_attention("huang2", causal=causal, max_positions=12, huang2_clip=clip)
    a = attn.encoding.rel_bias  # heads x (r = -K .. K), causal: -K .. 0
    K = clip if clip else 11
    assert a.shape == (2, K + 1 if causal else 2 * K + 1)
    x = torch.randn(7, 2, 8, dtype=torch.float64)
    want = naive_multiplicative_attention(attn, x, causal,
                                          lambda h, i, j: float(a[h, clip_(j - i, K) + K]))
    assert (run(attn, x, causal) - want).abs().max() < TOL


def clip_(r: int, k: int) -> int:
    return max(-k, min(k, r))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("clip", [None, 2])
def test_huang4_attention(causal, clip):
    """Eq. 16: (q_i.k_j + q_i.a_{j-i} + k_j.a_{j-i}) / sqrt(d_h), per-head vectors a."""
    attn = build_attention("huang4", causal=causal, max_positions=12, huang4_clip=clip)
    a = attn.encoding.rel_emb  # heads x distances x d_h
    K = clip if clip else 11
    T, B, D = 7, 2, attn.head_dim
    x = torch.randn(T, B, 8, dtype=torch.float64)
    with torch.no_grad():
        keys = attn.k_proj(x).view(T, B, 2, D)
    want = naive_attention(attn, x, causal, lambda b, h, i, j, q: float(
        (q + keys[j, b, h]) @ a[h, clip_(j - i, K) + K]) / math.sqrt(D))
    assert (run(attn, x, causal) - want).abs().max() < TOL


@pytest.mark.parametrize("encoding", ["huang1", "huang2"])
def test_huang_factors_start_at_one(encoding):
    """Multiplicative methods start from plain attention (docs/conventions.md: start a at 1)."""
    from fairseq_posenc.core.encodings import get_encoding
    from tests.support.model_utils import encoding_values

    enc = get_encoding(encoding).build(encoding_values(encoding), num_heads=2, head_dim=4,
                                       causal=False, max_positions=10)
    assert all(torch.all(p == 1) for p in enc.parameters())


def test_distance_rows_of_one_query_are_the_sum_written_out():
    """:meth:`DistanceRows.one_query_logits` (a decoding step of Transformer-XL or Huang
    et al.'s method 4) against ``q_c.k_j + x_q.A_q[:, r] + x_k[j].A_k[:, r]``,
    ``r = j - q_offset - r_lo``, summed in loops; tables wider than the keys need."""
    from fairseq_posenc.core.encodings.distance_rows import DistanceRows

    g = torch.Generator().manual_seed(0)
    batch, heads, keys, dim, r_lo = 2, 3, 5, 4, -6
    q_offset = keys - 1
    q_c, x_q = torch.randn(2, batch, heads, 1, dim, generator=g, dtype=torch.float64)
    k, x_k = torch.randn(2, batch, heads, keys, dim, generator=g, dtype=torch.float64)
    a_q, a_k = torch.randn(2, heads, dim, 9, generator=g, dtype=torch.float64)  # r -6..2
    for key_side in (None, (x_k, a_k)):
        got = DistanceRows(q_c, (x_q, a_q), key_side, r_lo).one_query_logits(k, q_offset)
        assert got.shape == (batch, heads, 1, keys)
        for b in range(batch):
            for h in range(heads):
                for j in range(keys):
                    r = j - q_offset - r_lo
                    want = q_c[b, h, 0] @ k[b, h, j] + x_q[b, h, 0] @ a_q[h, :, r]
                    if key_side is not None:
                        want = want + x_k[b, h, j] @ a_k[h, :, r]
                    assert abs(float(got[b, h, 0, j] - want)) < TOL
    with pytest.raises(ValueError, match="needs distances -4..0; the rows have -3"):
        DistanceRows(q_c, (x_q, a_q), None, -3).one_query_logits(k, q_offset)
