"""``kerple_log``: KERPLE's logarithmic kernel as a bias by distance (Chi, Fan, Ramadge and
Rudnicky 2022, "KERPLE: Kernelized Relative Positional Embedding for Length Extrapolation",
NeurIPS, arXiv:2205.09921, sec. 4, the logarithmic variant).

``e_ij += -r1_h log(1 + r2_h |i - j|)``, ``r1_h, r2_h > 0`` learned per head: a conditionally
positive definite kernel of the distance, whose constant offset to a positive definite one
the softmax absorbs. :class:`KernelizedBias` holds what KERPLE's two variants share (the
power variant is ``kerple_power``).

Parametrization, as the authors' code (chijames/KERPLE, ``megatron/mpu/layers.py``): the two
scalars per head are the parameters themselves, projected onto the constraint before every
use: ``r1, r2 >= 0.01`` (and ``r2 <= 2`` for the power variant), clamped in place, so that
the optimizer's next step starts from the projected value (projected gradient descent).
They start uniform, the multiplier of the logarithm ``r1 ~ U(0, 2)`` and ``r2 ~ U(0, 1)``
(the authors' ``bias_p``, ``bias_a``). One pair per head and stack, shared by all the
stack's layers, as the paper's Figure 1 ("learnable parameters in each attention head shared
across layers") and the authors' code (one module handed to every layer). The bias is added
to the scaled logits, as the authors add it after ``1/sqrt(d_h)``.

Deviations: the paper evaluates causal language models only. The kernel is a function of
``|i - j|``, so the encoder (bidirectional) adds the same kernel on both sides of the query,
with the same parameters; the decoder adds it for ``j <= i``, the paper's form. The table is
computed in at least float32 whatever the parameters' dtype, so that a long distance cannot
overflow half precision (``|i - j|^r2`` reaches 1024^2 in the power variant).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .kinds import DistanceBias
from .registry import register_encoding

#: The authors' lower bound on both parameters (``eps = 1e-2``).
KERNEL_EPS = 1e-2


class KernelizedBias(DistanceBias):
    """``kernel(r1_h, r2_h, |r|)`` per head and distance ``r``; subclasses give the kernel,
    the parameters' initial ranges and ``r2``'s upper bound (None: no bound)."""

    #: ``r1 ~ U(0, R1_INIT)``, ``r2 ~ U(0, R2_INIT)``.
    R1_INIT: float
    R2_INIT: float
    R2_MAX: float | None = None

    def __init__(self, *, num_heads: int) -> None:
        super().__init__()
        self.r1 = nn.Parameter(torch.rand(num_heads) * self.R1_INIT)
        self.r2 = nn.Parameter(torch.rand(num_heads) * self.R2_INIT)

    @classmethod
    def shares_layers(cls, values) -> bool:
        return True

    def project(self) -> None:
        """Clamp the parameters onto the kernel's constraint, in place (``.data``: neither
        recorded by autograd nor a new version of a tensor saved for a backward; after the
        first call of a forward the values are in range and later calls change nothing)."""
        self.r1.data.clamp_(min=KERNEL_EPS)
        self.r2.data.clamp_(min=KERNEL_EPS, max=self.R2_MAX)

    def kernel(self, r1: Tensor, r2: Tensor, distance: Tensor) -> Tensor:
        """The bias, ``(H, R)``, from ``r1``, ``r2`` ``(H, 1)`` and ``|r|`` ``(1, R)``."""
        raise NotImplementedError

    def distance_bias(self, r_lo: int, r_hi: int) -> Tensor:
        self.project()
        dtype = torch.promote_types(self.r1.dtype, torch.float32)
        distance = torch.arange(r_lo, r_hi + 1, device=self.r1.device, dtype=dtype).abs()
        return self.kernel(self.r1.to(dtype)[:, None], self.r2.to(dtype)[:, None],
                           distance[None, :])


@register_encoding
class KerpleLog(KernelizedBias):
    name = "kerple_log"
    R1_INIT, R2_INIT = 2.0, 1.0

    def kernel(self, r1: Tensor, r2: Tensor, distance: Tensor) -> Tensor:
        return -r1 * torch.log1p(r2 * distance)
