"""The kinds of term that act on the sequence before the product: :class:`Rotation`
(queries and keys transformed: RoPE), :class:`Projection` (keys and values from a projection
along the sequence: DIET-ABS on a Linformer) and :class:`InputEmbedding` (fairseq's own
input positions, configured)."""

from __future__ import annotations

from typing import ClassVar, Optional

from torch import Tensor

from ...context import KernelFamily, PositionContext
from .. import outputs
from ..base import PositionEncoding
from .facts import KindFacts, PositionKind, to_implement
from .operands import LogitTerms, Operands


class Rotation(PositionEncoding):
    """Queries and keys transformed by their positions before the product (and before the
    keys are cached). A rotation is relative: it sees no padding, so ``q_i.k_j`` after it
    must depend on ``j - i`` alone (positions chosen per sequence reach it through
    :attr:`~fairseq_posenc.core.context.PositionContext.positions`)."""

    facts = KindFacts(PositionKind.ROTATION, transforms_qk=True,
                      families={KernelFamily.ROTARY: ("rotate_qk",)})
    fused_families = frozenset({KernelFamily.ROTARY})
    methods = ("rotate_qk",)

    @to_implement
    def rotate_qk(self, q: Tensor, k: Tensor, q_offset: int, ctx: PositionContext,
                  q_scale: float = 1.0) -> tuple[Tensor, Tensor]:
        """This step's queries and keys ``(B, H, len, d_h)``, both at positions
        ``q_offset + t``, transformed; the queries also scaled by ``q_scale`` (the
        attention's ``1/sqrt(d_h)``, which a rotation may fold into its own product)."""
        raise NotImplementedError

    def transform_qk(self, q: Tensor, k: Tensor, q_offset: int, ctx: PositionContext,
                     q_scale: float) -> tuple[Tensor, Tensor]:
        """:meth:`rotate_qk`, its shapes and dtypes checked."""
        return outputs.check_rotation(self, q, k, self.rotate_qk(q, k, q_offset, ctx, q_scale))


class Projection(PositionEncoding):
    """Keys and values computed from the input projected along the sequence, with a bias
    of their own."""

    facts = KindFacts(PositionKind.PROJECTION, mask_sized=True, additive=True,
                      reads_content=True, projects_keys=True)
    methods = ("project_sequence", "projected_bias")

    @to_implement
    def project_sequence(self, x: Tensor, key_padding_mask: Optional[Tensor],
                         ctx: PositionContext) -> Tensor:
        """``(k_len', B, C)``, the input that keys and values are computed from, projected
        along the sequence (padding excluded) from ``x`` (``(T, B, C)``). The projected keys
        have no padding."""
        raise NotImplementedError

    @to_implement
    def projected_bias(self, q_len: int, key_padding_mask: Optional[Tensor],
                       ctx: PositionContext) -> Tensor:
        """``(B or 1, H or 1, q_len, k_len')`` added to the logits over the projected keys;
        ``key_padding_mask`` is the padding of the input."""
        raise NotImplementedError

    def keys_input(self, x: Tensor, key_padding_mask: Optional[Tensor],
                   ctx: PositionContext) -> Tensor:
        """:meth:`project_sequence`, checked: ``(k_len', B, C)`` from ``x``."""
        return outputs.PROJECTED_INPUT.check(
            self, self.project_sequence(x, key_padding_mask, ctx),
            (None, x.size(1), x.size(2)))

    def add_to_logits(self, logits: LogitTerms, a: Operands) -> None:
        logits.add(outputs.PROJECTED_BIAS.check(
            self, self.projected_bias(a.q_len, a.padding, a.ctx), a.sizes))


class InputEmbedding(PositionEncoding):
    """Position embeddings added to the input by fairseq's own modules; self-attention
    stays stock. ``fairseq_flags`` says how fairseq's transformer is configured (a class
    without it is refused at registration); no method of the class computes an
    embedding, and its class methods (:meth:`~..base.PositionEncoding.position_draw`,
    ``max_length``, ``random_positions_refusal``) are all it can add."""

    at_input = True
    facts = KindFacts(PositionKind.INPUT)
    methods = ()
    #: (no_token_positional_embeddings, learned_pos) for fairseq's transformer.
    fairseq_flags: ClassVar[tuple[bool, bool]]
