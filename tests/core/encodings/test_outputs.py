"""A user's encoding whose method returns another shape or dtype than its kind documents is
a ``ValueError`` at the first call that returns it, naming the encoding's class, the method,
what it returned and what the kind expects, in the attention layers of
``fairseq_posenc.nn`` and in ``fairseq_posenc.testing.check_encoding``; the same encoding
returning the documented result runs, so that each error is the mistake's.

The expected messages are written out here from the shapes the kinds' docstrings give
(``fairseq_posenc.nn.PairBias.pair_bias``: ``(B or 1, H, q_len, k_len)``, ...), for the
call each test makes: not computed by the code under test.
"""

from __future__ import annotations

import re
from typing import Optional

import pytest
import torch
from torch import Tensor, nn

from fairseq_posenc.core.encodings import ENCODINGS
from fairseq_posenc.core.encodings.kinds import ContentBias
from fairseq_posenc.nn import (DecodingCache, DistanceBias, LowRank, PairBias, PositionContext,
                               PositionalSelfAttention, Rotation, register_encoding)
from fairseq_posenc.testing import check_encoding

D, H, B = 8, 2, 3


# -- a correct encoding of each kind, and a mistake in each ----------------------------------

class Pairs(PairBias):
    """``b_h[p_i, p_j]`` from an ``(H, n, n)`` table, ``p`` counting real tokens."""

    name = "test_outputs_pairs"

    def __init__(self, *, num_heads: int, max_positions: int) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(num_heads, max_positions, max_positions))

    def keys(self, positions: Tensor, q_offset: int) -> Tensor:
        """The keys' positions: every position of the call, the cached ones included."""
        return positions

    def pair_bias(self, q_len: int, k_len: int, q_offset: int,
                  key_padding_mask: Optional[Tensor], ctx: PositionContext) -> Tensor:
        positions = ctx.real_positions(key_padding_mask, k_len, self.table.device)
        queries, keys = positions[:, q_offset:], self.keys(positions, q_offset)
        return self.table[:, queries[:, :, None], keys[:, None, :]].transpose(0, 1)


class OwnKeysPairs(Pairs):
    """Mistake: the keys of this call only, not the cached ones before them."""

    name = "test_outputs_own_keys_pairs"

    def keys(self, positions, q_offset):
        return positions[:, q_offset:]


class MaskPairs(Pairs):
    """Mistake: a bool mask of the pairs to keep, where a bias is asked for."""

    name = "test_outputs_mask_pairs"

    def pair_bias(self, q_len, k_len, q_offset, key_padding_mask, ctx):
        return super().pair_bias(q_len, k_len, q_offset, key_padding_mask, ctx) > 0


class Slopes(DistanceBias):
    """``-s_h |r|``, a slope per head."""

    name = "test_outputs_slopes"

    def __init__(self, *, num_heads: int) -> None:
        super().__init__()
        self.slope = nn.Parameter(torch.linspace(0.5, 1.0, num_heads))

    def distances(self, r_lo: int, r_hi: int) -> Tensor:
        return torch.arange(r_lo, r_hi + 1, dtype=self.slope.dtype)

    def distance_bias(self, r_lo: int, r_hi: int) -> Tensor:
        return -self.slope[:, None] * self.distances(r_lo, r_hi).abs()


class SlopesOneShort(Slopes):
    """Mistake: ``arange(r_lo, r_hi)``, the last distance left out."""

    name = "test_outputs_slopes_one_short"

    def distances(self, r_lo, r_hi):
        return torch.arange(r_lo, r_hi, dtype=self.slope.dtype)


class ThreeSlopes(Slopes):
    """Mistake: three heads, whatever the layer's number (a slope per head, hard-coded)."""

    name = "test_outputs_three_slopes"

    def __init__(self, *, num_heads: int) -> None:
        super().__init__(num_heads=3)


class SharedSlope(Slopes):
    """One slope for every head: a ``(1, R)`` table, which the kind allows."""

    name = "test_outputs_shared_slope"

    def distance_bias(self, r_lo, r_hi):
        return super().distance_bias(r_lo, r_hi)[:1]


class Factors(LowRank):
    """``P[h, p_i] . P[h, p_j]`` from an ``(H, n, 3)`` table."""

    name = "test_outputs_factors"

    def __init__(self, *, num_heads: int, max_positions: int) -> None:
        super().__init__()
        self.max_len = max_positions
        self.p = nn.Parameter(torch.randn(num_heads, max_positions, 3))

    def factors(self, length: int, ctx: PositionContext) -> tuple[Tensor, Tensor]:
        return self.p[:, :length], self.p[:, :length]


class HeadlessFactors(Factors):
    """Mistake: the factors of the first head alone, without the heads' dimension."""

    name = "test_outputs_headless_factors"

    def factors(self, length, ctx):
        return self.p[0, :length], self.p[0, :length]


class HalfTurns(Rotation):
    """The halves of each head's dimensions turned by ``p theta_i``, the angles in float64."""

    name = "test_outputs_half_turns"

    def __init__(self, *, head_dim: int) -> None:
        super().__init__()
        self.theta = 100.0 ** -torch.linspace(0, 1, head_dim // 2, dtype=torch.float64)

    def turned(self, x: Tensor, q_offset: int) -> Tensor:
        positions = torch.arange(q_offset, q_offset + x.size(-2), dtype=torch.float64)
        angles = positions[:, None] * self.theta
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)

    def rotate_qk(self, q, k, q_offset, ctx, q_scale=1.0):
        return self.turned(q * q_scale, q_offset), self.turned(k, q_offset)


class Float32Turns(HalfTurns):
    """Mistake: the rotation computed in float32 and not cast back to the model's dtype."""

    name = "test_outputs_float32_turns"

    def turned(self, x, q_offset):
        return super().turned(x.float(), q_offset)


class KeyScores(ContentBias):
    """``w_h . k_j`` for every query: ``(B, H, 1, k_len)``."""

    name = "test_outputs_key_scores"

    def __init__(self, *, num_heads: int, head_dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(num_heads, head_dim))

    def logit_bias(self, q, k, q_offset, ctx):
        return torch.einsum("bhkd,hd->bhk", k, self.weight.to(k.dtype)).unsqueeze(2)


class KeyScoresWithoutQueries(KeyScores):
    """Mistake: ``(B, H, k_len)``, without the queries' dimension."""

    name = "test_outputs_key_scores_without_queries"

    def logit_bias(self, q, k, q_offset, ctx):
        return super().logit_bias(q, k, q_offset, ctx)[:, :, 0]


CORRECT = (Pairs, Slopes, SharedSlope, Factors, HalfTurns, KeyScores)
MISTAKES = (OwnKeysPairs, MaskPairs, SlopesOneShort, ThreeSlopes, HeadlessFactors,
            Float32Turns, KeyScoresWithoutQueries)


@pytest.fixture(scope="module", autouse=True)
def registered():
    """Every encoding above registered for this module's tests, removed afterwards."""
    try:
        for cls in CORRECT + MISTAKES:
            register_encoding(cls)
        yield
    finally:
        for cls in CORRECT + MISTAKES:
            ENCODINGS.pop(cls.name, None)


def layer(cls: type, causal: bool = True) -> PositionalSelfAttention:
    return PositionalSelfAttention(D, H, cls.name, causal=causal, max_len=16).double().eval()


def whole(attn: PositionalSelfAttention) -> Tensor:
    """One forward of 5 positions."""
    return attn(torch.randn(B, 5, D, dtype=torch.float64))


def after_one_step(attn: PositionalSelfAttention) -> Tensor:
    """Position 0 through a cache, then positions 1..5 at once: 5 queries, 6 keys."""
    x, cache = torch.randn(B, 6, D, dtype=torch.float64), DecodingCache()
    attn(x[:, :1], cache=cache)
    return attn(x[:, 1:], cache=cache)


def named(cls: type, method: str) -> str:
    return f"{__name__}.{cls.__qualname__}.{method}"


# (the mistake, the encoding without it, the call, the message: what the kind documents)
CASES = [
    (OwnKeysPairs, Pairs, after_one_step,
     f"{named(OwnKeysPairs, 'pair_bias')} returned shape (1, 2, 5, 5), expected (B=3 or 1, "
     "H=2 or 1, q_len=5, k_len=6) or without its first dimension (PairBias.pair_bias says "
     "what each dimension is)"),
    (MaskPairs, Pairs, whole,
     f"{named(MaskPairs, 'pair_bias')} returned a tensor of dtype torch.bool, expected a "
     "floating-point dtype: a term of the logits (a bool or integer mask would be read as "
     "the numbers 0 and 1, not as a mask)"),
    (SlopesOneShort, Slopes, whole,
     f"{named(SlopesOneShort, 'distance_bias')} returned shape (2, 8), expected (H, "
     "r_hi - r_lo + 1 = 9) (DistanceBias.distance_bias says what each dimension is)"),
    (ThreeSlopes, SharedSlope, whole,
     f"{named(ThreeSlopes, 'distance_bias')} gives its table expanded to the call's pairs of "
     "shape (3, 5, 5), expected (B=3 or 1, H=2 or 1, q_len=5, k_len=5) or without its first "
     "dimension (DistanceBias.distance_bias says what each dimension is)"),
    (HeadlessFactors, Factors, whole,
     f"{named(HeadlessFactors, 'factors')} returned P_Q of shape (5, 3), expected (H, "
     "n >= 5, d_p) (LowRank.factors says what each dimension is)"),
    (Float32Turns, HalfTurns, whole,
     f"{named(Float32Turns, 'rotate_qk')} returned the queries of dtype torch.float32, "
     "expected torch.float64, that of the tensor it was given (the keys are cached, and both "
     "enter one product)"),
    (KeyScoresWithoutQueries, KeyScores, whole,
     f"{named(KeyScoresWithoutQueries, 'logit_bias')} returned shape (3, 2, 5), expected "
     "broadcastable to (B=3, H=2, q_len=5, k_len=5) (ContentBias.logit_bias says what each "
     "dimension is)"),
]


@pytest.mark.parametrize("mistake,correct,call,message", CASES,
                         ids=[case[0].__name__ for case in CASES])
def test_a_result_the_kind_does_not_document_is_refused_at_the_first_call(mistake, correct,
                                                                          call, message):
    torch.manual_seed(0)
    assert call(layer(correct)).shape[-1] == D
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        call(layer(mistake))


@pytest.mark.parametrize("mistake,message", [
    (OwnKeysPairs, "pair_bias returned shape (1, 2, 1, 1), expected (B=3 or 1, H=2 or 1, "
                   "q_len=1, k_len=2)"),
    (SlopesOneShort, "distance_bias returned shape (2, 398), expected (H, r_hi - r_lo + 1 = "
                     "399)"),
], ids=["pair_bias", "distance_bias"])
def test_check_encoding_reports_it_as_the_attention_does(mistake, message):
    """``check_encoding``'s first call is the full forward of the 200 positions its
    decoder then decodes (distances -199 .. 199); ``OwnKeysPairs`` is right at step 0 (one
    query, one key, both the call's) and wrong from step 1 on."""
    with pytest.raises(ValueError, match=re.escape(f"{__name__}.{mistake.__qualname__}."
                                                   f"{message}")):
        check_encoding(mistake.name)


def test_every_kind_that_the_tests_use_is_checked_correct_by_check_encoding():
    """The encodings without the mistakes pass every check: the errors above are the
    mistakes'."""
    for cls in CORRECT:
        check_encoding(cls.name)
