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

from typing import Annotated, Optional

import torch
from torch import Tensor, nn

from ..positions import clipped_index
from .base import init_scalar_table
from .kinds import DistanceBias
from .options import MAX_LEN_HELP, Option, Sharing
from .registry import register_encoding


#: A table over the distances ``-(N-1)..N-1``, longer ones clipped (``diet_rel``, ``t5_nob``).
TableLen = Annotated[Optional[int], Option(MAX_LEN_HELP.format(
    "the table covers distances -(N-1)..N-1; longer ones are clipped"), minimum=1,
    metavar="N")]


class RelativeTable(DistanceBias):
    """A scalar per head and clipped distance ``-(n-1)..n-1`` (``..0`` when causal),
    starting as N(0, 0.02); the registered encodings below give ``n`` and the heads."""

    def __init__(self, num_heads: int, max_len: int, causal: bool) -> None:
        super().__init__()
        self.r_lo, self.r_hi = -(max_len - 1), (0 if causal else max_len - 1)
        self.rel_bias = nn.Parameter(torch.empty(num_heads, self.r_hi - self.r_lo + 1))
        init_scalar_table(self.rel_bias)

    def distance_bias(self, r_lo: int, r_hi: int) -> Tensor:
        r = torch.arange(r_lo, r_hi + 1, device=self.rel_bias.device)
        return self.rel_bias[:, clipped_index(r, self.r_lo, self.r_hi)]


@register_encoding
class DietRel(RelativeTable):
    name = "diet_rel"

    def __init__(self, *, num_heads: int, causal: bool, max_positions: int,
                 diet_rel_max_len: TableLen = None,
                 diet_rel_sharing: Annotated[Sharing, Option(
                     "share tables across layers or heads (default none, as the DIET paper "
                     "recommends)")] = "none") -> None:
        super().__init__(1 if diet_rel_sharing == "head" else num_heads,
                         diet_rel_max_len or max_positions, causal)

    @classmethod
    def shares_layers(cls, values) -> bool:
        return values["diet_rel_sharing"] == "layer"
