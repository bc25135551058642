"""``t5``: bucketed relative scalar bias (Raffel et al. 2020, JMLR, section 2.1).

``e_ij += b_h[bucket(j - i)]`` with T5's logarithmic buckets (32 buckets, max distance
128 by default): bidirectional buckets in the encoder, causal ones (``r <= 0`` only) in the
decoder. One table ``rel_bias: H x num_buckets`` per stack, shared by all its layers, as in
T5 (the bias is computed once in the first layer and passed on).

Deviations: T5 folds the ``1/sqrt(d_h)`` scaling into its initialisation; here the word
logits keep fairseq's scaling and the bias is added after it, as in Chen 2021a's
``Raffel`` row. The table starts as N(0, 0.02).
"""

from __future__ import annotations

from typing import Annotated

import torch
from torch import Tensor, nn

from ..positions import t5_bucket
from .base import init_scalar_table
from .kinds import DistanceBias
from .options import BUCKETS_HELP, DISTANCE_HELP, Option
from .registry import register_encoding


@register_encoding
class T5(DistanceBias):
    name = "t5"

    def __init__(
        self, *, num_heads: int, causal: bool,
        t5_num_buckets: Annotated[int, Option(BUCKETS_HELP.format("T5"), minimum=4,
                                              hint="T5 uses 32.", metavar="N")] = 32,
        t5_max_distance: Annotated[int, Option(DISTANCE_HELP.format("T5"), minimum=1,
                                               hint="T5 uses 128.", metavar="N")] = 128,
    ) -> None:
        super().__init__()
        self.num_buckets = t5_num_buckets
        self.max_distance = t5_max_distance
        self.bidirectional = not causal
        self.rel_bias = nn.Parameter(torch.empty(num_heads, t5_num_buckets))
        init_scalar_table(self.rel_bias)

    @classmethod
    def shares_layers(cls, values) -> bool:
        return True

    def distance_bias(self, r_lo: int, r_hi: int) -> Tensor:
        r = torch.arange(r_lo, r_hi + 1, device=self.rel_bias.device)
        buckets = t5_bucket(r, self.num_buckets, self.max_distance, self.bidirectional)
        return self.rel_bias[:, buckets]
