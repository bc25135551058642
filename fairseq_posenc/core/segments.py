"""Segments of a multi-sentence source: per-head segment attention or an input embedding.

Chen et al. 2021b (DIET), eqs. (1)-(3): ``e_ij += E_S(S(i), S(j)) = S[l,h][S(i), S(j)]``, a
learned ``K x K`` table per head and layer (``--segment-attention``), against the BERT-style
input segment embedding ``x_i += W_seg[S(i)]`` (Devlin et al. 2018; ``--segment-embedding``)
as the comparison. Either works with any ``--pos-encoding``; both together are allowed.

For translation, segments are the sentences of a multi-sentence source joined by a separator
token (``--segment-separator``, default ``<sep>``, which must be in the source dictionary):
``S(i)`` is the number of separators before token ``i``, so a separator belongs to the
sentence it closes. ``K`` = ``--num-segments`` (default 2, as BERT and DIET's sentence
pairs); a source with more segments is an error, not silently clipped.

Where: encoder self-attention, every layer (DIET adds ``E_S`` in each layer, independently
of ``--pos-layers``). Targets are not segmented: decoder self-attention is unchanged.

Initialisation: ``S`` starts as N(0, 0.02) like the position scalars. The input embedding is
added to the token embedding before fairseq's ``sqrt(d)`` embedding scale, so it is drawn
and scaled like a token embedding (N(0, 1/d), then times ``sqrt(d)``), as BERT adds token,
segment and position embeddings on the same footing.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from .context import PositionContext
from .encodings.base import init_scalar_table
from .encodings.kinds import PairBias

def segment_ids(tokens: Tensor, separator: int, num_segments: int) -> Tensor:
    """``S(i)``: separators before token ``i``, ``(B, T)``; an error past ``num_segments``."""
    is_sep = tokens.eq(separator).long()
    ids = is_sep.cumsum(dim=1) - is_sep
    if ids.numel() and int(ids.max()) >= num_segments:
        raise ValueError(
            f"a source has {int(ids.max()) + 1} segments (separated by token {separator}), "
            f"but --num-segments is {num_segments}; raise --num-segments or split the input."
        )
    return ids


class SegmentAttention(PairBias):
    """``S[h][S(i), S(j)]`` for one layer, from the batch's segment ids in the stack's
    context."""

    def __init__(self, num_heads: int, num_segments: int) -> None:
        super().__init__()
        self.seg_bias = nn.Parameter(torch.empty(num_heads, num_segments, num_segments))
        init_scalar_table(self.seg_bias)

    def pair_bias(self, q_len: int, k_len: int, q_offset: int,
                  key_padding_mask: Optional[Tensor], ctx: PositionContext) -> Tensor:
        ids = ctx.segment_ids  # (B, T): the encoder's, never incremental
        if ids is None:
            raise ValueError("segment attention needs the source's segment ids: call the "
                             "encoder, which computes them from --segment-separator")
        bias = self.seg_bias[:, ids[:, :, None], ids[:, None, :]]  # (H, B, T, T)
        return bias.transpose(0, 1)


def segment_embedding(num_segments: int, embed_dim: int) -> nn.Embedding:
    embedding = nn.Embedding(num_segments, embed_dim)
    nn.init.normal_(embedding.weight, mean=0.0, std=embed_dim ** -0.5)  # as fairseq's tokens
    return embedding
