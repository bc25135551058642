"""``diet_abs_lin`` (DIET eq. (4)) against a naive loop, and what its decoder uses."""

from __future__ import annotations

import math

import pytest
import torch

from fairseq_posenc.plugin.attention import PositionalMultiheadAttention
from fairseq_posenc.core.encodings import PositionScope
from fairseq_posenc.core.encodings.diet_abs import DietAbs
from fairseq_posenc.core.encodings.diet_abs_lin import DietAbsLin
from tests.support.model_utils import build_model, encoding_values

TOL = 1e-9


def lin_attention(k: int, rank: int, max_len: int = 12, embed_dim: int = 8, heads: int = 2):
    torch.manual_seed(0)
    attn = PositionalMultiheadAttention(embed_dim, heads)
    [enc] = DietAbsLin.build_stack(
        encoding_values("diet_abs_lin", diet_abs_lin_k=k, diet_abs_lin_rank=rank), 1,
        num_heads=heads, head_dim=embed_dim // heads, causal=False, max_positions=max_len)
    with torch.no_grad():
        for p in [*enc.parameters(), *attn.parameters()]:
            p.normal_(0.0, 0.7)
    attn.attach(enc, PositionScope())
    attn.encoding_module = enc
    return attn.double().eval(), enc.double()


@torch.no_grad()
def naive_lin(attn, enc, x, pad):
    """Eq. (4) element by element: (E X)_m = sum over real tokens j of E[m, pos(j)] X_j."""
    T, B, C = x.shape
    H, D = attn.num_heads, attn.head_dim
    E, P_Q, P_K = enc.e, enc.tables.p_q, enc.tables.p_k
    out = torch.zeros(T, B, C, dtype=x.dtype)
    for b in range(B):
        real = [j for j in range(T) if not pad[b, j]]
        pos = {j: n for n, j in enumerate(real)}
        ex = [sum(E[m, pos[j]] * x[j, b] for j in real) for m in range(E.size(0))]
        keys = [attn.k_proj(row) for row in ex]
        values = [attn.v_proj(row) for row in ex]
        for i in real:
            q = attn.q_proj(x[i, b])
            z = torch.zeros(C, dtype=x.dtype)
            for h in range(H):
                sl = slice(h * D, (h + 1) * D)
                e = [float(q[sl] @ key[sl]) / math.sqrt(D)
                     + sum(float(P_Q[h, pos[i], d] * P_K[h, m, d]) for d in range(P_Q.size(-1)))
                     for m, key in enumerate(keys)]
                top = max(e)
                w = [math.exp(v - top) for v in e]
                for wm, value in zip(w, values):
                    z[sl] += wm / sum(w) * value[sl]
            out[i, b] = attn.out_proj(z)
    return out


@pytest.mark.parametrize("k,rank", [(3, 4), (6, 2)])
def test_encoder_attention_with_padding(k, rank):
    attn, enc = lin_attention(k, rank)
    T, B = 5, 3
    x = torch.randn(T, B, 8, dtype=torch.float64)
    pad = torch.zeros(B, T, dtype=torch.bool)
    pad[0, :2] = True  # left padding, as fairseq batches sources
    pad[2, :1] = True
    with attn.scope.open():
        out, _ = attn(x, x, x, key_padding_mask=pad, need_weights=False)
    ref = naive_lin(attn, enc, x, pad)
    assert (out - ref).masked_fill(pad.t()[..., None], 0).abs().max() < TOL


def test_decoder_uses_diet_abs_and_encoder_projects():
    model, _ = build_model("diet_abs_lin", ["--diet-abs-lin-k", "5"])
    enc_terms = [layer.self_attn.encoding for layer in model.encoder.layers]
    dec_terms = [layer.self_attn.encoding for layer in model.decoder.layers]
    assert all(isinstance(t, DietAbsLin) for t in enc_terms)
    assert enc_terms[0].tables is enc_terms[1].tables  # P_Q, P_K layer-shared by default
    assert enc_terms[0].e is not enc_terms[1].e  # E per layer
    assert all(type(t) is DietAbs for t in dec_terms) and dec_terms[0] is dec_terms[1]
    assert dec_terms[0].p_k.shape == dec_terms[0].p_q.shape  # n x d_p: no projection


def test_keys_are_projected_to_k_rows():
    model, d = build_model("diet_abs_lin", ["--diet-abs-lin-k", "5"])
    src = torch.randint(d.nspecial, 40, (2, 9))
    with torch.no_grad():
        out = model.encoder.layers[0].self_attn(
            model.encoder.forward_embedding(src)[0].transpose(0, 1), None, None,
            need_weights=True)[1]
    assert out.shape == (2, 9, 5)  # (B, q_len, k): attention over k projected keys
