"""RoPE's rotation of queries or keys in one pass (Su et al. 2021, eq. 34).

``y[2i] = x[2i] cos(p theta_i) - x[2i+1] sin(p theta_i)``,
``y[2i+1] = x[2i] sin(p theta_i) + x[2i+1] cos(p theta_i)`` at position ``p``; xPos's
(``encodings/xpos.py``) is the same with ``cos`` and ``sin`` times the pair's factor.

:func:`fairseq_posenc.core.positions.rotate_pairs` computes this as a complex64 product,
so half-precision q and k are cast to float32, multiplied and cast back: three passes
and two float32 copies of each, in the forward and again in the backward
(``docs/decisions.md``, "RoPE's rotation"). Here one pass reads ``x`` in its dtype and
layout, rotates each pair in float32 with the same float32 ``cos``/``sin``, and writes
``x``'s dtype: the same products and sums, rounded once to the output dtype, as the
complex path. The backward is the transpose (``-sin``) applied to the gradient, by the
same kernel: the inverse rotation for RoPE's unit numbers, and the right gradient for
xPos's, whose numbers also scale each pair (``cos`` and ``sin`` times the pair's factor).

Runs compiled on a CUDA GPU, and on CPU in Triton's interpreter (``TRITON_INTERPRET=1``
before import), where ``tests/core/kernels/test_rotary_kernel.py`` compares it with the
complex path.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import on_device_of

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised where triton is absent
    triton = None

#: Positions per program; the program reads whole rows (every pair of the head).
BLOCK_T = 64

if triton is not None:

    @triton.jit
    def _rotate_kernel(X, ROT, Y, sxb, sxh, sxt, syb, syh, syt, H, T, SIGN: tl.constexpr,
                       D: tl.constexpr, BD: tl.constexpr, BLOCK_T: tl.constexpr):
        """``X``, ``Y``: ``(B, H, T, D)``, last stride 1, any other strides; ``ROT``:
        ``(T, D/2, 2)`` float32, ``(cos, sin)`` per position and pair. Rows are loaded
        whole (coalesced) and split into the pairs' two halves in registers."""
        pid_t = tl.program_id(0)
        bh = tl.program_id(1)
        b, h = bh // H, bh % H
        t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
        d = tl.arange(0, BD)
        mask = (t < T)[:, None] & (d < D)[None, :]
        x = tl.load(X + b * sxb + h * sxh + t[:, None] * sxt + d[None, :], mask=mask,
                    other=0.0)
        x0, x1 = tl.split(tl.reshape(x.to(tl.float32), (BLOCK_T, BD // 2, 2)))
        rot = tl.load(ROT + t[:, None] * D + d[None, :], mask=mask, other=0.0)
        cos, sin = tl.split(tl.reshape(rot, (BLOCK_T, BD // 2, 2)))
        sin = sin * SIGN
        y = tl.reshape(tl.join(x0 * cos - x1 * sin, x0 * sin + x1 * cos), (BLOCK_T, BD))
        tl.store(Y + b * syb + h * syh + t[:, None] * syt + d[None, :],
                 y.to(Y.dtype.element_ty), mask=mask)


def _rotate(x: Tensor, rotation: Tensor, sign: int) -> Tensor:
    """``x`` rotated by ``rotation`` (``sign = -1``: by its inverse), in ``x``'s layout:
    a view of the projections' ``(T, B, H, d)`` output stays one, as with the complex
    path, so neither the attention nor autograd copies it."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    batch, heads, length, dim = x.shape
    y = torch.empty_like(x)  # x's strides (a permuted dense tensor keeps its layout)
    if y.stride(-1) != 1:
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    with on_device_of(x):
        _rotate_kernel[(triton.cdiv(length, BLOCK_T), batch * heads)](
            x, rotation, y, x.stride(0), x.stride(1), x.stride(2), y.stride(0), y.stride(1),
            y.stride(2), heads, length, SIGN=sign, D=dim,
            BD=max(16, 1 << (dim - 1).bit_length()), BLOCK_T=BLOCK_T)
    return y


class _Rotate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, rotation: Tensor) -> Tensor:
        ctx.save_for_backward(rotation)
        return _rotate(x, rotation, 1)

    @staticmethod
    def backward(ctx, d_y: Tensor):
        (rotation,) = ctx.saved_tensors
        return _rotate(d_y, rotation, -1), None


def rotate(x: Tensor, rotation: Tensor) -> Tensor:
    """``x`` (``(B, H, T, d)``) with pair ``i`` at position ``t`` multiplied by the
    complex number ``rotation[t, i]`` (``(T, d/2)``, complex64; a unit one turns it, as
    RoPE's, any other also scales it, as xPos's): what
    :func:`~fairseq_posenc.core.positions.rotate_pairs` computes, in one pass."""
    if triton is None:
        raise RuntimeError("the fused rotation needs Triton (pip install triton, or a CUDA "
                           "build of torch, which brings it)")
    if rotation.dtype != torch.complex64 or rotation.shape != (x.size(2), x.size(3) // 2):
        raise ValueError(f"rotation must be complex64 of shape {(x.size(2), x.size(3) // 2)}"
                         f", got {rotation.dtype} {tuple(rotation.shape)}")
    return _Rotate.apply(x, torch.view_as_real(rotation.contiguous()))
