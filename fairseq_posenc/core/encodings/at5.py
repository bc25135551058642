"""``at5`` and ``at5_nob``: Adaptive T5 (Wu, Zhang, Mao and Chen 2021, AAAI, "On Scalar
Embedding of Relative Positions in Attention Models", section "Adaptive T5 Model").

``e_ij += g_{h,s}(f_h(r))``, ``r = j - i``: a content-free scalar per head and distance, added
to the scaled logits (eq. (5), ``e^(l)`` of eq. (13)). ``f`` replaces T5's buckets by a
learnable "soft bucket" in ``[0, 1)`` and ``g`` replaces T5's bucket table by a small MLP,
one per head and sign ``s`` (``r > 0`` / ``r <= 0``):

* ``at5`` -- eqs. (17) and (19): ``f = 1 - exp(-alpha_h r)`` for ``r > 0`` and
  ``f = 1 - exp(beta_h r)`` for ``r <= 0``, with ``alpha_h = relu(alpha_raw_h) / L`` and
  ``beta_h = relu(beta_raw_h) / L`` (the paper's ``A max(0, gamma_+-)``, ``A = 1/n``); raw
  slopes start uniform in ``[Gamma_min, Gamma_max]`` (``--at5-slope-min/max``, MT: 1, 15).
* ``at5_nob`` -- the "AT5-NoB" ablation (Experiment section, Table 6): no bucketing
  function, ``f = sigmoid(E_h[clip(r)])`` from a learned per-head table instead of the
  exponential, fed to the same ``g_{h,s}``.

``g`` (eqs. (18) and (20), "multi-layer perceptrons with two hidden layers"):
``1 -> l1 -> l2 -> 1``, sigmoid after both hidden layers, a linear output (no activation),
as in the authors' ``polynomial_score``; MT setting ``l1 = 32``, ``l2 = 4``
(``--at5-l1-width``, ``--at5-l2-width``; ``--at5-nob-...`` likewise). The authors'
initialisation: weights from a normal of std 0.1 truncated at 2 std, biases 0.1.

Decisions and deviations (``docs/conventions.md``, "AT5"):

* ``r = 0`` takes the ``r <= 0`` branch (``f = 0``, ``g_-``), as the authors' code
  (``is_small = n <= 0``); eq. (17) puts ``l = 0`` in ``L+`` (``g_+``), which
  would make the causal decoder's diagonal need the ``r > 0`` MLP.
* The causal decoder only sees ``r <= 0``: its module owns ``beta`` and ``g_neg`` only (the
  authors create ``alpha`` and ``g_+`` there too; they never receive a gradient).
* ``L`` (``--at5-max-len``): the paper's ``n``, "the length of the input sequence", is the
  maximum sequence length in the authors' code (``1 / params.max_length``, 256 in MT, which
  is also the longest sentence they train on). Its fairseq counterpart is the stack's
  ``--max-source-positions`` / ``--max-target-positions`` (the default); for the paper's
  MT setting pass ``--at5-max-len 256`` (or train with max positions 256). ``at5`` has no
  length limit: ``L`` only scales the slopes.
* ``at5_nob``'s table covers ``r = -(L-1)..L-1`` (``2L - 1`` entries per head, ``L`` in the
  causal decoder), clipped beyond, ``L = --at5-nob-max-len`` (default the stack's max
  positions); starts uniform in ``[0, 1)`` as the authors' ``2L x H`` table. The authors'
  AT5-NoB code feeds it to one MLP per head (no sign split) with ReLU hidden layers (the
  default of ``polynomial_score``, which its caller does not override); we keep the paper's
  description -- only the bucketing changes, the bucket-embedding layer ``g_{h,s}`` is AT5's.
* No dropout inside ``g``: the authors' code drops the first hidden layer (p = 0.5, per
  ``(i, j)`` entry) in training; the paper does not mention it.
* Incremental decoding applies the bias row of step ``t`` over keys ``0..t``; the authors'
  cached decoder slices a ``1 x 1`` bias, so the bias has no effect in their beam search.

Placement and sharing: AT5's MT setting adds the bias to the first self-attention layer of
the encoder and the decoder only (``default_layers = "first"``). With ``--pos-layers all``
the stack's single module serves every layer, as the authors' ``every_layer_has_rp_bias``
(one bias per stack passed to each layer) and QANet setup (one set of slopes for all blocks,
"the same hyper-parameters for each layer's bucketing algorithm", one bias per block of 7
layers). The per-distance table is computed once per forward (and grown geometrically while
decoding) by :class:`DistanceBias`; the MLPs run on ``H x (#distances)`` inputs, never
on ``len x len``.
"""

from __future__ import annotations

from typing import Annotated, Any, Mapping, Optional

import torch
from torch import Tensor, nn

from ..positions import clipped_index
from .kinds import DistanceBias
from .options import MAX_LEN_HELP, Option
from .registry import register_encoding

#: The authors' MLP initialisation (``polynomial_score``): truncated normal, constant bias.
MLP_INIT_STD = 0.1
MLP_INIT_BIAS = 0.1


class HeadMLPs(nn.Module):
    """One MLP ``1 -> l1 -> l2 -> 1`` per head (sigmoid hidden layers, linear output),
    evaluated for all heads at once: ``(H, R) -> (H, R)``."""

    def __init__(self, num_heads: int, l1: int, l2: int) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(num_heads, l1))
        self.b1 = nn.Parameter(torch.empty(num_heads, l1))
        self.w2 = nn.Parameter(torch.empty(num_heads, l1, l2))
        self.b2 = nn.Parameter(torch.empty(num_heads, l2))
        self.w3 = nn.Parameter(torch.empty(num_heads, l2))
        self.b3 = nn.Parameter(torch.empty(num_heads))
        for w in (self.w1, self.w2, self.w3):
            nn.init.trunc_normal_(w, std=MLP_INIT_STD, a=-2 * MLP_INIT_STD, b=2 * MLP_INIT_STD)
        for b in (self.b1, self.b2, self.b3):
            nn.init.constant_(b, MLP_INIT_BIAS)

    def forward(self, f: Tensor) -> Tensor:
        h1 = torch.sigmoid(f.unsqueeze(-1) * self.w1.unsqueeze(1) + self.b1.unsqueeze(1))
        h2 = torch.sigmoid(torch.baddbmm(self.b2.unsqueeze(1), h1, self.w2))
        return torch.baddbmm(self.b3.view(-1, 1, 1), h2, self.w3.unsqueeze(-1)).squeeze(-1)


def width(layer: int) -> Option:
    """``NAME_l1_width``, ``NAME_l2_width``: common to both encodings."""
    default = 32 if layer == 1 else 4
    return Option(f"width of hidden layer {layer} of the per-head MLP g (default {default}, "
                  "AT5's MT setting)", minimum=1, hint="AT5's MT setting uses 32 and 4.",
                  metavar="N")


class SoftBucketBias(DistanceBias):
    """``b_h(r) = g_{h,sign(r)}(f_h(r))``; subclasses define the soft bucket ``f``.

    ``g_neg`` serves ``r <= 0``; ``g_pos`` (bidirectional stacks only) ``r > 0``.
    """

    default_layers = "first"

    def __init__(self, num_heads: int, causal: bool, l1: int, l2: int) -> None:
        super().__init__()
        self.g_neg = HeadMLPs(num_heads, l1, l2)
        self.g_pos = None if causal else HeadMLPs(num_heads, l1, l2)

    @classmethod
    def shares_layers(cls, values) -> bool:
        return True

    def soft_bucket(self, r: Tensor, positive: bool) -> Tensor:
        """``(H, len(r))``: ``f_h(r)`` for distances ``r`` all of one sign."""
        raise NotImplementedError

    def distance_bias(self, r_lo: int, r_hi: int) -> Tensor:
        r = torch.arange(r_lo, r_hi + 1, device=self.g_neg.b3.device)
        if self.g_pos is None:  # keys after the query are masked: any finite value will do
            r = r.clamp(max=0)
        neg, pos = r[r <= 0], r[r > 0]  # r ascends: the negative part comes first
        parts = [self.g_neg(self.soft_bucket(neg, positive=False))]
        if pos.numel():
            parts.append(self.g_pos(self.soft_bucket(pos, positive=True)))
        return torch.cat(parts, dim=-1)


@register_encoding
class AT5(SoftBucketBias):
    name = "at5"

    def __init__(
        self, *, num_heads: int, causal: bool, max_positions: int,
        at5_max_len: Annotated[Optional[int], Option(MAX_LEN_HELP.format(
            "L in alpha = relu(alpha_raw) / L (the paper's A = 1/n; 256 in AT5's MT "
            "setting); any length is supported"), minimum=1, metavar="N")] = None,
        at5_l1_width: Annotated[int, width(1)] = 32,
        at5_l2_width: Annotated[int, width(2)] = 4,
        at5_slope_min: Annotated[float, Option(
            "raw slopes start uniform in [G, --at5-slope-max] (Gamma_min; default 1.0, AT5's "
            "MT setting)", metavar="G")] = 1.0,
        at5_slope_max: Annotated[float, Option(
            "upper end of the raw slopes' initial range (Gamma_max; default 15.0, AT5's MT "
            "setting)", metavar="G")] = 15.0,
    ) -> None:
        super().__init__(num_heads, causal, at5_l1_width, at5_l2_width)
        slope_min, slope_max = at5_slope_min, at5_slope_max
        self.max_len = at5_max_len or max_positions
        # Raw slopes (the paper's gamma_-, gamma_+); relu(.) / L is applied in soft_bucket.
        self.beta = nn.Parameter(torch.empty(num_heads).uniform_(slope_min, slope_max))
        self.alpha = (None if causal else
                      nn.Parameter(torch.empty(num_heads).uniform_(slope_min, slope_max)))

    @classmethod
    def check_options(cls, values: Mapping[str, Any]) -> None:
        lo, hi = values["at5_slope_min"], values["at5_slope_max"]
        if not 0 <= lo <= hi or hi <= 0:
            raise ValueError(
                f"--at5-slope-min/--at5-slope-max must satisfy 0 <= min <= max, max > 0 "
                f"(got {lo}, {hi}): slopes pass through relu, so a slope <= 0 gives a flat "
                "bias that never learns. AT5 uses 1 and 15 for translation.")

    def soft_bucket(self, r: Tensor, positive: bool) -> Tensor:
        raw = self.alpha if positive else self.beta
        slope = torch.relu(raw) / self.max_len
        # eq. (17) 1 - exp(-alpha r), r > 0; eq. (19) 1 - exp(beta r), r <= 0: both -|r|.
        return -torch.expm1(-slope[:, None] * r.abs().to(slope.dtype)[None, :])


@register_encoding
class AT5NoBuckets(SoftBucketBias):
    name = "at5_nob"

    def __init__(
        self, *, num_heads: int, causal: bool, max_positions: int,
        at5_nob_max_len: Annotated[Optional[int], Option(MAX_LEN_HELP.format(
            "the table covers distances -(N-1)..N-1; longer ones are clipped"), minimum=1,
            metavar="N")] = None,
        at5_nob_l1_width: Annotated[int, width(1)] = 32,
        at5_nob_l2_width: Annotated[int, width(2)] = 4,
    ) -> None:
        super().__init__(num_heads, causal, at5_nob_l1_width, at5_nob_l2_width)
        max_len = at5_nob_max_len or max_positions
        self.r_lo, self.r_hi = -(max_len - 1), (0 if causal else max_len - 1)
        self.table = nn.Parameter(torch.empty(num_heads, self.r_hi - self.r_lo + 1).uniform_())

    def soft_bucket(self, r: Tensor, positive: bool) -> Tensor:
        return torch.sigmoid(self.table[:, clipped_index(r, self.r_lo, self.r_hi)])
