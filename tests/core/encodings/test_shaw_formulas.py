"""Shaw et al.'s relative attention (key and value vectors by clipped distance) against a
naive loop written from eqs. (3)-(5) (``support/naive.py``), and its one-query terms
against the general path. float64, tolerance 1e-9.
"""

from __future__ import annotations

import math

import pytest
import torch

from fairseq_posenc.core.encodings import PositionContext
from tests.support.model_utils import build_attention
from tests.support.naive import TOL, clip, naive_attention, run


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("values", [True, False])
def test_shaw_attention(causal, values):
    k = 2
    flags = dict(shaw_clip=k, shaw_no_value=not values)
    attn = build_attention("shaw", causal=causal, **flags)
    a_k, a_v = attn.encoding.rel_key, attn.encoding.rel_value
    assert a_k.shape[0] == (k + 1 if causal else 2 * k + 1)
    D = attn.head_dim
    x = torch.randn(7, 2, 8, dtype=torch.float64)
    want = naive_attention(
        attn, x, causal,
        lambda b, h, i, j, q: float(q @ a_k[clip(j - i, -k, k) + k]) / math.sqrt(D),
        (lambda h, i, j: a_v[clip(j - i, -k, k) + k]) if values else None,
    )
    assert (run(attn, x, causal) - want).abs().max() < TOL


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("q_offset", [1, 3, 9])
def test_shaw_one_query_equals_its_row_of_the_general_path(causal, q_offset):
    """Shaw's one-query terms (a decoding step: rows read from a window by distance)
    against the last row of the same terms for two queries (gathers and sums by clipped
    distance), at offsets inside and past the clip."""
    attn = build_attention("shaw", causal=causal, embed_dim=8, num_heads=2, shaw_clip=2)
    shaw = attn.encoding
    g = torch.Generator().manual_seed(q_offset)
    q = torch.randn(2, 2, 2, 4, generator=g, dtype=torch.float64)
    k = torch.randn(2, 2, q_offset + 1, 4, generator=g, dtype=torch.float64)
    probs = torch.randn(2, 2, 2, q_offset + 1, generator=g, dtype=torch.float64).softmax(-1)
    both = (shaw.logit_bias(q, k, q_offset - 1, PositionContext()),
            shaw.value_term(probs, q_offset - 1, PositionContext()))
    ctx = PositionContext(incremental=True)
    one = (shaw.logit_bias(q[:, :, 1:], k, q_offset, ctx),
           shaw.value_term(probs[:, :, 1:], q_offset, ctx))
    for got, want in zip(one, both):
        assert (got - want[:, :, 1:]).abs().max() < TOL
