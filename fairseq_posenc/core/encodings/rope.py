"""``rope``: rotary position embedding (Su et al. 2021, RoFormer, eq. 34).

Each head's query and key are rotated pair by pair: dimensions ``(2i, 2i+1)`` of the vector
at position ``p`` turn by the angle ``p * theta_i``, ``theta_i = base^(-2i/d_h)``,
``base = 10000`` (``--rope-base``). ``q_i . k_j`` then depends on positions only through
``j - i``. Interleaved pairs as in the paper (GPT-NeoX rotates the two halves instead: the
same family, a different pairing). Applied in every self-attention layer; no parameters.
Keys are cached rotated, so decoding step ``t`` rotates only its own query and key.
On CUDA in half precision a sequence's rotation is one fused pass
(:mod:`fairseq_posenc.core.kernels.rotary`, ``kernel="auto"``), the same arithmetic as the
complex64 product without its float32 copies. A decoding step puts every row at one
position, so its rotation is one ``d_h x d_h`` matrix product per tensor (entries from
float64 angles, the queries' times the attention's ``1/sqrt(d_h)``, rounded once to the
model's precision), the fewest kernels for the host to launch, which is what
bounds beam search.

Positions are indices in the padded row: fairseq pads on one side only, so real tokens
are contiguous and, the encoding being relative, the padding offset cancels. Positions
chosen per sequence (``--random-positions`` in training) rotate each row by its own.

p-RoPE (Barbero et al., "Round and Round We Go! What makes Rotary Positional Encodings
useful?", ICLR 2025, arXiv 2410.06205, sec. 6 and its ``apply_p_rope`` listing):
``--rope-fraction P`` rotates only the ``floor(P d_h / 2)`` highest-frequency pairs
(``i < floor(P d_h / 2)``), each at RoPE's own ``theta_i`` (not re-spaced), and leaves the
others unrotated, as the listing does by giving them an infinite wavelength: their
``theta_i`` is 0 (angle 0, ``cos 1``, ``sin 0``), so the rotation's paths (the complex
product, the decoding step's matrix, the fused kernel) need nothing of their own.
``P = 1`` (the default) is RoPE, ``P = 0`` rotates nothing (the paper's 0-RoPE, NoPE).

Rescaled frequencies for sentences longer than the training ones (a registered RoPE
scaling: position interpolation, NTK-aware scaling, YaRN, Llama 3's, dynamic NTK or a
user's; :mod:`fairseq_posenc.core.rope_scaling`) are a structural constructor argument
that only the rotations read, given at translation time through the plugin's tasks or
:class:`fairseq_posenc.nn.PositionStack`; a scaling's attention factor (YaRN's
temperature) joins the queries' scale. A ``per_sequence`` scaling's frequencies (dynamic
NTK's) depend on each sequence's length bound (:attr:`PositionContext.lengths`): a row's
rotation is then its own, as with positions chosen per sequence.

Not proposed by the papers this project reproduces; included because researchers comparing
position encodings today expect it.
"""

from __future__ import annotations

from typing import Annotated, Any, Mapping, Optional

import torch
from torch import Tensor

from ..context import FusedKernel, KernelFamily, PositionContext, Window
from .. import kernels
from ..positions import rotate_pairs
from ..rope_scaling import RopeScaling
from .kinds import Rotation
from .options import STRUCTURAL, Option
from .registry import register_encoding

#: ``--rope-fraction``, declared the same way by ``rope`` and ``xpos``.
RopeFraction = Annotated[float, Option(
    "p-RoPE (Barbero et al. 2025): rotate only the fraction P of the frequency pairs, the "
    "highest frequencies, and leave the lowest unrotated; 0 <= P <= 1 (default 1: RoPE)",
    minimum=0, metavar="P")]


def rotated_pairs(fraction: float, head_dim: int) -> int:
    """The pairs p-RoPE rotates: ``int(P * d_h // 2)``, as the paper's listing counts them."""
    return int(fraction * head_dim // 2)


def check_fraction(values: Mapping[str, Any]) -> None:
    fraction = values["rope_fraction"]
    if not 0 <= fraction <= 1:
        raise ValueError(f"--rope-fraction is the fraction of frequency pairs that rotate: "
                         f"0 <= P <= 1, got {fraction}. 1 is RoPE, 0 rotates nothing.")


@register_encoding
class Rope(Rotation):
    name = "rope"
    fused_kernel = FusedKernel(KernelFamily.ROTARY)
    #: Its rotation's frequencies are the ones a RoPE scaling rescales: the stack gives it
    #: (and xPos, and any rotation derived from it) the scaling chosen, or None.
    structural = STRUCTURAL + ("rope_scaling",)
    #: ``--pos-kernels``: ``"auto"`` (:meth:`_path`) or torch's complex product everywhere.
    pos_kernels = {"auto": "auto", "torch": "complex"}

    def __init__(self, *, head_dim: int, rope_scaling: Optional[RopeScaling] = None,
                 rope_base: Annotated[float, Option(
                     "base of the rotation frequencies (default 10000)",
                     metavar="B")] = 10000.0,
                 rope_fraction: RopeFraction = 1.0) -> None:
        """``rope_scaling``: frequencies rescaled for longer sentences than the training
        ones (None: the paper's)."""
        super().__init__()
        base, scaling = rope_base, rope_scaling
        #: ``"auto"``, ``"fused"`` or ``"complex"``: which rotation :meth:`_path` runs.
        self.kernel = "auto"
        if head_dim % 2:
            raise ValueError(f"--pos-encoding {self.name} needs an even head dimension, "
                             f"got {head_dim}")
        # float64 on the CPU, not a buffer: a model's .half() would round a buffer to its
        # precision, and the angles p theta with it (:meth:`_exact`)
        scaled = None if scaling is None else scaling.scaled(head_dim, base)
        self.theta = (base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
                      if scaled is None else scaled.frequencies)
        #: p-RoPE: pairs from this one on are not rotated (their frequency is 0).
        self.rotated = rotated_pairs(rope_fraction, head_dim)
        self.theta[self.rotated:] = 0.0
        self.base = base
        self._copies: dict[tuple[str, torch.device], Tensor] = {}
        self.scaling = scaling
        #: The factor on the logits, folded into the queries' scale: YaRN's ``1/t``, else 1.
        self.logit_scale = 1.0 if scaled is None else scaled.attention_factor

    @classmethod
    def check_options(cls, values: Mapping[str, Any]) -> None:
        check_fraction(values)
        if not values["rope_base"] > 1:
            raise ValueError(f"--rope-base must be greater than 1, got {values['rope_base']}")

    @classmethod
    def shares_layers(cls, values) -> bool:
        return True

    def _exact(self, name: str, device: torch.device) -> Tensor:
        """The float64 constant ``name`` (kept on the CPU) on ``device``, copied once per
        device: a copy per forward would make the host wait for the GPU."""
        copy = self._copies.get((name, device))
        if copy is None:
            copy = self._copies[name, device] = getattr(self, name).to(device)
        return copy

    # -- what a subclass adds to the rotation (xPos: a decay per pair) ------------------

    def _origin(self, end: int) -> int:
        """The position whose factors are 1, for a call over positions ``0..end-1``."""
        return 0

    def _magnitudes(self, positions: Tensor, origin: int) -> Optional[tuple[Tensor, Tensor]]:
        """Real factors on each pair of the queries and of the keys at ``positions``
        (float64, ``(n, d_h/2)`` each), or None: none (RoPE's rotation alone)."""
        return None

    def _rotations(self, end: int, dtype: torch.dtype, device: torch.device,
                   ctx: PositionContext) -> tuple[Tensor, Tensor]:
        """The queries' and the keys' factors for positions ``p = 0..end-1`` (at least),
        ``(end, d_h/2)`` each: ``e^(i p theta_j)``, times :meth:`_magnitudes` where a
        subclass has them (RoPE: one table, returned twice); complex of ``dtype``'s
        precision, computed in float64, cached per forward (per sequence while
        decoding)."""
        origin = self._origin(end)

        def compute(lo: int, hi: int) -> Window:
            positions = torch.arange(hi + 1, dtype=torch.float64, device=device)
            angles = positions[:, None] * self._exact("theta", device)
            magnitudes = self._magnitudes(positions, origin) or (torch.ones_like(angles),)
            tables = torch.stack([torch.polar(m, angles) for m in magnitudes])
            complex_type = torch.complex128 if dtype == torch.float64 else torch.complex64
            return Window(tables.to(complex_type), 0, hi, dim=1)

        tables = ctx.window(self, f"rotations {dtype} from {origin}", 0, end - 1,
                            compute).table
        return tables[0], tables[-1]

    def _step_matrix(self, position: int, dtype: torch.dtype, device: torch.device,
                     scale: float, ctx: PositionContext, side: int) -> Tensor:
        """The rotation at ``position`` times ``scale`` (and the queries' (``side`` 0) or
        keys' (1) :meth:`_magnitudes`) as a real ``(d_h, d_h)`` matrix ``M`` acting on
        rows, ``x M``: pairs ``(x_2i, x_2i+1) -> scale (x_2i cos - x_2i+1 sin, x_2i sin +
        x_2i+1 cos)``, computed in float64 and each entry rounded once to ``dtype``. Kept
        for the decoded sequence as a window of positions (one per scale and side: the
        queries' carries the attention's ``1/sqrt(d_h)``): a step reads its matrix."""
        origin = self._origin(position + 1)

        def compute(lo: int, hi: int) -> Window:
            positions = torch.arange(hi + 1, dtype=torch.float64, device=device)
            angles = positions[:, None] * self._exact("theta", device)  # (n, d/2)
            magnitudes = self._magnitudes(positions, origin)
            factor = scale if magnitudes is None else magnitudes[side] * scale
            cos, sin = angles.cos() * factor, angles.sin() * factor
            # blocks[n, i] = [[cos, sin], [-sin, cos]]: row 2i (x_2i), row 2i+1 (x_2i+1)
            blocks = torch.stack([torch.stack([cos, sin], -1),
                                  torch.stack([-sin, cos], -1)], -2)  # (n, d/2, 2, 2)
            pairs = blocks.size(1)
            eye = torch.eye(pairs, dtype=torch.float64, device=blocks.device)
            # (n, i, a, j, b) = eye[i, j] * blocks[n, i, a, b]: block-diagonal (n, d, d)
            matrices = (eye[None, :, None, :, None] * blocks[:, :, :, None, :])
            return Window(matrices.reshape(-1, 2 * pairs, 2 * pairs).to(dtype), 0, hi, dim=0)

        window = ctx.window(self, f"step matrices {dtype} x{scale!r} {side} from {origin}",
                            0, position, compute)
        return window.table[position]

    def _row_rotations(self, q: Tensor, q_offset: int,
                       ctx: PositionContext) -> tuple[Tensor, Tensor]:
        """Dynamic NTK: the queries' and keys' factors at positions ``q_offset ..``, each
        row at the frequencies of its length bound (``ctx.lengths``; a call without them,
        outside the plugin, bounds every row by the call's length), ``(B, 1, len, d_h/2)``
        complex, computed in float64 once per forward of the stack."""
        end = q_offset + q.size(-2)
        lengths = ctx.lengths
        if lengths is None:
            if ctx.incremental:
                raise ValueError(f"--rope-scaling {self.scaling.kind} reads each sequence's "
                                 "length bound "
                                 "while decoding (PositionContext.lengths); the plugin's "
                                 "decoder sets it: decode through it, or set the context's "
                                 "lengths")
            lengths = torch.full((q.size(0),), end, device=q.device)

        def compute() -> tuple[Tensor, Tensor]:
            theta = self.scaling.dynamic_frequencies(2 * self.theta.numel(), self.base,
                                                     lengths.to(q.device))
            theta[:, self.rotated:] = 0.0
            positions = torch.arange(q_offset, end, dtype=torch.float64, device=q.device)
            angles = positions[None, :, None] * theta[:, None, :]  # (B, len, d_h/2)
            magnitudes = self._magnitudes(positions, self._origin(end)) or (
                torch.ones_like(positions)[:, None],)
            complex_type = torch.complex128 if q.dtype == torch.float64 else torch.complex64
            tables = [torch.polar(m.expand_as(angles), angles).to(complex_type).unsqueeze(1)
                      for m in magnitudes]
            return tables[0], tables[-1]

        return ctx.latest(self, "dynamic rotations", (lengths, q_offset, end, q.dtype),
                          compute, batch_dependent=True)

    def _path(self, q: Tensor, ctx: PositionContext) -> str:
        """Which rotation a call runs (the one place that chooses it): ``"bounds"``, each
        row at the frequencies of its length bound (a ``per_sequence`` scaling:
        :meth:`_row_rotations`), and ``"positions"``, each row at the positions chosen for
        it, both in the complex product (the fused rotation takes one row of factors per
        position); else by :attr:`kernel`: ``"auto"`` gives a decoding step's one position
        a matrix product (``"step"``), a longer call the fused rotation on CUDA in half
        precision (:func:`~fairseq_posenc.core.kernels.auto_fuses`, the planner's rule too)
        and the complex64 product (:func:`rotate_pairs`) elsewhere; ``"fused"`` or
        ``"complex"``: that one everywhere."""
        if self.scaling is not None and self.scaling.per_sequence:
            return "bounds"
        if ctx.positions is not None:
            return "positions"
        if self.kernel != "auto":
            return self.kernel
        if q.size(-2) == 1:
            return "step"
        return ("fused" if kernels.auto_fuses(KernelFamily.ROTARY, q.device, q.dtype)
                else "complex")

    def rotate_qk(self, q: Tensor, k: Tensor, q_offset: int, ctx: PositionContext,
                  q_scale: float = 1.0) -> tuple[Tensor, Tensor]:
        q_scale = q_scale * self.logit_scale
        path = self._path(q, ctx)
        if path == "bounds":
            q_rotation, k_rotation = self._row_rotations(q, q_offset, ctx)
            return rotate_pairs(q * q_scale, q_rotation), rotate_pairs(k, k_rotation)
        if path == "positions":
            # Positions chosen per sequence (--random-positions): each row's own factors,
            # (B, 1, len, d_h/2) broadcast over the heads.
            q_rotation, k_rotation = self._rotations(ctx.largest_position() + 1, q.dtype,
                                                     q.device, ctx)
            index = ctx.positions[:, q_offset:q_offset + q.size(-2)]
            return (rotate_pairs(q * q_scale, q_rotation[index].unsqueeze(1)),
                    rotate_pairs(k, k_rotation[index].unsqueeze(1)))
        if path == "step":
            # A decoding step: every row at one position, so the rotation is one matrix
            # product per tensor, the queries' with the scale folded in (no kernel of its
            # own). Beam search is bound by the host's work per layer, and the complex
            # product launches 3 kernels per tensor in half precision (a float32 copy, the
            # product, a cast back) (docs/decisions.md, "RoPE's rotation").
            return (torch.matmul(q, self._step_matrix(q_offset, q.dtype, q.device, q_scale,
                                                      ctx, 0)),
                    torch.matmul(k, self._step_matrix(q_offset, q.dtype, q.device, 1.0, ctx,
                                                      1)))
        if q_scale != 1.0:
            q = q * q_scale
        end = q_offset + q.size(-2)
        q_rotation, k_rotation = (table[q_offset:end]
                                  for table in self._rotations(end, q.dtype, q.device, ctx))
        if path == "fused":
            from ..kernels.rotary import rotate

            return rotate(q, q_rotation), rotate(k, k_rotation)
        return rotate_pairs(q, q_rotation), rotate_pairs(k, k_rotation)
