"""The kinds of content-free term over pairs of positions: :class:`PairBias` (any table per
pair: segments, FIRE, TUPE's reset) and :class:`LowRank` (a product of factors over absolute
positions: DIET-ABS, TUPE)."""

from __future__ import annotations

from typing import Optional

from torch import Tensor

from ...context import KernelFamily, PositionContext
from .. import outputs
from ..base import PositionEncoding
from ..absolute_tables import low_rank_bias, low_rank_operands
from .by_distance import table_attention
from .facts import KindFacts, PositionKind, to_implement
from .operands import LogitTerms, Operands


class PairBias(PositionEncoding):
    """``b[h, i, j]``: content-free per pair of positions, added to the logits. A pair bias
    that is a table by distance on some calls (FIRE within its threshold) also derives from
    :class:`~.by_distance.DistanceBias`, declares ``DISTANCE`` and answers
    :meth:`distance_covers`."""

    facts = KindFacts(
        PositionKind.PAIR_BIAS, mask_sized=True, additive=True, content_free=True,
        families={KernelFamily.DISTANCE: ("distance_covers", "distance_bias",
                                          "distance_table")})
    methods = ("pair_bias",)

    @to_implement
    def pair_bias(self, q_len: int, k_len: int, q_offset: int,
                  key_padding_mask: Optional[Tensor], ctx: PositionContext) -> Tensor:
        """``(B or 1, H or 1, q_len, k_len)`` (or ``(H or 1, q_len, k_len)``: the same for
        every row) added to the logits of queries at positions ``q_offset .. q_offset +
        q_len - 1`` against keys ``0 .. k_len - 1``.
        ``key_padding_mask`` is the padding of the self-attention input, cache included
        (``(B, q_offset + q_len)``, True at padding, or None)."""
        raise NotImplementedError

    @to_implement
    def distance_covers(self, q_len: int, k_len: int, q_offset: int,
                        ctx: PositionContext) -> bool:
        """``DISTANCE``: whether this call's bias is the term's
        :meth:`~.by_distance.DistanceBias.distance_bias` read at ``j - i``, so that the
        fused distance kernel may run it. The planner asks only where that kernel would
        run."""
        raise NotImplementedError

    # -- how the attention applies it -----------------------------------------------------
    def add_to_logits(self, logits: LogitTerms, a: Operands) -> None:
        logits.add(outputs.PAIR_BIAS.check(
            self, self.pair_bias(a.q_len, a.k_len, a.q_offset, a.padding, a.ctx), a.sizes))

    def fused_covers(self, family: KernelFamily, q_len: int, k_len: int, q_offset: int,
                     ctx: PositionContext) -> bool:
        return self.distance_covers(q_len, k_len, q_offset, ctx)

    def fused_attention(self, family: KernelFamily, q: Tensor, k: Tensor, v: Tensor,
                        a: Operands, causal: bool, dropout_p: float) -> Tensor:
        return table_attention(self, q, k, v, a, causal, dropout_p, factor=False)


class LowRank(PositionEncoding):
    """``P_Q[pos_i] . P_K[pos_j]``: a low-rank term over absolute positions, exactly an
    attention over ``[q, P_Q] . [k, P_K]`` (``EXTRA_DIMENSIONS``). Declares
    :attr:`max_len`."""

    facts = KindFacts(PositionKind.LOW_RANK, additive=True, content_free=True,
                      families={KernelFamily.EXTRA_DIMENSIONS: ("factors",)})
    fused_families = frozenset({KernelFamily.EXTRA_DIMENSIONS})
    methods = ("factors",)
    #: The number of absolute positions the factors have: a class attribute, or set by the
    #: constructor (from the stack's ``max_positions`` or an option); a class that sets it
    #: nowhere is refused (:mod:`.contracts`).
    max_len: int

    @to_implement
    def factors(self, length: int, ctx: PositionContext) -> tuple[Tensor, Tensor]:
        """``P_Q, P_K`` of shape ``(H or 1, n, d_p)`` over absolute positions ``0..n-1``,
        ``n >= length``, scaled so that the term is ``P_Q[pos_i] . P_K[pos_j]``. Positions
        count real tokens; :attr:`max_len` bounds them."""
        raise NotImplementedError

    # -- how the attention applies it -----------------------------------------------------
    def add_to_logits(self, logits: LogitTerms, a: Operands) -> None:
        logits.add(outputs.LOW_RANK_TERM.check(
            self, low_rank_bias(self, a.q_len, a.k_len, a.q_offset, a.padding, a.ctx),
            a.sizes))

    def extra_dimensions(self, a: Operands) -> tuple[Tensor, Tensor]:
        """``EXTRA_DIMENSIONS``: ``P_Q[pos_i]``, ``P_K[pos_j]`` at the real positions."""
        return low_rank_operands(self, a.q_len, a.k_len, a.q_offset, a.padding, a.ctx)
