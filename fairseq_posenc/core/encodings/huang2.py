"""``huang2``: multiplicative scalar of the signed distance (Huang et al. 2020, method 2,
eqs. 12-13).

``e_ij = (q_i.k_j) * a[l,h][j - i] / sqrt(d_h)``: ``2n - 1`` scalars per head and layer
(``w_{1-n} .. w_{n-1}``), starting at 1. ``--huang2-clip K`` optionally clips ``j - i`` to
``[-K, K]``. The causal decoder keeps the ``n`` (or ``K + 1``) entries with ``j <= i``.
The same per-distance table as ``diet_rel``, used as a factor instead of a summand.
"""

from __future__ import annotations

import argparse

from torch import nn

from ..context import FusedKernel, KernelFamily, PositionKind
from .diet_rel import DietRel
from .flags import clip_option
from .huang1 import huang_clip
from .registry import register_encoding


@register_encoding
class Huang2(DietRel):
    name = "huang2"
    flags = (clip_option("huang2"),)
    kind = PositionKind.DISTANCE_SCALE
    fused_kernel = FusedKernel(KernelFamily.DISTANCE_FACTOR)

    def __init__(self, num_heads: int, max_len: int, causal: bool) -> None:
        super().__init__(num_heads, max_len, causal)
        nn.init.ones_(self.rel_bias)  # a factor: start from plain attention

    @classmethod
    def shares_layers(cls, args: argparse.Namespace) -> bool:
        return False

    @classmethod
    def build(cls, args, *, num_heads, head_dim, causal, max_positions) -> "Huang2":
        return cls(num_heads, huang_clip(args, cls.name, max_positions) + 1, causal)
