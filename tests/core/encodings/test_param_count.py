"""scripts/param_count.py against the closed-form counts of Huang et al. 2020, Table 1,
and docs/conventions.md ("Parameter counts"), written per stack: ``L`` layers, ``H``
heads, head dimension ``d``, ``n`` positions (source and target differ here, to catch a
mix-up), causal decoders keeping the ``j <= i`` half of relative tables."""

from __future__ import annotations

import pytest

from fairseq_posenc.tools import params as param_count

L, H, D, N_SRC, N_TGT, K = 2, 4, 32, 40, 30, 16  # tiny: 128 wide, 4 heads
FLAGS = ["--max-source-positions", str(N_SRC), "--max-target-positions", str(N_TGT)]
PAD = 1  # fairseq's learned table has n + padding_idx + 1 rows


def both(enc, dec):
    return enc(N_SRC) + dec(N_TGT)


EXPECTED = {
    "sinusoidal": 0,
    "shape": 0,  # sinusoids at shifted positions
    "none": 0,
    "alibi": 0,
    "rope": 0,
    "sandwich": 0,
    # KERPLE: r1, r2 per head, one pair per stack shared by its layers
    "kerple_log": 2 * 2 * H,
    "kerple_power": 2 * 2 * H,
    "xpos": 0,
    "learned": both(lambda n: (n + PAD + 1) * 128,
                    lambda n: (n + PAD + 1) * 128),
    "shaw": L * 2 * (2 * K + 1) * D + L * 2 * (K + 1) * D,  # key + value tables per layer
    "t5": 2 * H * 32,  # one table of 32 buckets per stack
    "t5_nob": both(lambda n: H * (2 * n - 1), lambda n: H * n),
    # AT5: per stack, H MLPs 1-32-4-1 (2*32 + 32*4 + 2*4 + 1 = 201) and H slopes per sign;
    # the causal decoder has the r <= 0 sign only. NoB: slopes -> a table over distances.
    "at5": 2 * H * (201 + 1) + H * (201 + 1),
    "at5_nob": both(lambda n: H * (2 * n - 1) + 2 * H * 201, lambda n: H * n + H * 201),
    "diet_rel": both(lambda n: L * H * (2 * n - 1), lambda n: L * H * n),
    "diet_abs": both(lambda n: H * 2 * n * D, lambda n: H * 2 * n * D),  # layer-shared, d_p = d
    # encoder: E (k x n) per layer, P_Q (n x d), P_K (k x d) layer-shared; decoder: diet_abs
    "diet_abs_lin": L * 32 * N_SRC + H * (N_SRC + 32) * D + H * 2 * N_TGT * D,
    # TUPE, per stack (layer-shared): p (n x d), LayerNorm (2d), U_Q, U_K (d x d + d each)
    "tupe_a": both(lambda n: n * 128 + 2 * 128 + 2 * (128 * 128 + 128),
                   lambda n: n * 128 + 2 * 128 + 2 * (128 * 128 + 128)),
    "tupe_r": both(lambda n: n * 128 + 2 * 128 + 2 * (128 * 128 + 128) + H * 32,  # + buckets
                   lambda n: n * 128 + 2 * 128 + 2 * (128 * 128 + 128) + H * 32),
    "huang1": both(lambda n: L * H * n, lambda n: L * H * n),  # Table 1: m h n
    "huang2": both(lambda n: L * H * (2 * n - 1), lambda n: L * H * n),  # m h (2n-1)
    "huang3": both(lambda n: L * H * (2 * n - 1) * D, lambda n: L * H * n * D),  # m h (2n-1) d
    "xl": 2 * (L * 128 * 128 + 2 * H * D),  # per stack: W_R (d x d) per layer, one u, v pair
    "huang4": both(lambda n: L * H * (2 * n - 1) * D, lambda n: L * H * n * D),  # m h (2n-1) d
    # FIRE, per layer: the MLP 1 -> 32 -> H (2 * 32 + 32 H + H), c and the multiplier of L
    "fire": 2 * L * (2 * 32 + 32 * H + H + 2),
    # CoPE, per layer: d_h x npos (npos = n + 1); the encoder's table has both signs
    "cope": both(lambda n: L * D * (2 * n + 1), lambda n: L * D * (n + 1)),
    # FoX, per layer: w (G x 128) and b (G) of the gates, G = 2H in the encoder (one set
    # per direction), H in the decoder
    "fox": L * (2 * H * 128 + 2 * H) + L * (H * 128 + H),
    # decoders only (the encoder: sinusoidal). PaTH, per layer: the low-rank projection
    # 128 -> 32 -> 128, the depthwise convolution (128 channels x 3), beta's a (H x 128), b
    "path": L * (128 * 32 + 32 * 128 + 128 * 3 + H * 128 + H),
    # stick-breaking: no parameters (--stickbreaking-remainder bias: b_h per layer)
    "stickbreaking": 0,
}


@pytest.mark.parametrize("encoding", sorted(EXPECTED))
def test_parameters_added_over_sinusoidal(encoding):
    total, base = param_count.counts(f"transformer_tiny_{encoding}", FLAGS, vocab=100)
    assert total - base == EXPECTED[encoding]


@pytest.mark.parametrize("flags,expected", [
    (["--diet-rel-sharing", "layer"], both(lambda n: H * (2 * n - 1), lambda n: H * n)),
    (["--diet-rel-sharing", "head"], both(lambda n: L * (2 * n - 1), lambda n: L * n)),
    (["--pos-layers", "first"], both(lambda n: H * (2 * n - 1), lambda n: H * n)),
])
def test_diet_rel_sharing_counts(flags, expected):
    total, base = param_count.counts("transformer_tiny_diet_rel", FLAGS + flags, vocab=100)
    assert total - base == expected


@pytest.mark.parametrize("flags,expected", [
    (["--diet-abs-sharing", "none"], both(lambda n: L * H * 2 * n * D, lambda n: L * H * 2 * n * D)),
    (["--diet-abs-symmetric", "--diet-abs-rank", "8"], both(lambda n: H * n * 8, lambda n: H * n * 8)),
])
def test_diet_abs_options_counts(flags, expected):
    total, base = param_count.counts("transformer_tiny_diet_abs", FLAGS + flags, vocab=100)
    assert total - base == expected


@pytest.mark.parametrize("encoding,flags,expected", [
    ("fire", ["--fire-shared", "--fire-mlp-width", "8"], 2 * (2 * 8 + 8 * H + H + 2)),
    ("cope", ["--cope-shared", "--cope-npos", "10"], D * 19 + D * 10),
])
def test_fire_and_cope_options_counts(encoding, flags, expected):
    total, base = param_count.counts(f"transformer_tiny_{encoding}", FLAGS + flags, vocab=100)
    assert total - base == expected


@pytest.mark.parametrize("arch,flags", [
    ("learned", ["--random-positions", "30"]),  # the same table, read at drawn positions
    ("t5", ["--random-positions", "500"]),
])
def test_random_positions_add_no_parameters(arch, flags):
    plain = param_count.counts(f"transformer_tiny_{arch}", FLAGS, vocab=100)
    assert param_count.counts(f"transformer_tiny_{arch}", FLAGS + flags, vocab=100) == plain


def test_every_encoding_is_counted():
    from fairseq_posenc.core.encodings import ENCODINGS

    assert set(EXPECTED) == set(ENCODINGS)
