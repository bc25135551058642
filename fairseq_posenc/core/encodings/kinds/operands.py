"""What the position terms of one attention call read (:class:`Operands`) and what they write
to the logits (:class:`LogitTerms`): the arguments of every kind's hooks."""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Optional

from torch import Tensor

from ...context import PositionContext


class Operands(NamedTuple):
    """One call's queries and keys, as the terms see them."""

    #: ``(B, H, q_len, d_h)``, scaled (and rotated); ``(B, H, k_len, d_h)``, cache included.
    q: Tensor
    k: Tensor
    q_len: int
    k_len: int
    #: Queries are the positions ``q_offset .. q_offset + q_len - 1`` of ``k_len``.
    q_offset: int
    #: The padding of the self-attention input, cache included (``(B, k_len)``, True at
    #: padding, or None); absolute terms count the real tokens' positions from it.
    padding: Optional[Tensor]
    ctx: PositionContext
    #: The terms that read the layer's input -> what they read of every key
    #: (``read_input``: FoX's cumulative sums of log-gates).
    read: Mapping[Any, Tensor]
    #: ``ROWS`` terms that one query reads as products by distance
    #: (:attr:`~fairseq_posenc.core.attention_plan.Plan.one_query_rows`).
    by_rows: tuple = ()
    #: A decoding step: one query, the last position, no padding.
    step: bool = False

    @property
    def sizes(self) -> tuple[int, int, int, int]:
        """The logits' ``(B, H, q_len, k_len)``, which each term's tensor is checked against."""
        return (self.q.size(0), self.q.size(1), self.q_len, self.k_len)


class LogitTerms:
    """The logits ``content * scale + bias`` as the terms build them: ``content`` replacing
    ``q.k``, a ``scale`` multiplying it and an additive ``bias``; None where no term has one."""

    __slots__ = ("content", "scale", "bias")

    def __init__(self) -> None:
        self.content: Optional[Tensor] = None
        self.scale: Optional[Tensor] = None
        self.bias: Optional[Tensor] = None

    def add(self, bias: Tensor) -> None:
        self.bias = bias if self.bias is None else self.bias + bias

    def multiply(self, factor: Tensor) -> None:
        self.scale = factor if self.scale is None else self.scale * factor

    def replace(self, content: Tensor) -> None:
        self.content = content
