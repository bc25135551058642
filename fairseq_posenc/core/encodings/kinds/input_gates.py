"""The kind of term whose gates read the layer's input: :class:`InputGates` (FoX). The
machinery of its cumulative sums, cached for every key, is :mod:`..gate_sums`."""

from __future__ import annotations

from typing import Optional

from torch import Tensor

from ...context import KernelFamily
from ..base import PositionEncoding
from ..gate_sums import gate_bias, gate_dimensions, gate_sums, step_gate_bias
from .facts import KindFacts, PositionKind, to_implement
from .operands import LogitTerms, Operands


class InputGates(PositionEncoding):
    """A bias from gates that read the attention layer's input ``x_t``: per head, ``D_ij =
    c_i - c_j`` with ``c`` the cumulative sum of the log-gates over positions (the forward
    gates for keys up to the query; a bidirectional term's backward gates, ``c'_j - c'_i``,
    for keys after it). The attention reads the gates once per call, keeps the sums of
    every cached key, and adds the differences (:mod:`fairseq_posenc.core.encodings.gate_sums`);
    under the causal mask they are extra dimensions (``CAUSAL_SUMS``)."""

    facts = KindFacts(PositionKind.INPUT_GATES, mask_sized=True, additive=True,
                      reads_content=True, reads_input=True,
                      families={KernelFamily.CAUSAL_SUMS: ("log_gates",)})
    methods = ("log_gates",)
    #: Whether keys after the query read a second set of gates (the encoder's form).
    bidirectional: bool = False

    @to_implement
    def log_gates(self, x: Tensor) -> Tensor:
        """``(B, G, T)``, at least float32: ``log f_t`` of every position of ``x``
        (``(T, B, C)``); ``G = H``, or ``2 H`` when :attr:`bidirectional` (the forward
        gates, then the backward ones)."""
        raise NotImplementedError

    def read_input(self, x: Tensor, key_padding_mask: Optional[Tensor],
                   saved: Optional[dict], heads: int) -> Tensor:
        """The cumulative sums of the log-gates of every key, the cache's extended."""
        return gate_sums(self, x, key_padding_mask, saved, heads)

    def add_to_logits(self, logits: LogitTerms, a: Operands) -> None:
        sums, heads = a.read[self], a.q.size(1)
        logits.add(step_gate_bias(sums, heads) if a.step
                   else gate_bias(sums, heads, a.q_len, self.bidirectional))

    def extra_dimensions(self, a: Operands) -> tuple[Tensor, Tensor]:
        """``CAUSAL_SUMS``: the causal bias less ``c_i`` as two extra dimensions."""
        return gate_dimensions(a.read[self], a.q.size(1), a.q_len, a.q.dtype)
