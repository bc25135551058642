"""``fox``: the Forgetting Transformer's forget gate (Lin, Nikishin, He and Courville 2025,
ICLR, arXiv 2503.02130, "Forgetting Transformer: Softmax Attention with a Forget Gate",
section 2 and its "no position embedding" setting).

A scalar forget gate per head and position reads the attention layer's input ``x_t``:

    f_t = sigmoid(w_h . x_t + b_h)                                    (section 2)
    F_ij = prod_{t=j+1..i} f_t,   e_ij = q_i.k_j / sqrt(d_h) + log F_ij
    log F_ij = D_ij = c_i - c_j,   c_i = sum_{t<=i} log f_t

so the attention is softmax attention with the bias ``D`` (the paper's
``O = softmax(Q K^T + D) V``), and FoX uses no other position information. Each layer has
its own ``w, b`` (``H x C`` and ``H``); they start as the authors' code
(zhixuan-lin/forgetting-transformer, the ``full`` gate) starts them: ``w ~ N(0, 0.02)``,
``b = 0`` (the paper sets no other initialisation for the data-dependent gate). The gates
are computed in float32 at least, as the authors'.

The sums, their cache while decoding, the bias and its fast form are the kind's
(:mod:`fairseq_posenc.core.encodings.gate_sums`): a decoding step reads ``c_i - c_j`` from the cached
``c_j``; under the causal mask on CUDA the bias runs as two extra query and key
dimensions, ``[1, 1] . [-c_hi_j, -c_lo_j]`` (``c_i`` dropped by the softmax), the sums
split so that half precision holds them to ``m 2^-2p`` (``m = max_j |c_j|``).

Deviations:

* Encoder (bidirectional; the paper is causal only): two gates per head, one per
  direction, ``f`` and ``g`` (``2H`` rows of ``w``). Keys up to the query get the forward
  gates' sum, ``sum_{t=j+1..i} log f_t``; keys after it the backward gates',
  ``sum_{t=i+1..j} log g_t = c'_j - c'_i`` -- the form of x-transformers'
  ``DataDependentAlibi`` (lower triangle from one set of cumulative sums, upper from
  another). A single gate read in both directions would tie a token's forgetting of what
  precedes it to its forgetting of what follows; two sets cost ``H`` more rows of ``w``
  (``docs/decisions.md``, "fox: the encoder's form"). The bias is not of rank 2: the
  encoder takes the pair path (a ``len x len`` bias).
* Padding: a padded position's log-gate is 0, so a pad (on the left, where fairseq pads
  sources, or on the right) changes no sum between real tokens, and it is masked as a key.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..context import FusedKernel, KernelFamily
from .kinds import InputGates
from .registry import register_encoding

#: The standard deviation of the gate weights at initialisation (the authors' code's
#: ``initializer_range``).
GATE_INIT_STD = 0.02


@register_encoding
class ForgettingTransformer(InputGates):
    name = "fox"
    fused_families = frozenset({KernelFamily.CAUSAL_SUMS})

    def __init__(self, *, num_heads: int, head_dim: int, causal: bool = False) -> None:
        super().__init__()
        self.bidirectional = not causal
        gates = num_heads * (1 if causal else 2)
        self.gate = nn.Linear(num_heads * head_dim, gates)
        nn.init.normal_(self.gate.weight, mean=0.0, std=GATE_INIT_STD)
        nn.init.zeros_(self.gate.bias)
        if causal:  # c_i - c_j less c_i: extra dimensions under the causal mask
            self.fused_kernel = FusedKernel(KernelFamily.CAUSAL_SUMS)

    @classmethod
    def random_positions_refusal(cls, values) -> str:
        return ("its bias is the sum of gates read from the tokens between query and key, "
                "not a term of positions, so there are none to draw; train fox without it")

    def log_gates(self, x: Tensor) -> Tensor:
        """``log sigmoid(w_h . x_t + b_h)``, ``(B, G, T)``, at least float32."""
        dtype = torch.promote_types(x.dtype, torch.float32)
        logits = F.linear(x.to(dtype), self.gate.weight.to(dtype), self.gate.bias.to(dtype))
        return F.logsigmoid(logits).permute(1, 2, 0)
