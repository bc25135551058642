"""The Triton kernels, compiled on a CUDA GPU and run by Triton's interpreter on CPU.

The interpreter is chosen by ``TRITON_INTERPRET=1`` before a kernel is defined, so this
module sets it on import where CUDA is absent, and :func:`kernel_module` redefines a
kernel module, or every module of a kernel package, that was imported before.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"


def _with_submodules(module: ModuleType) -> list[ModuleType]:
    """``module`` and, for a package, its submodules imported so far."""
    prefix = module.__name__ + "."
    return [module] + [m for name, m in list(sys.modules.items())
                       if name.startswith(prefix) and m is not None]


def _dependency_order(modules: list[ModuleType]) -> list[ModuleType]:
    """``modules`` with each after those of them it took names from (its functions,
    classes and submodules, told by their ``__module__``): the order to define them again
    in, so that a module binds the others' new definitions, not their old ones."""
    by_name = {m.__name__: m for m in modules}
    ordered: list[ModuleType] = []

    def visit(module: ModuleType, seen: frozenset) -> None:
        if module in ordered or module.__name__ in seen:
            return
        for value in list(vars(module).values()):
            name = value.__name__ if isinstance(value, ModuleType) else getattr(
                value, "__module__", None)
            if isinstance(name, str) and name in by_name and name != module.__name__:
                visit(by_name[name], seen | {module.__name__})
        ordered.append(module)

    for module in modules:
        visit(module, frozenset())
    return ordered


def kernel_module(name: str) -> ModuleType:
    """``fairseq_posenc.core.kernels.<name>``, interpreted on CPU (a package: every module of
    it). Skips the calling test module where Triton is missing (``scripts/test.sh``
    installs it on CPU)."""
    pytest.importorskip("triton", reason="the fused kernels need Triton (scripts/test.sh "
                        "installs it on CPU; CUDA builds of torch bring it)")
    from triton.runtime.jit import JITFunction

    module = importlib.import_module(f"fairseq_posenc.core.kernels.{name}")
    modules = _with_submodules(module)
    if DEVICE == "cpu" and any(isinstance(value, JITFunction)
                               for m in modules for value in vars(m).values()):
        for m in _dependency_order(modules):  # defined compiled: define them again,
            importlib.reload(m)  # interpreted
    return module
