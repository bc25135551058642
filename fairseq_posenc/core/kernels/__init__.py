"""Triton kernels for position terms that ``torch``'s own kernels run only with extra
passes or ``len x len`` tensors. Each module is imported where it is used: Triton is
optional on CPU, and Triton's interpreter (``TRITON_INTERPRET=1``) must be chosen before
a kernel is defined."""

from __future__ import annotations

import contextlib
import importlib.util
from typing import Callable, ContextManager, Optional

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


#: ``(family, dropout, device, dtype) -> bool``: whether a Triton family has been verified
#: (Triton installed, the self-check passed).
Verifier = Callable[[KernelFamily, bool, torch.device, torch.dtype], bool]


def self_checked(family: KernelFamily, dropout: bool, device: torch.device,
                 dtype: torch.dtype) -> bool:
    """The verifier ``"auto"`` uses: Triton is installed and the family's self-check passed
    on ``device`` in ``dtype`` (:func:`.self_check.verified`)."""
    if not triton_available():
        return False
    from .self_check import verified

    return verified(family, dropout, device, dtype)


def auto_fuses(family: KernelFamily, device: torch.device, dtype: torch.dtype,
               dropout: bool = False, verified: Optional[Verifier] = None) -> bool:
    """``"auto"``'s choice of a Triton kernel ``family`` (with attention dropout: its
    dropout variant): on CUDA, in half precision, once ``verified`` (by default
    :func:`self_checked`) there. The one rule for every family: the attention planner's
    (``attention_plan``) and RoPE's rotation (``Rope.rotate_qk``)."""
    return (device.type == "cuda" and dtype in FUSED_DTYPES
            and (verified or self_checked)(family, dropout, device, dtype))
