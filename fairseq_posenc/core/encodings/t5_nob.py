"""``t5_nob``: T5's relative scalar bias without buckets (Wu et al. 2021, AT5, section 4,
the "T5-NoB" ablation of Table 6).

``e_ij += b_h[clip(j - i)]``: one scalar per head and clipped distance, ``2n - 1`` per stack
(``n`` = ``--t5-nob-max-len``, default the stack's max positions; AT5's MT setting uses 256),
one table per stack shared by all layers as in T5. The same table as ``diet_rel`` with
layer-wise sharing; a separate name because the AT5 paper reports it as its own row.
Like ``at5``, it acts in the first self-attention layer of each stack by default (AT5's
translation setting, where Table 6 was measured); ``--pos-layers all`` puts the shared
table in every layer, as T5 does.
Causal decoders keep the ``n`` entries with ``j <= i``. The table starts as N(0, 0.02).
"""

from __future__ import annotations

import argparse

from .diet_rel import DietRel
from .flags import max_len_option
from .registry import register_encoding


@register_encoding
class T5NoBuckets(DietRel):
    name = "t5_nob"
    default_layers = "first"
    flags = (max_len_option(
        "t5_nob", "the table covers distances -(N-1)..N-1; longer ones are clipped"),)

    @classmethod
    def shares_layers(cls, args: argparse.Namespace) -> bool:
        return True

    @classmethod
    def build(cls, args, *, num_heads, head_dim, causal, max_positions) -> "T5NoBuckets":
        return cls(num_heads, args.t5_nob_max_len or max_positions, causal)
