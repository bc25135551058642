"""fairseq glue: the self-attention layer of the plugin's stacks, a ``MultiheadAttention``.

One ``MultiheadAttention`` subclass serves every attention-level encoding, in both stacks,
in training, evaluation and decoding. It replaces ``forward`` as a whole: fairseq's own
takes, in training and evaluation, a fused path that skips every hook a subclass could
override (``docs/fairseq-notes.md``; ``docs/decisions.md``, "Replacing forward"). The
computation is the torch-only core's
(:class:`~fairseq_posenc.core.attention_core.PositionalAttentionCore`, which
:class:`fairseq_posenc.nn.PositionalSelfAttention` runs too): this layer adds fairseq's
projections (with quantization noise), its attention dropout, and its incremental state,
whose buffer the core extends and the inherited ``reorder_incremental_state`` reorders for
beam search.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from fairseq.modules import MultiheadAttention
from torch import Tensor

from ..core.attention_core import AttachedPositions, PositionalAttentionCore, concat_low_rank
from ..core.attention_plan import DistanceKernel, LowRankKernel
from ..core.context import PositionScope

__all__ = ["AttachedPositions", "PositionalMultiheadAttention", "concat_low_rank"]


class PositionalMultiheadAttention(PositionalAttentionCore, MultiheadAttention):
    """Position-aware self-attention, built with its position terms (``positions``; none
    by default: :meth:`attach` gives a layer built on its own its terms).

    ``low_rank_kernel``: how ``LOW_RANK`` terms run on the fused path, and
    ``distance_kernel`` how a term by distance does (``docs/architecture.md``, "Which
    kernel runs"); every choice computes the same numbers.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        q_noise: float = 0.0,
        qn_block_size: int = 8,
        low_rank_kernel: LowRankKernel = "auto",
        distance_kernel: DistanceKernel = "auto",
        positions: Optional[AttachedPositions] = None,
    ) -> None:
        super().__init__(
            embed_dim,
            num_heads,
            dropout=dropout,
            self_attention=True,
            q_noise=q_noise,
            qn_block_size=qn_block_size,
        )
        self.low_rank_kernel: LowRankKernel = low_rank_kernel
        self.distance_kernel: DistanceKernel = distance_kernel
        self._positions = positions or AttachedPositions.of(None, PositionScope())

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """fairseq's signature: self-attention over ``query`` (``key`` and ``value`` are
        the same tensor), ``attn_mask`` the decoder's future mask."""
        if static_kv or before_softmax:
            raise NotImplementedError(
                "fairseq-posenc self-attention does not support static_kv / before_softmax"
            )
        if incremental_state is None:
            return self.attend(query, key_padding_mask, attn_mask, None, need_weights,
                               need_head_weights)
        saved = self._get_input_buffer(incremental_state)
        result = self.attend(query, key_padding_mask, attn_mask, saved, need_weights,
                             need_head_weights)
        self._set_input_buffer(incremental_state, saved)
        return result
