"""``fairseq_posenc.testing.check_encoding``: every built-in attention-level encoding passes
it, with its defaults and with other options, a window of tables that a decoding context
keeps grown anew by a step past 190 positions; each of its checks fails, naming
itself, on an encoding broken in the way that check exists for, a fault from position 70
on included; a term that is inf where a mask adds -inf is reported as values that are not
finite, at the first one.

The broken encodings are small test-only encodings, registered by the fixture
``own_encodings`` for the tests that ask for it and removed afterwards: beside each, the
same encoding without the fault (``absolute_pairs``, ``key_scores``) passes, so that each
failure is the fault's.
"""

from __future__ import annotations

import re
from typing import Optional

import pytest
import torch
from torch import Tensor, nn

import fairseq_posenc.testing as testing
from fairseq_posenc.core.encodings import ENCODINGS
from fairseq_posenc.core.encodings.kinds import ContentBias
from fairseq_posenc.core.positions import real_positions
from fairseq_posenc.nn import PairBias, PositionContext, encoding_names, register_encoding
from fairseq_posenc.testing import check_encoding


# -- test-only encodings: one correct form of each, and the faults ----------------------------

class AbsolutePairs(PairBias):
    """``b_h[pos_i, pos_j]`` from an ``(H, n, n)`` table over absolute positions, ``pos``
    counting real tokens: correct. The table starts at zero, as many tables do."""

    name = "test_absolute_pairs"

    def __init__(self, *, num_heads: int, max_positions: int, causal: bool) -> None:
        super().__init__()
        self.causal = causal
        self.table = nn.Parameter(torch.zeros(num_heads, max_positions, max_positions))

    def positions(self, key_padding_mask: Optional[Tensor], k_len: int) -> Tensor:
        """``(B or 1, k_len)``: every key's position."""
        return real_positions(key_padding_mask, k_len, self.table.device)

    def query_positions(self, positions: Tensor, q_len: int, q_offset: int) -> Tensor:
        """The queries are the last ``q_len`` of the keys."""
        return positions[:, q_offset:]

    def pair_bias(self, q_len: int, k_len: int, q_offset: int,
                  key_padding_mask: Optional[Tensor], ctx: PositionContext) -> Tensor:
        keys = self.positions(key_padding_mask, k_len)
        queries = self.query_positions(keys, q_len, q_offset)
        return self.table[:, queries[:, :, None], keys[:, None, :]].transpose(0, 1)


class IgnoresOffset(AbsolutePairs):
    """Fault: the queries read rows ``0 .. q_len - 1``, as if they came first: a decoding
    step (one query after the cached ones) reads row 0."""

    name = "test_ignores_offset"

    def query_positions(self, positions: Tensor, q_len: int, q_offset: int) -> Tensor:
        return positions[:, :q_len]


class IgnoresPadding(AbsolutePairs):
    """Fault: positions are the indices, padding counted: a left-padded row reads rows
    further down the table than the same row alone."""

    name = "test_ignores_padding"

    def positions(self, key_padding_mask: Optional[Tensor], k_len: int) -> Tensor:
        return torch.arange(k_len, device=self.table.device)[None]


class IgnoresDecoderPadding(AbsolutePairs):
    """Fault: the causal form counts padding (the encoder's is correct)."""

    name = "test_ignores_decoder_padding"

    def positions(self, key_padding_mask: Optional[Tensor], k_len: int) -> Tensor:
        if self.causal:
            return torch.arange(k_len, device=self.table.device)[None]
        return super().positions(key_padding_mask, k_len)


class ShortStepRows(AbsolutePairs):
    """Fault: a decoding step reads its query's row from rows kept for the first 70
    positions, the last of them at every later position (a table sized once, at the start
    of decoding); the full forward reads them all."""

    name = "test_short_step_rows"

    def query_positions(self, positions: Tensor, q_len: int, q_offset: int) -> Tensor:
        queries = positions[:, q_offset:]
        return queries.clamp(max=69) if q_len == 1 else queries


class FutureInf(AbsolutePairs):
    """Fault: ``+inf`` at the pairs a causal mask removes (keys after the query), which the
    mask's ``-inf`` makes nan."""

    name = "test_future_inf"

    def pair_bias(self, q_len: int, k_len: int, q_offset: int,
                  key_padding_mask: Optional[Tensor], ctx: PositionContext) -> Tensor:
        bias = super().pair_bias(q_len, k_len, q_offset, key_padding_mask, ctx)
        later = torch.ones(q_len, k_len, dtype=torch.bool).triu(q_offset + 1)
        return bias.masked_fill(later, float("inf"))


class KeyScores(ContentBias):
    """``w_h . k_j`` added to every query's logit of key ``j``: a term that reads the keys,
    so its values depend on the batch; computed anew at every call: correct."""

    name = "test_key_scores"

    def __init__(self, *, num_heads: int, head_dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(num_heads, head_dim))

    def scores(self, k: Tensor) -> Tensor:
        """``(B, H, 1, k_len)``."""
        return torch.einsum("bhkd,hd->bhk", k, self.weight.to(k.dtype)).unsqueeze(2)

    def logit_bias(self, q: Tensor, k: Tensor, q_offset: int, ctx: PositionContext) -> Tensor:
        return self.scores(k)


class StaleKeyScores(KeyScores):
    """Fault: while decoding, the scores of the keys cached before are kept in the
    decoding context (declared not batch-dependent, so it is kept) and only the new keys'
    are computed: beam search reorders the cache's keys, never the context."""

    name = "test_stale_key_scores"

    def logit_bias(self, q: Tensor, k: Tensor, q_offset: int, ctx: PositionContext) -> Tensor:
        if not ctx.incremental:
            return self.scores(k)
        kept = ctx.latest(self, "scores so far", None, dict)  # the same dict at every call
        before = kept.get("scores")
        done = 0 if before is None else before.size(-1)
        new = self.scores(k[:, :, done:])
        kept["scores"] = new if before is None else torch.cat([before, new], -1)
        return kept["scores"]


TEST_ENCODINGS = (AbsolutePairs, IgnoresOffset, IgnoresPadding, IgnoresDecoderPadding,
                  ShortStepRows, FutureInf, KeyScores, StaleKeyScores)


@pytest.fixture
def own_encodings():
    """The test-only encodings, registered for one test and removed afterwards."""
    try:
        for cls in TEST_ENCODINGS:
            register_encoding(cls)
        yield
    finally:
        for cls in TEST_ENCODINGS:
            ENCODINGS.pop(cls.name, None)


# -- every built-in encoding passes ------------------------------------------------------------

@pytest.mark.parametrize("encoding", encoding_names(False))
def test_every_built_in_encoding_passes(encoding, monkeypatch):
    """And where its decoding keeps windows of tables (``PositionContext.window``), one is
    computed anew for positions that only the last run of single steps reaches (the calls
    of several positions end before it): a step reads a window grown past the ones before."""
    reached: list[int] = []
    window = PositionContext.window

    def recorded(ctx, owner, what, lo, hi, compute):
        def grown(grown_lo: int, grown_hi: int):
            if ctx.incremental:
                reached.append(max(-lo, hi))
            return compute(grown_lo, grown_hi)

        return window(ctx, owner, what, lo, hi, grown)

    monkeypatch.setattr(PositionContext, "window", recorded)
    check_encoding(encoding)
    if reached:
        assert max(reached) >= testing.ONE_BY_ONE[-1].start, reached


@pytest.mark.parametrize("encoding,options", [
    ("shaw", {"shaw_clip": 2}),  # steps past the clip read clipped rows
    ("shaw", {"shaw_clip": 2, "shaw_no_value": True}),
    ("t5", {"t5_num_buckets": 8, "t5_max_distance": 16}),  # far distances share buckets
    ("tupe_r", {"tupe_r_num_buckets": 8, "tupe_r_max_distance": 16}),
    ("tupe_a", {"tupe_reset_first": True}),  # a pair bias instead of a low-rank term
    ("xl", {"xl_clamp_len": 2, "xl_untie_r": True}),
    ("huang4", {"huang4_clip": 2}),
    ("huang1", {"huang1_clip": 3}),
    ("huang3", {"huang3_clip": 2}),
    ("diet_abs_lin", {"diet_abs_lin_k": 4}),  # fewer projected keys than an input's tokens
    ("sandwich", {"sandwich_dim": 8}),
    ("diet_rel", {"diet_rel_sharing": "layer"}),
    ("diet_rel", {"diet_rel_sharing": "head"}),  # one table for every head: (1, R)
    ("diet_abs_lin", {"diet_abs_lin_sharing": "head"}),
    ("diet_abs", {"diet_abs_sharing": "none", "diet_abs_symmetric": True}),
    ("t5_nob", {"pos_layers": "all"}),  # its default is the first layer only
    ("fire", {"fire_init_l": 2.0, "fire_shared": True}),  # most steps past the threshold
    ("cope", {"cope_npos": 4, "cope_shared": True}),  # contextual positions clamped at 3
    ("xpos", {"xpos_scale_base": 16.0}),  # a decay that the steps show
    ("rope", {"rope_base": 100.0}),
], ids=lambda value: value if isinstance(value, str) else
    ",".join(f"{name}={option}" for name, option in value.items()))
def test_encodings_with_other_options_pass(encoding, options):
    check_encoding(encoding, **options)


def test_a_correct_encoding_of_ones_own_passes(own_encodings):
    """The test-only encodings without a fault: the failures below are their faults'."""
    check_encoding(AbsolutePairs.name)
    check_encoding(KeyScores.name)


# -- each check fails, naming itself -----------------------------------------------------------

@pytest.mark.parametrize("broken,check,where", [
    (IgnoresOffset, "incremental decoding", "step 1 against the full forward"),
    (ShortStepRows, "incremental decoding", "step 191 against the full forward"),
    (StaleKeyScores, "beam reordering", "step 1, after 1 reorderings"),
    (IgnoresPadding, "padding", "the non-causal (encoder) stack, row 1 (6 real tokens of 9, "
                                "padded on the left)"),
    (IgnoresDecoderPadding, "padding", "the causal (decoder) stack, row 1 (6 real tokens of 9, "
                                       "padded on the left)"),
], ids=["offset", "from position 70", "reordering", "encoder padding", "decoder padding"])
def test_each_check_fails_naming_itself(own_encodings, broken, check, where):
    """The checks run in the order incremental decoding, beam reordering, padding: a
    failure of a later one means the earlier ones passed."""
    pattern = (f"^{re.escape(check)}: encoding '{broken.name}' with default options: "
               f"{re.escape(where)}.*: max abs difference (\\S+), more than the tolerance "
               "(\\S+)$")
    with pytest.raises(AssertionError, match=pattern) as failed:
        check_encoding(broken.name)
    difference, tolerance = re.match(pattern, str(failed.value)).groups()
    assert float(difference) > 1e3 * float(tolerance)  # the fault, not rounding
    assert 1e-9 <= float(tolerance) < 1e-7  # relative to outputs of a few units


def test_values_that_are_not_finite_are_reported_at_the_first(own_encodings):
    """The full forward's first query has keys after it, ``inf`` there, and nan out; step
    0 has one key and none after it."""
    with pytest.raises(AssertionError) as failed:
        check_encoding(FutureInf.name)
    assert str(failed.value).startswith(
        "incremental decoding: encoding 'test_future_inf' with default options: step 0 "
        "against the full forward: non-finite values (inf/nan) in the full forward, the first "
        "at row 0, position 0: ")
    assert "max abs difference" not in str(failed.value)


def test_a_table_shorter_than_the_decoded_sequences_is_refused_before_any_work():
    with pytest.raises(ValueError, match=f"check_encoding decodes sequences of "
                                         f"{testing.LENGTH} positions, and diet_abs_max_len=100 "
                                         "gives 'diet_abs' a table of 100: pass "
                                         f"diet_abs_max_len={testing.LENGTH} or more"):
        check_encoding("diet_abs", diet_abs_max_len=100)


def test_the_message_gives_the_options(own_encodings):
    with pytest.raises(AssertionError, match=r"^incremental decoding: encoding "
                                             r"'test_ignores_offset' with pos_layers='all': "):
        check_encoding(IgnoresOffset.name, pos_layers="all")


def test_perturbed_parameters_keep_the_checks_from_being_vacuous(own_encodings,
                                                                 monkeypatch):
    """The faulty tables start at zero: without the noise check_encoding adds, a fault
    that reads the wrong rows of them would pass."""
    monkeypatch.setattr(testing, "PERTURBATION", 0.0)
    for broken in (IgnoresOffset, IgnoresPadding, StaleKeyScores):
        check_encoding(broken.name)


def test_the_result_is_the_same_and_the_callers_state_kept(own_encodings):
    """Fixed seeds: the same numbers on every run, whatever the caller drew before; the
    caller's random state and thread count are left as they were."""
    messages = []
    threads = torch.get_num_threads()
    for seed in (1, 2):
        torch.manual_seed(seed)
        state = torch.get_rng_state()
        with pytest.raises(AssertionError) as failed:
            check_encoding(IgnoresPadding.name)
        messages.append(str(failed.value))
        assert torch.equal(torch.get_rng_state(), state)
        assert torch.get_num_threads() == threads
    assert messages[0] == messages[1]


# -- wrong arguments ---------------------------------------------------------------------------

@pytest.mark.parametrize("encoding", encoding_names(True))
def test_input_level_encodings_are_refused(encoding):
    with pytest.raises(ValueError, match=f"{encoding!r} is an input-level one "
                                         r"\(fairseq_posenc.nn.PositionEmbedding.*"
                                         "Attention-level encodings: alibi, "):
        check_encoding(encoding)


def test_unknown_encodings_and_options_are_refused():
    with pytest.raises(ValueError, match="unknown encoding 'T5'; choose one of"):
        check_encoding("T5")
    with pytest.raises(TypeError, match=r"'shaw_clip' \(an option of shaw\)"):
        check_encoding("t5", shaw_clip=2)
    with pytest.raises(ValueError, match="shaw_clip must be an int"):
        check_encoding("shaw", shaw_clip=2.5)
    with pytest.raises(TypeError, match="chooses max_len itself.*got max_len=16: pass only "
                                        r"the encoding's options .*encoding_options\('t5'\)"):
        check_encoding("t5", max_len=16)
