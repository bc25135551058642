"""``xpos``: RoPE with a decay per dimension (Sun et al. 2023, "A Length-Extrapolatable
Transformer", ACL 2023, arXiv 2212.10554, sec. 3, "XPOS"; the authors' code:
microsoft/torchscale, ``xpos_relative_position.py``).

Each head's query at position ``n`` and key at position ``m`` are rotated as RoPE's
(pairs ``(2i, 2i+1)`` by ``n theta_i``, ``theta_i = 10000^(-2i/d_h)``) and each pair is
scaled, the query's by ``zeta_i^(n/gamma)``, the key's by ``zeta_i^(-m/gamma)``::

    f_q(q, n)_i = R(n theta_i) q_i zeta_i^(n/gamma)
    f_k(k, m)_i = R(m theta_i) k_i zeta_i^(-m/gamma)
    zeta_i = (2i/d_h + 0.4) / 1.4,   gamma = 512 (--xpos-scale-base)

so that pair ``i`` contributes ``zeta_i^((n - m)/gamma) (R((m - n) theta_i) k_i) . q_i``
to ``q_n.k_m``: a function of ``n - m``, which decays as the key falls behind the query
(``zeta_i < 1``, fastest for the highest frequencies, ``zeta_0 = 2/7``). No parameters.

The position origin. Only ``n - m`` matters, so any origin gives the paper's logits; the
origin sets how large each factor is alone. The decoder's origin is its first position:
keys are cached once scaled, and a decoding step scales only its own query and key (the
authors' code centres the positions on the current length instead, so that every cached
key is rescaled at every step). Its largest factor is then ``zeta_0^(-t/gamma) = 3.5^(t /
512)`` at position ``t``: 12.25 at fairseq's default 1024 positions; past about 4000
positions (``3.5^8``, 2.3e4) a key would approach float16's largest number, 65504. The
encoder has no cache: its origin is the middle of the row, so that its factors stay within
``3.5^(T / 1024)`` for ``T`` positions.

Deviations:

* The encoder (bidirectional). The paper defines xPos for causal language models, where
  ``m <= n``; with keys after the query (``m > n``) the same factors grow with the distance,
  as ``zeta_i^(-(m - n)/gamma)``. The encoder applies the paper's transformation
  unchanged, as the authors' code does in every self-attention, its bidirectional encoder
  included (torchscale's ``xpos_rel_pos``, which its encoder's configuration offers as
  its decoder's does); a decay by ``|n - m|`` cannot be split into a factor on the query and
  one on the key, so it would need the logits written out.
* The paper's other part, blockwise causal attention at inference, is not applied: it
  concerns language models reading beyond their training window, and a sentence is
  attended to whole.

Shares RoPE's machinery (:class:`~fairseq_posenc.core.encodings.rope.Rope`): the factors join
the rotation's complex numbers (``zeta^(n/gamma) e^(i n theta)``), so the complex product,
the fused rotation on CUDA in half precision (:mod:`fairseq_posenc.core.kernels.rotary`, whose
backward multiplies by the conjugate: the transpose of a scaled rotation) and a decoding
step's one matrix product per tensor all carry the decay at no extra pass. Positions are
indices in the padded row, as RoPE's; the encoding being relative, the padding offset
cancels. ``--rope-scaling`` at translation time rescales the rotation's frequencies and
leaves the decay as trained (:mod:`fairseq_posenc.core.rope_scaling`).

``--rope-fraction P`` (p-RoPE, :mod:`~fairseq_posenc.core.encodings.rope`) sets the
frequencies of the lowest ``d_h/2 - floor(P d_h / 2)`` pairs to 0, and keeps every pair's
decay: xPos defines ``zeta_i`` by the pair's index, as a factor beside the rotation
``R(n theta_i)``, not through ``theta_i``, so an unrotated pair is ``q_i
zeta_i^(n/gamma)``, its contribution ``zeta_i^((n - m)/gamma) k_i . q_i``. These are the
pairs whose ``zeta_i`` is nearest 1 (``(2i/d_h + 0.4)/1.4``), so they decay the least.
"""

from __future__ import annotations

from typing import Annotated, Any, Mapping, Optional

import torch
from torch import Tensor

from ..rope_scaling import RopeScaling
from .options import Option
from .registry import register_encoding
from .rope import Rope, RopeFraction, check_fraction

#: The rotation's base: RoPE's, as the paper and the authors' code use.
ROTATION_BASE = 10000.0


@register_encoding
class XPos(Rope):
    name = "xpos"

    def __init__(self, *, head_dim: int, causal: bool,
                 rope_scaling: Optional[RopeScaling] = None,
                 xpos_scale_base: Annotated[float, Option(
                     "gamma, the decay's scale: query and key pairs scaled by zeta^(n/gamma) "
                     "and zeta^(-m/gamma) (default 512)", metavar="G")] = 512.0,
                 rope_fraction: RopeFraction = 1.0) -> None:
        """``causal``: the decoder's origin is its first position, the encoder's the
        middle of each call's positions (module docstring)."""
        super().__init__(head_dim=head_dim, rope_scaling=rope_scaling, rope_base=ROTATION_BASE,
                         rope_fraction=rope_fraction)
        self.scale_base = xpos_scale_base
        self.causal = causal
        zeta = (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim + 0.4) / 1.4
        self.log_zeta = zeta.log()  # float64 on the CPU, as RoPE's frequencies

    @classmethod
    def check_options(cls, values: Mapping[str, Any]) -> None:
        check_fraction(values)
        if not values["xpos_scale_base"] > 0:
            raise ValueError(f"--xpos-scale-base must be positive, got "
                             f"{values['xpos_scale_base']}. The paper uses 512.")

    def _origin(self, end: int) -> int:
        return 0 if self.causal else (end - 1) // 2

    def _magnitudes(self, positions: Tensor, origin: int) -> tuple[Tensor, Tensor]:
        """``zeta_i^((p - origin)/gamma)`` for the queries, its inverse for the keys."""
        exponent = ((positions - origin)[:, None] / self.scale_base
                    * self._exact("log_zeta", positions.device))
        return exponent.exp(), (-exponent).exp()
