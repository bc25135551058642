"""``alibi``: attention with linear biases (Press et al. 2022, ICLR, section 3).

``e_ij += -m_h |j - i|`` with fixed head slopes ``m_h``: the geometric sequence
``2^(-8/H), 2^(-16/H), ...`` for ``H`` a power of two, and for other ``H`` the slopes of the
nearest smaller power of two followed by every other slope of the next larger one (the
authors' ``get_slopes``). The paper's decoder adds ``m_h (j - i)`` for ``j <= i``, which is the
same number; in the encoder the penalty is symmetric (SPEC.md). No parameters; the bias is
the same for every layer, so it is computed once per stack and forward.

Not proposed by the papers this project reproduces; included because researchers comparing
position encodings today expect it.
"""

from __future__ import annotations

import argparse
import math

import torch
from torch import Tensor

from .base import RelativeScalarBias
from .registry import register_encoding


def alibi_slopes(num_heads: int) -> list[float]:
    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (h + 1) for h in range(n)]

    if math.log2(num_heads).is_integer():
        return power_of_two(num_heads)
    closest = 2 ** math.floor(math.log2(num_heads))
    return power_of_two(closest) + alibi_slopes(2 * closest)[0::2][: num_heads - closest]


@register_encoding
class Alibi(RelativeScalarBias):
    name = "alibi"

    def __init__(self, num_heads: int) -> None:
        super().__init__()
        self.register_buffer("slopes", torch.tensor(alibi_slopes(num_heads)), persistent=False)

    @classmethod
    def shares_layers(cls, args: argparse.Namespace) -> bool:
        return True

    @classmethod
    def build(cls, args, *, num_heads, head_dim, causal, max_positions) -> "Alibi":
        return cls(num_heads)

    def distance_bias(self, r_lo: int, r_hi: int) -> Tensor:
        r = torch.arange(r_lo, r_hi + 1, device=self.slopes.device, dtype=self.slopes.dtype)
        return -self.slopes[:, None] * r.abs()[None, :]
