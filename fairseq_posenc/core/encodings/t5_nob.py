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

from .diet_rel import RelativeTable, TableLen
from .registry import register_encoding


@register_encoding
class T5NoBuckets(RelativeTable):
    name = "t5_nob"
    default_layers = "first"

    def __init__(self, *, num_heads: int, causal: bool, max_positions: int,
                 t5_nob_max_len: TableLen = None) -> None:
        super().__init__(num_heads, t5_nob_max_len or max_positions, causal)

    @classmethod
    def shares_layers(cls, values) -> bool:
        return True
