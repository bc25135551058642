"""The five built-in RoPE scalings, each registered as a user registers one
(:mod:`fairseq_posenc.core.rope_scaling_registry`): position interpolation, NTK-aware base
scaling, YaRN, Llama 3's scaling and dynamic NTK, each as its paper (or, for the last two,
Hugging Face transformers' ``modeling_rope_utils``) defines it. All give one set of
frequencies for a whole sequence, so that keys cached while decoding stay valid; dynamic
NTK's depends on the sequence's length bound, fixed for the whole sequence (below).

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
  is the sequence's *length bound*, fixed for the whole sequence: the scaling is
  ``per_sequence``, called with one length per sequence, which the plugin gives per
  sentence (the encoder: the sentence's real tokens; the decoder: the longest output the
  generator allows the sentence, :mod:`fairseq_posenc.plugin.rope_lengths`), so a decoding
  step and the full forward read the same frequencies, and a sentence's translation does
  not depend on its batch.

Deviation from the YaRN authors' code (jquesnelle/yarn): it ramps linearly over the pair
index between the indices where ``r = beta`` and ``r = alpha``, rounded down and up to whole
pairs; the paper's ramp, used here, is linear in ``r``, evaluated at each pair.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Mapping, Optional

from torch import Tensor

from .declarations import Option
from .rope_scaling_registry import Scaled, Unscaled, register_rope_scaling

#: YaRN's ramp bounds on the turns a pair makes over the training length (the paper's
#: values for LLaMA: ``alpha = 1``, ``beta = 32``).
YARN_ALPHA, YARN_BETA = 1.0, 32.0
#: Llama 3.1's ``low_freq_factor`` and ``high_freq_factor`` (Meta's and Hugging Face's).
LLAMA3_LOW, LLAMA3_HIGH = 1.0, 4.0


@register_rope_scaling("linear", help="position interpolation, Chen et al. 2023")
def linear(rope: Unscaled, factor: float, original_len: Optional[int],
           lengths: Optional[Tensor]) -> Scaled:
    """Position interpolation: every frequency divided by ``s``."""
    return Scaled(rope.theta / factor)


@register_rope_scaling("ntk", help="NTK-aware base")
def ntk(rope: Unscaled, factor: float, original_len: Optional[int],
        lengths: Optional[Tensor]) -> Scaled:
    """NTK-aware scaling: RoPE's frequencies at the base ``b s^(d / (d - 2))``."""
    power = _ntk_exponent("ntk", rope.head_dim)
    return Scaled((rope.base * factor ** power) ** -rope.exponent)


def _ramp(rope: Unscaled, factor: float, length: int, low: float, high: float) -> Tensor:
    """NTK-by-parts: ``(1 - g) theta / s + g theta``, ``g`` the ramp from 0 at ``r = low``
    to 1 at ``r = high`` over the turns ``r_i = L / lambda_i``."""
    turns = length * rope.theta / (2 * math.pi)  # r_i = L / lambda_i
    ramp = ((turns - low) / (high - low)).clamp(0.0, 1.0)
    return (1 - ramp) * rope.theta / factor + ramp * rope.theta


@register_rope_scaling("yarn", reads_length=True,
                       help="Peng et al. 2023, with its attention temperature")
def yarn(rope: Unscaled, factor: float, original_len: Optional[int],
         lengths: Optional[Tensor]) -> Scaled:
    """YaRN: the ramp over ``r`` from ``alpha = 1`` to ``beta = 32``, and the temperature
    ``1/t = (0.1 ln s + 1)^2`` on the logits."""
    return Scaled(_ramp(rope, factor, original_len, YARN_ALPHA, YARN_BETA),
                  (0.1 * math.log(factor) + 1.0) ** 2)


def llama3_factors(values: Mapping[str, Any]) -> tuple[float, float]:
    """Llama 3's ``(l, h)``, the defaults where not given."""
    low, high = (values["rope_scaling_low_freq_factor"],
                 values["rope_scaling_high_freq_factor"])
    return (LLAMA3_LOW if low is None else low, LLAMA3_HIGH if high is None else high)


def check_llama3(values: Mapping[str, Any]) -> None:
    low, high = llama3_factors(values)
    if not 0 < low < high:
        raise ValueError("--rope-scaling llama3 needs 0 < --rope-scaling-low-freq-factor < "
                         f"--rope-scaling-high-freq-factor (Llama 3.1: 1 and 4), got "
                         f"{low} and {high}")


@register_rope_scaling("llama3", reads_length=True, check=check_llama3, help="Llama 3.1's")
def llama3(rope: Unscaled, factor: float, original_len: Optional[int],
           lengths: Optional[Tensor], *,
           rope_scaling_low_freq_factor: Annotated[Optional[float], Option(
               "with --rope-scaling llama3: wavelengths above L / this are interpolated "
               "(default 1, Llama 3.1's)")] = None,
           rope_scaling_high_freq_factor: Annotated[Optional[float], Option(
               "with --rope-scaling llama3: wavelengths below L / this are kept (default 4, "
               "Llama 3.1's)")] = None) -> Scaled:
    """Llama 3.1's bands: YaRN's ramp from ``l`` to ``h``, no temperature."""
    low, high = llama3_factors({"rope_scaling_low_freq_factor": rope_scaling_low_freq_factor,
                                "rope_scaling_high_freq_factor": rope_scaling_high_freq_factor})
    return Scaled(_ramp(rope, factor, original_len, low, high))


@register_rope_scaling("dynamic", reads_length=True, per_sequence=True,
                       help="dynamic NTK: the base from each sentence's length bound")
def dynamic(rope: Unscaled, factor: float, original_len: Optional[int],
            lengths: Optional[Tensor]) -> Scaled:
    """Dynamic NTK for sequences of length bounds ``lengths`` (``(B,)``): ``(B, d/2)``, RoPE's
    frequencies for a bound within ``L``."""
    power = _ntk_exponent("dynamic", rope.head_dim)
    n = lengths.to(rope.exponent.device, dtype=rope.exponent.dtype).clamp(min=original_len)
    scaled = rope.base * (factor * n / original_len - (factor - 1)) ** power  # n <= L: b
    return Scaled(scaled[:, None] ** -rope.exponent)


def _ntk_exponent(kind: str, head_dim: int) -> float:
    """``d / (d - 2)``, the power on the base's factor."""
    if head_dim <= 2:
        raise ValueError(f"--rope-scaling {kind} raises the base to the power d_h / (d_h - 2):"
                         f" it needs a head dimension above 2, got {head_dim}")
    return head_dim / (head_dim - 2)


#: The built-in scalings' names (those registered above).
BUILT_IN = ("linear", "ntk", "yarn", "llama3", "dynamic")
