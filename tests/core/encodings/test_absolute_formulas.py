"""Absolute positions: DIET-abs's ``P_Q P_K^T`` at real (padding-aware) positions, the
gather of a pair table at real positions, and the input encodings' added rows, against
loops written from the papers (``support/naive.py``). float64, tolerance 1e-9.
"""

from __future__ import annotations

import pytest
import torch

from fairseq_posenc.core.positions import gather_absolute_pairs
from tests.support.model_utils import build_attention
from tests.support.naive import TOL, naive_attention, naive_sinusoid


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("flags", [{}, {"diet_abs_symmetric": True, "diet_abs_rank": 3},
                                   {"diet_abs_sharing": "head"}])
def test_diet_abs_attention_with_padding(causal, flags):
    """DIET eq. (1) with positions counted over real tokens: row 1 is left-padded by 2, so
    its i-th real token uses row/column i of P_Q P_K^T."""
    attn = build_attention("diet_abs", causal=causal, max_positions=9, **flags)
    p_q = attn.encoding.p_q
    p_k = p_q if flags.get("diet_abs_symmetric") else attn.encoding.p_k
    T, pad = 7, 2
    x = torch.randn(T, 2, 8, dtype=torch.float64)
    padding = torch.zeros(2, T, dtype=torch.bool)
    if not causal:
        padding[1, :pad] = True

    def position(b, i):
        return i - pad if (not causal and b == 1) else i

    def term(b, h, i, j, q):
        hh = 0 if flags.get("diet_abs_sharing") == "head" else h
        return float(p_q[hh, max(position(b, i), 0)] @ p_k[hh, max(position(b, j), 0)])

    want = naive_attention(attn, x, causal, term, key_padding=padding)
    mask = torch.triu(torch.full((T, T), float("-inf"), dtype=x.dtype), 1) if causal else None
    with attn.scope.open():
        got, _ = attn(x, x, x, key_padding_mask=padding if padding.any() else None,
                      attn_mask=mask, need_weights=False)
    rows = slice(None) if causal else slice(pad, None)  # padded queries are never used
    assert (got[rows, 1] - want[rows, 1]).abs().max() < TOL
    assert (got[:, 0] - want[:, 0]).abs().max() < TOL


@pytest.mark.parametrize("encoding", ["sinusoidal", "learned", "none", "shape"])
def test_input_position_term(encoding):
    """What the input encoding adds to the scaled token embedding, at real positions:
    the k-th real token gets row k + padding_idx + 1 (fairseq's numbering), whatever the
    padding of its row (shape: unshifted, outside a training forward)."""
    from tests.support.model_utils import build_model

    model, d = build_model(encoding)
    src = torch.randint(d.nspecial, 30, (2, 6))
    src[0, :2] = d.pad()  # left padding
    for stack, tokens in ((model.encoder, src), (model.decoder, src.flip(1))):  # right pad
        with torch.no_grad():
            tok = stack.embed_scale * stack.embed_tokens(tokens)
            if stack is model.encoder:
                added = stack.forward_embedding(tokens)[0] - tok
            else:
                added = (stack.embed_positions(tokens) if stack.embed_positions is not None
                         else torch.zeros_like(tok))
        for b in range(tokens.size(0)):
            real = [t for t in range(tokens.size(1)) if tokens[b, t] != d.pad()]
            for k, t in enumerate(real):
                p = k + d.pad() + 1
                if encoding in ("sinusoidal", "shape"):
                    want = torch.tensor(naive_sinusoid(p, tok.size(-1)))
                elif encoding == "learned":
                    want = stack.embed_positions.weight[p]
                else:
                    want = torch.zeros(tok.size(-1))
                assert (added[b, t] - want).abs().max() < 1e-5, (encoding, b, t)


def test_gather_absolute_pairs_reads_real_positions():
    """out[b, h, i, j] = table[h, pos[b, q_offset + i], pos[b, j]], and its gradient."""
    table = torch.randn(2, 6, 6, dtype=torch.float64, requires_grad=True)
    positions = torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4], [0, 0, 1, 2, 3]])
    got = gather_absolute_pairs(table, positions, 1)
    assert got.shape == (3, 2, 4, 5)
    weights = torch.randn(got.shape, dtype=torch.float64)
    (got * weights).sum().backward()
    want_grad = torch.zeros_like(table)
    for b in range(3):
        for h in range(2):
            for i in range(4):
                for j in range(5):
                    pi, pj = int(positions[b, 1 + i]), int(positions[b, j])
                    assert got[b, h, i, j] == table[h, pi, pj]
                    want_grad[h, pi, pj] += weights[b, h, i, j]
    assert (table.grad - want_grad).abs().max() < TOL
