"""``diet_rel``: one scalar per head and relative distance (DIET-REL = REL-SCALAR).

Chen et al. 2021b (DIET), eq. (3); Chen et al. 2021a ("Demystifying"), REL-SCALAR:
``e_ij = q_i.k_j / sqrt(d_h) + R[r]`` with no buckets; ``r`` is clipped to the table's
range, ``n`` = ``--diet-rel-max-len`` (default: the stack's ``--max-source-positions`` /
``--max-target-positions``), i.e. a ``2n - 1`` table per head and layer in the encoder.

Sharing (``--diet-rel-sharing``, DIET section 5): ``none`` (default, the papers'
recommendation for DIET-REL), ``layer`` (one set of per-head tables for all layers) or
``head`` (one table per layer used by every head).

Deviations: the papers write ``R_{i-j}``; we index by ``r = j - i`` (``docs/conventions.md``,
"Distance sign"), which relabels the same parameters. The causal decoder only ever sees
``r <= 0``, so its table has the ``n`` entries it can use instead of ``2n - 1`` (the other
``n - 1`` would never be trained). The per-head segment term ``E_S`` of eq. (3) is a
separate option (segment attention). Tables start as N(0, 0.02) (BERT's initializer range).
"""

from __future__ import annotations

import argparse

import torch
from torch import Tensor, nn

from ..positions import clipped_index
from .base import SHARING_CHOICES, RelativeScalarBias, init_scalar_table
from .flags import Flag, max_len_option
from .registry import register_encoding


@register_encoding
class DietRel(RelativeScalarBias):
    name = "diet_rel"
    flags = (
        max_len_option("diet_rel",
                       "the table covers distances -(N-1)..N-1; longer ones are clipped"),
        Flag("--diet-rel-sharing", "diet_rel: share tables across layers or heads (default "
             "none, as the DIET paper recommends)", default="none", choices=SHARING_CHOICES),
    )

    def __init__(self, num_heads: int, max_len: int, causal: bool) -> None:
        super().__init__()
        self.r_lo, self.r_hi = -(max_len - 1), (0 if causal else max_len - 1)
        self.rel_bias = nn.Parameter(torch.empty(num_heads, self.r_hi - self.r_lo + 1))
        init_scalar_table(self.rel_bias)

    @classmethod
    def shares_layers(cls, args: argparse.Namespace) -> bool:
        return args.diet_rel_sharing == "layer"

    @classmethod
    def build(cls, args, *, num_heads, head_dim, causal, max_positions) -> "DietRel":
        heads = 1 if args.diet_rel_sharing == "head" else num_heads
        return cls(heads, args.diet_rel_max_len or max_positions, causal)

    def distance_bias(self, r_lo: int, r_hi: int) -> Tensor:
        r = torch.arange(r_lo, r_hi + 1, device=self.rel_bias.device)
        return self.rel_bias[:, clipped_index(r, self.r_lo, self.r_hi)]
