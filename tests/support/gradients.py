"""Gradients of a computation that reads a module's parameters, against finite
differences (``torch.autograd.gradcheck``, float64)."""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor, nn


class _Call(nn.Module):
    """``fn(*inputs)`` as the forward of a module holding ``module``: what
    ``torch.func.functional_call`` needs to swap ``module``'s parameters for the checked
    values while ``fn`` runs."""

    def __init__(self, module: nn.Module, fn: Callable[..., Tensor]) -> None:
        super().__init__()
        self.module = module
        self.fn = fn

    def forward(self, *inputs: Tensor) -> Tensor:
        return self.fn(*inputs)


def gradcheck_with_parameters(module: nn.Module, fn: Callable[..., Tensor],
                              inputs: Sequence[Tensor] = ()) -> bool:
    """``gradcheck`` of ``fn(*inputs)`` with respect to ``inputs`` (float64, requiring
    grad) and every parameter of ``module`` (float64)."""
    call = _Call(module, fn)
    names = [name for name, _ in call.named_parameters()]
    values = [p.detach().clone().requires_grad_() for p in call.parameters()]
    count = len(inputs)

    def run(*args: Tensor) -> Tensor:
        return torch.func.functional_call(call, dict(zip(names, args[count:])),
                                          tuple(args[:count]), strict=True)

    return torch.autograd.gradcheck(run, (*inputs, *values))
