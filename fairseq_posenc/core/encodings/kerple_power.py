"""``kerple_power``: KERPLE's power kernel as a bias by distance (Chi, Fan, Ramadge and
Rudnicky 2022, "KERPLE: Kernelized Relative Positional Embedding for Length Extrapolation",
NeurIPS, arXiv:2205.09921, sec. 4, the power variant).

``e_ij += -r1_h |i - j|^r2_h``, ``r1_h > 0`` and ``0 < r2_h <= 2`` learned per head (the
kernel is conditionally positive definite only for exponents up to 2). With ``r2 = 1`` it is
ALiBi with learned slopes.

Parametrization, as the authors' code (chijames/KERPLE, ``megatron/mpu/layers.py``,
``ParallelKerplePower`` with ``kerple_power_ap_``, the configuration of their experiments):
the parameters themselves, projected in place before every use onto ``r1 >= 0.01`` and
``0.01 <= r2 <= 2``; they start as ``r1 ~ U(0, 1)`` (the authors' ``bias_a``) and the exponent
``r2 ~ U(0, 2)`` (``bias_p``). One pair per head and stack, shared by all layers; the
projection, the sharing, the encoder's symmetric form and the float32 table are
:class:`~fairseq_posenc.core.encodings.kerple_log.KernelizedBias`'s (see ``kerple_log``, whose
docstring lists the deviations).
"""

from __future__ import annotations

from torch import Tensor

from .kerple_log import KernelizedBias
from .registry import register_encoding


@register_encoding
class KerplePower(KernelizedBias):
    name = "kerple_power"
    R1_INIT, R2_INIT = 1.0, 2.0
    R2_MAX = 2.0

    def kernel(self, r1: Tensor, r2: Tensor, distance: Tensor) -> Tensor:
        # pow's gradient in the exponent is 0 at distance 0 (torch defines it so)
        return -r1 * distance.pow(r2)
