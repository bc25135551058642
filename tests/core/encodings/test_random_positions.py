"""``--random-positions L`` (Ruoss et al. 2023): the draw (sorted, distinct, within
``[0, L)``, per sequence, seeded), every kind of term at drawn positions against a float64
loop of its paper's formula (``support/naive.py``) with the distances ``pos_j - pos_i``,
the input embeddings at drawn positions, evaluation equal to the model without the option,
and the errors for encodings it cannot apply to.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from fairseq_posenc.core.context import PositionContext
from fairseq_posenc.core.encodings import ENCODINGS, get_encoding
from fairseq_posenc.core.encodings.registry import option_values
from fairseq_posenc.core.positions import real_positions
from fairseq_posenc.core.random_positions import draw_positions
from tests.support.batches import random_source
from tests.support.model_utils import build_attention, build_model, encoding_values
from tests.support.naive import (TOL, clip, heads, naive_attention, naive_rope,
                                 naive_sinusoid, naive_t5_bucket)

SPAN = 40


def left_padded(batch: int, length: int) -> torch.Tensor:
    """Row ``b`` has ``b`` padding tokens on the left."""
    return torch.arange(length)[None, :] < torch.arange(batch)[:, None]


# --- the draw ---------------------------------------------------------------------------


def test_draw_sorted_distinct_within_the_span_per_sequence():
    padding = left_padded(6, 9)
    drawn = draw_positions(padding, SPAN, torch.Generator().manual_seed(0))
    rows = []
    for b in range(6):
        real = drawn[b][~padding[b]].tolist()
        assert real == sorted(set(real)) and 0 <= real[0] and real[-1] < SPAN
        assert len(real) == 9 - b
        assert drawn[b][padding[b]].eq(0).all()
        rows.append(tuple(real))
    assert len(set(rows)) == 6  # one draw per sequence
    assert torch.equal(drawn, draw_positions(padding, SPAN, torch.Generator().manual_seed(0)))


def test_every_subset_is_equally_likely():
    """Two tokens from [0, 5): ten subsets, each a tenth of the draws."""
    padding = torch.zeros(20000, 2, dtype=torch.bool)
    drawn = draw_positions(padding, 5, torch.Generator().manual_seed(1))
    counts = Counter(map(tuple, drawn.tolist()))
    assert set(counts) == {(a, b) for a in range(5) for b in range(a + 1, 5)}
    assert all(abs(n - 2000) < 200 for n in counts.values()), counts


def test_a_sequence_longer_than_the_span_is_an_error():
    padding = torch.zeros(2, 6, dtype=torch.bool)
    padding[1, :2] = True
    draw_positions(padding[1:], 4)  # 4 real tokens fit 4 positions
    with pytest.raises(ValueError, match="--random-positions 4 draws positions from only 4"):
        draw_positions(padding, 4)


# --- each kind of term at drawn positions, against its formula --------------------------


def run_at(attn, x, causal, positions, padding):
    T = x.size(0)
    mask = torch.triu(torch.full((T, T), float("-inf"), dtype=x.dtype), 1) if causal else None
    with attn.scope.open(PositionContext(positions=positions)):
        out, _ = attn(x, x, x, key_padding_mask=padding, attn_mask=mask, need_weights=False)
    return out


def keys_of(attn, x):
    with torch.no_grad():
        return heads(attn, x)[1]


def alibi_slope(h: int, heads_: int) -> float:
    """Press et al.: the geometric sequence starting at 2^(-8/H) (H a power of two)."""
    return (2 ** (-8 / heads_)) ** (h + 1)


def xl_term(attn, keys, clamp):
    enc = attn.encoding
    w_r, u, v = enc.r_proj, enc.biases.u, enc.biases.v
    C, D = attn.embed_dim, attn.head_dim

    def term(b, h, i, j, q, r):
        s = -r if clamp is None else clip(-r, -clamp, clamp)  # Transformer-XL's i - j
        angles = [s / 10000 ** (2 * k / C) for k in range(C // 2)]
        rel = [math.sin(a) for a in angles] + [math.cos(a) for a in angles]
        proj = [sum(float(w_r[h * D + e, c]) * rel[c] for c in range(C)) for e in range(D)]
        k = keys[j, b, h]
        return sum(float(q[e]) * proj[e] + float(u[h, e]) * float(k[e])
                   + float(v[h, e]) * proj[e] for e in range(D)) / math.sqrt(D)

    return term


#: encoding -> (flags, max positions, term(attn, keys, causal) -> f(b, h, i, j, q, r)):
#: the logit term at distance r = pos_j - pos_i, from each paper (see the formula tests
#: of each encoding for the references at consecutive positions).
CASES = {
    # DISTANCE_BIAS: T5's buckets (Raffel et al. 2020), DIET-REL's clipped table, ALiBi
    "t5": ({"t5_num_buckets": 8, "t5_max_distance": 20}, 12,
           lambda attn, keys, causal: lambda b, h, i, j, q, r: float(
               attn.encoding.rel_bias[h, naive_t5_bucket(r, 8, 20, not causal)])),
    "diet_rel": ({"diet_rel_max_len": 6}, 12,
                 lambda attn, keys, causal: lambda b, h, i, j, q, r: float(
                     attn.encoding.rel_bias[h, clip(r, -5, 5) + 5])),
    "alibi": ({}, 12, lambda attn, keys, causal: lambda b, h, i, j, q, r:
              -alibi_slope(h, attn.num_heads) * abs(r)),
    # DISTANCE_SCALE: Huang et al. method 2, a factor on q.k (naive adds q.k itself)
    "huang2": ({"huang2_clip": 6}, 12,
               lambda attn, keys, causal: lambda b, h, i, j, q, r: float(
                   q @ keys[j, b, h]) * (float(attn.encoding.rel_bias[h, clip(r, -6, 6) + 6])
                                         - 1) / math.sqrt(attn.head_dim)),
    # CONTENT_BIAS: Transformer-XL; Huang et al. method 4
    "xl": ({"xl_clamp_len": None}, 12, lambda attn, keys, causal: xl_term(attn, keys, None)),
    "huang4": ({"huang4_clip": 6}, 12,
               lambda attn, keys, causal: lambda b, h, i, j, q, r: float(
                   (q + keys[j, b, h]) @ attn.encoding.rel_emb[h, clip(r, -6, 6) + 6])
               / math.sqrt(attn.head_dim)),
    # CONTENT_LOGITS: Huang et al. method 3, a gate per dimension of q.k
    "huang3": ({"huang3_clip": 6}, 12,
               lambda attn, keys, causal: lambda b, h, i, j, q, r: sum(
                   float(q[e]) * float(keys[j, b, h, e])
                   * (float(attn.encoding.rel_gate[h, clip(r, -6, 6) + 6, e]) - 1)
                   for e in range(attn.head_dim)) / math.sqrt(attn.head_dim)),
    # LOW_RANK: DIET-ABS's P_Q[pos_i] . P_K[pos_j] at the drawn absolute positions
    "diet_abs": ({}, SPAN, None),
}


@pytest.mark.parametrize("grad", [True, False], ids=["explicit", "sdpa"])
@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "decoder"])
@pytest.mark.parametrize("encoding", sorted(CASES))
def test_terms_at_drawn_positions(encoding, causal, grad):
    flags, max_positions, make = CASES[encoding]
    attn = build_attention(encoding, causal=causal, max_positions=max_positions, **flags)
    T, B = 7, 3
    x = torch.randn(T, B, 8, dtype=torch.float64)
    padding = torch.zeros(B, T, dtype=torch.bool) if causal else left_padded(B, T)
    pos = draw_positions(padding, SPAN, torch.Generator().manual_seed(4))
    keys = keys_of(attn, x)
    if encoding == "diet_abs":
        p_q, p_k = attn.encoding.p_q, attn.encoding.p_k

        def term(b, h, i, j, q):
            return float(p_q[h, int(pos[b, i])] @ p_k[h, int(pos[b, j])])
    else:
        at_r = make(attn, keys, causal)

        def term(b, h, i, j, q):
            return at_r(b, h, i, j, q, int(pos[b, j] - pos[b, i]))

    want = naive_attention(attn, x, causal, term, key_padding=padding, positions=pos)
    with torch.set_grad_enabled(grad):
        got = run_at(attn, x, causal, pos, padding if padding.any() else None)
    real = ~padding.t()
    assert (got[real] - want[real]).abs().max() < TOL


@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "decoder"])
def test_shaw_at_drawn_positions(causal):
    """Shaw et al. eqs. 3-5 at clip(pos_j - pos_i, -k, k): the key and the value term."""
    attn = build_attention("shaw", causal=causal, shaw_clip=3)
    a_k, a_v = attn.encoding.rel_key, attn.encoding.rel_value
    T, B, D = 7, 3, attn.head_dim
    x = torch.randn(T, B, 8, dtype=torch.float64)
    padding = torch.zeros(B, T, dtype=torch.bool) if causal else left_padded(B, T)
    pos = draw_positions(padding, SPAN, torch.Generator().manual_seed(5))

    def row(b, i, j):
        return clip(int(pos[b, j] - pos[b, i]), -3, 3) + 3

    want = naive_attention(
        attn, x, causal, lambda b, h, i, j, q: float(q @ a_k[row(b, i, j)]) / math.sqrt(D),
        lambda b, h, i, j: a_v[row(b, i, j)], key_padding=padding, positions=pos)
    got = run_at(attn, x, causal, pos, padding if padding.any() else None)
    real = ~padding.t()
    assert (got[real] - want[real]).abs().max() < TOL


@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "decoder"])
def test_rope_at_drawn_positions(causal):
    """Su et al. eq. 34: each query and key turned by its drawn position."""
    attn = build_attention("rope", causal=causal, embed_dim=12, num_heads=2)
    T, B = 7, 3
    x = torch.randn(T, B, 12, dtype=torch.float64)
    padding = torch.zeros(B, T, dtype=torch.bool) if causal else left_padded(B, T)
    pos = draw_positions(padding, SPAN, torch.Generator().manual_seed(6))
    want = naive_attention(attn, x, causal, lambda b, h, i, j, q: 0.0, rotate=naive_rope,
                           key_padding=padding, positions=pos)
    got = run_at(attn, x, causal, pos, padding if padding.any() else None)
    real = ~padding.t()
    assert (got[real] - want[real]).abs().max() < TOL


# --- whole models -----------------------------------------------------------------------


def recorded_draw(stack):
    """Wrap ``stack``'s draw so that each training forward's positions are kept."""
    drawn = []
    original = stack.pos_draw

    def draw(padding):
        drawn.append(original(padding))
        return drawn[-1]

    stack.pos_draw = draw
    return drawn


@pytest.mark.parametrize("encoding", ["sinusoidal", "learned"])
def test_input_embeddings_at_drawn_positions(encoding):
    model, d = build_model(encoding, ["--random-positions", str(SPAN)])
    model.train()  # dropout is 0
    src, lengths = random_source(d)
    drawn = recorded_draw(model.encoder)
    seen = []
    hook = model.encoder.embed_positions.register_forward_hook(
        lambda module, args, out: seen.append(out))
    model.encoder(src, lengths)
    hook.remove()
    (pos,), (added,) = drawn, seen
    table = model.encoder.embed_positions
    for b in range(src.size(0)):
        real = src[b].ne(d.pad())
        assert pos[b][real].tolist() == sorted(set(pos[b][real].tolist()))
        for t in real.nonzero().flatten().tolist():
            row = d.pad() + 1 + int(pos[b, t])  # fairseq's numbering of position p
            want = (torch.tensor(naive_sinusoid(row, added.size(-1))) if encoding ==
                    "sinusoidal" else table.weight[row].double())
            assert (added[b, t].double() - want).abs().max() < 1e-5


#: every encoding the option applies to
TAKING = sorted(name for name, cls in ENCODINGS.items()
                if cls.random_positions_refusal(option_values(cls, {})) is None)


@pytest.mark.parametrize("encoding", TAKING)
def test_evaluation_equals_the_model_without_the_option(encoding):
    model, d = build_model(encoding, ["--random-positions", str(SPAN)])
    plain, _ = build_model(encoding)
    src, lengths = random_source(d)
    prev = torch.full((3, 4), d.eos())
    with torch.no_grad():
        assert torch.equal(model(src, lengths, prev)[0], plain(src, lengths, prev)[0])


@pytest.mark.parametrize("encoding", TAKING)
def test_training_reads_the_drawn_positions_in_every_layer(encoding):
    """A training forward at positions 0..n-1 (the draw replaced) equals evaluation, on the
    paths for chosen positions: every term of every layer reads the stack's positions.
    Real draws change the output, and gradients stay finite."""
    model, d = build_model(encoding, ["--random-positions", str(SPAN)])
    src, lengths = random_source(d)
    prev = torch.randint(d.nspecial, 40, (3, 5))
    prev[:, 0] = d.eos()
    with torch.no_grad():
        evaluated = model(src, lengths, prev)[0]
    model.train()  # dropout is 0
    drawn = [recorded_draw(model.encoder), recorded_draw(model.decoder)]
    trained = model(src, lengths, prev)[0]
    assert (trained - evaluated).abs().max() > 1e-4  # the drawn positions count
    trained.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert all(len(d_) == 1 for d_ in drawn)  # once per forward and stack
    for stack in (model.encoder, model.decoder):
        stack.pos_draw = lambda padding: real_positions(padding, padding.size(1)).masked_fill(
            padding, 0).expand(padding.size(0), -1)
    with torch.no_grad():
        at_indices = model(src, lengths, prev)[0]
    assert (at_indices - evaluated).abs().max() < 1e-5


@pytest.mark.parametrize("encoding,flags,message", [
    ("none", [], "--random-positions cannot apply to --pos-encoding none: the model has no "
                 "positions to draw."),
    ("diet_abs_lin", [], "--random-positions cannot apply to --pos-encoding diet_abs_lin: "
                         "its encoder's keys and values are the input projected"),
    ("cope", [], "--random-positions cannot apply to --pos-encoding cope: its positions "
                 "are counts of gates"),
    ("fire", [], "--random-positions cannot apply to --pos-encoding fire: its bias is a "
                 "function of the query's position"),
    ("fox", [], "--random-positions cannot apply to --pos-encoding fox: its bias is the sum "
                "of gates read from the tokens between query and key"),
    ("tupe_a", ["--tupe-reset-first"], "--random-positions cannot apply to --pos-encoding "
                                       "tupe_a: --tupe-reset-first unties position 0"),
    ("learned", ["--max-target-positions", "30"],
     "--random-positions 40 draws positions up to 39, but --pos-encoding learned has a table "
     "of 30 target positions (--max-target-positions): raise --max-target-positions to at "
     "least 40"),
    ("diet_abs", ["--diet-abs-max-len", "20"],
     "--random-positions 40 draws positions up to 39, but --pos-encoding diet_abs has a "
     "table of 20 source positions (--diet-abs-max-len)"),
    ("t5", ["--keep-input-positions", "--encoder-learned-pos", "--max-source-positions",
            "16"], "--random-positions 40 draws positions up to 39, but --pos-encoding t5 has "
                   "a table of 16 source positions (--max-source-positions)"),
])
def test_what_it_cannot_apply_to_is_an_error(encoding, flags, message):
    with pytest.raises(ValueError) as error:
        build_model(encoding, ["--random-positions", str(SPAN), *flags])
    assert str(error.value).startswith(message)


def test_a_span_below_one_is_an_error():
    with pytest.raises(ValueError, match="--random-positions must be a positive integer"):
        build_model("t5", ["--random-positions", "0"])


def test_refusals_are_declared():
    assert {name for name in ENCODINGS if name not in TAKING} == {
        "none", "shape", "diet_abs_lin", "fire", "cope", "fox", "path", "stickbreaking"}
    assert get_encoding("tupe_r").random_positions_refusal(
        encoding_values("tupe_r", tupe_reset_first=True)) is not None
