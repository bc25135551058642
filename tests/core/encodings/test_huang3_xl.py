"""``huang3`` (Huang et al. 2020, eq. 15) and ``xl`` (Transformer-XL, Dai et al. 2019) against
naive per-(b, h, i, j) loops written from the papers' formulas, in float64."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch

from fairseq_posenc.core.encodings import PositionContext, get_encoding
from tests.support.batches import random_source
from tests.support.model_utils import build_attention, build_model, encoding_values
from tests.support.naive import TOL, naive_attention, run


def clip(r: int, k: int) -> int:
    return max(-k, min(k, r))


# --- huang3 ---------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("clip_k", [None, 2])
def test_huang3_attention(causal, clip_k):
    """Eq. 15: e_ij = sum_d q_id k_jd a_{j-i,d} / sqrt(d_h), a per head, r in [-K, K]."""
    attn = build_attention("huang3", causal=causal, max_positions=12, huang3_clip=clip_k)
    a = attn.encoding.rel_gate  # heads x (r = -K .. K; causal: -K .. 0) x d_h
    K = clip_k if clip_k else 11
    T, B, D = 7, 2, attn.head_dim
    assert a.shape == (2, K + 1 if causal else 2 * K + 1, D)
    x = torch.randn(T, B, 8, dtype=torch.float64)
    with torch.no_grad():
        keys = attn.k_proj(x).view(T, B, 2, D)

    def term(b, h, i, j, q):  # naive_attention adds q.k / sqrt(d_h) itself: take it back
        gated = sum(float(q[d]) * float(keys[j, b, h, d]) * float(a[h, clip(j - i, K) + K, d])
                    for d in range(D))
        return (gated - float(q @ keys[j, b, h])) / math.sqrt(D)

    want = naive_attention(attn, x, causal, term)
    assert (run(attn, x, causal) - want).abs().max() < TOL


@pytest.mark.parametrize("causal", [False, True])
def test_huang3_starts_as_standard_attention(causal):
    """a starts at 1 (docs/conventions.md: multiplicative methods start from plain attention)."""
    enc = get_encoding("huang3").build(encoding_values("huang3"), num_heads=2, head_dim=4,
                                       causal=causal, max_positions=10)
    assert all(torch.all(p == 1) for p in enc.parameters())
    attn = build_attention("huang3", causal=causal)
    x = torch.randn(6, 2, 8, dtype=torch.float64)
    attn.attach(enc.double(), attn.scope)
    with_gate = run(attn, x, causal)
    attn.attach(None, attn.scope)
    assert (with_gate - run(attn, x, causal)).abs().max() < TOL


# --- xl -------------------------------------------------------------------------------


def naive_xl_sinusoid(s: int, d: int) -> list[float]:
    """Transformer-XL's PositionalEmbedding: [sin(s / 10000^(2k/d))]_k then [cos(...)]_k."""
    angles = [s / 10000 ** (2 * k / d) for k in range(d // 2)]
    return [math.sin(a) for a in angles] + [math.cos(a) for a in angles]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("clamp", [None, 2])
def test_xl_attention(causal, clamp):
    """e_ij = (q_i.k_j + q_i.W_R R_{i-j} + u.k_j + v.W_R R_{i-j}) / sqrt(d_h), per head."""
    attn = build_attention("xl", causal=causal, xl_clamp_len=clamp)
    enc = attn.encoding
    w_r, u, v = enc.r_proj, enc.biases.u, enc.biases.v  # W_R: (out, in) like nn.Linear
    T, B, C, D = 7, 2, 8, attn.head_dim
    x = torch.randn(T, B, C, dtype=torch.float64)
    with torch.no_grad():
        keys = attn.k_proj(x).view(T, B, 2, D)

    def term(b, h, i, j, q):
        s = i - j if clamp is None else clip(i - j, clamp)
        r = naive_xl_sinusoid(s, C)
        proj = [sum(float(w_r[h * D + e, c]) * r[c] for c in range(C)) for e in range(D)]
        k = keys[j, b, h]
        return sum(float(q[e]) * proj[e] + float(u[h, e]) * float(k[e])
                   + float(v[h, e]) * proj[e] for e in range(D)) / math.sqrt(D)

    want = naive_attention(attn, x, causal, term)
    assert (run(attn, x, causal) - want).abs().max() < TOL


def test_xl_sinusoid_layout():
    from fairseq_posenc.core.encodings.xl import xl_sinusoid

    got = xl_sinusoid(torch.tensor([-3, 0, 5]), 10)
    want = torch.tensor([naive_xl_sinusoid(s, 10) for s in (-3, 0, 5)], dtype=torch.float64)
    assert (got - want).abs().max() < 1e-12


def test_xl_depends_on_relative_distance_only():
    """Shifting every position by s leaves the term of each (q_i, k_j) pair unchanged."""
    attn = build_attention("xl", causal=False, max_positions=40)
    enc, n, s = attn.encoding, 6, 5
    q, k = torch.randn(2, 1, 2, n + s, attn.head_dim, dtype=torch.float64).unbind(0)
    ctx = PositionContext()
    with torch.no_grad():
        shifted = enc.logit_bias(q, k, 0, ctx)[..., s:, s:]
        plain = enc.logit_bias(q[:, :, s:], k[:, :, s:], 0, ctx)
    assert (shifted - plain).abs().max() < TOL


@pytest.mark.parametrize("untie", [False, True])
def test_xl_query_biases_shared_by_the_stack_unless_untied(untie):
    model, _ = build_model("xl", ["--xl-untie-r"] if untie else [])
    for stack in (model.encoder, model.decoder):
        layers = list(stack.pos_encodings)
        assert len(layers) == 2 and layers[0].r_proj is not layers[1].r_proj
        assert (layers[0].biases is layers[1].biases) != untie
    assert model.encoder.pos_encodings[0].biases is not model.decoder.pos_encodings[0].biases


def test_xl_projected_table_once_per_layer_and_grown_while_decoding(monkeypatch):
    import fairseq_posenc.core.encodings.xl as xl

    calls = []
    original = xl.xl_sinusoid

    def counting(distances, dim):
        calls.append(len(distances))
        return original(distances, dim)

    monkeypatch.setattr(xl, "xl_sinusoid", counting)
    model, d = build_model("xl")
    src, lengths = random_source(d)
    with torch.no_grad():
        enc_out = model.encoder(src, lengths)
        model.decoder(torch.full((3, 5), d.eos()), enc_out)
        assert len(calls) == 4  # 2 layers x (encoder, decoder)
        calls.clear()
        tokens = torch.full((3, 40), 5)
        tokens[:, 0] = d.eos()
        state: dict = {}
        for step in range(1, 41):  # the decoder reads only the last token of each prefix
            model.decoder(tokens[:, :step], enc_out, incremental_state=state)
    # per layer once: the window grows ahead (geometrically, from 64 positions), so a
    # sentence of up to 64 tokens computes it at its first step only
    assert len(calls) == 2, calls


# --- parameter counts with options ----------------------------------------------------

_spec = importlib.util.spec_from_file_location(
    "param_count", Path(__file__).resolve().parents[3] / "scripts" / "param_count.py")
param_count = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(param_count)


@pytest.mark.parametrize("flags,expected", [
    ([], 2 * (2 * 128 * 128 + 2 * 4 * 32)),  # per stack: W_R per layer, one u, v pair
    (["--xl-untie-r"], 2 * 2 * (128 * 128 + 2 * 4 * 32)),  # u, v per layer
])
def test_xl_parameter_counts(flags, expected):
    total, base = param_count.counts("transformer_tiny_xl", flags, vocab=100)
    assert total - base == expected
