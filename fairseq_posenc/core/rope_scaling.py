"""RoPE's frequencies rescaled at translation time, so that a model trained on sentences of
up to ``L`` tokens reads longer ones: position interpolation, NTK-aware base scaling, YaRN,
Llama 3's scaling and dynamic NTK, each as its paper (or, for the last two, Hugging Face
transformers' ``modeling_rope_utils``) defines it. All give one set of frequencies for a
whole sequence, so that keys cached while decoding stay valid; dynamic NTK's depends on
the sequence's length bound, fixed for the whole sequence (below).

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
* ``llama3``: Llama 3.1's scaling (Meta's reference code; Hugging Face transformers'
  ``_compute_llama3_parameters``), NTK-by-parts over wavelengths with two factors ``l``
  (``--rope-scaling-low-freq-factor``, default 1) and ``h`` (``--rope-scaling-high-freq-
  factor``, default 4): ``lambda_i > L / l``: ``theta_i / s``; ``lambda_i < L / h``:
  ``theta_i``; between, with ``g_i = (L / lambda_i - l) / (h - l)``, ``theta'_i = (1 - g_i)
  theta_i / s + g_i theta_i`` (YaRN's ramp with ``alpha = l``, ``beta = h``, no
  temperature). Static: every sentence, short ones too, reads the rescaled frequencies.
* ``dynamic``: dynamic NTK (emozilla 2023, described in YaRN's sec. 3.3; transformers'
  ``_compute_dynamic_ntk_parameters``): for a sequence of length ``n``, ``n <= L``: RoPE's
  frequencies; ``n > L``: the base ``b' = b (s n / L - (s - 1))^(d / (d - 2))``. Hugging
  Face recomputes ``b'`` as the decoded sequence grows, so keys cached under an earlier base
  are read with a later one (github.com/huggingface/transformers/issues/25104). Here ``n``
  is the sequence's *length bound*, fixed for the whole sequence:
  :meth:`RopeScaling.dynamic_frequencies` takes one length per sequence, which the plugin
  gives per sentence (the encoder: the sentence's real tokens; the decoder: the longest
  output the generator allows the sentence, :mod:`fairseq_posenc.plugin.rope_lengths`), so
  a decoding step and the full forward read the same frequencies, and a sentence's
  translation does not depend on its batch.

Deviation from the YaRN authors' code (jquesnelle/yarn): it ramps linearly over the pair
index between the indices where ``r = beta`` and ``r = alpha``, rounded down and up to whole
pairs; the paper's ramp, used here, is linear in ``r``, evaluated at each pair.

Applied to ``rope`` and to ``xpos``'s rotation (whose decay ``zeta^((n - m)/gamma)`` is
not a frequency and stays as trained; no paper combines the two), and before
``--rope-fraction`` (pairs it leaves unrotated stay unrotated). The options reach the
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
SCALINGS = ("linear", "ntk", "yarn", "llama3", "dynamic")
#: The scalings that read the training length ``L`` (``--rope-scaling-original-len``).
NEEDS_LENGTH = ("yarn", "llama3", "dynamic")
#: YaRN's ramp bounds on the turns a pair makes over the training length (the paper's
#: values for LLaMA: ``alpha = 1``, ``beta = 32``).
YARN_ALPHA, YARN_BETA = 1.0, 32.0
#: Llama 3.1's ``low_freq_factor`` and ``high_freq_factor`` (Meta's and Hugging Face's).
LLAMA3_LOW, LLAMA3_HIGH = 1.0, 4.0


@dataclass(frozen=True)
class RopeScaling:
    """``--rope-scaling KIND --rope-scaling-factor FACTOR``; for ``yarn``, ``llama3`` and
    ``dynamic`` the training length ``original_len`` (``L``, in tokens; None until known:
    :meth:`frequencies` needs it); for ``llama3`` its two factors (None: 1 and 4)."""

    kind: str
    factor: float
    original_len: Optional[int] = None
    low_freq_factor: Optional[float] = None
    high_freq_factor: Optional[float] = None

    def __post_init__(self) -> None:
        if self.kind not in SCALINGS:
            raise ValueError(f"--rope-scaling must be one of {', '.join(SCALINGS)}, "
                             f"got {self.kind!r}")
        if not self.factor >= 1:
            raise ValueError(f"--rope-scaling-factor must be at least 1 (the new length "
                             f"over the training length), got {self.factor}")
        if self.kind in NEEDS_LENGTH:
            if self.original_len is not None and self.original_len < 1:
                raise ValueError("--rope-scaling-original-len must be a positive number of "
                                 f"tokens (the training length), got {self.original_len}")
        elif self.original_len is not None:
            raise ValueError(f"--rope-scaling-original-len is read by --rope-scaling "
                             f"{', '.join(NEEDS_LENGTH)} only; --rope-scaling {self.kind} "
                             "uses the factor alone: drop it")
        given = [flag for flag, value in (
            ("--rope-scaling-low-freq-factor", self.low_freq_factor),
            ("--rope-scaling-high-freq-factor", self.high_freq_factor)) if value is not None]
        if given and self.kind != "llama3":
            raise ValueError(f"{' and '.join(given)} are read by --rope-scaling llama3 only; "
                             f"drop them from --rope-scaling {self.kind}")
        low, high = self.llama3_factors
        if self.kind == "llama3" and not 0 < low < high:
            raise ValueError("--rope-scaling llama3 needs 0 < --rope-scaling-low-freq-factor < "
                             f"--rope-scaling-high-freq-factor (Llama 3.1: 1 and 4), got "
                             f"{low} and {high}")

    @property
    def llama3_factors(self) -> tuple[float, float]:
        """Llama 3's ``(l, h)``, the defaults where not given."""
        low, high = self.low_freq_factor, self.high_freq_factor
        return (LLAMA3_LOW if low is None else low, LLAMA3_HIGH if high is None else high)

    @property
    def logit_scale(self) -> float:
        """The factor on the logits: YaRN's ``1/t = (0.1 ln s + 1)^2``, else 1."""
        if self.kind != "yarn":
            return 1.0
        return (0.1 * math.log(self.factor) + 1.0) ** 2

    def _length(self) -> int:
        if self.original_len is None:
            raise ValueError(f"--rope-scaling {self.kind} needs the training length: give "
                             "--rope-scaling-original-len N (tokens with </s>)")
        return self.original_len

    def frequencies(self, head_dim: int, base: float) -> Tensor:
        """``theta'_i`` for the pairs ``i = 0 .. d/2 - 1``, float64 (``dynamic``: those of
        a sequence within the training length, RoPE's)."""
        exponent = torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim
        theta = base ** -exponent
        if self.kind == "linear":
            return theta / self.factor
        if self.kind in ("ntk", "dynamic"):
            _ntk_exponent(self.kind, head_dim)
            if self.kind == "dynamic":
                self._length()
                return theta
            return (base * self.factor ** (head_dim / (head_dim - 2))) ** -exponent
        turns = self._length() * theta / (2 * math.pi)  # r_i = L / lambda_i
        low, high = ((YARN_ALPHA, YARN_BETA) if self.kind == "yarn" else self.llama3_factors)
        ramp = ((turns - low) / (high - low)).clamp(0.0, 1.0)
        return (1 - ramp) * theta / self.factor + ramp * theta

    def dynamic_frequencies(self, head_dim: int, base: float, lengths: Tensor) -> Tensor:
        """Dynamic NTK's ``theta'_i`` for sequences of length bounds ``lengths`` (``(B,)``):
        ``(B, d/2)`` float64 on ``lengths``' device, RoPE's for a bound within ``L``."""
        length = self._length()
        n = lengths.to(torch.float64).clamp(min=length)  # n <= L: b' = b
        scaled = base * (self.factor * n / length - (self.factor - 1)) ** _ntk_exponent(
            self.kind, head_dim)
        exponent = torch.arange(0, head_dim, 2, dtype=torch.float64,
                                device=lengths.device) / head_dim
        return scaled[:, None] ** -exponent


def _ntk_exponent(kind: str, head_dim: int) -> float:
    """``d / (d - 2)``, the power on the base's factor."""
    if head_dim <= 2:
        raise ValueError(f"--rope-scaling {kind} raises the base to the power d_h / (d_h - 2):"
                         f" it needs a head dimension above 2, got {head_dim}")
    return head_dim / (head_dim - 2)
