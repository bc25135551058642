"""p-RoPE, ``--rope-fraction P`` (Barbero et al., ICLR 2025, sec. 6 and its ``apply_p_rope``
listing), against the definition written out in float64: the ``floor(P d_h / 2)``
highest-frequency pairs turn by ``p * 10000^(-2i/d_h)`` (RoPE's own frequencies) and the
others not at all; xPos keeps every pair's decay ``zeta_i^((n - m)/gamma)``; the fused
rotation's table (the planner's CUDA path, its kernel replaced here by the complex product:
no Triton on CPU) has ``cos 1, sin 0`` on unrotated pairs; the flag's checks."""

from __future__ import annotations

import math

import pytest
import torch

from fairseq_posenc.core import kernels
from fairseq_posenc.core.context import PositionContext
from fairseq_posenc.core.encodings.rope import Rope, rotate_pairs
from fairseq_posenc.core.rope_scaling import RopeScaling
from fairseq_posenc.plugin import build
from tests.support.model_utils import build_attention, encoding_values
from tests.support.naive import TOL, naive_attention, run, turn_pairs


def paper_angles(p: int, d: int, fraction: float) -> list[float]:
    """Pair ``i`` of ``d / 2`` turns by ``p theta_i`` if it is among the rotated highest
    frequencies (``i < floor(P d / 2)``), else not."""
    rotated = math.floor(fraction * d / 2)
    return [p * 10000.0 ** (-2 * i / d) if i < rotated else 0.0 for i in range(d // 2)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.6, 0.75, 1.0])
def test_attention_rotates_the_highest_pairs_only(fraction, causal):
    """d_h = 12 (6 pairs): P = 0.6 rounds 3.6 pairs down to 3, 0.25 1.5 to 1."""
    attn = build_attention("rope", causal=causal, embed_dim=24, num_heads=2,
                           rope_fraction=fraction)
    x = torch.randn(7, 2, 24, dtype=torch.float64)
    want = naive_attention(attn, x, causal, lambda b, h, i, j, q: 0.0,
                           rotate=lambda vec, p: turn_pairs(vec, paper_angles(p, 12, fraction)))
    assert (run(attn, x, causal) - want).abs().max() < TOL


def test_rotated_pairs_keep_ropes_frequencies_not_respaced():
    rope = Rope(head_dim=16, rope_fraction=0.5)
    want = [10000.0 ** (-2 * i / 16) if i < 4 else 0.0 for i in range(8)]
    assert rope.theta.tolist() == pytest.approx(want, rel=1e-15, abs=0)


def test_xpos_keeps_the_decay_of_unrotated_pairs():
    """P = 0.5, d_h = 8: pairs 0, 1 turn and decay, pairs 2, 3 only decay."""
    attn = build_attention("xpos", causal=False, embed_dim=8, num_heads=1, rope_fraction=0.5)
    q, k = torch.randn(2, 1, 1, 5, 8, dtype=torch.float64).unbind(0)
    rq, rk = attn.encoding.rotate_qk(q, k, 0, attn.scope.context)
    for n, m in ((4, 0), (1, 3)):
        decay = [((2 * i / 8 + 0.4) / 1.4) ** ((n - m) / 512) for i in range(4)]
        a = turn_pairs(q[0, 0, n], paper_angles(n, 8, 0.5))
        b = turn_pairs(k[0, 0, m], paper_angles(m, 8, 0.5))
        want = sum(decay[i] * float(a[2 * i:2 * i + 2] @ b[2 * i:2 * i + 2]) for i in range(4))
        assert abs(float(rq[0, 0, n] @ rk[0, 0, m]) - want) < TOL


def test_a_rescaling_applies_to_the_rotated_pairs_only():
    rope = Rope(head_dim=16, rope_scaling=RopeScaling("linear", 2.0), rope_fraction=0.5)
    want = [10000.0 ** (-2 * i / 16) / 2 if i < 4 else 0.0 for i in range(8)]
    assert rope.theta.tolist() == pytest.approx(want, rel=1e-15, abs=0)


def test_the_fused_paths_table_leaves_unrotated_pairs_as_they_are(monkeypatch):
    """Where ``auto`` fuses (forced), the kernel receives cos 1, sin 0 for pairs 2, 3 and
    RoPE's numbers for pairs 0, 1; a decoding step's matrix is the identity there."""
    from fairseq_posenc.core.kernels import rotary

    tables = []
    monkeypatch.setattr(kernels, "auto_fuses", lambda *args: True)
    monkeypatch.setattr(rotary, "rotate", lambda x, rot: tables.append(rot) or
                        rotate_pairs(x, rot))
    rope = Rope(head_dim=8, rope_fraction=0.5)
    x = torch.randn(2, 3, 7, 8)
    full, _ = rope.rotate_qk(x, x, 0, PositionContext())
    table = tables[0].to(torch.complex128)
    assert torch.equal(table[:, 2:], torch.ones(7, 2, dtype=torch.complex128))
    p = torch.arange(7, dtype=torch.float64)[:, None]
    want = torch.polar(torch.ones(7, 2, dtype=torch.float64),
                       p * torch.tensor([1.0, 10000.0 ** -0.25], dtype=torch.float64))
    assert (table[:, :2] - want).abs().max() < 1e-6
    step, _ = rope.rotate_qk(x[:, :, 6:], x[:, :, 6:], 6, PositionContext(incremental=True))
    assert torch.equal(step[..., 4:], x[:, :, 6:, 4:])
    assert torch.allclose(step, full[:, :, 6:], atol=1e-6)


@pytest.mark.parametrize("encoding", ["rope", "xpos"])
@pytest.mark.parametrize("value,message", [
    (1.5, r"--rope-fraction is the fraction of frequency pairs that rotate: 0 <= P <= 1, "
          r"got 1.5"),
    (float("nan"), r"0 <= P <= 1, got nan"),
    (-0.1, r"--rope-fraction must be at least 0, got -0.1"),
])
def test_bad_fractions_name_the_flag(encoding, value, message):
    with pytest.raises(ValueError, match=message):
        encoding_values(encoding, rope_fraction=value)


def test_one_flag_for_both_encodings_and_the_default_is_rope():
    args = build.model_args("transformer_tiny_xpos", ["--rope-fraction", "0.25"])
    assert args.rope_fraction == 0.25
    assert build.model_args("transformer_tiny_rope").rope_fraction == 1.0
    assert Rope(head_dim=16).theta.tolist() == pytest.approx(
        [10000.0 ** (-2 * i / 16) for i in range(8)], rel=1e-15, abs=0)


@pytest.mark.parametrize("encoding", ["rope", "xpos"])
def test_the_model_configuration_carries_it_to_every_layer(encoding):
    """A checkpoint records its model's flags: the model built from them (as at
    translation) rotates floor(0.6 * 8 / 2) = 2 of the 4 pairs of the test model's heads
    (d_h = 8)."""
    from tests.support.model_utils import build_model

    model, _ = build_model(encoding, ["--rope-fraction", "0.6"])
    ropes = [m for m in model.modules() if isinstance(m, Rope)]
    assert len(ropes) == 2 and model.args.rope_fraction == 0.6  # one per stack
    for rope in ropes:
        assert rope.theta.numel() == 4
        assert rope.theta[:2].gt(0).all() and not rope.theta[2:].any()
