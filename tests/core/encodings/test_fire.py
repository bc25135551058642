"""FIRE (Li et al. 2023, ICLR 2024, sec. 3) against a naive float64 loop written from
``b(i, j) = f(psi(i - j) / psi(max(L, i)))``, ``psi(x) = log(c x + 1)``, with the threshold
small enough that the bias depends on the query's position; its padding (positions from the
first real token), decoding steps, sharing, gradients and flags."""

from __future__ import annotations

import math

import pytest
import torch

from fairseq_posenc.core.context import PositionContext
from fairseq_posenc.core.encodings.fire import Fire
from tests.support.gradients import gradcheck_with_parameters
from tests.support.model_utils import build_attention, build_model, encoding_values
from tests.support.naive import TOL, fairseq_padding, naive_attention, run, run_steps

T, B = 9, 2
C, L = 0.7, 2.5  # L < T: rows 3.. are normalised by their own position


def fire_attention(causal: bool):
    attn = build_attention("fire", causal=causal, fire_init_l=L)
    with torch.no_grad():
        attn.encoding.c.fill_(C)
        attn.encoding.l_multiplier.fill_(1.0)
    return attn


def naive_bias(enc, h: int, i: int, j: int, n: int = 0) -> float:
    """The paper's formula, scalar by scalar, for real positions ``i``, ``j`` of a
    sentence of ``n`` tokens: ``f(psi(i - j) / psi(max(L, i)))`` for ``j <= i``; the
    encoder's keys after the query ``f(-psi(j - i) / psi(max(L, n - 1 - i)))``. eps =
    1e-6 on the normaliser, f = Linear(1, w), ReLU, Linear(w, H)."""
    c = float(enc.c)
    threshold = abs(float(enc.l_multiplier) * enc.init_l)

    def psi(x: float) -> float:
        return math.log(abs(c * x) + 1)

    if j <= i:
        x = psi(i - j) / (psi(max(threshold, i)) + 1e-6)
    else:
        x = -psi(j - i) / (psi(max(threshold, n - 1 - i)) + 1e-6)
    first, second = enc.mlp[0], enc.mlp[2]
    hidden = [max(0.0, float(first.weight[k, 0]) * x + float(first.bias[k]))
              for k in range(first.out_features)]
    return sum(float(second.weight[h, k]) * hidden[k]
               for k in range(len(hidden))) + float(second.bias[h])


@pytest.mark.parametrize("causal", [False, True])
def test_fire_attention_against_naive_loop(causal):
    """Row 1 is left-padded by 3 (encoder) or right-padded (decoder, as fairseq batches
    targets): its positions count from its first real token (and, for the encoder's keys
    after the query, from its last)."""
    attn = fire_attention(causal)
    enc = attn.encoding
    x = torch.randn(T, B, 8, dtype=torch.float64)
    padding = fairseq_padding(B, T, causal)
    first = [0, 0 if causal else 3]
    length = (~padding).sum(1).tolist()
    want = naive_attention(attn, x, causal, lambda b, h, i, j, q: naive_bias(
        enc, h, i - first[b], j - first[b], length[b]), key_padding=padding)
    with torch.no_grad():
        got = run(attn, x, causal, padding)
    real = ~padding.t()
    assert (got[real] - want[real]).abs().max() < TOL


def test_the_bias_depends_on_the_query_beyond_the_threshold():
    """Rows at or below L share one function of the distance; beyond it each row has its
    own normaliser psi(i), so the same distance gets another bias (a bias by pair). The
    encoder's keys after the query: the same with positions counted from the end."""
    enc = fire_attention(causal=True).encoding
    table = enc.pair_bias(T, T, 0, None, PositionContext())  # (H, T, T)
    assert torch.equal(table[:, 1, 0], table[:, 2, 1])  # i = 1, 2 <= L: by distance
    assert (table[:, 4, 3] - table[:, 7, 6]).abs().min() > 1e-6  # i = 4, 7 > L
    for i, j in [(0, 0), (5, 2), (8, 8)]:
        for h in range(2):
            assert abs(float(table[h, i, j]) - naive_bias(enc, h, i, j)) < TOL
    both = fire_attention(causal=False).encoding.pair_bias(T, T, 0, None, PositionContext())
    assert torch.equal(both[:, 1, 0], both[:, 2, 1])  # by distance at or below L
    assert torch.equal(both[:, 7, 8], both[:, 6, 7])  # 1, 2 tokens after the query: <= L
    assert (both[:, 1, 2] - both[:, 4, 5]).abs().min() > 1e-6  # 7, 4 tokens after: > L


def test_decoding_steps_read_their_own_row():
    """Each step (one query at position t over the cached keys) is row t of the naive
    causal reference, past the threshold too."""
    attn = fire_attention(causal=True)
    enc = attn.encoding
    x = torch.randn(T, B, 8, dtype=torch.float64)
    want = naive_attention(attn, x, True, lambda b, h, i, j, q: naive_bias(enc, h, i, j))
    assert (run_steps(attn, x) - want).abs().max() < TOL


def test_gradients_of_c_l_and_the_mlp_match_finite_differences():
    """The table's backward (through psi, max(L, i) and the MLP) against finite
    differences of its forward; L is not an integer, so max(L, i) has no tie."""
    enc = fire_attention(causal=False).encoding
    assert gradcheck_with_parameters(enc, lambda: enc.table(T))


@pytest.mark.parametrize("flags,modules", [([], 2), (["--fire-shared"], 1)])
def test_one_module_per_layer_or_per_stack(flags, modules):
    model, _ = build_model("fire", flags)
    for stack in (model.encoder, model.decoder):
        assert len(stack.pos_encodings) == modules
        assert all(layer.self_attn.encoding is not None for layer in stack.layers)


def test_defaults_are_the_papers():
    enc = Fire.build(encoding_values("fire"), num_heads=8, head_dim=64, causal=True,
                     max_positions=1024)
    assert enc.mlp[0].out_features == 32 and enc.mlp[2].out_features == 8
    assert float(enc.c) == pytest.approx(0.1) and float(enc.threshold()) == 512.0


@pytest.mark.parametrize("flags,message", [
    (["--fire-init-c", "0"], "--fire-init-c must be positive, got 0.0"),
    (["--fire-init-l", "-3"], "--fire-init-l must be positive, got -3.0"),
    (["--fire-mlp-width", "0"], "--fire-mlp-width must be a positive integer, got 0. FIRE "
                                "uses 32."),
])
def test_bad_flags_are_errors_that_name_the_flag(flags, message):
    with pytest.raises(ValueError) as error:
        build_model("fire", flags)
    assert str(error.value).startswith(message)


def fire_within(causal: bool, threshold: float):
    """A layer whose threshold is ``threshold`` (float64), ``c`` as above."""
    attn = build_attention("fire", causal=causal, fire_init_l=threshold)
    with torch.no_grad():
        attn.encoding.c.fill_(C)
        attn.encoding.l_multiplier.fill_(1.0)
    return attn.encoding


def parameters_of(enc) -> list:
    return [*enc.mlp.parameters(), enc.c, enc.l_multiplier]


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "decoder"])
def test_below_the_threshold_the_distance_table_is_the_pair_bias(causal, padded):
    """Every position below L (T - 1 = 8 < L = 8.25): the table by distance that the fused
    kernel reads (:meth:`Fire.distance_table`, read at ``j - i``) is today's pair bias at
    every real pair, bit for bit in float64, and a weighted sum of it has the same
    gradients with respect to the MLP, c and L (torch.autograd; summed in another order,
    so to rounding). The encoder's row is left-padded by 3, the decoder's right-padded."""
    enc = fire_within(causal, T - 0.75)
    assert enc.distance_covers(T, T, 0, PositionContext())
    padding = fairseq_padding(B, T, causal) if padded else None
    pair = enc.pair_bias(T, T, 0, padding, PositionContext()).expand(B, -1, T, T)
    table, r_lo = enc.distance_table(T, T, 0, PositionContext())
    assert r_lo == -(T - 1) and table.shape == (2, 2 * T - 1)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    by_distance = table[:, j - i - r_lo].expand(B, -1, T, T)
    real = torch.ones(B, 1, T, T, dtype=torch.bool)
    if padded:
        real = ~padding[:, None, :, None] & ~padding[:, None, None, :]
    real = real.expand(B, 2, T, T)
    assert torch.equal(by_distance[real], pair[real])
    weights = torch.randn(B, 2, T, T, dtype=torch.float64) * real
    want = torch.autograd.grad((pair * weights).sum(), parameters_of(enc))
    got = torch.autograd.grad((by_distance * weights).sum(), parameters_of(enc))
    for g_want, g_got in zip(want, got):
        assert g_want.abs().max() > 0
        torch.testing.assert_close(g_got, g_want, rtol=1e-12, atol=1e-12)


def test_at_or_beyond_the_threshold_the_pair_path_stays():
    """At L = 8 = T - 1 the last row's bias is still the table's, but the pair path's
    max(L, i) ties and gives L half the gradient: not covered; at L = 6.5 the rows 7 and 8
    read their own normaliser, which no table by distance has."""
    tie = fire_within(True, T - 1.0)
    assert not tie.distance_covers(T, T, 0, PositionContext())
    assert tie.distance_covers(T - 1, T - 1, 0, PositionContext())
    pair = tie.pair_bias(T, T, 0, None, PositionContext())
    table, r_lo = tie.distance_table(T, T, 0, PositionContext())
    assert torch.equal(table[:, -(T - 1) - r_lo], pair[:, T - 1, 0])
    (g_pair,) = torch.autograd.grad(pair[:, T - 1, 0].sum(), tie.l_multiplier)
    (g_table,) = torch.autograd.grad(table[:, -(T - 1) - r_lo].sum(), tie.l_multiplier)
    torch.testing.assert_close(2 * g_pair, g_table)
    short = fire_within(True, 6.5)
    assert not short.distance_covers(T, T, 0, PositionContext())
    pair = short.pair_bias(T, T, 0, None, PositionContext())
    table, r_lo = short.distance_table(T, T, 0, PositionContext())
    assert torch.equal(table[:, -6 - r_lo], pair[:, 6, 0])  # row 6 < L
    assert (table[:, -8 - r_lo] - pair[:, 8, 0]).abs().min() > 1e-6  # row 8 > L
