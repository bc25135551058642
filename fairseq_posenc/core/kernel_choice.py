"""``--pos-kernels``: the choice between the Triton kernels and torch's paths, applied to a
model's modules.

:func:`choose_kernels` sets the kernel of every module of a model that has one: each
:class:`~fairseq_posenc.core.attention_core.PositionalAttentionCore`'s ``distance_kernel``
and the ``kernel`` of each position term that declares a switch of its own
(:attr:`~fairseq_posenc.core.encodings.base.PositionEncoding.pos_kernels`: RoPE's rotations,
whose :meth:`~fairseq_posenc.core.encodings.rope.Rope._path` reads it). The fairseq plugin
applies it to the model it builds (``--pos-kernels``), and :mod:`fairseq_posenc.nn` offers it
to any PyTorch model; both take it from here, so the plugin needs nothing of the torch API.
"""

from __future__ import annotations

from torch import nn

from .attention_core import PositionalAttentionCore
from .encodings.base import PositionEncoding

__all__ = ["KERNEL_CHOICES", "choose_kernels"]

#: ``--pos-kernels``: the kernels' choice for each module that has one (:func:`choose_kernels`).
KERNEL_CHOICES = ("auto", "torch")


def choose_kernels(model: nn.Module, choice: str) -> None:
    """``--pos-kernels``: ``"auto"``, each attention's ``distance_kernel`` and each term's
    own ``kernel`` (RoPE's) picks the Triton kernel where it applies and was verified;
    ``"torch"``, the float mask (or the explicit path) and torch's paths (RoPE's complex
    product) everywhere."""
    if choice not in KERNEL_CHOICES:
        raise ValueError(f"--pos-kernels must be one of {', '.join(KERNEL_CHOICES)}, "
                         f"got {choice!r}")
    for module in model.modules():
        if isinstance(module, PositionalAttentionCore):
            module.distance_kernel = "auto" if choice == "auto" else "bias"
        elif isinstance(module, PositionEncoding) and module.pos_kernels is not None:
            module.kernel = module.pos_kernels[choice]
