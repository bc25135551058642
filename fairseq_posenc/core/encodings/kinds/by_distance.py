"""The kinds of term that are a table by relative distance: :class:`DistanceBias` (added to
the logits) and :class:`DistanceScale` (multiplying ``q_i.k_j``, Huang et al.'s methods 1-2)."""

from __future__ import annotations

from torch import Tensor

from ...context import FusedKernel, KernelFamily, PositionContext, Window
from ...positions import distance_range, expand_distance_bias, read_by_distance
from .. import outputs
from ..base import PositionEncoding
from ..absolute_tables import low_rank_operands
from .facts import KindFacts, PositionKind, to_implement
from .operands import LogitTerms, Operands


class DistanceBias(PositionEncoding):
    """``b_h(r)``: a content-free scalar per head and relative distance ``r = j - i``,
    added to the logits.

    Implement :meth:`distance_bias` for a range of distances; :meth:`expanded` turns it
    into the ``(H, q_len, k_len)`` term, caching both the per-distance table and the
    expansion in the stack's context, and on CUDA in half precision the table runs in the
    fused distance kernel (``DISTANCE``), with its gradient. A causal bias that equals a
    low-rank term up to a constant per query (causal ALiBi) declares
    ``CAUSAL_EXTRA_DIMENSIONS`` and implements ``factors`` and ``max_len`` as a
    :class:`~.absolute.LowRank` does.
    """

    facts = KindFacts(
        PositionKind.DISTANCE_BIAS, mask_sized=True, additive=True, content_free=True,
        families={KernelFamily.DISTANCE: ("distance_bias",),
                  KernelFamily.CAUSAL_EXTRA_DIMENSIONS: ("distance_bias", "factors")})
    fused_kernel = FusedKernel(KernelFamily.DISTANCE)
    fused_families = frozenset({KernelFamily.DISTANCE})
    methods = ("distance_bias",)

    @to_implement
    def distance_bias(self, r_lo: int, r_hi: int) -> Tensor:
        """``(heads, r_hi - r_lo + 1)``: the bias of every distance in ``[r_lo, r_hi]``
        (``(1, r_hi - r_lo + 1)``: one row for every head)."""
        raise NotImplementedError

    # -- how the attention applies it -----------------------------------------------------
    def add_to_logits(self, logits: LogitTerms, a: Operands) -> None:
        logits.add(self.checked_term(a))

    def extra_dimensions(self, a: Operands) -> tuple[Tensor, Tensor]:
        """``CAUSAL_EXTRA_DIMENSIONS``: the factors of the bias under the causal mask."""
        return low_rank_operands(self, a.q_len, a.k_len, a.q_offset, a.padding, a.ctx)

    def fused_attention(self, family: KernelFamily, q: Tensor, k: Tensor, v: Tensor,
                        a: Operands, causal: bool, dropout_p: float) -> Tensor:
        """The attention with the table in the fused distance kernel, ``(B, H, q, d_h)``."""
        return table_attention(self, q, k, v, a, causal, dropout_p, factor=False)

    # -- the table ---------------------------------------------------------------------------
    def checked_term(self, a: Operands) -> Tensor:
        """:meth:`expanded` for the call, checked against the logits' shape."""
        return outputs.DISTANCE_TERM.check(
            self, self.expanded(a.q_len, a.k_len, a.q_offset, a.ctx), a.sizes)

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
        return outputs.DISTANCE_TABLE.check(self, self.distance_bias(r_lo, r_hi),
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


class DistanceScale(DistanceBias):
    """``s_h(r)``: a content-free factor per head and relative distance multiplying
    ``q_i.k_j`` (Huang et al.'s methods 1 and 2); :meth:`distance_bias` gives the factors.
    The logits are written out, or the fused kernel multiplies its tiles
    (``DISTANCE_FACTOR``)."""

    facts = KindFacts(PositionKind.DISTANCE_SCALE, needs_logits=True,
                      families={KernelFamily.DISTANCE_FACTOR: ("distance_bias",)})
    fused_kernel = FusedKernel(KernelFamily.DISTANCE_FACTOR)
    fused_families = frozenset({KernelFamily.DISTANCE_FACTOR})

    def add_to_logits(self, logits: LogitTerms, a: Operands) -> None:
        logits.multiply(self.checked_term(a))

    def fused_attention(self, family: KernelFamily, q: Tensor, k: Tensor, v: Tensor,
                        a: Operands, causal: bool, dropout_p: float) -> Tensor:
        return table_attention(self, q, k, v, a, causal, dropout_p, factor=True)


def table_attention(term: DistanceBias, q: Tensor, k: Tensor, v: Tensor, a: Operands,
                    causal: bool, dropout_p: float, factor: bool) -> Tensor:
    """The fused distance kernel over ``term``'s table by distance, added to the logits or
    (``factor``) multiplying ``q.k``; attention dropout drawn inside the tiles, the same
    distribution as the explicit path's
    (:func:`~fairseq_posenc.core.kernels.distance.dropout_keep`)."""
    from ...kernels.distance import distance_attention  # Triton, loaded where it runs

    table, r_lo = term.distance_table(a.q_len, a.k_len, a.q_offset, a.ctx)
    return distance_attention(q, k, v, table, r_lo, a.q_offset, a.padding, causal=causal,
                              factor=factor, dropout_p=dropout_p)
