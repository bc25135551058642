"""Properties the encodings share: the fused and explicit attention paths give the same
outputs, and relative terms do not change when every position shifts. float64,
tolerance 1e-9.
"""

from __future__ import annotations

import pytest
import torch

from fairseq_posenc.core.encodings import PositionContext, PositionKind
from tests.support.model_utils import build_attention
from tests.support.naive import TOL


@pytest.mark.parametrize("encoding,flags", [("t5", {}), ("diet_rel", {}), ("shaw", {}),
                                            ("shaw", {"shaw_no_value": True}),
                                            ("alibi", {}), ("rope", {}), ("huang4", {}),
                                            ("tupe_a", {}), ("tupe_r", {}), ("at5", {}),
                                            ("at5_nob", {}), ("xl", {}), ("fire", {}),
                                            ("xpos", {"xpos_scale_base": 4.0})])
def test_fused_and_explicit_paths_agree(encoding, flags):
    attn = build_attention(encoding, causal=False, **flags)
    x = torch.randn(6, 3, 8, dtype=torch.float64)
    pad = torch.zeros(3, 6, dtype=torch.bool)
    pad[1, :2] = True
    with attn.scope.open():
        fused, _ = attn(x, x, x, key_padding_mask=pad, need_weights=False)
        explicit, weights = attn(x, x, x, key_padding_mask=pad, need_weights=True)
    assert (fused - explicit).abs().max() < TOL
    assert weights.shape == (3, 6, 6) and torch.all(weights[1, :, :2] == 0)


@pytest.mark.parametrize("encoding,flags", [("t5", {}), ("diet_rel", {}), ("shaw", {}),
                                            ("alibi", {}), ("t5_nob", {}), ("huang4", {}),
                                            ("huang3", {}), ("at5", {}), ("at5_nob", {}),
                                            ("xl", {}), ("cope", {})])
def test_relative_terms_are_shift_invariant(encoding, flags):
    """Shifting every position by s leaves the position term of each (i, j) unchanged."""
    attn = build_attention(encoding, causal=False, max_positions=40, **flags)
    enc, n, s = attn.encoding, 6, 5
    q = torch.randn(1, 2, n + s, attn.head_dim, dtype=torch.float64)
    k = torch.randn(1, 2, n + s, attn.head_dim, dtype=torch.float64)

    def term(q, k, ctx):  # huang3's term replaces q.k; the others add to it
        if enc.kind is PositionKind.CONTENT_LOGITS:
            return enc.content_logits(q, k, 0, ctx)
        if enc.kind is PositionKind.DISTANCE_BIAS:
            return enc.expanded(q.size(-2), k.size(-2), 0, ctx)
        return enc.logit_bias(q, k, 0, ctx)

    ctx = PositionContext()
    shifted = term(q, k, ctx)[..., s:, s:]
    plain = term(q[:, :, s:], k[:, :, s:], ctx)
    assert (shifted - plain).abs().max() < TOL
