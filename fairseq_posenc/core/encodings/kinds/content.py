"""The kinds of term that read the queries or keys: :class:`ContentBias` (a bias from them:
Transformer-XL, Huang et al.'s method 4, Shaw's keys), :class:`ContentOnProbabilities`
(and a term on the output from the probabilities: Shaw's values) and
:class:`ContentLogits` (``q_i.k_j`` replaced: Huang et al.'s method 3, CoPE)."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ...context import KernelFamily, PositionContext
from .. import outputs
from ..base import PositionEncoding
from ..distance_rows import DistanceRows
from .facts import KindFacts, PositionKind, to_implement
from .operands import LogitTerms, Operands

#: The fused families of a content bias and the methods each calls.
CONTENT_FAMILIES = {KernelFamily.CLIPPED: ("clipped_tables", "rows_by_key"),
                    KernelFamily.ROWS: ("rows_cover", "distance_rows")}


class ContentBias(PositionEncoding):
    """A bias computed from the queries or keys, added to the logits. Fused: ``CLIPPED``
    (tables by clipped distance, rows by key while decoding) or ``ROWS`` (products read by
    distance)."""

    facts = KindFacts(PositionKind.CONTENT_BIAS, mask_sized=True, additive=True,
                      reads_content=True, families=CONTENT_FAMILIES)
    methods = ("logit_bias",)

    @to_implement
    def logit_bias(self, q: Tensor, k: Tensor, q_offset: int,
                   ctx: PositionContext) -> Tensor:
        """The term added to ``e_ij`` (after scaling), broadcastable to ``(B, H, q_len,
        k_len)``; ``q`` is the already scaled query ``(B, H, q_len, d_h)``, ``k`` the keys
        ``(B, H, k_len, d_h)``."""
        raise NotImplementedError

    @to_implement
    def rows_cover(self, q_len: int, k_len: int, q_offset: int) -> bool:
        """``ROWS``: whether every distance of this attention has a vector of its own (no
        clip shorter than the sentence), so that :meth:`distance_rows` gives the term."""
        raise NotImplementedError

    @to_implement
    def distance_rows(self, q: Tensor, k: Tensor, q_offset: int,
                      ctx: PositionContext) -> DistanceRows:
        """``ROWS``, where :meth:`rows_cover`: the term as :class:`~..distance_rows.DistanceRows`
        (``q`` scaled)."""
        raise NotImplementedError

    @to_implement
    def clipped_tables(self, q: Tensor) -> tuple[Tensor, Optional[Tensor], int]:
        """``CLIPPED``: ``key_rows`` ``(B, H, q_len, R)`` from the scaled queries, the
        value table ``(R, d_h)`` (or None: keys only), and ``r_lo``."""
        raise NotImplementedError

    @to_implement
    def rows_by_key(self, q_offset: int, k_len: int, dtype: torch.dtype,
                    ctx: PositionContext) -> tuple[Tensor, Optional[Tensor]]:
        """``CLIPPED``, one query at ``q_offset`` (a decoding step): the key table's row for
        each key ``j``, ``(k_len, d_h)``, and the value table's (or None), so that the
        logits are ``q.(k_j + key_rows[j])`` and the output ``sum_j p_j (v_j +
        value_rows[j])``."""
        raise NotImplementedError

    # -- how the attention applies it -----------------------------------------------------
    def add_to_logits(self, logits: LogitTerms, a: Operands) -> None:
        if self in a.by_rows:  # one query: the products by distance, no gather
            logits.replace(self.distance_rows(a.q, a.k, a.q_offset, a.ctx)
                           .one_query_logits(a.k, a.q_offset))
            return
        logits.add(outputs.LOGIT_BIAS.check(
            self, self.logit_bias(a.q, a.k, a.q_offset, a.ctx), a.sizes))

    def fused_covers(self, family: KernelFamily, q_len: int, k_len: int, q_offset: int,
                     ctx: PositionContext) -> bool:
        """``ROWS``: no clip shorter than the sentence; ``CLIPPED``: the rows fit a tile."""
        if family is KernelFamily.ROWS:
            return self.rows_cover(q_len, k_len, q_offset)
        from ...kernels.distance import clipped_rows_fit

        return clipped_rows_fit(self.fused_kernel.clipped_rows)

    def fused_attention(self, family: KernelFamily, q: Tensor, k: Tensor, v: Tensor,
                        a: Operands, causal: bool, dropout_p: float) -> Tensor:
        """``ROWS`` (Transformer-XL, Huang 4): products by distance in the kernel;
        ``CLIPPED`` (Shaw): rows per query, and the values' term by clipped distance."""
        from ...kernels.distance import clipped_relative_attention, distance_rows_attention

        if family is KernelFamily.ROWS:
            rows = self.distance_rows(q, k, a.q_offset, a.ctx)
            return distance_rows_attention(rows.q_content, k, v, rows.query, rows.r_lo,
                                           a.q_offset, a.padding, causal, rows.key,
                                           dropout_p)
        key_rows, value_table, r_lo = self.clipped_tables(q)
        out, by_distance = clipped_relative_attention(
            q, k, v, key_rows, r_lo, a.q_offset, a.padding, causal,
            by_distance=value_table is not None, dropout_p=dropout_p)
        if by_distance is not None:
            out = out + by_distance.to(out.dtype) @ value_table
        return out


class ContentOnProbabilities(ContentBias):
    """A :class:`ContentBias` and a term added to the output from the probabilities
    (:meth:`value_term`): the logits are written out unless a fused kernel takes both."""

    facts = KindFacts(PositionKind.PROBABILITIES, mask_sized=True, additive=True,
                      needs_logits=True, reads_content=True, adds_to_output=True,
                      families=CONTENT_FAMILIES)
    methods = ("logit_bias", "value_term")

    @to_implement
    def value_term(self, probs: Tensor, q_offset: int, ctx: PositionContext) -> Tensor:
        """The term added to ``sum_j p_ij v_j``, ``(B, H, q_len, d_h)``."""
        raise NotImplementedError

    def add_to_output(self, probs: Tensor, q_offset: int, ctx: PositionContext,
                      head_dim: int) -> Tensor:
        """:meth:`value_term`, checked: ``(B, H, q_len, d_h)``."""
        return outputs.VALUE_TERM.check(self, self.value_term(probs, q_offset, ctx),
                                        (*probs.shape[:3], head_dim))


class ContentLogits(PositionEncoding):
    """``q_i.k_j`` replaced by a position-dependent product."""

    facts = KindFacts(PositionKind.CONTENT_LOGITS, needs_logits=True)
    methods = ("content_logits",)

    @to_implement
    def content_logits(self, q: Tensor, k: Tensor, q_offset: int,
                       ctx: PositionContext) -> Tensor:
        """``(B, H, q_len, k_len)`` replacing ``q_i.k_j`` (``q`` already scaled)."""
        raise NotImplementedError

    def add_to_logits(self, logits: LogitTerms, a: Operands) -> None:
        logits.replace(outputs.CONTENT_LOGITS.check(
            self, self.content_logits(a.q, a.k, a.q_offset, a.ctx), a.sizes))
