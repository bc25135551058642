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
position ``i`` once ``i > L``, not on ``j - i`` alone, so in general it is a ``PAIR_BIAS``:
the ``(H, n, n)`` table over positions is computed once per forward (per module; while
decoding, for a window that grows geometrically) and read at the rows' real positions
(:func:`~fairseq_posenc.core.encodings.absolute_tables.absolute_pair_bias`), then added to the float mask
(SDPA on CUDA; the explicit path on CPU in training, whose fused kernel does not
differentiate its mask). A decoding step reads its own row ``t`` of the table. The MLP
runs on ``n x n`` inputs per module and forward (``n x n x w`` hidden values), the
paper's cost.

Within the threshold it is a table by distance: for a query at ``i <= L`` the normaliser is
the constant ``psi(L)`` (and in the encoder, for the keys after it, ``psi(max(L, n - 1 -
i)) = psi(L)`` when ``n - 1 <= L``), so ``b(i, j) = f(sign(i - j) psi(|i - j|) / psi(L))``
(:meth:`Fire.distance_bias`). A call whose every position is below ``L`` (keys ``0 .. k_len -
1`` with ``k_len - 1 < L``; :meth:`Fire.distance_covers`) is therefore a
``DISTANCE`` term too: the planner gives it the fused distance kernel where that kernel runs
(CUDA, half precision), its gradient reaching the MLP, ``c`` and ``L`` through the
``(H, 2 n - 1)`` table, and the MLP runs on ``2 n - 1`` inputs instead of ``n x n``. The
planner reads ``L`` on the host once per forward for all the FIRE modules of a stack
(:meth:`Fire.host_threshold`: one host synchronisation per stack and forward on CUDA).

Deviations (the paper defines the causal form only):

* Positions count real tokens: ``i`` is the query's position from the row's first real
  token, so a left-padded source (or target, with ``--left-pad-target``) is encoded like
  the same sentence alone. The distance is the same on indices.
* Encoder (bidirectional): the keys after the query are the mirror image of the keys
  before it. A key ``j > i`` gets ``f(-psi(j - i) / psi(max(L, n - 1 - i)))``, ``n`` the
  row's real tokens: the negative of the same transform (so the MLP tells the two sides
  apart; with ``|i - j|`` the bias would be symmetric, and an encoder whose only position
  term it is could not tell left from right), normalised by the length of the query's
  context on that side, the ``n - 1 - i`` tokens after it, counted from the row's last
  real token. The keys at or before the query (all the decoder sees) get the paper's
  formula, normalised by the ``i`` tokens before it. Each side's input then stays in
  ``[0, 1]`` in magnitude, as in the causal case: normalising the keys after the query by
  ``psi(max(L, i))`` instead would send them past 1 for early queries of a sentence longer
  than ``L``, the extrapolation FIRE's normalisation is there to avoid. Both sides read
  one table, ``M[a, b] = f(sign(a - b) psi(|a - b|) / psi(max(L, a, b)))``: a key before
  the query at ``(i, j)``, a key after it at ``(n - 1 - j, n - 1 - i)``.
"""

from __future__ import annotations

from typing import Annotated, Any, Mapping, Optional

import torch
from torch import Tensor, nn

from ..context import KernelFamily, PositionContext, Window
from ..positions import gather_absolute_pairs, relative_positions
from .kinds import DistanceBias, PairBias
from .options import Option
from .absolute_tables import absolute_pair_bias
from .registry import register_encoding

#: Added to the normaliser ``psi(max(L, i))`` (the authors' ``eps``).
EPS = 1e-6


def fire_inputs(n: int, c: Tensor, threshold: Tensor) -> Tensor:
    """``(n, n)``: ``sign(a - b) psi(|a - b|) / (psi(max(L, a, b)) + eps)`` for positions
    ``a`` (rows) and ``b`` (columns), ``psi(x) = log(|c x| + 1)``: for ``b <= a`` the
    paper's input of query ``a`` and key ``b``; float32 at least (positions reach ``n``)."""
    dtype = torch.promote_types(c.dtype, torch.float32)
    pos = torch.arange(n, device=c.device, dtype=dtype)
    c, threshold = c.to(dtype), threshold.to(dtype)
    diff = pos[:, None] - pos[None, :]
    numerator = torch.sign(diff) * torch.log1p((c * diff).abs())
    farther = torch.maximum(pos[:, None], pos[None, :])
    normaliser = torch.log1p((c * torch.maximum(farther, threshold)).abs()) + EPS
    return numerator / normaliser


def fire_distance_inputs(r_lo: int, r_hi: int, c: Tensor, threshold: Tensor) -> Tensor:
    """``(R,)``: ``sign(-r) psi(|r|) / (psi(L) + eps)`` for the distances ``r = j - i`` in
    ``[r_lo, r_hi]``: :func:`fire_inputs` of every pair whose positions are at most ``L``,
    by the same operations (so the same numbers)."""
    dtype = torch.promote_types(c.dtype, torch.float32)
    c, threshold = c.to(dtype), threshold.to(dtype)
    diff = -torch.arange(r_lo, r_hi + 1, device=c.device, dtype=dtype)  # i - j
    numerator = torch.sign(diff) * torch.log1p((c * diff).abs())
    normaliser = torch.log1p((c * threshold).abs()) + EPS
    return numerator / normaliser


def positions_from_the_end(key_padding_mask: Tensor, positions: Tensor) -> Tensor:
    """``n - 1 - p``: each token's position counted from its row's last real token
    (``positions`` from the first; padding gets a valid index, it is masked)."""
    real = (~key_padding_mask.to(torch.bool)).sum(dim=1, keepdim=True)
    return (real - 1 - positions).clamp(min=0)


@register_encoding
class Fire(PairBias, DistanceBias):
    """A ``PAIR_BIAS`` (:attr:`applies_as`) that is its ``DISTANCE_BIAS`` table read at
    ``j - i`` on the calls within its threshold (:meth:`distance_covers`), where the fused
    distance kernel may run it (``DISTANCE``)."""

    name = "fire"
    applies_as = PairBias
    fused_families = frozenset({KernelFamily.DISTANCE})

    def __init__(
        self, *, num_heads: int, causal: bool = True,
        fire_mlp_width: Annotated[int, Option(
            "width of the hidden layer of the MLP f (default 32, the paper's)", minimum=1,
            metavar="N", hint="FIRE uses 32.")] = 32,
        fire_init_c: Annotated[float, Option(
            "initial value of c in psi(x) = log(c x + 1) (learned; default 0.1, the "
            "paper's)", metavar="C")] = 0.1,
        fire_init_l: Annotated[float, Option(
            "L_0 in the threshold L = |l L_0| of psi(max(L, i)), l learned from 1 (default "
            "512, the paper's)", metavar="L")] = 512.0,
        fire_shared: Annotated[bool, Option(
            "one FIRE module per stack, shared by its layers (the paper's FIRE-Shared; "
            "default: one per layer)")] = False,
    ) -> None:
        super().__init__()
        mlp_width, init_c, init_l = fire_mlp_width, fire_init_c, fire_init_l
        self.causal = causal
        self.mlp = nn.Sequential(nn.Linear(1, mlp_width), nn.ReLU(),
                                 nn.Linear(mlp_width, num_heads))
        self.c = nn.Parameter(torch.tensor(float(init_c)))
        #: ``L_0``: fixed; the threshold is ``|l_multiplier * L_0|``.
        self.init_l = float(init_l)
        self.l_multiplier = nn.Parameter(torch.tensor(1.0))
        #: The FIRE modules of this module's stack (:meth:`build_stack`), whose thresholds
        #: :meth:`host_threshold` reads together; a plain tuple, not submodules.
        self.stack_modules: tuple["Fire", ...] = (self,)

    @classmethod
    def check_options(cls, values: Mapping[str, Any]) -> None:
        for option, value in (("--fire-init-c", values["fire_init_c"]),
                              ("--fire-init-l", values["fire_init_l"])):
            if not value > 0:  # also NaN
                raise ValueError(f"{option} must be positive, got {value!r}: psi(x) = "
                                 "log(c x + 1) needs c > 0 and the threshold L > 0. FIRE "
                                 "starts from c = 0.1 and L = 512.")

    @classmethod
    def random_positions_refusal(cls, values) -> Optional[str]:
        return ("its bias is a function of the query's position and the distance, "
                "normalised by psi(max(L, i)) over the positions 0..n-1 its table covers; "
                "FIRE's own answer to unseen lengths is that normalisation: train fire "
                "without it")

    @classmethod
    def shares_layers(cls, values) -> bool:
        return values["fire_shared"]

    @classmethod
    def build_stack(cls, values, num_layers, pos_layers=None, **structural):
        """:meth:`PositionEncoding.build_stack`, each module told the stack's others."""
        layers = super().build_stack(values, num_layers, pos_layers, **structural)
        modules = tuple(dict.fromkeys(m for m in layers if m is not None))
        for module in modules:
            module.stack_modules = modules
        return layers

    def threshold(self) -> Tensor:
        """``L = |l L_0|``."""
        return (self.l_multiplier * self.init_l).abs()

    def host_threshold(self, ctx: PositionContext) -> float:
        """``L`` as a Python float, exactly (float64), read once per forward for every
        module of the stack (:attr:`stack_modules`): one host synchronisation per stack
        and forward on CUDA, not one per layer."""
        stack = self.stack_modules
        values = ctx.latest(stack, "thresholds on the host", None, lambda: torch.stack(
            [m.threshold().detach().double() for m in stack]).tolist())
        return values[stack.index(self)]

    def distance_covers(self, q_len: int, k_len: int, q_offset: int,
                        ctx: PositionContext) -> bool:
        """Whether every position of the call is below ``L`` (keys ``0 .. k_len - 1``,
        the queries among them, and in the encoder the tokens after a query fewer than
        ``k_len``), so that the bias is :meth:`distance_bias` read at ``j - i``. Positions
        count real tokens, at most their indices: padding keeps the rule exact. Below,
        not at: at a position equal to ``L`` the bias is the same, but the pair path's
        ``max(L, i)`` gives ``L`` half the gradient there (torch's rule at a tie), the
        table all of it."""
        return k_len - 1 < self.host_threshold(ctx)

    def through_mlp(self, x: Tensor) -> Tensor:
        """``f_theta`` of every input of ``x`` (``(...)``), ``(..., H)``."""
        weight = self.mlp[0].weight
        return self.mlp(x.to(weight.dtype).unsqueeze(-1))

    def table(self, n: int) -> Tensor:
        """``(H, n, n)``: ``M[a, b]`` (:func:`fire_inputs` through the MLP); for ``b <= a``
        the bias of query position ``a`` and key position ``b``."""
        return self.through_mlp(fire_inputs(n, self.c, self.threshold())).permute(2, 0, 1)

    def distance_bias(self, r_lo: int, r_hi: int) -> Tensor:
        """``(H, r_hi - r_lo + 1)``: the bias by distance ``r = j - i`` of the calls whose
        positions are below ``L`` (:meth:`distance_covers`; the fused distance kernel
        reads it through :meth:`DistanceBias.distance_table`): ``M[i, j]`` of every such
        pair, computed on ``2 n - 1`` inputs."""
        x = fire_distance_inputs(r_lo, r_hi, self.c, self.threshold())
        return self.through_mlp(x).t()

    def pair_bias(self, q_len: int, k_len: int, q_offset: int,
                  key_padding_mask: Optional[Tensor], ctx: PositionContext) -> Tensor:
        """:meth:`table` once per forward (a window grown geometrically while decoding),
        read at the rows' real positions; in the encoder the keys after the query read it
        mirrored, at positions counted from the row's end."""
        table = ctx.window(self, "table", 0, k_len - 1,
                           lambda lo, hi: Window(self.table(hi + 1), 0, hi)).table
        before = absolute_pair_bias(self, table, q_len, k_len, q_offset, key_padding_mask,
                                    ctx)
        if self.causal:
            return before

        def both_sides() -> Tensor:
            if key_padding_mask is None:  # [i, j] -> table[k_len - 1 - j, k_len - 1 - i]
                mirrored = table[:, :k_len, :k_len].flip(-1, -2).transpose(-1, -2)
                after = mirrored[:, q_offset:]
            else:
                positions = ctx.real_positions(key_padding_mask, k_len, table.device)
                after = gather_absolute_pairs(
                    table.transpose(-1, -2), positions_from_the_end(key_padding_mask,
                                                                    positions), q_offset)
            later = relative_positions(q_len, k_len, q_offset, table.device) > 0  # j > i
            return torch.where(later, after, before)

        return ctx.latest(self, "both sides", (key_padding_mask, q_len, k_len, q_offset),
                          both_sides, batch_dependent=key_padding_mask is not None)
