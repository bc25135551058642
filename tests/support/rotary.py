"""RoPE's rotation table as the fused rotation takes it, and its kernel choice."""

from __future__ import annotations

import torch

from fairseq_posenc.core.encodings.rope import Rope


def rotations(length: int, d: int, offset: int = 0) -> torch.Tensor:
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.arange(offset, offset + length, dtype=torch.float64)[:, None] * theta
    return torch.polar(torch.ones_like(angle), angle).to(torch.complex64)


def set_rope_kernel(model: torch.nn.Module, kernel: str) -> None:
    ropes = [m for m in model.modules() if isinstance(m, Rope)]
    assert ropes
    for m in ropes:
        m.kernel = kernel
