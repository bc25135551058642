"""``path``: PaTH attention (Yang, Shen, Wen, Tan, Mishra, Ren, Panda and Kim 2025, NeurIPS,
arXiv 2505.16381, "PaTH Attention: Position Encoding via Accumulating Householder
Transformations", sections 2 and 3; PaTH-FoX with ``--path-forget-gate``).

Keys reach a query through one data-dependent Householder-like transform per position on
the way (section 2):

    logit(i, j) = q_i^T H_i H_{i-1} ... H_{j+1} k_j / sqrt(d_h),   j <= i
    H_t = I - beta_t w_t w_t^T,   beta_t = 2 sigmoid(a_h . x_t + b_h)   (in (0, 2))
    w_t = normalize(silu(conv3(U V x)))_h                                (unit norm per head)

softmax over ``j``. ``beta`` in ``(0, 2)`` lets ``H_t`` have the eigenvalue ``1 - beta_t <
0`` (a reflection at ``beta = 2``). ``w_t`` is the layer input's low-rank projection
(``C -> 32 -> H d_h``, no biases) through a causal, depthwise convolution of width 3
without bias and a SiLU, L2-normalised per head: the authors' layer
(flash-linear-attention ``fla/layers/path_attn.py``, whose ``ShortConvolution`` applies
the SiLU by default). With ``--path-forget-gate`` the logits also get FoX's bias
``sum_{t=j+1..i} log sigmoid(g_h . x_t + c_h)`` (PaTH-FoX, the layer's
``use_forget_gate``). The products run blockwise (:mod:`.path_products`, the paper's
section 3 in torch: the UT transform within blocks of 64, products across them); a
decoding step applies its one ``H_t`` to every cached key and appends its own (the
authors' decoding), the kind's (:class:`~.kinds.PathTransforms`).

What the paper and the layer leave open, ours:

* Initialisation: the projections ``U``, ``V``, ``a`` and the gate's ``g`` start as
  ``N(0, 0.02)`` and the biases ``b``, ``c`` at 0 (flash-linear-attention's models'
  ``initializer_range`` and zero biases; so ``beta_t`` starts near 1); the convolution as
  torch's ``Conv1d`` (Kaiming uniform).
* The L2 norm is ``F.normalize`` (``w / max(|w|, 1e-12)``), the authors' ``l2_norm`` divides
  by ``sqrt(|w|^2 + 1e-6)``: the same for any ``|w|`` above ``1e-3``.
* Encoder: the paper defines PaTH for causal attention only, and so does this encoding: a
  stack without the causal mask refuses it (``transformer_*_path`` use ``sinusoidal`` in
  the encoder).
* Padding: a padded position's convolution inputs are 0 and its ``beta`` is 0 (it
  transforms nothing, ``H_t = I``) and its log-gate 0; it is masked as a key.
"""

from __future__ import annotations

from typing import Annotated

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .fox import GATE_INIT_STD
from .kinds import PathTransforms
from .options import Option
from .registry import register_encoding

#: The low-rank projection's inner width (the authors' layer's).
RANK = 32
#: The short convolution's width.
WIDTH = 3


@register_encoding
class PathAttention(PathTransforms):
    name = "path"
    window = WIDTH

    def __init__(self, *, num_heads: int, head_dim: int, causal: bool = True,
                 path_forget_gate: Annotated[bool, Option(
                     "add FoX's forget gate to the logits (PaTH-FoX)")] = False) -> None:
        super().__init__()
        channels = width = num_heads * head_dim
        self.num_heads, self.head_dim = num_heads, head_dim
        self.w_down = nn.Linear(channels, RANK, bias=False)
        self.w_up = nn.Linear(RANK, width, bias=False)
        self.w_conv = nn.Conv1d(width, width, WIDTH, groups=width, bias=False)
        self.beta = nn.Linear(channels, num_heads)
        for linear in (self.w_down, self.w_up, self.beta):
            nn.init.normal_(linear.weight, mean=0.0, std=GATE_INIT_STD)
        nn.init.zeros_(self.beta.bias)
        self.forget_gate = path_forget_gate
        if path_forget_gate:
            self.gate = nn.Linear(channels, num_heads)
            nn.init.normal_(self.gate.weight, mean=0.0, std=GATE_INIT_STD)
            nn.init.zeros_(self.gate.bias)

    @classmethod
    def random_positions_refusal(cls, values) -> str:
        return ("its transforms are read from the tokens between query and key, not from "
                "positions, so there are none to draw; train path without it")

    def path_inputs(self, x: Tensor) -> Tensor:
        """``U V x``, ``(B, T, H d_h)``."""
        return self.w_up(self.w_down(x.transpose(0, 1)))

    def transforms(self, inputs: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        """``w`` through the causal convolution (``inputs`` has its ``WIDTH - 1`` earlier
        rows), SiLU and the L2 norm per head; ``beta = 2 sigmoid(a . x + b)``."""
        conv = F.silu(self.w_conv(inputs.transpose(1, 2)))  # (B, H d_h, T)
        batch, length = conv.size(0), conv.size(2)
        w = conv.view(batch, self.num_heads, self.head_dim, length).transpose(2, 3)
        beta = 2.0 * torch.sigmoid(self.beta(x)).permute(1, 2, 0)
        return F.normalize(w, dim=-1), beta

    def log_gates(self, x: Tensor) -> Tensor:
        """``log sigmoid(g_h . x_t + c_h)``, ``(B, H, T)``, at least float32."""
        dtype = torch.promote_types(x.dtype, torch.float32)
        logits = F.linear(x.to(dtype), self.gate.weight.to(dtype), self.gate.bias.to(dtype))
        return F.logsigmoid(logits).permute(1, 2, 0)
