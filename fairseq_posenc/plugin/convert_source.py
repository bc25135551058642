"""The checkpoint that ``posenc-convert`` converts (:mod:`.convert`): read, recognised and
described, or refused in one line before any work.

A checkpoint is read as every checkpoint of the plugin is, with ``weights_only``
(:func:`.checkpoint.load`): it runs no code, and a damaged file is named. Its model is
recognised by its arguments (``args`` of a checkpoint written before fairseq 0.10, else
``cfg.model``) and its state dict, not by fairseq's registry of architectures alone:
IndicTrans2's ``transformer_18_18`` and NLLB's ``transformer_24_24`` are fairseq
transformers whose architectures fairseq 0.12 does not register. So:

* arguments with a record of position encodings (:mod:`.encoding_record`), or an
  architecture of ``transformer_posenc``: a checkpoint of the plugin;
* an architecture that fairseq registers for another model (``bart_base``,
  ``transformer_lm``, ``lstm``): refused, naming the model;
* fairseq's ``transformer`` model, or an architecture no one registers: fairseq's
  transformer, if its state dict is laid out as one (an encoder and a decoder of layers with
  self-attention, the decoder's with encoder-decoder attention, each stack's token
  embedding, nothing else).

A stock checkpoint's encoding is its input positions, per stack (``sinusoidal``,
``learned`` with ``--STACK-learned-pos``, ``none`` with ``--no-token-positional-
embeddings``), which its state dict must agree with (a learned table where, and only
where, the arguments say so); a plugin checkpoint's is the tag its weights carry.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import pickle
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from fairseq.models.transformer import DEFAULT_MAX_SOURCE_POSITIONS, DEFAULT_MAX_TARGET_POSITIONS

from . import encoding_record
from .checkpoint import DamagedCheckpoint, decode_tag, load
from .encoding_record import STACKS
from .registration import register
from .stacks import SIDES, input_flags

#: What ``posenc-convert`` converts, for every refusal of a model.
CONVERTS = ("posenc-convert converts checkpoints of fairseq's transformer translation model "
            "(any of its architectures and flags) and of fairseq-posenc's transformer_posenc")
#: The tensors of layer 0 that fairseq's transformer has, each as ``(what, key prefix)``;
#: attention is ``PREFIX.k_proj.weight`` (fairseq since 2019) or ``PREFIX.in_proj_weight``.
_LAYOUT = (("an encoder token embedding", "encoder.embed_tokens.weight"),
           ("a decoder token embedding", "decoder.embed_tokens.weight"),
           ("encoder self-attention", "encoder.layers.0.self_attn"),
           ("decoder self-attention", "decoder.layers.0.self_attn"),
           ("encoder-decoder attention", "decoder.layers.0.encoder_attn"))
_WEIGHTS_ONLY = re.compile(r"Unsupported global: GLOBAL (\S+)")


class ConversionError(ValueError):
    """Why a conversion cannot be made, in one line: what is wrong and what to do."""


@dataclass
class Source:
    """A checkpoint to convert, read and recognised (:func:`read_source`)."""

    path: Path
    sha256: str
    #: The file's contents, as ``torch.load`` gives them.
    state: dict
    #: A copy of its model's arguments.
    args: argparse.Namespace
    #: ``transformer`` (fairseq's) or ``transformer_posenc`` (the plugin's).
    model: str
    #: Its ``--arch``; None where its arguments name none.
    architecture: Optional[str]
    #: Each stack's encoding: a stock model's input positions, a plugin model's encoding.
    encodings: dict[str, str]
    #: The updates it was trained for (its last ``optimizer_history`` entry).
    updates: int

    @property
    def plugin(self) -> bool:
        return self.model == "transformer_posenc"

    @property
    def tag(self) -> str:
        """Its encodings in one name, as the plugin's tag writes them."""
        encoder, decoder = (self.encodings[stack] for stack in STACKS)
        return encoder if encoder == decoder else f"{encoder}/{decoder}"

    def input_positions(self, stack: str) -> Optional[str]:
        """``stack``'s input position embedding: None, ``sinusoidal`` or ``learned``."""
        if self.plugin:
            none, learned = input_flags(self.args, stack)
        else:
            none = bool(getattr(self.args, "no_token_positional_embeddings", False))
            learned = bool(getattr(self.args, f"{stack}_learned_pos", False))
        return None if none else "learned" if learned else "sinusoidal"

    def max_positions(self, stack: str) -> int:
        """The longest sequence ``stack`` takes (``--max-source/target-positions``)."""
        side = SIDES[stack]
        default = DEFAULT_MAX_SOURCE_POSITIONS if side == "source" else DEFAULT_MAX_TARGET_POSITIONS
        return int(getattr(self.args, f"max_{side}_positions", None) or default)

    @property
    def task(self) -> dict[str, Any]:
        """Its task's arguments: ``cfg.task`` (a dict), or those of ``args``."""
        cfg = self.state.get("cfg") or {}
        task = cfg.get("task") if isinstance(cfg, Mapping) else None
        if isinstance(task, Mapping):
            return dict(task)
        if isinstance(task, argparse.Namespace):
            return {"_name": getattr(task, "_name", None) or getattr(task, "task", None),
                    **vars(task)}
        return {"_name": getattr(self.args, "task", None), **vars(self.args)}

    def describe(self) -> str:
        """One line: model, architecture, encodings, updates."""
        what = ("fairseq-posenc's transformer_posenc" if self.plugin
                else "fairseq's transformer")
        arch = f"--arch {self.architecture}" if self.architecture else "no --arch recorded"
        encodings = ("--pos-encoding" if self.plugin else "input positions")
        return f"{what} ({arch}), {encodings} {self.tag}, {self.updates} updates"

    def provenance(self, seed: int) -> dict[str, Any]:
        """The converted model's record of where it came from
        (:func:`.encoding_record.write_conversion`)."""
        return {"path": str(self.path.resolve()), "sha256": self.sha256, "model": self.model,
                "architecture": self.architecture, "encoding": self.tag,
                "updates": self.updates, "seed": seed}


def read_source(path: Path | str) -> Source:
    """The checkpoint at ``path``, read and recognised (the module docstring);
    :class:`ConversionError` for a file that is missing, damaged, not a checkpoint, or a
    checkpoint of another model."""
    path = Path(path)
    if not path.exists():
        raise ConversionError(f"{path}: no such file; give the checkpoint to convert (a .pt "
                              "file that fairseq-train wrote)")
    if not path.is_file():
        raise ConversionError(f"{path} is not a file; give a checkpoint file (for example "
                              f"{path / 'checkpoint_best.pt'})")
    register()  # the plugin's architectures and fairseq's checkpoint globals
    state = _load(path)
    if not isinstance(state, dict) or not isinstance(state.get("model"), Mapping):
        raise ConversionError(f"{path} is not a fairseq checkpoint: it holds no model state (the "
                              "'model' entry that fairseq-train saves)")
    args = model_arguments(path, state)
    architecture = getattr(args, "_name", None) or getattr(args, "arch", None)
    model = _model(path, args, architecture)
    weights = state["model"]
    _check_layout(path, weights, architecture)
    encodings = (_plugin_encodings(path, args, weights) if model == "transformer_posenc"
                 else _stock_encodings(path, args, weights))
    history = state.get("optimizer_history") or [{}]
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    return Source(path, digest, state, args, model, architecture, encodings,
                  int(history[-1].get("num_updates", 0) or 0))


def _load(path: Path) -> Any:
    try:
        return load(path)
    except DamagedCheckpoint as error:
        raise ConversionError(f"{path} is damaged: torch cannot read it ({error.reason}); it "
                              "was probably cut off by a copy or a save that did not finish: "
                              "copy it again") from None
    except (RuntimeError, EOFError, ValueError, OSError, pickle.UnpicklingError) as error:
        if not zipfile.is_zipfile(path):
            raise ConversionError(f"{path} is not a checkpoint: torch.save writes a zip "
                                  "archive, and this file is none (another format, or "
                                  "damaged)") from None
        refused = _WEIGHTS_ONLY.search(str(error))
        if refused:
            raise ConversionError(
                f"{path} holds {refused.group(1)}, which loading with weights_only refuses "
                "(a checkpoint runs no code here): it is not a checkpoint that fairseq-train "
                "wrote, or it holds objects of other code; save its model's state without "
                "them") from None
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ConversionError(f"{path}: torch cannot load it ({first})") from None


def model_arguments(path: Path, state: Mapping[str, Any]) -> argparse.Namespace:
    """A copy of the model's arguments of a checkpoint: ``args`` (before fairseq 0.10), else
    ``cfg.model``; with fairseq's own upgrade of arguments older still (one
    ``max_positions`` for both sides)."""
    args = state.get("args")
    if args is None:
        cfg = state.get("cfg")
        args = cfg.get("model") if isinstance(cfg, Mapping) else None
    if isinstance(args, Mapping):  # a dataclass model's configuration
        args = argparse.Namespace(**{str(k): v for k, v in args.items()})
    if not isinstance(args, argparse.Namespace):
        raise ConversionError(f"{path} holds no model arguments (neither 'args' nor "
                              "'cfg.model'): it was not written by fairseq-train")
    args = copy.deepcopy(args)
    if hasattr(args, "max_positions") and not hasattr(args, "max_source_positions"):
        args.max_source_positions = args.max_target_positions = args.max_positions
    return args


def _model(path: Path, args: argparse.Namespace, architecture: Optional[str]) -> str:
    """``transformer_posenc`` or ``transformer``; a :class:`ConversionError` naming another
    model that fairseq registers the architecture for."""
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.models.transformer import TransformerModel

    from .models import PosencTransformerModel

    registered = ARCH_MODEL_REGISTRY.get(architecture) if architecture else None
    if encoding_record.has_record(args) or (
            registered is not None and issubclass(registered, PosencTransformerModel)):
        return "transformer_posenc"
    if registered is None or registered is TransformerModel:
        return "transformer"
    raise ConversionError(f"{path} is a checkpoint of fairseq's {registered.__name__} (--arch "
                          f"{architecture}), not of its transformer translation model; "
                          f"{CONVERTS}")


def _check_layout(path: Path, weights: Mapping[str, Any], architecture: Optional[str]) -> None:
    for what, key in _LAYOUT:
        found = key in weights or any(f"{key}.{name}" in weights
                                      for name in ("k_proj.weight", "in_proj_weight"))
        if not found:
            raise ConversionError(
                f"{path} is no transformer translation model: it has no {what} ({key}; "
                f"--arch {architecture or 'not recorded'}); {CONVERTS}")
    foreign = [k for k in weights if k != "_extra_state" and not k.startswith(("encoder.",
                                                                                 "decoder."))]
    if foreign:
        raise ConversionError(
            f"{path} is no transformer translation model: it holds {foreign[0]}, outside an "
            f"encoder and a decoder (--arch {architecture or 'not recorded'}); {CONVERTS}")


def _plugin_encodings(path: Path, args: argparse.Namespace,
                      weights: Mapping[str, Any]) -> dict[str, str]:
    """Each stack's encoding, as the weights' tag names them (the record where the
    weights carry no tag)."""
    from ..core.encodings import ENCODINGS

    names = encoding_record.stack_names(args)
    tag = weights.get("_extra_state")
    if tag is not None:
        encoder, _, decoder = decode_tag(tag).partition("/")
        names = {"encoder": encoder, "decoder": decoder or encoder}
    for stack, name in names.items():
        if name not in ENCODINGS:
            raise ConversionError(
                f"{path}: its {stack}'s encoding {name} is not registered here: it is an "
                "encoding of your own (a --user-dir) or of another version of fairseq-posenc")
    return names


def _stock_encodings(path: Path, args: argparse.Namespace,
                     weights: Mapping[str, Any]) -> dict[str, str]:
    """Each stack's input positions; a :class:`ConversionError` where the state dict
    disagrees with the arguments about a learned table."""
    encodings = {}
    for stack in STACKS:
        none = bool(getattr(args, "no_token_positional_embeddings", False))
        learned = bool(getattr(args, f"{stack}_learned_pos", False)) and not none
        table = f"{stack}.embed_positions.weight"
        if learned != (table in weights):
            raise ConversionError(
                f"{path}: its arguments say the {stack} has "
                f"{'a learned' if learned else 'no learned'} table of positions, but its state "
                f"dict {'lacks' if learned else 'holds'} {table}: the arguments are not those "
                "of these weights")
        encodings[stack] = "none" if none else "learned" if learned else "sinusoidal"
    return encodings
