"""Checkpoint loading under torch's ``weights_only=True`` default, and the encoding tag.

torch >= 2.6 loads with ``weights_only=True``; fairseq 0.12 calls ``torch.load`` without
the argument and its checkpoints pickle a few non-tensor objects, so ``fairseq-generate``
fails with ``Unsupported global: GLOBAL argparse.Namespace``. fairseq imports ``--user-dir``
before it loads a model, so the plugin registers exactly the globals fairseq's own
checkpoints need (``docs/fairseq-notes.md`` says which kind of checkpoint needs each) and
nothing else; the protection stays on for everything else (unlike
``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``).

Every ``transformer_posenc`` state dict carries its ``--pos-encoding`` as a small float
tensor (floats so that checkpoint averaging leaves it unchanged), so that a checkpoint of
one encoding loaded into a model of another fails with a message that names both.
"""

from __future__ import annotations

import argparse
import collections
import typing

import numpy
import torch
from torch import Tensor


def _allowlist() -> list[object]:
    from omegaconf import DictConfig, ListConfig
    from omegaconf.base import ContainerMetadata, Metadata
    from omegaconf.nodes import AnyNode

    from fairseq.distributed.utils import _TensorPlaceholder

    return [
        argparse.Namespace,  # cfg.model of args-based models
        # --eval-bleu and other numpy values in the extra state
        numpy.core.multiarray._reconstruct,
        numpy.ndarray,
        numpy.dtype,
        numpy.dtypes.Int64DType,
        # multi-process resume: rank 0 broadcasts the whole state with broadcast_object
        DictConfig,
        ListConfig,
        ContainerMetadata,
        Metadata,
        AnyNode,
        typing.Any,
        dict,
        list,
        int,
        collections.defaultdict,
        _TensorPlaceholder,
    ]


def register_safe_globals() -> None:
    """Allow the globals of fairseq checkpoints in ``torch.load(weights_only=True)``."""
    torch.serialization.add_safe_globals(_allowlist())


def encode_tag(name: str) -> Tensor:
    return torch.tensor([float(b) for b in name.encode("utf-8")], dtype=torch.float64)


def decode_tag(tag: Tensor) -> str:
    return bytes(int(round(float(x))) for x in tag.flatten()).decode("utf-8", "replace")
