"""``huang3``: a relative vector gating each dimension of ``q_i.k_j`` (Huang et al. 2020,
method 3, eqs. 14-15).

``e_ij = sum_d q_id k_jd a[l,h][j - i]_d / sqrt(d_h)`` ("sum prod" of query, key and relative
vector): ``2n - 1`` vectors of size ``d_h`` per head and layer (``w_{1-n} .. w_{n-1}``; the
causal decoder keeps the ``n`` with ``j <= i``). The paper applies no clipping here;
``--huang3-clip K`` optionally clips ``j - i`` to ``[-K, K]``, as for methods 1, 2 and 4.

It replaces the content logits (the ``content_logits`` hook; ``q`` arrives already scaled by
``1/sqrt(d_h)``). The paper states no initialisation; ``a`` starts at 1, as the scalar
methods 1-2 do (``docs/conventions.md``, "Multiplicative methods start at 1"), so that
training begins from plain attention (the vector analogue of method 2's factor).

Memory: the three-way product cannot be written as a matrix product, so each forward holds
a ``(B, H, q_len, k_len, d_h)`` tensor (the gathered ``(H, q_len, k_len, d_h)`` table, and
the same-sized product for autograd). The paper's Table 1 gives method 3 the runtime storage
``O(m h n^2 d)`` and section 3.6 warns: "it requires a significantly higher memory footprint
during training ... we can only fit 2 sequences in each GPU for method 3, as opposed to 20
sequences per GPU for all other methods." Incremental decoding computes one row
(``(B, H, 1, k_len, d_h)``) per step.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..context import PositionContext
from .huang1 import Clip, huang_clip
from .kinds import ContentLogits
from .distance_rows import clipped_distance_index
from .registry import register_encoding


@register_encoding
class Huang3(ContentLogits):
    name = "huang3"

    def __init__(self, *, num_heads: int, head_dim: int, causal: bool, max_positions: int,
                 huang3_clip: Clip = None) -> None:
        super().__init__()
        clip = huang_clip(huang3_clip, max_positions)
        self.r_lo, self.r_hi = -clip, (0 if causal else clip)
        # a gate on every dimension of q.k: 1 is plain attention
        self.rel_gate = nn.Parameter(torch.ones(num_heads, self.r_hi - self.r_lo + 1, head_dim))

    def content_logits(self, q: Tensor, k: Tensor, q_offset: int,
                       ctx: PositionContext) -> Tensor:
        idx = clipped_distance_index(q.size(-2), k.size(-2), q_offset, self.r_lo, self.r_hi,
                                     ctx, q.device)
        gate = self.rel_gate.to(q.dtype)[:, idx]  # H, q_len, k_len, d_h: inherent to method 3
        if idx.dim() == 4:  # distances per sequence (chosen positions): H, B, q_len, k_len, d_h
            return torch.einsum("bhid,bhjd,hbijd->bhij", q, k, gate.squeeze(2))
        return torch.einsum("bhid,bhjd,hijd->bhij", q, k, gate)
