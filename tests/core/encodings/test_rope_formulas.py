"""RoPE (Su et al.) against the paper's rotation written out pair by pair (eq. 34): the
attention, lower precisions, decoding steps, and logits that depend on the distance only.
float64 references (``support/naive.py``), tolerance 1e-9 in float64.
"""

from __future__ import annotations

import pytest
import torch

from fairseq_posenc.core.encodings import PositionContext
from tests.support.model_utils import build_attention
from tests.support.naive import TOL, naive_attention, naive_rope, run


@pytest.mark.parametrize("causal", [False, True])
def test_rope_attention(causal):
    attn = build_attention("rope", causal=causal, embed_dim=12, num_heads=2)
    x = torch.randn(7, 2, 12, dtype=torch.float64)
    want = naive_attention(attn, x, causal, lambda b, h, i, j, q: 0.0, rotate=naive_rope)
    assert (run(attn, x, causal) - want).abs().max() < TOL


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_rope_rotation_in_lower_precision(dtype):
    """The complex-product rotation (float32 / complex64, and float32 for half types)
    against the naive rotation in float64, on a strided (B, H, T, d_h) view as the
    attention passes it and on a slice with an odd storage offset."""
    attn = build_attention("rope", causal=False, embed_dim=12, num_heads=2)
    x = torch.randn(5, 3, 2, 7, dtype=torch.float64)  # (T, B, H, d_h + 1)
    for view in (x[..., :6].permute(1, 2, 0, 3), x[..., 1:].permute(1, 2, 0, 3)):
        got, _ = attn.encoding.rotate_qk(view.to(dtype), view.to(dtype), 2, PositionContext())
        assert got.dtype == dtype and got.shape == view.shape
        for b, h, t in ((0, 0, 0), (2, 1, 4), (1, 0, 3)):
            want = naive_rope(view[b, h, t], 2 + t)
            tol = 1e-5 if dtype == torch.float32 else 3e-2
            assert (got[b, h, t].double() - want).abs().max() < tol


@pytest.mark.parametrize("dtype,tol", [(torch.float64, TOL), (torch.float32, 1e-5),
                                       (torch.bfloat16, 3e-2), (torch.float16, 3e-2)])
def test_rope_decoding_step_rotates_as_the_paper(dtype, tol):
    """A decoding step (every row at one position) rotates by one matrix product, the
    queries' with their scale folded in; against the naive rotation, at positions that
    make the context grow its window of matrices."""
    attn = build_attention("rope", causal=True, embed_dim=12, num_heads=2)
    ctx = PositionContext(incremental=True)
    q, k = torch.randn(2, 3, 2, 1, 6, dtype=torch.float64).unbind(0)  # (B, H, 1, d_h)
    for p in (0, 1, 17, 40):
        got_q, got_k = attn.encoding.rotate_qk(q.to(dtype), k.to(dtype), p, ctx, 0.375)
        assert got_q.dtype == dtype and got_q.shape == q.shape
        for got, x, scale in ((got_q, q, 0.375), (got_k, k, 1.0)):
            for b, h in ((0, 0), (2, 1)):
                want = naive_rope(x[b, h, 0], p) * scale
                assert (got[b, h, 0].double() - want).abs().max() < tol, (p, b, h)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_precision_model_keeps_exact_angles(dtype):
    """fairseq's --fp16 calls the model's .half(): the frequencies stay float64 (a buffer
    would be rounded to the model's precision, and the angle at position 900 with it, by
    up to 0.01 rad in float16 and 0.34 in bfloat16)."""
    attn = build_attention("rope", causal=False, embed_dim=12, num_heads=2).to(dtype)
    x = torch.randn(1, 1, 3, 6, dtype=torch.float64)
    got, _ = attn.encoding.rotate_qk(x.to(dtype), x.to(dtype), 898, PositionContext())
    for t in range(3):
        want = naive_rope(x[0, 0, t], 898 + t)
        assert (got[0, 0, t].double() - want).abs().max() < 2e-2 * want.abs().max()


def test_rope_logits_depend_on_distance_only():
    attn = build_attention("rope", causal=False, embed_dim=12, num_heads=2)
    q, k = torch.randn(2, 1, 1, 6, dtype=torch.float64).unbind(0)
    logits = []
    for shift in (0, 37):
        ctx = PositionContext()
        qs, _ = attn.encoding.rotate_qk(q, q, shift + 3, ctx)
        _, ks = attn.encoding.rotate_qk(k, k, shift + 8, ctx)
        logits.append(float((qs * ks).sum()))
    assert abs(logits[0] - logits[1]) < TOL
