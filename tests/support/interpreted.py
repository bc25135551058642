"""The Triton kernels, compiled on a CUDA GPU and run by Triton's interpreter on CPU.

The interpreter is chosen by ``TRITON_INTERPRET=1`` before a kernel is defined, so this
module sets it on import where CUDA is absent, and :func:`kernel_module` redefines a
kernel module that was imported before.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"


def kernel_module(name: str) -> ModuleType:
    """``fairseq_posenc.kernels.<name>``, interpreted on CPU. Skips the calling test module
    where Triton is missing (``scripts/test.sh`` installs it on CPU)."""
    pytest.importorskip("triton", reason="the fused kernels need Triton (scripts/test.sh "
                        "installs it on CPU; CUDA builds of torch bring it)")
    from triton.runtime.jit import JITFunction

    module = importlib.import_module(f"fairseq_posenc.kernels.{name}")
    if DEVICE == "cpu" and any(isinstance(value, JITFunction)
                               for value in vars(module).values()):
        module = importlib.reload(module)  # defined compiled: define it again, interpreted
    return module
