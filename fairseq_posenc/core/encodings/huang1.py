"""``huang1``: multiplicative scalar of the absolute distance (Huang et al. 2020, EMNLP
Findings, method 1, eqs. 11-12).

``e_ij = (q_i.k_j) * a[l,h][|j - i|] / sqrt(d_h)``: one scalar per head, layer and absolute
distance, ``n`` of them (``n`` = max positions), starting at 1 so that training begins from
plain attention. The paper applies no clipping here; ``--huang1-clip K`` optionally clips
``|j - i|`` at ``K``, as every Huang method has an optional clip (``docs/conventions.md``,
"Clipping and table ranges").

A factor on the logits (``DISTANCE_SCALE``): the explicit attention path (logits
materialised).
"""

from __future__ import annotations

from typing import Annotated, Optional

import torch
from torch import Tensor, nn

from .kinds import DistanceScale
from .options import CLIP_HELP, Option
from .registry import register_encoding


#: ``huangN_clip``: optional, positive when given.
Clip = Annotated[Optional[int], Option(CLIP_HELP, minimum=1, metavar="K")]


def huang_clip(clip: Optional[int], max_positions: int) -> int:
    """Largest distance with its own entry: ``huangN_clip`` if given, else ``n - 1``."""
    return min(clip, max_positions - 1) if clip else max_positions - 1


@register_encoding
class Huang1(DistanceScale):
    name = "huang1"

    def __init__(self, *, num_heads: int, max_positions: int, huang1_clip: Clip = None) -> None:
        super().__init__()
        self.clip = clip = huang_clip(huang1_clip, max_positions)
        self.rel_scale = nn.Parameter(torch.ones(num_heads, clip + 1))

    def distance_bias(self, r_lo: int, r_hi: int) -> Tensor:
        r = torch.arange(r_lo, r_hi + 1, device=self.rel_scale.device)
        return self.rel_scale[:, r.abs().clamp(max=self.clip)]
