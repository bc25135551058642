"""Triton kernels for position terms that ``torch``'s own kernels run only with extra
passes or ``len x len`` tensors. Each module is imported where it is used: Triton is
optional on CPU, and Triton's interpreter (``TRITON_INTERPRET=1``) must be chosen before
a kernel is defined."""

from __future__ import annotations

import contextlib
import importlib.util
from typing import ContextManager

import torch
from torch import Tensor

from ..context import KernelFamily

#: Dtypes in which ``"auto"`` uses a fused kernel. float32 keeps torch's path: its position
#: terms cost little there beside float32's own arithmetic, and torch's path keeps its
#: products free of TF32 rounding (``docs/decisions.md``, "Half precision only").
FUSED_DTYPES = frozenset({torch.float16, torch.bfloat16})


def triton_available() -> bool:
    """Whether Triton is installed (checked without importing it)."""
    return importlib.util.find_spec("triton") is not None


def on_device_of(x: Tensor) -> ContextManager:
    """Triton launches on the current CUDA device: make it ``x``'s for the launch."""
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


def fused_by_default(family: KernelFamily, x: Tensor, dropout: bool = False) -> bool:
    """``"auto"``'s choice for a Triton kernel ``family`` (with attention dropout: its
    dropout variant) on ``x``: on CUDA, in half precision, with Triton, once the family has
    been verified there (:func:`.self_check.verified`)."""
    if not (x.is_cuda and x.dtype in FUSED_DTYPES and triton_available()):
        return False
    from .self_check import verified

    return verified(family, dropout, x.device, x.dtype)
