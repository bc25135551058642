"""The kinds of position term: what each is, and the methods that compute it.

A position term is of one kind (:class:`PositionKind`); the attention computes each kind in
one exact way and chooses the fastest kernel for it
(:mod:`fairseq_posenc.core.attention_plan` reads the kind and the sets below, never which
methods answer). Each kind is a base class here with the one to three methods to implement
(its ``methods``; an encoding implements at least one, ``register_encoding`` checks) and
what it may add for a fused kernel (:attr:`~.base.PositionEncoding.fused_kernel`):

* :class:`DistanceBias` -- ``DISTANCE_BIAS`` / ``DISTANCE_SCALE``: a per-head table over a
  range of distances ``r = j - i`` (:meth:`DistanceBias.distance_bias`), added to the logits
  or multiplying ``q_i.k_j`` (Huang et al.'s methods 1-2); fused: ``DISTANCE``,
  ``DISTANCE_FACTOR``, and ``CAUSAL_EXTRA_DIMENSIONS``: a causal distance bias that equals a
  ``LOW_RANK`` term up to a constant per query (:meth:`LowRank.factors` over ``max_len``
  positions; causal ALiBi);
* :class:`PairBias` -- ``PAIR_BIAS``: content-free per pair (segments, FIRE, TUPE's reset);
  fused: ``DISTANCE`` on the calls where it is a table by distance (FIRE within its
  threshold: :meth:`PairBias.distance_covers`);
* :class:`LowRank` -- ``LOW_RANK``: ``P_Q, P_K`` over absolute positions whose product is
  added to the logits (DIET-ABS, TUPE); fused: ``EXTRA_DIMENSIONS``;
* :class:`Rotation` -- ``ROTATION``: queries and keys rotated (RoPE); fused: ``ROTARY``;
* :class:`ContentBias` -- ``CONTENT_BIAS`` / ``PROBABILITIES``: a bias from the queries or
  keys, and a term from the probabilities (Shaw); fused: ``CLIPPED`` (tables by clipped
  distance) or ``ROWS`` (products read by distance: Transformer-XL, Huang et al.'s method 4);
* :class:`ContentLogits` -- ``CONTENT_LOGITS``: ``q_i.k_j`` replaced (Huang et al.'s method
  3, CoPE);
* :class:`Projection` -- ``PROJECTION``: keys and values from the input projected along the
  sequence, with their own bias (DIET-ABS on a Linformer);
* :class:`InputGates` -- ``INPUT_GATES``: a bias from gates that read the layer's input,
  ``c_i - c_j`` of per-head cumulative sums of log-gates (FoX); fused:
  ``CAUSAL_SUMS`` (the sums as extra dimensions under the causal mask);
* :class:`InputEmbedding` -- ``INPUT``: fairseq's own position embeddings, configured.

A class may derive from two kinds and set its ``kind`` per instance when a constructor
argument changes it (TUPE's reset). What each method returns is checked against what its
docstring here says, at every call (:mod:`.outputs`).
"""

from __future__ import annotations

import enum
from typing import ClassVar, Optional

import torch
from torch import Tensor

from ..context import FusedKernel, KernelFamily, PositionContext, Window
from ..positions import distance_range, expand_distance_bias, read_by_distance
from .base import PositionEncoding
from .outputs import DISTANCE_TABLE
from .terms import DistanceRows


class PositionKind(enum.Enum):
    """What a position term is; each kind has one exact computation in the attention."""

    #: Added to the input embeddings by fairseq's own position embeddings.
    INPUT = "input embedding"
    #: ``b[h, j - i]``: a content-free scalar per head and relative distance, added to the
    #: logits (``distance_bias``).
    DISTANCE_BIAS = "content-free bias by distance"
    #: A content-free table per head and relative distance multiplying ``q_i.k_j``
    #: (``distance_bias`` read as factors).
    DISTANCE_SCALE = "content-free factor by distance"
    #: ``b[h, i, j]``: content-free, per pair of absolute positions or segments
    #: (``pair_bias``).
    PAIR_BIAS = "content-free bias by pair"
    #: ``P_Q[pos_i] . P_K[pos_j]``: a low-rank term over absolute positions
    #: (``factors``). Exactly an attention over ``[q, P_Q] . [k, P_K]``.
    LOW_RANK = "low-rank absolute term"
    #: A rotation of queries and keys by their positions (``rotate_qk``).
    ROTATION = "rotation of q and k"
    #: Added to the logits, computed from the queries or keys (``logit_bias``).
    CONTENT_BIAS = "bias that reads q or k"
    #: Replaces ``q_i.k_j`` by a position-dependent product (``content_logits``).
    CONTENT_LOGITS = "position-dependent q.k"
    #: A bias that reads q or k and a term added to the output from the attention
    #: probabilities (``logit_bias`` and ``value_term``).
    PROBABILITIES = "terms on keys and on the probabilities"
    #: Keys and values computed from a projection of the input along the sequence, with
    #: their own bias (``project_sequence`` and ``projected_bias``).
    PROJECTION = "projection of keys and values"
    #: Differences of cumulative sums of log-gates that read the layer's input, added to
    #: the logits (``log_gates``; the sums are cached while decoding).
    INPUT_GATES = "bias from gates on the layer input"


# What each kind asks of the attention, declared with the kinds; the planner
# (:mod:`fairseq_posenc.core.attention_plan`) reads these sets.

#: Kinds that add a ``len x len`` (or larger) tensor to the logits.
MASK_SIZED = frozenset({PositionKind.DISTANCE_BIAS, PositionKind.PAIR_BIAS,
                        PositionKind.CONTENT_BIAS, PositionKind.PROBABILITIES,
                        PositionKind.PROJECTION, PositionKind.INPUT_GATES})
#: Kinds that need the logits written out (the explicit path), unless fused.
NEEDS_LOGITS = frozenset({PositionKind.DISTANCE_SCALE, PositionKind.CONTENT_LOGITS,
                          PositionKind.PROBABILITIES})
#: Additive kinds that depend on positions only, given the padding.
CONTENT_FREE = frozenset({PositionKind.DISTANCE_BIAS, PositionKind.PAIR_BIAS,
                          PositionKind.LOW_RANK})
#: Additive kinds whose tensor reads the queries or keys (so it has a gradient whenever
#: autograd records).
READS_CONTENT = frozenset({PositionKind.CONTENT_BIAS, PositionKind.PROBABILITIES,
                           PositionKind.PROJECTION, PositionKind.INPUT_GATES})
#: Kinds added to the float mask (:data:`MASK_SIZED` and the low-rank bias).
ADDITIVE = MASK_SIZED | {PositionKind.LOW_RANK}


class DistanceBias(PositionEncoding):
    """``b_h(r)``: a content-free scalar per head and relative distance ``r = j - i``,
    added to the logits (``DISTANCE_BIAS``) or, for Huang et al.'s multiplicative methods,
    multiplying ``q_i.k_j`` (``DISTANCE_SCALE``).

    Implement :meth:`distance_bias` for a range of distances; :meth:`expanded` turns it
    into the ``(H, q_len, k_len)`` term, caching both the per-distance table and the
    expansion in the stack's context, and on CUDA in half precision the table runs in the
    fused distance kernel, with its gradient.
    """

    kind = PositionKind.DISTANCE_BIAS
    fused_kernel = FusedKernel(KernelFamily.DISTANCE)
    methods = ("distance_bias",)

    def distance_bias(self, r_lo: int, r_hi: int) -> Tensor:
        """``(heads, r_hi - r_lo + 1)``: the bias of every distance in ``[r_lo, r_hi]``
        (``(1, r_hi - r_lo + 1)``: one row for every head)."""
        raise NotImplementedError

    def distance_table(self, q_len: int, k_len: int, q_offset: int,
                       ctx: PositionContext) -> tuple[Tensor, int]:
        """``(H, R)`` and ``r_lo``: the bias of every distance ``r_lo .. r_lo + R - 1`` that
        queries at ``q_offset + i`` and keys ``0 .. k_len - 1`` have, once per forward."""
        r_lo, r_hi = distance_range(q_len, k_len, q_offset)
        table = ctx.window(self, "per_distance", r_lo, r_hi,
                           lambda lo, hi: Window(self.checked_table(lo, hi), lo, hi))
        return table.rows(r_lo, r_hi), r_lo

    def checked_table(self, r_lo: int, r_hi: int) -> Tensor:
        """:meth:`distance_bias`, its width and dtype checked
        (:data:`.outputs.DISTANCE_TABLE`; its heads are checked on the term it gives)."""
        return DISTANCE_TABLE.check(self, self.distance_bias(r_lo, r_hi),
                                    (None, r_hi - r_lo + 1))

    def expanded(self, q_len: int, k_len: int, q_offset: int, ctx: PositionContext) -> Tensor:
        """``(H, q_len, k_len)``: ``b_h(j - i)`` for queries at ``q_offset + i``; between
        positions chosen per sequence (:attr:`PositionContext.positions`), ``(B, H, q_len,
        k_len)`` read at their differences."""
        if ctx.positions is not None:
            def gathered() -> Tensor:
                r_lo, r_hi = ctx.distance_range(q_len, k_len, q_offset)
                table = ctx.window(self, "per_distance", r_lo, r_hi, lambda lo, hi: Window(
                    self.checked_table(lo, hi), lo, hi)).rows(r_lo, r_hi)
                return read_by_distance(table, ctx.distances(q_len, k_len, q_offset) - r_lo)

            return ctx.latest(self, "expanded", (q_len, k_len, q_offset), gathered,
                              batch_dependent=True)
        if q_len == 1 and ctx.incremental:
            # A decoding step: one narrow of an (H, 1, R) window kept for the sequence,
            # nothing made per step (beam search is bound by the host's work per layer).
            r_lo, r_hi = -q_offset, k_len - 1 - q_offset
            return ctx.window(self, "step rows", r_lo, r_hi, lambda lo, hi: Window(
                self.checked_table(lo, hi).unsqueeze(-2), lo, hi)).rows(r_lo, r_hi)

        def compute() -> Tensor:
            table, r_lo = self.distance_table(q_len, k_len, q_offset, ctx)
            return expand_distance_bias(table, r_lo, q_len, k_len, q_offset)

        # Kept while the key is the same: the layers that share the term read it once per
        # forward (a single query outside a decoding context too).
        return ctx.latest(self, "expanded", (q_len, k_len, q_offset), compute)


class PairBias(PositionEncoding):
    """``b[h, i, j]``: content-free per pair of positions, added to the logits."""

    kind = PositionKind.PAIR_BIAS
    methods = ("pair_bias",)

    def pair_bias(self, q_len: int, k_len: int, q_offset: int,
                  key_padding_mask: Optional[Tensor], ctx: PositionContext) -> Tensor:
        """``(B or 1, H or 1, q_len, k_len)`` (or ``(H or 1, q_len, k_len)``: the same for
        every row) added to the logits of queries at positions ``q_offset .. q_offset +
        q_len - 1`` against keys ``0 .. k_len - 1``.
        ``key_padding_mask`` is the padding of the self-attention input, cache included
        (``(B, q_offset + q_len)``, True at padding, or None)."""
        raise NotImplementedError

    def distance_covers(self, q_len: int, k_len: int, q_offset: int,
                        ctx: PositionContext) -> bool:
        """A pair bias that also derives from :class:`DistanceBias` (FIRE) declares
        :attr:`KernelFamily.DISTANCE`: whether this call's bias is its
        :meth:`DistanceBias.distance_bias` read at ``j - i``, so that the fused distance
        kernel may run it. The planner asks only where that kernel would run."""
        return False


class LowRank(PositionEncoding):
    """``P_Q[pos_i] . P_K[pos_j]``: a low-rank term over absolute positions, exactly an
    attention over ``[q, P_Q] . [k, P_K]``. Declares :attr:`max_len`."""

    kind = PositionKind.LOW_RANK
    methods = ("factors",)
    #: The number of absolute positions the factors have: a class attribute, or set by the
    #: constructor (from the stack's ``max_positions`` or an option); a class that sets it
    #: nowhere is refused (:func:`declaration_refusal`, :func:`built_refusal`).
    max_len: int

    def factors(self, length: int, ctx: PositionContext) -> tuple[Tensor, Tensor]:
        """``P_Q, P_K`` of shape ``(H or 1, n, d_p)`` over absolute positions ``0..n-1``,
        ``n >= length``, scaled so that the term is ``P_Q[pos_i] . P_K[pos_j]``. Positions
        count real tokens; :attr:`max_len` bounds them."""
        raise NotImplementedError


class Rotation(PositionEncoding):
    """Queries and keys transformed by their positions before the product (and before the
    keys are cached)."""

    kind = PositionKind.ROTATION
    methods = ("rotate_qk",)

    def rotate_qk(self, q: Tensor, k: Tensor, q_offset: int, ctx: PositionContext,
                  q_scale: float = 1.0) -> tuple[Tensor, Tensor]:
        """This step's queries and keys ``(B, H, len, d_h)``, both at positions
        ``q_offset + t``, transformed; the queries also scaled by ``q_scale`` (the
        attention's ``1/sqrt(d_h)``, which a rotation may fold into its own product)."""
        raise NotImplementedError


class ContentBias(PositionEncoding):
    """A bias computed from the queries or keys (``CONTENT_BIAS``) and, for
    ``PROBABILITIES``, a term added to the output from the probabilities."""

    kind = PositionKind.CONTENT_BIAS
    methods = ("logit_bias",)

    def logit_bias(self, q: Tensor, k: Tensor, q_offset: int,
                   ctx: PositionContext) -> Tensor:
        """The term added to ``e_ij`` (after scaling), broadcastable to ``(B, H, q_len,
        k_len)``; ``q`` is the already scaled query ``(B, H, q_len, d_h)``, ``k`` the keys
        ``(B, H, k_len, d_h)``."""
        raise NotImplementedError

    def value_term(self, probs: Tensor, q_offset: int, ctx: PositionContext) -> Tensor:
        """``PROBABILITIES``: the term added to ``sum_j p_ij v_j``, ``(B, H, q_len, d_h)``."""
        raise NotImplementedError

    def rows_cover(self, q_len: int, k_len: int, q_offset: int) -> bool:
        """``ROWS``: whether every distance of this attention has a vector of its own (no
        clip shorter than the sentence), so that :meth:`distance_rows` gives the term."""
        raise NotImplementedError

    def distance_rows(self, q: Tensor, k: Tensor, q_offset: int,
                      ctx: PositionContext) -> DistanceRows:
        """``ROWS``, where :meth:`rows_cover`: the term as :class:`~.terms.DistanceRows`
        (``q`` scaled)."""
        raise NotImplementedError

    def clipped_tables(self, q: Tensor) -> tuple[Tensor, Optional[Tensor], int]:
        """``CLIPPED``: ``key_rows`` ``(B, H, q_len, R)`` from the scaled queries, the
        value table ``(R, d_h)`` (or None: keys only), and ``r_lo``."""
        raise NotImplementedError

    def rows_by_key(self, q_offset: int, k_len: int, dtype: torch.dtype,
                    ctx: PositionContext) -> tuple[Tensor, Optional[Tensor]]:
        """``CLIPPED``, one query at ``q_offset`` (a decoding step): the key table's row for
        each key ``j``, ``(k_len, d_h)``, and the value table's (or None), so that the
        logits are ``q.(k_j + key_rows[j])`` and the output ``sum_j p_j (v_j +
        value_rows[j])``."""
        raise NotImplementedError


class ContentLogits(PositionEncoding):
    """``q_i.k_j`` replaced by a position-dependent product."""

    kind = PositionKind.CONTENT_LOGITS
    methods = ("content_logits",)

    def content_logits(self, q: Tensor, k: Tensor, q_offset: int,
                       ctx: PositionContext) -> Tensor:
        """``(B, H, q_len, k_len)`` replacing ``q_i.k_j`` (``q`` already scaled)."""
        raise NotImplementedError


class Projection(PositionEncoding):
    """Keys and values computed from the input projected along the sequence, with a bias
    of their own."""

    kind = PositionKind.PROJECTION
    methods = ("project_sequence", "projected_bias")

    def project_sequence(self, x: Tensor, key_padding_mask: Optional[Tensor],
                         ctx: PositionContext) -> Tensor:
        """``(k_len', B, C)``, the input that keys and values are computed from, projected
        along the sequence (padding excluded) from ``x`` (``(T, B, C)``). The projected keys
        have no padding."""
        raise NotImplementedError

    def projected_bias(self, q_len: int, key_padding_mask: Optional[Tensor],
                       ctx: PositionContext) -> Tensor:
        """``(B or 1, H or 1, q_len, k_len')`` added to the logits over the projected keys;
        ``key_padding_mask`` is the padding of the input."""
        raise NotImplementedError


class InputGates(PositionEncoding):
    """A bias from gates that read the attention layer's input ``x_t``: per head, ``D_ij =
    c_i - c_j`` with ``c`` the cumulative sum of the log-gates over positions (the forward
    gates for keys up to the query; a bidirectional term's backward gates, ``c'_j - c'_i``,
    for keys after it). The attention reads the gates once per call, keeps the sums of
    every cached key, and adds the differences (:mod:`fairseq_posenc.core.gate_sums`)."""

    kind = PositionKind.INPUT_GATES
    methods = ("log_gates",)
    #: Whether keys after the query read a second set of gates (the encoder's form).
    bidirectional: bool = False

    def log_gates(self, x: Tensor) -> Tensor:
        """``(B, G, T)``, at least float32: ``log f_t`` of every position of ``x``
        (``(T, B, C)``); ``G = H``, or ``2 H`` when :attr:`bidirectional` (the forward
        gates, then the backward ones)."""
        raise NotImplementedError


class InputEmbedding(PositionEncoding):
    """Position embeddings added to the input by fairseq's own modules; self-attention
    stays stock. ``fairseq_flags`` says how fairseq's transformer is configured (a class
    without it is refused at registration); no method of the class computes an
    embedding, and its class methods (:meth:`~.base.PositionEncoding.position_draw`,
    ``max_length``, ``random_positions_refusal``) are all it can add."""

    at_input = True
    kind = PositionKind.INPUT
    methods = ()
    #: (no_token_positional_embeddings, learned_pos) for fairseq's transformer.
    fairseq_flags: ClassVar[tuple[bool, bool]]


#: Every kind's base class.
KINDS = (DistanceBias, PairBias, LowRank, Rotation, ContentBias, ContentLogits, Projection,
         InputGates, InputEmbedding)


def declaration_refusal(cls: type) -> Optional[str]:
    """Why registration refuses ``cls`` for what its kind asks it to declare (None: it
    declares it): an :class:`InputEmbedding` without ``fairseq_flags``; a :class:`LowRank`
    without ``max_len``, where the class shows it (no class attribute, and no constructor
    of its own to set it: one that has a constructor is checked when it is built,
    :func:`built_refusal`)."""
    if issubclass(cls, InputEmbedding):
        flags = getattr(cls, "fairseq_flags", None)
        if not (isinstance(flags, tuple) and len(flags) == 2
                and all(isinstance(flag, bool) for flag in flags)):
            got = "has none" if flags is None else f"got {flags!r}"
            return ("is an InputEmbedding and needs the class attribute fairseq_flags = "
                    "(no_token_positional_embeddings, learned_pos), the fairseq input "
                    "embedding it configures: (False, False) sinusoidal, (False, True) "
                    f"learned, (True, False) none; {got}")
    if issubclass(cls, LowRank) and getattr(cls, "max_len", None) is None and all(
            "__init__" not in vars(base) for base in cls.__mro__
            if issubclass(base, PositionEncoding) and base is not PositionEncoding):
        return ("is a LowRank without max_len: set the number of absolute positions its "
                "factors cover, as a class attribute max_len or as self.max_len in its "
                "__init__ (from the stack's max_positions, or an option)")
    return None


def built_refusal(term: PositionEncoding) -> Optional[str]:
    """Why a built ``term`` cannot be attended with (None: it can): a ``LOW_RANK`` term
    (or one whose fused kernel reads :meth:`LowRank.factors`) whose ``max_len``, the
    positions its factors cover, its constructor left unset or not a positive int."""
    if term.kind is not PositionKind.LOW_RANK and not (
            term.fused_kernel is not None
            and term.fused_kernel.family is KernelFamily.CAUSAL_EXTRA_DIMENSIONS):
        return None
    max_len = getattr(term, "max_len", None)
    if isinstance(max_len, int) and not isinstance(max_len, bool) and max_len >= 1:
        return None
    got = "has none" if max_len is None else f"got {max_len!r}"
    return ("is a LowRank term and needs max_len, the number of absolute positions its "
            "factors cover, a positive int: set self.max_len in its __init__ (from the "
            f"stack's max_positions, or an option); {got}")


def unimplemented_kinds(cls: type) -> list[type]:
    """The kinds ``cls`` derives from of which it implements none of the methods."""
    missing = []
    for kind in KINDS:
        if kind.methods and issubclass(cls, kind) and all(
                getattr(cls, method) is getattr(kind, method) for method in kind.methods):
            missing.append(kind)
    return missing
