"""Each encoding's attention against a naive loop written from the paper's formula.

The references below index tables by ``r = j - i`` (SPEC.md) and loop over batch, head,
query and key in plain Python; they share nothing with the code under test but the
parameter tensors. float64, tolerance 1e-6.
"""

from __future__ import annotations

import math

import pytest
import torch

from fairseq_posenc.encodings import PositionMemo
from fairseq_posenc.positions import t5_bucket
from model_utils import build_attention

TOL = 1e-6


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


@torch.no_grad()
def naive_attention(attn, x, causal, logit_term, value_term=None):
    """softmax_j(q_i.k_j / sqrt(d_h) + logit_term(b, h, i, j, q_i)) and sum_j p_ij (v_j + value_term)."""
    T, B, C = x.shape
    H, D = attn.num_heads, attn.head_dim
    q = attn.q_proj(x).view(T, B, H, D)
    k = attn.k_proj(x).view(T, B, H, D)
    v = attn.v_proj(x).view(T, B, H, D)
    out = torch.zeros(T, B, H, D, dtype=x.dtype)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                keys = range(i + 1) if causal else range(T)
                e = [float(q[i, b, h] @ k[j, b, h]) / math.sqrt(D) + logit_term(b, h, i, j, q[i, b, h])
                     for j in keys]
                m = max(e)
                w = [math.exp(x_ - m) for x_ in e]
                s = sum(w)
                for j, wj in zip(keys, w):
                    vj = v[j, b, h] + (value_term(h, i, j) if value_term else 0)
                    out[i, b, h] += wj / s * vj
    return attn.out_proj(out.reshape(T, B, C))


def run(attn, x, causal):
    T = x.size(0)
    mask = torch.triu(torch.full((T, T), float("-inf"), dtype=x.dtype), 1) if causal else None
    with attn.memo.scope():
        out, _ = attn(x, x, x, attn_mask=mask, need_weights=False)
    return out


def clip(r: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, r))


@pytest.mark.parametrize("r,bucket", [(-1, 1), (-8, 8), (-16, 10), (-64, 14), (-127, 15),
                                      (-500, 15), (0, 0), (1, 17), (8, 24), (127, 31), (900, 31)])
def test_t5_bucket_spot_values_from_spec(r, bucket):
    assert int(t5_bucket(torch.tensor([r]))[0]) == bucket


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (64, 128), (16, 40)])
def test_t5_bucket_matches_naive(bidirectional, num_buckets, max_distance):
    r = torch.arange(-400, 401)
    got = t5_bucket(r, num_buckets, max_distance, bidirectional).tolist()
    want = [naive_t5_bucket(int(x), num_buckets, max_distance, bidirectional) for x in r]
    assert got == want


@pytest.mark.parametrize("causal", [False, True])
def test_t5_attention(causal):
    attn = build_attention("t5", causal=causal, t5_num_buckets=8, t5_max_distance=6)
    table = attn.position.rel_bias
    x = torch.randn(9, 2, 8, dtype=torch.float64)
    want = naive_attention(attn, x, causal, lambda b, h, i, j, q: float(
        table[h, naive_t5_bucket(j - i, 8, 6, not causal)]))
    assert (run(attn, x, causal) - want).abs().max() < TOL


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sharing", ["none", "head"])
def test_diet_rel_attention(causal, sharing):
    n = 4  # shorter than the sequence: distances beyond +-(n-1) are clipped
    attn = build_attention("diet_rel", causal=causal, diet_rel_max_len=n, diet_rel_sharing=sharing)
    table = attn.position.rel_bias  # rows: heads (1 if head-shared), columns: r = -(n-1)..
    assert table.shape == ((1 if sharing == "head" else 2), (n if causal else 2 * n - 1))
    x = torch.randn(7, 2, 8, dtype=torch.float64)
    want = naive_attention(attn, x, causal, lambda b, h, i, j, q: float(
        table[0 if sharing == "head" else h, clip(j - i, -(n - 1), n - 1) + n - 1]))
    assert (run(attn, x, causal) - want).abs().max() < TOL


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("values", [True, False])
def test_shaw_attention(causal, values):
    k = 2
    flags = dict(shaw_clip=k, shaw_no_value=not values)
    attn = build_attention("shaw", causal=causal, **flags)
    a_k, a_v = attn.position.rel_key, attn.position.rel_value
    assert a_k.shape[0] == (k + 1 if causal else 2 * k + 1)
    D = attn.head_dim
    x = torch.randn(7, 2, 8, dtype=torch.float64)
    want = naive_attention(
        attn, x, causal,
        lambda b, h, i, j, q: float(q @ a_k[clip(j - i, -k, k) + k]) / math.sqrt(D),
        (lambda h, i, j: a_v[clip(j - i, -k, k) + k]) if values else None,
    )
    assert (run(attn, x, causal) - want).abs().max() < TOL


@pytest.mark.parametrize("encoding,flags", [("t5", {}), ("diet_rel", {}), ("shaw", {}),
                                            ("shaw", {"shaw_no_value": True})])
def test_fused_and_explicit_paths_agree(encoding, flags):
    attn = build_attention(encoding, causal=False, **flags)
    x = torch.randn(6, 3, 8, dtype=torch.float64)
    pad = torch.zeros(3, 6, dtype=torch.bool)
    pad[1, :2] = True
    with attn.memo.scope():
        fused, _ = attn(x, x, x, key_padding_mask=pad, need_weights=False)
        explicit, weights = attn(x, x, x, key_padding_mask=pad, need_weights=True)
    assert (fused - explicit).abs().max() < TOL
    assert weights.shape == (3, 6, 6) and torch.all(weights[1, :, :2] == 0)


@pytest.mark.parametrize("encoding,flags", [("t5", {}), ("diet_rel", {}), ("shaw", {})])
def test_relative_terms_are_shift_invariant(encoding, flags):
    """Shifting every position by s leaves the position term of each (i, j) unchanged."""
    attn = build_attention(encoding, causal=False, max_positions=40, **flags)
    enc, n, s = attn.position, 6, 5
    q = torch.randn(1, 2, n + s, attn.head_dim, dtype=torch.float64)
    memo = PositionMemo()
    with memo.scope():
        shifted = enc.logit_bias(q, n + s, 0, memo)[..., s:, s:]
        plain = enc.logit_bias(q[:, :, s:], n, 0, memo)
    assert (shifted - plain).abs().max() < TOL
