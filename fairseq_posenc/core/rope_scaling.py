"""RoPE's frequencies rescaled at translation time, so that a model trained on sentences of
up to ``L`` tokens reads longer ones: position interpolation, NTK-aware base scaling and
YaRN, each as its paper defines it, all static (one set of frequencies for the whole
sequence), so that keys cached while decoding stay valid.

With ``theta_i = b^(-2i/d)`` the frequency of pair ``i`` (``d`` the head dimension, ``b``
the base) and ``s >= 1`` the scale factor (the new length over ``L``):

* ``linear``: Position Interpolation (Chen et al. 2023, "Extending Context Window of Large
  Language Models via Positional Interpolation", arXiv 2306.15595, sec. 2):
  ``f'(x, m) = f(x, m L / L') = f(x, m / s)``, the positions divided by ``s``; for a
  rotation this is every frequency divided by ``s``: ``theta'_i = theta_i / s``.
* ``ntk``: "NTK-aware" interpolation (bloc97 2023, written out by Peng et al., "YaRN:
  Efficient Context Window Extension of Large Language Models", ICLR 2024, arXiv
  2309.00071, sec. 3, "NTK-aware" interpolation): the base raised to ``b' = b s^(d /
  (d - 2))``, ``theta'_i = b'^(-2i/d)``: the lowest frequency is divided by ``s``, the highest kept.
* ``yarn``: YaRN (Peng et al. 2024, sec. 3): "NTK-by-parts" interpolation with YaRN's
  attention scaling. Pair ``i``'s wavelength is ``lambda_i = 2 pi / theta_i``
  and ``r_i = L / lambda_i`` the turns it makes over the training length; the ramp
  ``gamma(r) = 0`` for ``r < alpha``, ``1`` for ``r > beta``, ``(r - alpha) / (beta -
  alpha)`` between, with ``alpha = 1``, ``beta = 32`` (the paper's values for LLaMA), and
  ``theta'_i = (1 - gamma(r_i)) theta_i / s + gamma(r_i) theta_i``: pairs that turn many
  times over ``L`` keep their frequency, pairs that turn less than once are interpolated.
  The logits are divided by a temperature ``t``, ``sqrt(1/t) = 0.1 ln s + 1``: the
  attention multiplies ``q.k / sqrt(d)`` by ``1/t = (0.1 ln s + 1)^2``, folded into the
  queries' scale.

Deviation from the YaRN authors' code (jquesnelle/yarn): it ramps linearly over the pair
index between the indices where ``r = beta`` and ``r = alpha``, rounded down and up to whole
pairs; the paper's ramp, used here, is linear in ``r``, evaluated at each pair.

Applied to ``rope`` and to ``xpos``'s rotation (whose decay ``zeta^((n - m)/gamma)`` is
not a frequency and stays as trained; no paper combines the two). The options reach the
model through the plugin's tasks when a checkpoint is loaded to translate
(:mod:`fairseq_posenc.plugin.translation_scaling`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

#: ``--rope-scaling`` choices.
SCALINGS = ("linear", "ntk", "yarn")
#: YaRN's ramp bounds on the turns a pair makes over the training length (the paper's
#: values for LLaMA: ``alpha = 1``, ``beta = 32``).
YARN_ALPHA, YARN_BETA = 1.0, 32.0


@dataclass(frozen=True)
class RopeScaling:
    """``--rope-scaling KIND --rope-scaling-factor FACTOR`` and, for YaRN, the training
    length ``original_len`` (``L``, in tokens; None until known: :meth:`frequencies`
    needs it)."""

    kind: str
    factor: float
    original_len: Optional[int] = None

    def __post_init__(self) -> None:
        if self.kind not in SCALINGS:
            raise ValueError(f"--rope-scaling must be one of {', '.join(SCALINGS)}, "
                             f"got {self.kind!r}")
        if not self.factor >= 1:
            raise ValueError(f"--rope-scaling-factor must be at least 1 (the new length "
                             f"over the training length), got {self.factor}")
        if self.kind == "yarn":
            if self.original_len is not None and self.original_len < 1:
                raise ValueError("--rope-scaling-original-len must be a positive number of "
                                 f"tokens (the training length), got {self.original_len}")
        elif self.original_len is not None:
            raise ValueError(f"--rope-scaling-original-len is read by --rope-scaling yarn "
                             f"only; --rope-scaling {self.kind} uses the factor alone: "
                             "drop it")

    @property
    def logit_scale(self) -> float:
        """The factor on the logits: YaRN's ``1/t = (0.1 ln s + 1)^2``, else 1."""
        if self.kind != "yarn":
            return 1.0
        return (0.1 * math.log(self.factor) + 1.0) ** 2

    def frequencies(self, head_dim: int, base: float) -> Tensor:
        """``theta'_i`` for the pairs ``i = 0 .. d/2 - 1``, float64."""
        exponent = torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim
        theta = base ** -exponent
        if self.kind == "linear":
            return theta / self.factor
        if self.kind == "ntk":
            if head_dim <= 2:
                raise ValueError("--rope-scaling ntk raises the base to the power "
                                 "d_h / (d_h - 2): it needs a head dimension above 2, got "
                                 f"{head_dim}")
            return (base * self.factor ** (head_dim / (head_dim - 2))) ** -exponent
        if self.original_len is None:
            raise ValueError("--rope-scaling yarn needs the training length: give "
                             "--rope-scaling-original-len N (tokens with </s>)")
        turns = self.original_len * theta / (2 * math.pi)  # r_i = L / lambda_i
        ramp = ((turns - YARN_ALPHA) / (YARN_BETA - YARN_ALPHA)).clamp(0.0, 1.0)
        return (1 - ramp) * theta / self.factor + ramp * theta
