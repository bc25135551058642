"""FoX's forget gate (Lin et al. 2025, sec. 2) against a naive float64 loop written from the
paper's equations: ``f_t = sigmoid(w_h.x_t + b_h)``, logits ``q_i.k_j / sqrt(d_h) +
sum_{t=j+1..i} log f_t``; the encoder form (keys after the query: ``sum_{t=i+1..j} log
g_t`` of the second set of gates); padding on either side; decoding steps from the cached
sums, beam reordering through fairseq's own ``reorder_incremental_state``; the hi/lo split
of the sums against its error bound, emulating half precision's rounding; the extra
dimensions on CPU against the bias."""

from __future__ import annotations

import math

import pytest
import torch

from fairseq_posenc.core.encodings.gate_sums import CACHE_KEY, split_bound, split_sums
from fairseq_posenc.testing import check_encoding
from tests.support.model_utils import build_attention
from tests.support.naive import TOL, fairseq_padding, naive_attention, run, run_steps

T, B, C, H = 8, 2, 8, 2


def fox_attention(causal: bool):
    return build_attention("fox", causal=causal, embed_dim=C, num_heads=H)


def naive_log_gate(attn, x, b, g, t) -> float:
    """``log sigmoid(w_g . x_t + b_g)``, scalar by scalar (gate ``g``: the forward gates
    of the heads, then the encoder's backward ones)."""
    gate = attn.encoding.gate
    z = sum(float(gate.weight[g, c]) * float(x[t, b, c]) for c in range(x.size(-1)))
    z += float(gate.bias[g])
    return -math.log1p(math.exp(-z))


def naive_fox(attn, x):
    """``logit_term(b, h, i, j, q_i)``: the sum of the log-gates between key and query."""
    def term(b, h, i, j, q_i):
        if j <= i:
            return sum(naive_log_gate(attn, x, b, h, t) for t in range(j + 1, i + 1))
        return sum(naive_log_gate(attn, x, b, H + h, t) for t in range(i + 1, j + 1))

    return term


@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "decoder"])
def test_fox_attention_against_naive_loop(causal):
    """Row 1 is padded on the side fairseq pads it: its real tokens attend as alone."""
    attn = fox_attention(causal)
    x = torch.randn(T, B, C, dtype=torch.float64)
    padding = fairseq_padding(B, T, causal)
    want = naive_attention(attn, x, causal, naive_fox(attn, x), key_padding=padding)
    with torch.no_grad():
        got = run(attn, x, causal, padding)
    real = ~padding.t()
    assert (got[real] - want[real]).abs().max() < TOL


@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "decoder"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_padding_on_either_side_changes_no_real_token(causal, side):
    attn = fox_attention(causal)
    x = torch.randn(T, 1, C, dtype=torch.float64)
    pads = torch.randn(3, 1, C, dtype=torch.float64) * 5  # gates far from the real ones'
    padded = torch.cat([pads, x] if side == "left" else [x, pads])
    real = slice(3, None) if side == "left" else slice(0, T)
    padding = torch.ones(1, T + 3, dtype=torch.bool)
    padding[0, real] = False
    with torch.no_grad():
        alone = run(attn, x, causal)
        batch = run(attn, padded, causal, padding)
    assert (batch[real] - alone).abs().max() < TOL


def test_decoding_steps_equal_the_full_forward_and_cache_the_sums():
    attn = fox_attention(causal=True)
    x = torch.randn(T, B, C, dtype=torch.float64)
    with torch.no_grad():
        full = run(attn, x, True)
    state: dict = {}
    from fairseq_posenc.core.context import PositionContext

    context = PositionContext(incremental=True)
    steps = []
    for t in range(T):
        with torch.no_grad(), attn.scope.open(context):
            steps.append(attn(x[t:t + 1], x[t:t + 1], x[t:t + 1], incremental_state=state,
                              need_weights=False)[0][0])
    assert (torch.stack(steps) - full).abs().max() < TOL
    assert (run_steps(attn, x) - full).abs().max() < TOL
    # the cache holds c_j of every key: the running sums of the naive log-gates
    sums = attn._get_input_buffer(state)[CACHE_KEY]
    assert sums.shape == (B, H, T)
    for b in range(B):
        for h in range(H):
            c = 0.0
            for t in range(T):
                c += naive_log_gate(attn, x, b, h, t)
                assert abs(float(sums[b, h, t]) - c) < TOL


def test_fairseq_reorders_the_sums_with_the_keys():
    """Beam search's reorder (fairseq's ``reorder_incremental_state``) between steps: the
    steps of the reordered rows equal the full forward of the reordered sequences."""
    attn = fox_attention(causal=True)
    x = torch.randn(T, B, C, dtype=torch.float64)
    order = torch.tensor([1, 0, 1])
    from fairseq_posenc.core.context import PositionContext

    state: dict = {}
    context = PositionContext(incremental=True)
    steps = []
    rows = x
    for t in range(T):
        if t == 4:
            attn.reorder_incremental_state(state, order)
            rows = x[:, order]
        with torch.no_grad(), attn.scope.open(context):
            steps.append(attn(rows[t:t + 1], rows[t:t + 1], rows[t:t + 1],
                              incremental_state=state, need_weights=False)[0][0])
    with torch.no_grad():
        want = run(attn, x[:, order], True)
    assert (torch.stack(steps[4:]) - want[4:]).abs().max() < TOL


def test_check_encoding_passes():
    check_encoding("fox")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("largest", [0.3, 37.0, 500.0, 4000.0])
def test_split_sums_within_the_bound_in_half_precision(dtype, largest):
    """``c_hi`` holds exactly in ``dtype``, and ``c_hi + round(c_lo)`` is within
    ``m 2^-2p`` of ``c`` (``m = max |c|`` of the row), where ``c`` rounded alone is not."""
    torch.manual_seed(0)
    # sums as a gate gives them: non-increasing from 0, the row's largest |c| at its end
    steps = torch.rand(3, 2, 512, dtype=torch.float64)
    sums = -(steps.cumsum(-1) / steps.sum(-1, keepdim=True)) * largest
    high, low = split_sums(sums, dtype)
    assert torch.equal(high.to(dtype).double(), high)  # c_hi exact in dtype
    assert low.abs().max() <= high.abs().max() * 2.0 ** -{torch.float16: 11,
                                                          torch.bfloat16: 8,
                                                          torch.float32: 24}[dtype] + 1e-12
    error = (high.to(dtype).double() + low.to(dtype).double() - sums).abs().max()
    bits = {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24}[dtype]
    bound = split_bound(largest, dtype)
    assert bound <= largest * 2.0 ** (-2 * bits) + 2.0 ** -25
    assert error <= bound
    if dtype is not torch.float32 and largest >= 37:
        assert (sums.to(dtype).double() - sums).abs().max() > 8 * bound


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_extra_dimensions_equal_the_bias_on_cpu(dtype):
    """The causal route's extra dimensions (``low_rank_kernel="concat"``), run on CPU:
    the same outputs and gradients as the bias, with a prefix cached too."""
    attn = fox_attention(causal=True).to(dtype)
    x = torch.randn(T, B, C, dtype=dtype)
    padding = fairseq_padding(B, T, True)
    mask = torch.triu(torch.full((T, T), float("-inf"), dtype=dtype), 1)
    outs, grads = [], []
    for kernel in ("bias", "concat"):
        attn.low_rank_kernel = kernel
        attn.zero_grad()
        with attn.scope.open():
            out, _ = attn(x, x, x, key_padding_mask=padding, attn_mask=mask,
                          need_weights=False)
        out[~padding.t()].sum().backward()
        outs.append(out.detach())
        grads.append(attn.encoding.gate.weight.grad.clone())
    tol = TOL if dtype is torch.float64 else 1e-4
    real = ~padding.t()
    assert (outs[0][real] - outs[1][real]).abs().max() < tol
    assert (grads[0] - grads[1]).abs().max() < tol * 10
