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

A damaged checkpoint (truncated by a full disk, a killed copy or save) fails in
``torch.load`` with "PytorchStreamReader failed reading zip archive", naming no file.
:func:`load`, which the tools use, and fairseq's own loader once :func:`name_damaged_files`
has wrapped it (``fairseq-train`` resuming from ``checkpoint_last.pt``, ``fairseq-generate``)
raise :class:`DamagedCheckpoint` instead: the file, torch's reason, and what to do.
"""

from __future__ import annotations

import argparse
import collections
import functools
import pickle
import typing
import zipfile
from pathlib import Path

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


class DamagedCheckpoint(ValueError):
    """A checkpoint file that torch cannot read because it is truncated or corrupt."""

    def __init__(self, path, reason: str):
        self.path, self.reason = path, reason
        super().__init__(
            f"{path} is damaged: torch cannot read it ({reason}); it was probably cut off "
            "(a full disk, a copy or a save that was killed). Delete it. A training's "
            "checkpoint_last.pt: the training then starts again from scratch, or resumes from "
            "another checkpoint of its own copied over checkpoint_last.pt (checkpoint_best.pt, "
            "or an interval checkpoint_E_U.pt); an averaged checkpoint_avgN.pt is made again "
            "from the interval checkpoints")


def _damaged(path) -> bool:
    """Whether ``path`` is not a whole zip archive, the format ``torch.save`` writes (every
    member's checksum read)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip() is not None
    except (zipfile.BadZipFile, EOFError):
        return True
    except OSError:  # not readable at all (a directory, no permission): not its bytes
        return False


def _reraise_damaged(path, error: BaseException) -> None:
    """:class:`DamagedCheckpoint` from ``error`` when the file is damaged; a refusal of
    ``weights_only`` or any other error of a whole file stays as it is."""
    if isinstance(path, (str, Path)) and Path(path).is_file() \
            and "Weights only load failed" not in str(error) and _damaged(path):
        lines = str(error).strip().splitlines() or [type(error).__name__]
        raise DamagedCheckpoint(path, lines[0]) from error


def load(path, **kwargs):
    """``torch.load(path, map_location="cpu", **kwargs)`` with fairseq's globals allowed
    (:func:`register_safe_globals`); :class:`DamagedCheckpoint` for a damaged file."""
    register_safe_globals()
    try:
        return torch.load(path, **{"map_location": "cpu", **kwargs})
    except (RuntimeError, EOFError, ValueError, OSError, pickle.UnpicklingError) as error:
        _reraise_damaged(path, error)
        raise


_wrapped = False


def name_damaged_files() -> None:
    """Wrap fairseq's ``checkpoint_utils.load_checkpoint_to_cpu`` (once) so that a damaged
    file raises :class:`DamagedCheckpoint`, which names it: ``fairseq-train`` resuming
    from it, ``fairseq-generate --path``. Any other error passes as fairseq raises it."""
    global _wrapped
    if _wrapped:
        return
    from fairseq import checkpoint_utils

    original = checkpoint_utils.load_checkpoint_to_cpu

    @functools.wraps(original)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        try:
            return original(path, *args, **kwargs)
        except (RuntimeError, EOFError, ValueError, OSError, pickle.UnpicklingError) as error:
            _reraise_damaged(path, error)
            raise

    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu
    _wrapped = True
