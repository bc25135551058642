"""``stickbreaking``: stick-breaking attention in place of the softmax (Tan, Shen, Yang,
Courville and Panda 2025, ICLR, arXiv 2410.17980, "Scaling Stick-Breaking Attention: An
Efficient Implementation and In-depth Study", sections 2 and 3).

For a query ``i`` the keys, from the nearest to the farthest, each break off the fraction
``beta_ij = sigmoid(q_i.k_j / sqrt(d_h))`` of what is left of a stick of length 1:

    A_ij = beta_ij prod_{j < l < i} (1 - beta_il),   keys j < i            (section 2)
    o_i  = sum_j A_ij v_j

computed in log space (:mod:`.stick_weights`). The recency of the process is the only
position information: no position encoding beside it, the input positions off (as for
any attention-level encoding).

The weights need not sum to 1: ``r_i = prod_{j < i} (1 - beta_ij)`` is left. The authors'
code treats it three ways, and ``--stickbreaking-remainder`` chooses:

* ``none`` (the default): dropped, as the paper's released 3B model is configured
  (``sb_remainder: false``) and as flash-linear-attention's stick-breaking layer does;
* ``value``: ``+ r_i v_i``, the rest on the current token's value (dolomite-engine's
  ``sb_remainder``);
* ``bias``: ``+ r_i b_h``, a learned vector per head, starting at 0 (another version of
  dolomite-engine's layer).

The current token is not among the keys (``j < i``), as the authors' decoding reads the
cache (``--stickbreaking-attend-current`` takes ``j <= i``); the first query attends to
nothing and outputs the remainder's term (0 with ``none``).

Ours:

* The authors' released model also normalises the heads' outputs before the output
  projection; the fairseq layer here keeps fairseq's output projection as it is.
* Encoder: stick-breaking is defined for causal attention only (the order of the keys is
  the one from the query back to the start), and so is this encoding: a stack without the
  causal mask refuses it (``transformer_*_stickbreaking`` use ``sinusoidal`` in the
  encoder).
* Attention dropout, where it acts, drops weights as it drops softmax probabilities; the
  remainder's term is kept whole.
* Padding: a padded key breaks no stick (its ``beta`` is 0).
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional

import torch
from torch import Tensor, nn

from .kinds import AttentionWeights
from .options import Option
from .registry import register_encoding
from .stick_weights import stick_weights


@register_encoding
class StickBreakingAttention(AttentionWeights):
    name = "stickbreaking"

    def __init__(self, *, num_heads: int, head_dim: int, causal: bool = True,
                 stickbreaking_attend_current: Annotated[bool, Option(
                     "the current token is among its own keys (j <= i; default: j < i, the "
                     "authors' decoding)")] = False,
                 stickbreaking_remainder: Annotated[Literal["none", "value", "bias"], Option(
                     "what the stick that is left adds to the output: nothing (the "
                     "authors' released model), r_i v_i (the current token's value) or "
                     "r_i b_h (a learned vector per head)")] = "none") -> None:
        super().__init__()
        self.attend_current = stickbreaking_attend_current
        self.remainder = stickbreaking_remainder
        if stickbreaking_remainder == "bias":
            self.rest_bias = nn.Parameter(torch.zeros(num_heads, head_dim))

    @classmethod
    def random_positions_refusal(cls, values) -> str:
        return ("its weights follow the order of the keys, not positions, so there are none "
                "to draw; train stickbreaking without it")

    def weights(self, logits: Tensor, q_offset: int) -> tuple[Tensor, Tensor]:
        """``A_ij`` and the remaining stick, in log space."""
        return stick_weights(logits, q_offset, self.attend_current)

    def rest_term(self, rest: Tensor, v: Tensor) -> Optional[Tensor]:
        """``r_i v_i`` or ``r_i b_h``, ``(B, H, q_len, d_h)``, or None (``none``)."""
        if self.remainder == "none":
            return None
        if self.remainder == "value":
            return rest.unsqueeze(-1) * v[:, :, v.size(2) - rest.size(2):]
        return rest.unsqueeze(-1) * self.rest_bias.to(rest.dtype)[:, None, :]
