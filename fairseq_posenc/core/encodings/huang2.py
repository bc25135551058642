"""``huang2``: multiplicative scalar of the signed distance (Huang et al. 2020, method 2,
eqs. 12-13).

``e_ij = (q_i.k_j) * a[l,h][j - i] / sqrt(d_h)``: ``2n - 1`` scalars per head and layer
(``w_{1-n} .. w_{n-1}``), starting at 1. ``--huang2-clip K`` optionally clips ``j - i`` to
``[-K, K]``. The causal decoder keeps the ``n`` (or ``K + 1``) entries with ``j <= i``.
The same per-distance table as ``diet_rel``, used as a factor instead of a summand.
"""

from __future__ import annotations

from torch import nn

from .diet_rel import RelativeTable
from .huang1 import Clip, huang_clip
from .kinds import DistanceScale
from .registry import register_encoding


@register_encoding
class Huang2(RelativeTable, DistanceScale):
    name = "huang2"

    def __init__(self, *, num_heads: int, causal: bool, max_positions: int,
                 huang2_clip: Clip = None) -> None:
        super().__init__(num_heads, huang_clip(huang2_clip, max_positions) + 1, causal)
        nn.init.ones_(self.rel_bias)  # a factor: start from plain attention
