"""xPos (Sun et al. 2023) against the paper's transformation written out pair by pair in
float64, with the paper's origin (the first position is 0): the query at ``n`` turned by
``n theta_i`` and scaled by ``zeta_i^(n/gamma)``, the key at ``m`` by ``zeta_i^(-m/gamma)``,
``zeta_i = (2i/d + 0.4)/1.4``. The module's origins differ (the encoder's is the middle of
the row), so agreement also shows that the logits depend on ``n - m`` only. The
attention, the logits at long distances, a decoding step in lower precisions, and the
bound on each factor that the origins give. Tolerance 1e-9 in float64.
"""

from __future__ import annotations

import math

import pytest
import torch

from fairseq_posenc.core.encodings import PositionContext
from tests.support.model_utils import build_attention
from tests.support.naive import TOL, naive_attention, run


def naive_xpos(vec, p, side, gamma=512.0, base=10000.0):
    """The paper's f_q (``side = 1``) or f_k (``side = -1``) at position ``p``."""
    d = vec.numel()
    out = vec.clone()
    for i in range(d // 2):
        angle = p * base ** (-2 * i / d)
        zeta = (2 * i / d + 0.4) / 1.4
        scale = zeta ** (side * p / gamma)
        x0, x1 = float(vec[2 * i]), float(vec[2 * i + 1])
        out[2 * i] = scale * (x0 * math.cos(angle) - x1 * math.sin(angle))
        out[2 * i + 1] = scale * (x0 * math.sin(angle) + x1 * math.cos(angle))
    return out


@pytest.mark.parametrize("gamma", [512.0, 3.0])  # 3: a decay that a short row shows
@pytest.mark.parametrize("causal", [False, True])
def test_xpos_attention(causal, gamma):
    attn = build_attention("xpos", causal=causal, embed_dim=12, num_heads=2,
                           xpos_scale_base=gamma)
    x = torch.randn(7, 2, 12, dtype=torch.float64)
    want = naive_attention(attn, x, causal, lambda b, h, i, j, q: 0.0,
                           rotate=lambda v, p: naive_xpos(v, p, 1, gamma),
                           rotate_key=lambda v, p: naive_xpos(v, p, -1, gamma))
    assert (run(attn, x, causal) - want).abs().max() < TOL


def test_xpos_logits_of_a_long_row_are_the_papers():
    """An encoder row of 300 positions (its origin at 149): every logit q_n.k_m equals the
    paper's, keys after the query included (the encoder's growing factor)."""
    attn = build_attention("xpos", causal=False, embed_dim=8, num_heads=1)
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(2, 1, 1, 300, 8, dtype=torch.float64, generator=g).unbind(0)
    rq, rk = attn.encoding.rotate_qk(q, k, 0, PositionContext())
    logits = (rq @ rk.transpose(-1, -2))[0, 0]
    for n, m in ((0, 299), (299, 0), (150, 3), (7, 7), (298, 120)):
        want = float(naive_xpos(q[0, 0, n], n, 1) @ naive_xpos(k[0, 0, m], m, -1))
        assert abs(float(logits[n, m]) - want) < TOL * (1 + abs(want))


def test_xpos_decoding_steps_are_the_papers_up_to_1000_positions():
    """Decoder steps (origin 0, keys scaled once and cached): the logit of the step's query
    with keys rotated at earlier steps is the paper's at every distance."""
    attn = build_attention("xpos", causal=True, embed_dim=8, num_heads=1)
    ctx = PositionContext(incremental=True)
    g = torch.Generator().manual_seed(4)
    q, k = torch.randn(2, 1, 1, 1, 8, dtype=torch.float64, generator=g).unbind(0)
    keys = {m: attn.encoding.rotate_qk(q, k, m, ctx)[1] for m in (0, 1, 500, 999)}
    for n in (1, 500, 999):
        step_q, _ = attn.encoding.rotate_qk(q, k, n, ctx)
        for m in (m for m in keys if m <= n):
            got = float((step_q * keys[m]).sum())
            want = float(naive_xpos(q[0, 0, 0], n, 1) @ naive_xpos(k[0, 0, 0], m, -1))
            assert abs(got - want) < TOL * (1 + abs(want)), (n, m)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2),
                                       (torch.float16, 3e-2)])
def test_xpos_decoding_step_in_lower_precision(dtype, tol):
    """A step's one matrix product per tensor, the queries' scale folded in."""
    attn = build_attention("xpos", causal=True, embed_dim=12, num_heads=2,
                           xpos_scale_base=64.0)
    ctx = PositionContext(incremental=True)
    q, k = torch.randn(2, 3, 2, 1, 6, dtype=torch.float64).unbind(0)
    for p in (0, 17, 40, 130):
        got_q, got_k = attn.encoding.rotate_qk(q.to(dtype), k.to(dtype), p, ctx, 0.375)
        for got, x, side, scale in ((got_q, q, 1, 0.375), (got_k, k, -1, 1.0)):
            for b, h in ((0, 0), (2, 1)):
                want = naive_xpos(x[b, h, 0], p, side, 64.0) * scale
                assert (got[b, h, 0].double() - want).abs().max() < tol * want.abs().max()


@pytest.mark.parametrize("causal,length", [(False, 2048), (True, 1024)])
def test_the_origins_bound_the_factors_in_half_precision(causal, length):
    """Each factor alone stays within 3.5^(T/1024) in the encoder (origin mid-row) and
    3.5^(t/512) in the decoder (origin 0): in float16 at 2048 source and 1024 target
    positions the rotated keys are finite and the logits the paper's, which from the
    paper's origin would put factors of 3.5^4 = 150 (encoder) on the keys."""
    attn = build_attention("xpos", causal=causal, embed_dim=8, num_heads=1)
    ones = torch.ones(1, 1, length, 8, dtype=torch.float16)
    q, k = attn.encoding.float().rotate_qk(ones, ones, 0, PositionContext())
    largest = max(q.float().abs().max(), k.float().abs().max()) / math.sqrt(2)
    bound = 3.5 ** (length / (512 if causal else 1024))
    assert torch.isfinite(k).all() and largest <= bound * 1.01
    for n, m in ((length - 1, 0), (0, length - 1), (length // 2, length // 3)):
        if causal and m > n:
            continue
        want = float(naive_xpos(ones[0, 0, n].double(), n, 1)
                     @ naive_xpos(ones[0, 0, m].double(), m, -1))
        got = float((q[0, 0, n].float() * k[0, 0, m].float()).sum())
        assert abs(got - want) < 1e-2 * max(1.0, abs(want)), (n, m)
