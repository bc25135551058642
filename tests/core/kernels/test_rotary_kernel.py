"""RoPE's fused rotation (``fairseq_posenc.core.kernels.rotary``) turns each pair of q or k
as the paper's 2 x 2 rotation does, and as the complex64 path does.

On CPU the kernel runs in Triton's interpreter (``tests/support/interpreted.py``), in
float32 and float16; compiled and in bfloat16 in ``tests/core/kernels/test_gpu.py``. The
reference is the paper's eq. 34 written out with ``cos``/``sin`` in float64 on the same
(rounded) inputs.
"""

from __future__ import annotations

import pytest
import torch

from fairseq_posenc.core.context import KernelFamily
from fairseq_posenc.core.encodings.rope import Rope, rotate_pairs
from tests.support.interpreted import DEVICE, kernel_module
from tests.support.model_utils import assert_kernels_agree, build_model
from tests.support.batches import random_source
from tests.support.rotary import rotations, set_rope_kernel

rotary = kernel_module("rotary")


def paper_rotation(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0):
    """Eq. 34: pair ``i`` at position ``p`` turned by ``p * base^(-2i/d)``, float64."""
    d = x.size(-1)
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = positions.double()[:, None] * theta
    cos, sin = torch.cos(angle), torch.sin(angle)
    x0, x1 = x.double()[..., 0::2], x.double()[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 2e-3)])
@pytest.mark.parametrize("d,length,offset", [(64, 45, 0), (24, 7, 130)])
def test_rotation_is_the_papers_forward_and_backward(dtype, tol, d, length, offset):
    """A permuted (non-contiguous) input as the attention passes it; positions from an
    offset (decoding after a cache); the backward is the inverse rotation."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(length, 3, 2, d, generator=g).to(dtype).permute(1, 2, 0, 3)  # B, H, T, d
    weights = torch.randn(3, 2, length, d, generator=g, dtype=torch.float64)
    xd = x.to(DEVICE).detach().requires_grad_()  # a leaf, still permuted
    out = rotary.rotate(xd, rotations(length, d, offset).to(DEVICE))
    (out.double() * weights.to(DEVICE)).sum().backward()
    xr = x.double().requires_grad_()
    ref = paper_rotation(xr, torch.arange(offset, offset + length))
    (ref * weights).sum().backward()
    assert out.dtype == dtype and out.shape == x.shape
    assert out.stride() == xd.stride()  # the input's layout: no copy for attention or autograd
    assert (out.cpu().double() - ref).abs().max() < tol * 4
    assert (xd.grad.cpu().double() - xr.grad).abs().max() < tol * 4


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 2e-3)])
def test_xpos_scaled_rotation_forward_and_backward(dtype, tol):
    """xPos's numbers (a rotation times zeta_i^(p/gamma), here gamma = 16 so that the
    factors range over 0.2-5): the pair scaled and turned, and the backward the transpose
    (the scaled rotation's own, not its inverse)."""
    length, d, gamma = 40, 16, 16.0
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 3, length, d, generator=g).to(dtype)
    weights = torch.randn(2, 3, length, d, generator=g, dtype=torch.float64)
    positions = torch.arange(length, dtype=torch.float64) - length // 2
    zeta = (torch.arange(0, d, 2, dtype=torch.float64) / d + 0.4) / 1.4
    factor = zeta[None, :] ** (positions[:, None] / gamma)  # (T, d/2)
    scaled = (rotations(length, d, -(length // 2)).to(torch.complex128) * factor)
    xd = x.to(DEVICE).detach().requires_grad_()
    out = rotary.rotate(xd, scaled.to(torch.complex64).to(DEVICE))
    (out.double() * weights.to(DEVICE)).sum().backward()
    xr = x.double().requires_grad_()
    ref = paper_rotation(xr, positions) * factor.repeat_interleave(2, -1)
    (ref * weights).sum().backward()
    scale = ref.abs().max()
    assert (out.cpu().double() - ref).abs().max() < tol * 4 * scale
    assert (xd.grad.cpu().double() - xr.grad).abs().max() < tol * 4 * xr.grad.abs().max()


def test_unrotated_pairs_pass_through_the_kernel():
    """p-RoPE (--rope-fraction 0.5, d_h = 16): RoPE's table with frequency 0 on pairs 4-7,
    whose cos 1 and sin 0 leave them exactly as they are; pairs 0-3 as the paper's."""
    rope = Rope(head_dim=16, rope_fraction=0.5)
    angle = torch.arange(20, dtype=torch.float64)[:, None] * rope.theta
    table = torch.polar(torch.ones_like(angle), angle).to(torch.complex64)
    x = torch.randn(2, 3, 20, 16, generator=torch.Generator().manual_seed(3))
    out = rotary.rotate(x.to(DEVICE), table.to(DEVICE)).cpu()
    assert torch.equal(out[..., 8:], x[..., 8:])
    ref = paper_rotation(x, torch.arange(20))
    assert (out[..., :8].double() - ref[..., :8]).abs().max() < 1e-5


def test_fused_and_complex_paths_round_alike():
    """The same float32 arithmetic: float16 outputs equal to the last bit or one apart."""
    x = torch.randn(2, 4, 33, 64, generator=torch.Generator().manual_seed(1)).half()
    rot = rotations(33, 64)
    fused = rotary.rotate(x.to(DEVICE), rot.to(DEVICE)).cpu().float()
    complex_path = rotate_pairs(x, rot).float()
    ulp = torch.finfo(torch.float16).eps * complex_path.abs().clamp(min=2 ** -14)
    assert ((fused - complex_path).abs() <= ulp).all()


def test_bad_rotation_is_refused():
    x = torch.zeros(1, 2, 5, 8, device=DEVICE)
    with pytest.raises(ValueError, match=r"rotation must be complex64 of shape \(5, 4\)"):
        rotary.rotate(x, rotations(6, 8).to(DEVICE))


@pytest.mark.slow  # a whole model in Triton's interpreter
@pytest.mark.parametrize("encoding,flags", [("rope", []), ("xpos", ["--xpos-scale-base", "8"])])
def test_model_with_the_fused_rotation(encoding, flags):
    """A whole RoPE (xPos) model (float32): the same outputs as the complex path, and
    decoding step by step equals the fused full forward."""
    model, d = build_model(encoding, flags)
    model.to(DEVICE)
    assert_kernels_agree(model, d, set_rope_kernel, "complex", "fused", 1e-5, DEVICE)


def test_auto_keeps_the_complex_path_on_cpu_and_in_float32(monkeypatch):
    calls = []
    monkeypatch.setattr(rotary, "rotate", lambda *a: calls.append(1) or rotate_pairs(*a))
    model, d = build_model("rope")
    model.to(DEVICE)
    src, lengths = random_source(d)
    with torch.no_grad():
        model.encoder(src.to(DEVICE), lengths.to(DEVICE))
    assert calls == []


def test_auto_rotates_a_decoding_step_by_one_matrix(monkeypatch):
    """Where ``"auto"`` fuses (CUDA, half precision; forced here), a whole sequence is
    rotated by the kernel and a decoding step's one position by a matrix product."""
    from fairseq_posenc.core import kernels
    from fairseq_posenc.core.encodings import PositionContext

    calls = []
    monkeypatch.setattr(kernels, "auto_fuses", lambda *args: True)
    monkeypatch.setattr(rotary, "rotate", lambda *a: calls.append(a[0].size(2)) or
                        rotate_pairs(*a))
    rope = Rope(head_dim=16, rope_base=10000.0)
    x = torch.randn(2, 3, 7, 16)
    full, _ = rope.rotate_qk(x, x, 0, PositionContext())
    step, _ = rope.rotate_qk(x[:, :, 6:], x[:, :, 6:], 6, PositionContext(incremental=True))
    assert calls == [7, 7]  # q and k of the full sequence only
    assert torch.allclose(step, full[:, :, 6:], atol=1e-6)


def test_pos_kernels_torch_keeps_the_complex_rotation(monkeypatch):
    from fairseq_posenc.core import kernels

    calls = []
    monkeypatch.setattr(kernels, "auto_fuses", lambda *args: True)
    monkeypatch.setattr(rotary, "rotate", lambda *a: calls.append(1) or rotate_pairs(*a))
    for choice, expected in (("torch", 0), ("auto", 4)):  # q and k in 2 encoder layers
        calls.clear()
        model, d = build_model("rope", ["--pos-kernels", choice])
        src, lengths = random_source(d)
        with torch.no_grad():
            model.encoder(src, lengths)
        assert len(calls) == expected, choice


def test_self_check_of_the_rotation(monkeypatch):
    self_check = kernel_module("self_check")
    assert self_check.self_check(KernelFamily.ROTARY, False, torch.device(DEVICE),
                                 torch.float16)
    monkeypatch.setattr(self_check, "rotate", lambda x, rot: rotate_pairs(x, rot.conj()))
    with pytest.warns(RuntimeWarning, match="rotary kernel is not used .* output is off "
                      "by .* complex64 instead"):
        assert not self_check.self_check(KernelFamily.ROTARY, False, torch.device(DEVICE),
                                 torch.float16)
