"""``fairseq_posenc.nn.path_attention`` (PaTH, Yang et al. 2025, "PaTH Attention: Position
Encoding via Accumulating Householder Transformations", arXiv 2505.16381, eq. 2:
``A_ij ∝ exp(k_j^T (prod_{s=j+1..i} H_s) q_i)``, ``H_s = I - beta_s w_s w_s^T``) against a
naive float64 loop that builds every ``d_h x d_h`` matrix ``H_t`` and multiplies them:
the logit of query ``i`` and key ``j <= i`` is ``q_i^T H_i H_{i-1} ... H_{j+1} k_j /
sqrt(d_h)`` (``H`` symmetric), plus ``sum_{t=j+1..i} log f_t`` with FoX's gates
(PaTH-FoX, sec. 3.3); a softmax over the keys so far. A padded position transforms
nothing (``H_t = I``), adds no log gate and is no key. Lengths past one block of 64 cross
the implementation's block boundaries; beta = 0 is plain causal attention; beta = 2 with
hand-picked ``w`` reflects, in an order the hand computation checks."""

from __future__ import annotations

import math

import pytest
import torch

from fairseq_posenc.nn import path_attention

ATOL, RTOL = 1e-10, 1e-9


def naive_path(q, k, v, w, beta, log_gates=None, padding=None):
    """Loops over batch, head, query ``i`` and key ``j = i, i-1, ..., 0``: ``P`` is the
    product ``H_i ... H_{j+1}`` of explicit matrices, one more factor ``H_j`` on its right
    for each step to the next key."""
    B, H, T, d = q.shape
    out = torch.zeros(B, H, T, d, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            eye = torch.eye(d, dtype=torch.float64)
            mats, gates = [], []
            for t in range(T):
                pad = padding is not None and bool(padding[b, t])
                wt = w[b, h, t].double()
                mats.append(eye if pad else eye - float(beta[b, h, t]) * torch.outer(wt, wt))
                gates.append(0.0 if pad or log_gates is None else float(log_gates[b, h, t]))
            for i in range(T):
                P = eye.clone()  # the empty product, for j = i
                gate_sum = 0.0  # sum_{t=j+1..i} log f_t
                logits, keys = [], []
                for j in range(i, -1, -1):
                    if padding is None or not bool(padding[b, j]):
                        z = float(q[b, h, i].double() @ P @ k[b, h, j].double()) / math.sqrt(d)
                        logits.append(z + gate_sum)
                        keys.append(j)
                    P = P @ mats[j]
                    gate_sum += gates[j]
                if not keys:
                    continue
                top = max(logits)
                weights = [math.exp(z - top) for z in logits]
                total = sum(weights)
                for p, j in zip(weights, keys):
                    out[b, h, i] += (p / total) * v[b, h, j].double()
    return out


def inputs(B, H, T, d, gates=False):
    q, k, v = (torch.randn(B, H, T, d, dtype=torch.float64) for _ in range(3))
    w = torch.nn.functional.normalize(torch.randn(B, H, T, d, dtype=torch.float64), dim=-1)
    beta = 2 * torch.sigmoid(3 * torch.randn(B, H, T, dtype=torch.float64))
    flat = beta.view(-1)  # both ends of (0, 2) for sure
    flat[::7] = 1e-6
    flat[3::7] = 2 - 1e-6
    log_gates = torch.nn.functional.logsigmoid(torch.randn(B, H, T, dtype=torch.float64))
    return q, k, v, w, beta, (log_gates if gates else None)


@pytest.mark.parametrize("d", [4, 8])
@pytest.mark.parametrize("T", [1, 5, 37, 70])
def test_path_against_naive_loop(T, d):
    torch.manual_seed(T * 10 + d)
    q, k, v, w, beta, _ = inputs(2, 2, T, d)
    got = path_attention(q, k, v, w, beta)
    assert got.shape == (2, 2, T, d) and got.dtype == torch.float64
    torch.testing.assert_close(got, naive_path(q, k, v, w, beta), atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("T", [64, 65, 130])
def test_path_across_block_boundaries(T):
    torch.manual_seed(T)
    q, k, v, w, beta, _ = inputs(2, 2, T, 4)
    got = path_attention(q, k, v, w, beta)
    torch.testing.assert_close(got, naive_path(q, k, v, w, beta), atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("T,d", [(5, 4), (37, 8), (70, 4)])
def test_path_fox_against_naive_loop(T, d):
    torch.manual_seed(100 + T)
    q, k, v, w, beta, log_gates = inputs(2, 2, T, d, gates=True)
    got = path_attention(q, k, v, w, beta, log_gates=log_gates)
    want = naive_path(q, k, v, w, beta, log_gates)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)
    # the gates do change the numbers
    assert (want - naive_path(q, k, v, w, beta)).abs().max() > 1e-3


@pytest.mark.parametrize("gates", [False, True], ids=["path", "path_fox"])
def test_padding_on_either_side_changes_no_real_row(gates):
    """Row 0 right-padded, row 1 left-padded (70 positions, the real ones straddling the
    block boundary at 64); the pads' inputs are large junk. Each real row equals its
    sequence alone and the loop."""
    torch.manual_seed(7 + gates)
    L, npad, d = 60, 10, 4
    seqs = [inputs(1, 2, L, d, gates=True) for _ in range(2)]
    junk = inputs(2, 2, npad, d, gates=True)
    padding = torch.zeros(2, L + npad, dtype=torch.bool)
    padding[0, L:] = True
    padding[1, :npad] = True
    scale = [20.0, 20.0, 20.0, 1.0, 1.0, 30.0]  # big q, k, v, gates; valid w, beta
    parts = [torch.cat([torch.cat([seqs[0][n], junk[n][:1] * c], dim=2),
                        torch.cat([junk[n][1:] * c, seqs[1][n]], dim=2)])
             for n, c in enumerate(scale)]
    if not gates:
        parts[5] = None
    q, k, v, w, beta, log_gates = parts
    got = path_attention(q, k, v, w, beta, log_gates=log_gates, key_padding_mask=padding)
    want = naive_path(q, k, v, w, beta, log_gates, padding)
    real = ~padding
    torch.testing.assert_close(got.transpose(1, 2)[real], want.transpose(1, 2)[real],
                               atol=ATOL, rtol=RTOL)
    for row, (s, cols) in enumerate([(seqs[0], slice(0, L)), (seqs[1], slice(npad, None))]):
        alone = path_attention(*s[:5], log_gates=s[5] if gates else None)
        torch.testing.assert_close(got[row:row + 1, :, cols], alone, atol=ATOL, rtol=RTOL)
    # an all-False mask is no mask
    q, k, v, w, beta, log_gates = inputs(2, 2, 9, 4, gates=gates)
    torch.testing.assert_close(
        path_attention(q, k, v, w, beta, log_gates=log_gates,
                       key_padding_mask=torch.zeros(2, 9, dtype=torch.bool)),
        path_attention(q, k, v, w, beta, log_gates=log_gates), atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("gates", [False, True], ids=["path", "path_fox"])
def test_padding_in_the_middle_transforms_nothing(gates):
    """Holes inside the sequences: only there does a pad stand between a real key and a
    real query, so only there do its ``H_t = I`` and log gate 0 show. The real rows
    equal the loop and the sequence with its holes taken out."""
    torch.manual_seed(21 + gates)
    T, d = 70, 4
    q, k, v, w, beta, log_gates = inputs(2, 2, T, d, gates=gates)
    padding = torch.zeros(2, T, dtype=torch.bool)
    padding[0, 10:14] = True
    padding[0, 60:67] = True
    padding[1, 1] = padding[1, 33] = padding[1, 64] = True
    got = path_attention(q, k, v, w, beta, log_gates=log_gates, key_padding_mask=padding)
    want = naive_path(q, k, v, w, beta, log_gates, padding)
    real = ~padding
    torch.testing.assert_close(got.transpose(1, 2)[real], want.transpose(1, 2)[real],
                               atol=ATOL, rtol=RTOL)
    for b in range(2):
        keep = real[b]
        x = [t[b:b + 1, :, keep] for t in (q, k, v, w, beta)]
        alone = path_attention(*x, log_gates=None if log_gates is None
                               else log_gates[b:b + 1, :, keep])
        torch.testing.assert_close(got[b:b + 1, :, keep], alone, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("T", [5, 70])
def test_beta_zero_is_causal_softmax_attention(T):
    torch.manual_seed(T + 1)
    q, k, v, w, _, _ = inputs(2, 2, T, 8)
    beta = torch.zeros(2, 2, T, dtype=torch.float64)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(path_attention(q, k, v, w, beta), want, atol=ATOL, rtol=RTOL)


def test_beta_two_reflects_in_order_by_hand():
    """T = 3, d_h = 2, beta = 2: ``H_1 = diag(-1, 1)`` (w_1 = e_1), ``H_2 = [[0, -1],
    [-1, 0]]`` (w_2 = (1, 1)/sqrt 2), so ``H_2 H_1 = [[0, -1], [1, 0]]`` and ``H_1 H_2``
    its transpose. ``k_0 = (1, 1)``, ``k_1 = k_2 = 0``, ``q_1 = q_2 = (sqrt2 ln 3, 0)``:
    logit(1, 0) = q_1 . H_1 k_0 / sqrt 2 = -ln 3, logit(2, 0) = q_2 . H_2 H_1 k_0 / sqrt 2
    = -ln 3 (the wrong order, or no reflection: +ln 3), the others 0. With ``v_0 = e_1``,
    ``v_1 = e_2``, ``v_2 = 0``: row 1 is (1/4, 3/4), row 2 (1/7, 3/7)."""
    s = math.sqrt(2) * math.log(3)
    q = torch.tensor([[0.0, 0.0], [s, 0.0], [s, 0.0]], dtype=torch.float64)
    k = torch.tensor([[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    r = 1 / math.sqrt(2)
    w = torch.tensor([[0.6, 0.8], [1.0, 0.0], [r, r]], dtype=torch.float64)
    beta = torch.full((1, 1, 3), 2.0, dtype=torch.float64)
    got = path_attention(*(x[None, None] for x in (q, k, v, w)), beta)[0, 0]
    want = torch.tensor([[1.0, 0.0], [0.25, 0.75], [1 / 7, 3 / 7]], dtype=torch.float64)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)
    loop = naive_path(*(x[None, None] for x in (q, k, v, w)), beta)[0, 0]
    torch.testing.assert_close(loop, want, atol=ATOL, rtol=RTOL)
