"""Checkpoint -> model: read a fairseq checkpoint of a ``transformer_posenc`` model and
rebuild the model from its own saved arguments, without fairseq's task.

Decisions:

* fairseq's ``load_model_ensemble`` builds the task first, and the translation task loads
  its dictionaries from the training data directory saved in the checkpoint, which is
  often elsewhere (another machine, a deleted scratch folder). Position terms need no
  dictionary, so the model is built with placeholder dictionaries of the saved embedding
  sizes unless a dictionary is wanted; a sentence needs the real source dictionary, from
  ``--data`` or else from the data directory the checkpoint records when that exists here
  (:func:`recorded_data`; :func:`load_dictionaries` says what to pass when it is missing).
* ``torch.load`` runs with ``weights_only=True`` and the plugin's allowlist
  (:func:`~fairseq_posenc.plugin.checkpoint.register_safe_globals`, part of
  :func:`fairseq_posenc.register`, which also registers the architectures the saved
  arguments name): a checkpoint is data, not code.
* Only fairseq-posenc models are accepted: the state dict must carry the encoding tag
  (``_extra_state``, see ``checkpoint.py``) and the arguments a ``transformer_posenc``
  architecture; anything else is a clear ``SystemExit``, never a traceback.
* The saved arguments go through the architecture function again (fairseq does the same on
  load) and :func:`~fairseq_posenc.plugin.position_args.fill_position_defaults`, so a
  checkpoint written before a flag existed still builds.
"""

from __future__ import annotations

import argparse
import pickle
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import torch
from fairseq.data import Dictionary
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

from ... import register
from ...plugin.checkpoint import DamagedCheckpoint, decode_tag, load
from ...plugin.models import PosencTransformerModel
from ...plugin.position_args import fill_position_defaults
from ...plugin.stacks import model_tag

#: Says what a fairseq-posenc checkpoint is, for every "not one of ours" error.
WHAT_WE_READ = ("posenc-inspect reads the checkpoint_best.pt / checkpoint_last.pt that "
                "fairseq-train writes for a model trained with --user-dir fairseq_posenc "
                "(an --arch transformer_*_<encoding> or transformer_posenc)")


@dataclass
class LoadedModel:
    """A rebuilt model in eval mode and the facts the report needs about it."""

    path: Path
    model: PosencTransformerModel
    args: argparse.Namespace
    encoding: str
    source_lang: Optional[str]
    target_lang: Optional[str]
    #: The real source dictionary (``--data``), or None: placeholders were used.
    source_dictionary: Optional[Dictionary]
    #: The data directory the dictionaries came from, or None.
    data: Optional[Path] = None
    #: Whether ``data`` is the checkpoint's recorded data directory (no ``--data`` given).
    data_recorded: bool = False


def fail(message: str) -> "SystemExit":
    """The exit every user error takes: the message says what to pass instead."""
    return SystemExit(f"posenc-inspect: error: {message}")


def read_checkpoint(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise fail(f"no checkpoint file at {path}. {WHAT_WE_READ}; pass its path.")
    register()
    try:
        state = load(path, weights_only=True)
    except DamagedCheckpoint as err:
        raise fail(str(err)) from None
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as err:
        lines = str(err).splitlines() or [""]
        reason = next((line for line in lines if "Unsupported global" in line), lines[0])
        raise fail(f"{path} is not a fairseq checkpoint that torch can load safely "
                   f"({type(err).__name__}: {reason.strip()}). {WHAT_WE_READ}.") from None
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise fail(f"{path} has no fairseq model state (no 'model' entry). {WHAT_WE_READ}.")
    return state


def saved_arguments(state: dict[str, Any], path: Path) -> argparse.Namespace:
    """The model's arguments: ``cfg.model`` (fairseq >= 0.10) or the legacy ``args``."""
    cfg = state.get("cfg") or {}
    args = cfg.get("model") if isinstance(cfg, dict) else None
    if not isinstance(args, argparse.Namespace):
        args = state.get("args")
    if not isinstance(args, argparse.Namespace) or not hasattr(args, "arch"):
        raise fail(f"{path} holds no args-based fairseq model arguments. {WHAT_WE_READ}.")
    model_class = ARCH_MODEL_REGISTRY.get(args.arch)
    tag = state["model"].get("_extra_state")
    recorded = getattr(args, "user_dir", None)
    if model_class is None and recorded and Path(recorded).name != "fairseq_posenc":
        raise fail(f"{path} is a model of --arch {args.arch}, an encoding of a --user-dir "
                   f"this command has not imported: add --user-dir {recorded} (the directory "
                   "the checkpoint was trained with).")
    if (model_class is None or not issubclass(model_class, PosencTransformerModel)
            or not isinstance(tag, torch.Tensor)):
        raise fail(f"{path} is a model of --arch {args.arch}, not a fairseq-posenc "
                   f"transformer_posenc model (no position-encoding tag). {WHAT_WE_READ}.")
    args = argparse.Namespace(**vars(args))  # the architecture function fills in place
    encoding = decode_tag(tag)  # NAME, or ENCODER/DECODER for an encoding per stack
    ARCH_CONFIG_REGISTRY[args.arch](args)
    fill_position_defaults(args)
    if model_tag(args) != encoding:
        raise fail(f"{path}: its arguments say --pos-encoding {model_tag(args)} but its "
                   f"weights were trained with {encoding}; the file is inconsistent.")
    task = cfg.get("task") if isinstance(cfg, dict) else None
    for side in ("source_lang", "target_lang"):  # the task's, when the model lacks them
        if getattr(args, side, None) is None and isinstance(task, dict):
            setattr(args, side, task.get(side))
    return args


def recorded_data(state: dict[str, Any]) -> Optional[Path]:
    """The training data directory the checkpoint's saved arguments name (``cfg.task.data``,
    else the model's or the legacy ``args.data``), or None. Of fairseq's colon-separated
    shards, the first: it holds the dictionaries."""
    cfg = state.get("cfg") if isinstance(state.get("cfg"), dict) else {}
    for saved in (cfg.get("task"), cfg.get("model"), state.get("args")):
        value = saved.get("data") if isinstance(saved, dict) else getattr(saved, "data", None)
        if isinstance(value, str) and value:
            return Path(value.split(":")[0])
    return None


def data_directory(state: dict[str, Any]) -> Path:
    """The checkpoint's recorded data directory when it exists here, or the exit that says
    to pass ``--data``."""
    recorded = recorded_data(state)
    if recorded is not None and recorded.is_dir():
        return recorded
    where = (f" (the checkpoint records {recorded}, which does not exist here)"
             if recorded is not None else " (the checkpoint records none)")
    raise fail("--sentence needs the source dictionary: pass --data DIR, the "
               "fairseq-preprocess (data-bin) directory the model was trained on (it holds "
               f"dict.SRC.txt){where}.")


def placeholder(size: int, extra: tuple[str, ...] = ()) -> Dictionary:
    """A dictionary of ``size`` symbols (``extra`` among them): enough to build the model
    when only position terms are wanted."""
    d = Dictionary()
    for symbol in extra:
        d.add_symbol(symbol)
    for i in range(size - len(d)):
        d.add_symbol(f"<placeholder{i}>")
    return d


def language_pair(args: argparse.Namespace, data: Path) -> tuple[str, str]:
    src, tgt = getattr(args, "source_lang", None), getattr(args, "target_lang", None)
    found = sorted(p.name[len("dict."):-len(".txt")] for p in data.glob("dict.*.txt"))
    if src is None and tgt is None:
        # trained without --source-lang: fairseq-train read the pair from the file names
        from fairseq.data.data_utils import infer_language_pair

        src, tgt = infer_language_pair(str(data))
    if src is None and tgt is None and len(found) == 2:
        raise fail(f"the checkpoint does not record its languages and {data} has "
                   f"dictionaries for {found}; pass --source-lang.")
    src = src or next((lang for lang in found if lang != tgt), None)
    tgt = tgt or next((lang for lang in found if lang != src), src)
    if src is None:
        raise fail(f"{data} has no dict.*.txt; pass --data the fairseq-preprocess output "
                   "directory the model was trained on (it holds dict.SRC.txt).")
    return src, tgt


def load_dictionaries(args: argparse.Namespace, data: Path) -> tuple[Dictionary, Dictionary]:
    """The training dictionaries from ``data`` (the fairseq-preprocess output)."""
    if not data.is_dir():
        raise fail(f"--data {data} is not a directory; pass the fairseq-preprocess output "
                   "(data-bin) directory the model was trained on.")
    src, tgt = language_pair(args, data)
    dictionaries = []
    for lang in (src, tgt):
        file = data / f"dict.{lang}.txt"
        if not file.is_file():
            raise fail(f"{file} does not exist; pass --data the fairseq-preprocess output "
                       f"directory of this model (with dict.{lang}.txt), or --source-lang.")
        dictionaries.append(Dictionary.load(str(file)))
    args.source_lang, args.target_lang = src, tgt
    return dictionaries[0], dictionaries[1]


def load_model(path: Path, data: Optional[Path] = None,
               source_lang: Optional[str] = None, *,
               need_dictionary: bool = False) -> LoadedModel:
    """Read ``path`` and rebuild its model in eval mode (see the module docstring). With
    ``need_dictionary`` and no ``data``, the dictionaries come from the data directory the
    checkpoint records."""
    state = read_checkpoint(path)
    args = saved_arguments(state, path)
    if source_lang:
        args.source_lang = source_lang
    weights = state["model"]
    data_recorded = need_dictionary and data is None
    if data_recorded:
        data = data_directory(state)
    real = data is not None
    if real:
        src_dict, tgt_dict = load_dictionaries(args, data)
    else:
        # The separator must exist for a --segment-attention model to build.
        extra = (args.segment_separator,) if getattr(args, "segment_separator", None) else ()
        src_dict = placeholder(weights["encoder.embed_tokens.weight"].size(0), extra)
        tgt_size = weights["decoder.embed_tokens.weight"].size(0)
        tgt_dict = src_dict if tgt_size == len(src_dict) else placeholder(tgt_size)
    task = SimpleNamespace(source_dictionary=src_dict, target_dictionary=tgt_dict)
    try:
        model = ARCH_MODEL_REGISTRY[args.arch].build_model(args, task)
        model.load_state_dict(weights, strict=True)
    except (ValueError, RuntimeError) as err:
        hint = (" Does --data hold this model's dictionaries?" if real else "")
        first = "\n".join(str(err).splitlines()[:3])  # a size mismatch lists every tensor
        raise fail(f"the model of {path} could not be rebuilt: {first}{hint}") from None
    return LoadedModel(path, model.eval(), args, model_tag(args),
                       getattr(args, "source_lang", None), getattr(args, "target_lang", None),
                       src_dict if real else None, data, data_recorded)
