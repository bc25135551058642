"""``alibi``: attention with linear biases (Press et al. 2022, ICLR, section 3).

``e_ij += -m_h |j - i|`` with fixed head slopes ``m_h``: the geometric sequence
``2^(-8/H), 2^(-16/H), ...`` for ``H`` a power of two, and for other ``H`` the slopes of the
nearest smaller power of two followed by every other slope of the next larger one (the
authors' ``get_slopes``). The paper's decoder adds ``m_h (j - i)`` for ``j <= i``, which is the
same number; in the encoder the penalty is symmetric (``docs/conventions.md``, "Masks and
padding"). No parameters; the bias is the same for every layer, so it is computed once per
stack and forward.

In the causal decoder the bias is also exactly a rank-1 term over key positions: for
``j <= i``, ``-m_h (i - j) = m_h j - m_h i``, and ``-m_h i`` is the same for every key of a row,
which a softmax ignores. :meth:`Alibi.factors` gives it as ``P_Q[i] . P_K[j] = m_h j``
(``j`` split as ``16 floor(j/16) + (j mod 16)``, two parts that bf16 and fp16 hold exactly
up to ``j = 4095``), so that a fused attention kernel can run it with the causal mask and
no ``T x T`` bias (``KernelFamily.CAUSAL_EXTRA_DIMENSIONS``). Keys after the query get
``m_h j`` instead of ``-m_h (j - i)``; the causal mask removes both.

Not proposed by the papers this project reproduces; included because researchers comparing
position encodings today expect it.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..context import FusedKernel, KernelFamily, PositionContext
from .kinds import DistanceBias
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
class Alibi(DistanceBias):
    name = "alibi"
    #: Bidirectional: the fused distance kernel; causal: also the bias's exact rank-1 form.
    fused_families = frozenset({KernelFamily.DISTANCE, KernelFamily.CAUSAL_EXTRA_DIMENSIONS})

    #: Rows of :meth:`factors`: any length (the two-part split is exact below 4096).
    max_len = 4096

    def __init__(self, *, num_heads: int, causal: bool = False) -> None:
        super().__init__()
        self.register_buffer("slopes", torch.tensor(alibi_slopes(num_heads)), persistent=False)
        if causal:  # the bias also has the exact rank-1 form of :meth:`factors`
            self.fused_kernel = FusedKernel(KernelFamily.CAUSAL_EXTRA_DIMENSIONS)

    @classmethod
    def shares_layers(cls, values) -> bool:
        return True

    def distance_bias(self, r_lo: int, r_hi: int) -> Tensor:
        r = torch.arange(r_lo, r_hi + 1, device=self.slopes.device, dtype=self.slopes.dtype)
        return -self.slopes[:, None] * r.abs()[None, :]

    def factors(self, length: int, ctx: PositionContext) -> tuple[Tensor, Tensor]:
        """The causal bias up to a per-row constant: ``P_Q[i] = (m_h, m_h)``,
        ``P_K[j] = (16 floor(j/16), j mod 16)``, so ``P_Q[i] . P_K[j] = m_h j``."""
        j = torch.arange(length, device=self.slopes.device)
        p_k = torch.stack([j - j % 16, j % 16], dim=-1).to(self.slopes.dtype)[None]  # 1, n, 2
        p_q = self.slopes[:, None, None].expand(-1, length, 2)  # H, n, 2
        return p_q, p_k
