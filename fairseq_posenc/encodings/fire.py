"""``fire``: Functional Interpolation for Relative Positions (Li, You, Guruganesh, Ainslie,
Ontanon, Zaheer, Sanghai, Yang, Kumar and Bhojanapalli 2023, ICLR 2024, arXiv 2310.04418,
section 3).

``e_ij += b_h(i, j) = f_theta(psi(i - j) / psi(max(L, i)))_h``, ``psi(x) = log(c x + 1)``:
a content-free bias added to the scaled logits. ``f_theta`` is an MLP ``1 -> w -> H`` with a
ReLU hidden layer, one output per head; ``c`` and the threshold ``L`` are learned. Dividing
by ``psi`` of the query's position maps every query's distances into ``[0, 1]``
(progressive interpolation: a longer context is a finer grid over the same range); the log
spreads the nearby distances; ``L`` keeps short contexts from being stretched.

Defaults and initialisation, as the paper's implementation (its appendix listing): ``w =
32`` (``--fire-mlp-width``), PyTorch's default ``Linear`` initialisation, ``c`` learned from
0.1 (``--fire-init-c``), ``L = |l * L_0|`` with the multiplier ``l`` learned from 1 and
``L_0 = 512`` fixed (``--fire-init-l``), ``|c x|`` inside the log (a ``c`` that turns
negative stays a log of a positive number), and ``eps = 1e-6`` added to the normaliser
(``psi(max(L, 0)) = 0`` when ``L`` reaches 0). One module per layer (FIRE); ``--fire-shared``
gives one per stack, shared by its layers (the paper's FIRE-Shared).

What kind of term it is, and which computation it gets: the bias depends on the query's
position ``i`` (once ``i > L``), not on ``j - i`` alone, so it is no table by distance and
the fused distance kernel cannot take it. It is a ``PAIR_BIAS``: the ``(H, n, n)`` table
over positions is computed once per forward (per module; while decoding, for a window that
grows geometrically) and read at the rows' real positions
(:func:`~fairseq_posenc.encodings.base.absolute_pair_bias`), then added to the float mask
(SDPA on CUDA; the explicit path on CPU in training, whose fused kernel does not
differentiate its mask). A decoding step reads its own row ``t`` of the table.

Deviations (the paper defines the causal form only):

* Positions count real tokens: ``i`` is the query's position from the row's first real
  token, so a left-padded source is encoded like the same source alone. The distance is the
  same on indices.
* Encoder (bidirectional): ``psi`` is extended as an odd function, ``psi(i - j) = sign(i - j)
  log(|c (i - j)| + 1)``, and the normaliser stays the query's own ``psi(max(L, i))``. A key
  after the query gets the negative of the same transform, so the MLP can tell the two sides
  apart (with ``|i - j|`` the bias would be symmetric, and an encoder whose only position
  term cannot tell left from right). For keys at or before the query (all the decoder
  sees) this is the paper's formula. The normalised distance of a key after the query can
  exceed 1 in magnitude (the normaliser is the query's context before it, as in the paper).
"""

from __future__ import annotations

import argparse
from typing import Optional

import torch
from torch import Tensor, nn

from ..context import PositionContext, PositionKind, Window
from .base import PositionEncoding, absolute_pair_bias
from .flags import Flag
from .registry import register_encoding

#: Added to the normaliser ``psi(max(L, i))`` (the authors' ``eps``).
EPS = 1e-6


def fire_inputs(n: int, c: Tensor, threshold: Tensor) -> Tensor:
    """``(n, n)``: ``psi(p - r) / (psi(max(L, p)) + eps)`` for query position ``p`` (rows)
    and key position ``r`` (columns), ``psi`` odd: ``sign(x) log(|c x| + 1)``; float32 at
    least (the positions reach ``n``)."""
    dtype = torch.promote_types(c.dtype, torch.float32)
    pos = torch.arange(n, device=c.device, dtype=dtype)
    c, threshold = c.to(dtype), threshold.to(dtype)
    diff = pos[:, None] - pos[None, :]
    numerator = torch.sign(diff) * torch.log1p((c * diff).abs())
    normaliser = torch.log1p((c * torch.maximum(pos, threshold)).abs()) + EPS
    return numerator / normaliser[:, None]


@register_encoding
class Fire(PositionEncoding):
    name = "fire"
    kind = PositionKind.PAIR_BIAS
    flags = (
        Flag("--fire-mlp-width", "fire: width of the hidden layer of the MLP f (default 32, "
             "the paper's)", default=32, type=int, metavar="N", minimum=1,
             hint="FIRE uses 32."),
        Flag("--fire-init-c", "fire: initial value of c in psi(x) = log(c x + 1) (learned; "
             "default 0.1, the paper's)", default=0.1, type=float, metavar="C"),
        Flag("--fire-init-l", "fire: L_0 in the threshold L = |l L_0| of psi(max(L, i)), "
             "l learned from 1 (default 512, the paper's)", default=512.0, type=float,
             metavar="L"),
        Flag("--fire-shared", "fire: one FIRE module per stack, shared by its layers (the "
             "paper's FIRE-Shared; default: one per layer)"),
    )

    def __init__(self, num_heads: int, mlp_width: int = 32, init_c: float = 0.1,
                 init_l: float = 512.0) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(1, mlp_width), nn.ReLU(),
                                 nn.Linear(mlp_width, num_heads))
        self.c = nn.Parameter(torch.tensor(float(init_c)))
        #: ``L_0``: fixed; the threshold is ``|l_multiplier * L_0|``.
        self.init_l = float(init_l)
        self.l_multiplier = nn.Parameter(torch.tensor(1.0))

    @classmethod
    def check_args(cls, args: argparse.Namespace) -> None:
        super().check_args(args)
        for option, value in (("--fire-init-c", args.fire_init_c),
                              ("--fire-init-l", args.fire_init_l)):
            if not value > 0:  # also NaN
                raise ValueError(f"{option} must be positive, got {value!r}: psi(x) = "
                                 "log(c x + 1) needs c > 0 and the threshold L > 0. FIRE "
                                 "starts from c = 0.1 and L = 512.")

    @classmethod
    def shares_layers(cls, args: argparse.Namespace) -> bool:
        return bool(args.fire_shared)

    @classmethod
    def build(cls, args, *, num_heads, head_dim, causal, max_positions) -> "Fire":
        return cls(num_heads, args.fire_mlp_width, args.fire_init_c, args.fire_init_l)

    def threshold(self) -> Tensor:
        """``L = |l L_0|``."""
        return (self.l_multiplier * self.init_l).abs()

    def table(self, n: int) -> Tensor:
        """``(H, n, n)``: the bias of query position ``p`` (rows) and key position ``r``
        (columns), ``p, r`` in ``0..n-1``."""
        x = fire_inputs(n, self.c, self.threshold())
        weight = self.mlp[0].weight
        out = self.mlp(x.to(weight.dtype).unsqueeze(-1))  # (n, n, H)
        return out.permute(2, 0, 1)

    def pair_bias(self, q_len: int, k_len: int, q_offset: int,
                  key_padding_mask: Optional[Tensor], ctx: PositionContext) -> Tensor:
        """:meth:`table` once per forward (a window grown geometrically while decoding),
        read at the rows' real positions."""
        table = ctx.window(self, "table", 0, k_len - 1,
                           lambda lo, hi: Window(self.table(hi + 1), 0, hi)).table
        return absolute_pair_bias(self, table, q_len, k_len, q_offset, key_padding_mask, ctx)
