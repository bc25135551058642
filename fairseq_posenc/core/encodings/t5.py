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

import argparse

import torch
from torch import Tensor, nn

from ..positions import t5_bucket
from .flags import bucket_options
from .base import RelativeScalarBias, init_scalar_table
from .registry import register_encoding


@register_encoding
class T5(RelativeScalarBias):
    name = "t5"
    flags = bucket_options("t5", "T5")

    def __init__(
        self, num_heads: int, num_buckets: int, max_distance: int, bidirectional: bool
    ) -> None:
        super().__init__()
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self.rel_bias = nn.Parameter(torch.empty(num_heads, num_buckets))
        init_scalar_table(self.rel_bias)

    @classmethod
    def shares_layers(cls, args: argparse.Namespace) -> bool:
        return True

    @classmethod
    def build(cls, args, *, num_heads, head_dim, causal, max_positions) -> "T5":
        return cls(num_heads, args.t5_num_buckets, args.t5_max_distance, not causal)

    def distance_bias(self, r_lo: int, r_hi: int) -> Tensor:
        r = torch.arange(r_lo, r_hi + 1, device=self.rel_bias.device)
        buckets = t5_bucket(r, self.num_buckets, self.max_distance, self.bidirectional)
        return self.rel_bias[:, buckets]
