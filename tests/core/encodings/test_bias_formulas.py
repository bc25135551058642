"""Scalar biases by distance (T5, T5 without buckets, DIET-rel, ALiBi) against a naive loop
written from each paper's formula, and the expansion of a per-distance table to pairs.

The references (``support/naive.py``) index tables by ``r = j - i`` (docs/conventions.md)
and loop over batch, head, query and key in plain Python; they share nothing with the code
under test but the parameter tensors. float64, tolerance 1e-9.
"""

from __future__ import annotations

import pytest
import torch

from fairseq_posenc.core.positions import expand_distance_bias, t5_bucket
from tests.support.model_utils import build_attention
from tests.support.naive import TOL, clip, naive_attention, naive_t5_bucket, run


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
    table = attn.encoding.rel_bias
    x = torch.randn(9, 2, 8, dtype=torch.float64)
    want = naive_attention(attn, x, causal, lambda b, h, i, j, q: float(
        table[h, naive_t5_bucket(j - i, 8, 6, not causal)]))
    assert (run(attn, x, causal) - want).abs().max() < TOL


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sharing", ["none", "head"])
def test_diet_rel_attention(causal, sharing):
    n = 4  # shorter than the sequence: distances beyond +-(n-1) are clipped
    attn = build_attention("diet_rel", causal=causal, diet_rel_max_len=n, diet_rel_sharing=sharing)
    table = attn.encoding.rel_bias  # rows: heads (1 if head-shared), columns: r = -(n-1)..
    assert table.shape == ((1 if sharing == "head" else 2), (n if causal else 2 * n - 1))
    x = torch.randn(7, 2, 8, dtype=torch.float64)
    want = naive_attention(attn, x, causal, lambda b, h, i, j, q: float(
        table[0 if sharing == "head" else h, clip(j - i, -(n - 1), n - 1) + n - 1]))
    assert (run(attn, x, causal) - want).abs().max() < TOL


@pytest.mark.parametrize("causal", [False, True])
def test_t5_nob_attention(causal):
    n = 3
    attn = build_attention("t5_nob", causal=causal, t5_nob_max_len=n)
    table = attn.encoding.rel_bias  # heads x distances -(n-1)..(n-1) (causal: ..0)
    x = torch.randn(7, 2, 8, dtype=torch.float64)
    want = naive_attention(attn, x, causal, lambda b, h, i, j, q: float(
        table[h, clip(j - i, -(n - 1), n - 1) + n - 1]))
    assert (run(attn, x, causal) - want).abs().max() < TOL


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("num_heads", [4, 6])
def test_alibi_attention(causal, num_heads):
    # Press et al.: slopes 2^(-8/H), 2^(-16/H), ... for H a power of two; for H = 6 the
    # slopes of H = 4 followed by the 1st and 3rd of H = 8.
    def slopes(n):
        return [2 ** (-8 * (h + 1) / n) for h in range(n)]

    m = slopes(4) if num_heads == 4 else slopes(4) + slopes(8)[0:4:2]
    attn = build_attention("alibi", causal=causal, embed_dim=2 * num_heads, num_heads=num_heads)
    x = torch.randn(7, 2, 2 * num_heads, dtype=torch.float64)
    want = naive_attention(attn, x, causal, lambda b, h, i, j, q: -m[h] * abs(j - i))
    assert (run(attn, x, causal) - want).abs().max() < TOL


@pytest.mark.parametrize("q_len,k_len,q_offset,r_lo,extra", [
    (5, 5, 0, -4, 0), (1, 9, 8, -8, 0), (3, 9, 6, -12, 4), (4, 7, 0, -10, 7), (6, 2, 0, -5, 0)])
def test_expand_distance_bias_reads_each_pair_distance(q_len, k_len, q_offset, r_lo, extra):
    """b[h, i, j] = table[h, (j - (q_offset + i)) - r_lo], for tables that cover more
    distances than needed (decoding allocates ahead), and its gradient."""
    r_hi = k_len - 1 - q_offset + extra
    table = torch.randn(3, r_hi - r_lo + 1, dtype=torch.float64, requires_grad=True)
    got = expand_distance_bias(table, r_lo, q_len, k_len, q_offset)
    weights = torch.randn(3, q_len, k_len, dtype=torch.float64)
    (got * weights).sum().backward()
    want_grad = torch.zeros_like(table)
    for h in range(3):
        for i in range(q_len):
            for j in range(k_len):
                r = j - (q_offset + i)
                assert got[h, i, j] == table[h, r - r_lo]
                want_grad[h, r - r_lo] += weights[h, i, j]
    assert (table.grad - want_grad).abs().max() < TOL
