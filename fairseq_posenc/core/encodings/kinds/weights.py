"""The kind of term that replaces the softmax: :class:`AttentionWeights` (stick-breaking)."""

from __future__ import annotations

from typing import Optional

from torch import Tensor

from .. import outputs
from ..base import PositionEncoding
from .facts import KindFacts, PositionKind, to_implement
from .operands import Operands


class AttentionWeights(PositionEncoding):
    """The attention weights from the logits (every mask in them as ``-inf``) in place of
    the softmax, and a term added to the output from what the weights leave of each row
    (they need not sum to 1). Causal only; no position term beside it is needed."""

    facts = KindFacts(PositionKind.WEIGHTS, needs_logits=True, replaces_softmax=True,
                      causal_only=True)
    methods = ("weights", "rest_term")

    @to_implement
    def weights(self, logits: Tensor, q_offset: int) -> tuple[Tensor, Tensor]:
        """The weights ``(B, H, q_len, k_len)`` and what each row leaves ``(B, H, q_len)``,
        from the logits (queries at positions ``q_offset + i`` of the keys)."""
        raise NotImplementedError

    @to_implement
    def rest_term(self, rest: Tensor, v: Tensor) -> Optional[Tensor]:
        """The term added to ``sum_j A_ij v_j`` from what the weights leave (``rest``,
        ``(B, H, q_len)``; ``v`` the values of every key, the queries' the last ``q_len``),
        ``(B, H, q_len, d_h)``, or None."""
        raise NotImplementedError

    def normalise(self, logits: Tensor, a: Operands, v: Tensor
                  ) -> tuple[Tensor, Optional[Tensor]]:
        """The weights, and the term their rest adds to the output (checked)."""
        weights, rest = self.weights(logits, a.q_offset)
        weights = outputs.WEIGHTS.check(self, weights, a.sizes)
        term = self.rest_term(rest, v)
        if term is not None:
            term = outputs.REST_TERM.check(self, term, (*a.sizes[:3], v.size(-1)))
        return weights, term
