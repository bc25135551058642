"""``sandwich``: the inner product of two sinusoidal embeddings as a fixed bias by distance
(Chi, Fan, Rudnicky and Ramadge 2023, "Dissecting Transformer Length Extrapolation via the
Lens of Receptive Field Analysis", ACL, arXiv:2212.10356, the section that introduces
Sandwich, and its appendix's construction).

Of ``(q_i + p_i).(k_j + p_j)`` Sandwich keeps ``q_i.k_j`` and the position-position term
``p_i.p_j``, which for sinusoidal embeddings of dimension ``D`` (``--sandwich-dim``) depends on
``i - j`` only; each head ``h = 1..H`` divides it by ALiBi's ``8h/H`` (the paper's ``h``, its
Figure 1)::

    e_ij += (sum_{k=1}^{D/2} cos((i - j) / 10000^(2k/D)) - D/2) * H / (8h)

No parameters; the same bias in every layer, so it is computed once per stack and forward.
``cos`` is even, so the bias is symmetric: the encoder adds it on both sides of the query
and the decoder for ``j <= i`` (the paper's causal language models), the same formula.

Where the sources differ. The two public implementations, NVIDIA NeMo 1.x's
``sandwich_relative_position_embedding.py`` and attention-gym's ``attn_gym/mods/sandwich.py``
(which takes it from the paper's appendix), agree on the formula above but for three points,
which ``docs/conventions.md`` ("Sandwich") lists as not yet checked against the paper's text:

* ``- D/2`` is a constant per head, which the softmax ignores; with it the bias is 0 at
  distance 0 and negative elsewhere (NeMo subtracts it; attention-gym does not);
* the sum runs over ``k = 1..D/2``, as NeMo writes it; attention-gym sums ``k = 0..D/2 - 1``
  (frequencies one step higher: it has ``cos(i - j)`` and lacks ``cos((i - j) / 10000)``);
* ``D = 128`` by default, the value attention-gym reports the paper uses; NeMo uses the
  head dimension. The head scaling ``H / (8h)`` is the same in both.

The table is computed in at least float32 from integers (no half-precision frequencies).
"""

from __future__ import annotations

from typing import Annotated, Any, Mapping

import torch
from torch import Tensor

from .kinds import DistanceBias
from .options import Option
from .registry import register_encoding


@register_encoding
class Sandwich(DistanceBias):
    name = "sandwich"

    def __init__(self, *, num_heads: int, sandwich_dim: Annotated[int, Option(
            "dimension D of the sinusoidal embeddings whose inner product is the bias (an "
            "even number; default 128)", minimum=2, hint="The paper uses 128.",
            metavar="D")] = 128) -> None:
        super().__init__()
        check_dim(sandwich_dim)
        self.dim = sandwich_dim
        # the head numbers h = 1..H (exact in any float dtype); the table follows their
        # device, and their dtype where it is wider than float32
        self.register_buffer("heads", torch.arange(1, num_heads + 1, dtype=torch.float32),
                             persistent=False)

    @classmethod
    def check_options(cls, values: Mapping[str, Any]) -> None:
        check_dim(values["sandwich_dim"])

    @classmethod
    def shares_layers(cls, values) -> bool:
        return True

    def distance_bias(self, r_lo: int, r_hi: int) -> Tensor:
        dtype = torch.promote_types(self.heads.dtype, torch.float32)
        device = self.heads.device
        k = torch.arange(1, self.dim // 2 + 1, device=device, dtype=dtype)
        frequencies = 10000.0 ** (-2.0 * k / self.dim)
        r = torch.arange(r_lo, r_hi + 1, device=device, dtype=dtype)
        inner = torch.cos(r[:, None] * frequencies[None, :]).sum(-1) - self.dim / 2  # (R,)
        heads = self.heads.to(dtype)
        return inner[None, :] * (heads.numel() / (8.0 * heads))[:, None]


def check_dim(dim: int) -> None:
    if dim < 2 or dim % 2:
        raise ValueError(f"--sandwich-dim must be a positive even number, got {dim}. "
                         "The paper uses 128.")
