"""``fairseq_posenc.nn.stickbreaking_attention`` (Tan, Shen, Yang, Courville, Panda 2025,
"Scaling Stick-Breaking Attention: An Efficient Implementation and In-depth Study",
arXiv 2410.17980, eq. 1-2: ``beta_ij = sigmoid(q_i.k_j / sqrt(d_h))``, ``A_ij = beta_ij
prod_{j<l<i} (1 - beta_il)``) against the stick-breaking process itself, walked in a
float64 Python loop: each query breaks its stick at the nearest key first, then farther
ones, the remaining stick a running product. ``attend_current=True`` lets the query's own
key break first (``j <= i``, ``prod_{j<l<=i}``); without it query 0 attends to nothing.
A padded key breaks nothing. The weights (read off with one-hot values) and the remaining
stick sum to 1; logits of 50 to 100 and more stay finite and exact."""

from __future__ import annotations

import math

import pytest
import torch

from fairseq_posenc.nn import stickbreaking_attention

ATOL, RTOL = 1e-10, 1e-9


def sigmoid(z: float) -> float:
    """``1 / (1 + e^-z)`` without overflow: ``1 - sigmoid(z)`` is ``sigmoid(-z)``."""
    return 1 / (1 + math.exp(-z)) if z >= 0 else math.exp(z) / (1 + math.exp(z))


def naive_stickbreaking(q, k, v, attend_current, padding=None):
    B, H, T, d = q.shape
    out = torch.zeros(B, H, T, d, dtype=torch.float64)
    rest = torch.ones(B, H, T, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            qs, ks, vs = q[b, h].tolist(), k[b, h].tolist(), v[b, h].tolist()
            for i in range(T):
                stick = 1.0
                acc = [0.0] * d
                first = i if attend_current else i - 1
                for j in range(first, -1, -1):  # nearest key first
                    if padding is not None and bool(padding[b, j]):
                        continue
                    z = sum(a * c for a, c in zip(qs[i], ks[j])) / math.sqrt(d)
                    piece = stick * sigmoid(z)  # beta_ij of what is left
                    acc = [a + piece * x for a, x in zip(acc, vs[j])]
                    stick *= sigmoid(-z)  # 1 - beta_ij
                out[b, h, i] = torch.tensor(acc, dtype=torch.float64)
                rest[b, h, i] = stick
    return out, rest


def padding_mask(B, T, side):
    """Row 0 unpadded, the others padded by about T/3, 2T/3 (at most T - 1) on ``side``,
    or (``"middle"``) in holes that leave the first and last positions real."""
    padding = torch.zeros(B, T, dtype=torch.bool)
    for b in range(1, B):
        n = min(b * max(T // 3, 1), T - 1)
        if side == "middle":
            padding[b, 1:T - 1:b + 1] = True
        elif n:
            padding[b, T - n:] = side == "right"
            padding[b, :n] = side == "left"
    return padding


def compare(got, want, padding=None):
    (out, rest), (out_w, rest_w) = got, want
    assert out.dtype == torch.float64 and out.shape == out_w.shape
    assert rest.shape == rest_w.shape
    if padding is not None:  # the real queries' rows only
        real = ~padding
        out, out_w = out.transpose(1, 2)[real], out_w.transpose(1, 2)[real]
        rest, rest_w = rest.transpose(1, 2)[real], rest_w.transpose(1, 2)[real]
    torch.testing.assert_close(out, out_w, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(rest, rest_w, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("side", [None, "right", "left", "middle"])
@pytest.mark.parametrize("attend_current", [True, False])
@pytest.mark.parametrize("T", [1, 6, 33, 70])
def test_stickbreaking_against_naive_loop(T, attend_current, side):
    torch.manual_seed(T)
    B, H, d = 3, 2, 8
    q, k, v = (torch.randn(B, H, T, d, dtype=torch.float64) * 2 for _ in range(3))
    padding = None if side is None else padding_mask(B, T, side)
    got = stickbreaking_attention(q, k, v, attend_current=attend_current,
                                  key_padding_mask=padding)
    compare(got, naive_stickbreaking(q, k, v, attend_current, padding), padding)


@pytest.mark.parametrize("attend_current", [True, False])
@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_changes_no_real_row(attend_current, side):
    """A sequence alone, and padded with large junk keys in a batch: the same rows."""
    torch.manual_seed(3)
    L, n, d = 66, 5, 4
    q, k, v = (torch.randn(1, 2, L, d, dtype=torch.float64) for _ in range(3))
    junk = [torch.randn(1, 2, n, d, dtype=torch.float64) * 30 for _ in range(3)]
    cat = (lambda x, j: torch.cat([x, j], 2)) if side == "right" else (
        lambda x, j: torch.cat([j, x], 2))
    padded = [cat(x, j) for x, j in zip((q, k, v), junk)]
    padding = torch.zeros(1, L + n, dtype=torch.bool)
    padding[0, L:] = side == "right"
    padding[0, :n] = side == "left"
    real = slice(0, L) if side == "right" else slice(n, None)
    out, rest = stickbreaking_attention(*padded, attend_current=attend_current,
                                        key_padding_mask=padding)
    alone = stickbreaking_attention(q, k, v, attend_current=attend_current)
    compare((out[:, :, real], rest[:, :, real]), alone)
    compare((out[:, :, real], rest[:, :, real]),
            naive_stickbreaking(q, k, v, attend_current))


@pytest.mark.parametrize("side", [None, "left", "middle"])
@pytest.mark.parametrize("attend_current", [True, False])
def test_weights_and_remaining_stick_sum_to_one(attend_current, side):
    """``v`` the one-hot rows of ``eye(T)`` (``d_h = T``): output row ``i`` is the weights
    ``A_i.``; nonnegative, zero past the keys the query attends to and at padded keys,
    and with the remaining stick they sum to 1."""
    torch.manual_seed(11)
    B, H, T = 2, 2, 9
    q, k = (torch.randn(B, H, T, T, dtype=torch.float64) * 2 for _ in range(2))
    v = torch.eye(T, dtype=torch.float64).expand(B, H, T, T)
    padding = None if side is None else padding_mask(B, T, side)
    weights, rest = stickbreaking_attention(q, k, v, attend_current=attend_current,
                                            key_padding_mask=padding)
    compare((weights, rest), naive_stickbreaking(q, k, v, attend_current, padding), padding)
    real = torch.ones(B, T, dtype=torch.bool) if padding is None else ~padding
    allowed = torch.ones(T, T, dtype=torch.bool).tril(0 if attend_current else -1)
    for b in range(B):
        rows = weights[b][:, real[b]]  # (H, real queries, T)
        keys = allowed[real[b]] & real[b][None, :]
        assert (rows >= 0).all()
        assert (rows[:, ~keys] == 0).all()
        total = rows.sum(-1) + rest[b][:, real[b]]
        torch.testing.assert_close(total, torch.ones_like(total), atol=ATOL, rtol=RTOL)
        assert (rows.sum(-1) > 1e-3).any()  # the test has teeth: real weights
    if not attend_current and side is None:  # query 0: nothing to attend to
        assert (weights[:, :, 0] == 0).all() and (rest[:, :, 0] == 1).all()


def test_first_query_without_the_current_key_attends_to_nothing():
    torch.manual_seed(5)
    q, k, v = (torch.randn(2, 3, 4, 8, dtype=torch.float64) for _ in range(3))
    out, rest = stickbreaking_attention(q, k, v, attend_current=False)
    assert (out[:, :, 0] == 0).all() and (rest[:, :, 0] == 1).all()
    out, rest = stickbreaking_attention(q[:, :, :1], k[:, :, :1], v[:, :, :1],
                                        attend_current=False)
    assert (out == 0).all() and (rest == 1).all()
    # with its own key: beta_00 of the stick, v_0 weighted
    out, rest = stickbreaking_attention(q[:, :, :1], k[:, :, :1], v[:, :, :1],
                                        attend_current=True)
    beta = torch.sigmoid((q[:, :, 0] * k[:, :, 0]).sum(-1) / math.sqrt(8))
    torch.testing.assert_close(out[:, :, 0], beta[..., None] * v[:, :, 0], atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(rest[:, :, 0], 1 - beta, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("attend_current", [True, False])
@pytest.mark.parametrize("T", [7, 70])
def test_extreme_logits_finite_and_exact(T, attend_current):
    """``q, k`` scaled so that ``|z|`` runs to 50..100 and past: sticks broken whole
    (``beta = 1`` to 1e-20 and closer) or not at all, remaining sticks down to e^-100."""
    torch.manual_seed(T + attend_current)
    B, H, d = 2, 2, 4
    q, k = (torch.randn(B, H, T, d, dtype=torch.float64) * 6 for _ in range(2))
    v = torch.randn(B, H, T, d, dtype=torch.float64)
    z = (q @ k.transpose(-1, -2) / math.sqrt(d)).tril()
    assert z.abs().max() > 50 and ((z.abs() > 50) & (z.abs() < 100)).sum() > 3
    padding = padding_mask(B, T, "left")
    for mask in (None, padding):
        out, rest = stickbreaking_attention(q, k, v, attend_current=attend_current,
                                            key_padding_mask=mask)
        real = torch.ones(B, T, dtype=torch.bool) if mask is None else ~mask
        assert torch.isfinite(out.transpose(1, 2)[real]).all()
        assert torch.isfinite(rest.transpose(1, 2)[real]).all()
        compare((out, rest), naive_stickbreaking(q, k, v, attend_current, mask), mask)
