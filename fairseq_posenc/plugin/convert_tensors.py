"""The tensors and the file of a conversion (:mod:`.convert`, steps 4 and 5): the source's
state dict, upgraded as fairseq upgrades it on every load, matched to the converted model's
tensors by name and shape; the length checks of the converted model's tables; the
checkpoint's contents in fairseq's layout."""

from __future__ import annotations

import argparse
import copy
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch

from .convert_source import ConversionError, Source
from .encoding_record import STACKS, stack_names
from .stacks import SIDES

#: fairseq's learned table of positions holds ``padding_idx + 1`` rows before position 0.
_ROWS_BEFORE_POSITIONS = 2
#: The modules of a stack that hold positions: input positions, the encodings' own terms,
#: segment attention and embedding. Only these may be new or dropped; any other tensor new
#: or dropped means the checkpoint is no plain transformer of its arguments.
_POSITIONAL = re.compile(
    r"^(encoder|decoder)\.(embed_positions|pos_encodings|segment_attention|segment_embed)\.")


@dataclass(frozen=True)
class Entry:
    """One tensor of a conversion: its name, shape, kind (``parameter``; ``tied``: another
    name of a parameter listed before it; ``buffer``; ``tensor``: one of the source's that
    the converted model lacks) and, for a new or dropped one, how it starts or why it goes."""

    name: str
    shape: tuple[int, ...]
    kind: str
    note: str = ""

    @property
    def numel(self) -> int:
        n = 1
        for size in self.shape:
            n *= size
        return n


def _kinds(model: torch.nn.Module) -> dict[str, str]:
    """``parameter`` or ``tied`` for each name of a parameter (the first name of a shared
    one is its ``parameter``); every other tensor of the state dict is a ``buffer``."""
    kinds, seen = {}, set()
    for name, p in model.named_parameters(remove_duplicate=False):
        kinds[name] = "tied" if id(p) in seen else "parameter"
        seen.add(id(p))
    return kinds


def _start(model: torch.nn.Module, name: str, kind: str, seed: int) -> str:
    """How a new tensor starts: its module's own initialisation, as training's."""
    owner = type(model.get_submodule(name.rpartition(".")[0])).__name__
    if kind == "buffer":
        return f"{owner}'s buffer, as the model builds it"
    return f"{owner}, initialised as fairseq-train --seed {seed} initialises it"


def _why(source: Source, args: argparse.Namespace, name: str) -> str:
    """Why the converted model lacks the source's tensor ``name``."""
    from ..core.encodings import get_encoding

    stack = name.partition(".")[0]
    if stack not in STACKS:
        return "not in the converted model"
    theirs, ours = source.encodings[stack], stack_names(args)[stack]
    if name.endswith((".embed_positions._float_tensor", ".embed_positions.weights")):
        return ("a buffer of fairseq's sinusoidal table, which fairseq 0.12 drops on every "
                "load (it computes the table)")
    if ".embed_positions." in name:
        if not get_encoding(ours).at_input:
            return (f"the {stack}'s input positions: {ours} turns them off "
                    "(--keep-input-positions keeps them)")
        return f"the {stack}'s {theirs} input positions: {ours} has none of its own"
    if theirs != ours:
        return f"the {stack}'s {theirs} encoding: the converted {stack} has {ours}"
    return "not in the converted model"


def _mismatch(source: Source, args: argparse.Namespace, name: str, theirs: tuple[int, ...],
              ours: tuple[int, ...]) -> ConversionError:
    stack = name.partition(".")[0]
    if name.endswith(".embed_positions.weight") and stack in STACKS:
        side = SIDES[stack]
        have, want = theirs[0] - _ROWS_BEFORE_POSITIONS, ours[0] - _ROWS_BEFORE_POSITIONS
        return ConversionError(
            f"{source.path}'s learned {stack} positions are a table of {have} ({name}), but "
            f"the converted model's --max-{side}-positions {want} asks for {want}: a learned "
            f"table cannot change its length; keep --max-{side}-positions {have}, or convert "
            "to an encoding without a table of positions")
    return ConversionError(
        f"{name} is {list(theirs)} in {source.path} but {list(ours)} in the converted model: "
        f"an option of {stack_names(args).get(stack, 'its encoding')} differs from the "
        "checkpoint's (its cfg.model has the values); give the checkpoint's, or convert to "
        "another encoding")


def transfer(source: Source, model: torch.nn.Module, args: argparse.Namespace, seed: int
             ) -> tuple["OrderedDict[str, torch.Tensor]", tuple[list[Entry], ...]]:
    """The converted model's state dict, each tensor the source's where it has one of the
    same name (a :class:`ConversionError` where its shape differs), else the model's fresh
    one; and the entries copied, new and dropped. The state dict is loaded into ``model``,
    strictly, as a check that it loads."""
    from fairseq.checkpoint_utils import prune_state_dict

    theirs = dict(source.state["model"])
    theirs.pop("_extra_state", None)  # the source's encoding tag: the report names it
    model.upgrade_state_dict(theirs)  # fairseq's upgrade of old names, as on every load
    theirs = prune_state_dict(theirs, args)  # --*-layers-to-keep, as on every load
    for stack in STACKS:  # pruned now: a load of the converted checkpoint must not again
        setattr(args, f"{stack}_layers_to_keep", None)
    kinds = _kinds(model)
    ours = model.state_dict()
    state: OrderedDict[str, torch.Tensor] = OrderedDict()
    copied, new = [], []
    for name, tensor in ours.items():
        if name == "_extra_state":  # the converted model's encoding tag
            state[name] = tensor
            continue
        shape, kind = tuple(tensor.shape), kinds.get(name, "buffer")
        if name in theirs:
            if tuple(theirs[name].shape) != shape:
                raise _mismatch(source, args, name, tuple(theirs[name].shape), shape)
            state[name] = theirs[name]
            copied.append(Entry(name, shape, kind))
        else:
            state[name] = tensor.detach().clone()
            new.append(Entry(name, shape, kind, _start(model, name, kind, seed)))
    dropped = [Entry(name, tuple(t.shape), "tensor", _why(source, args, name))
               for name, t in theirs.items() if name not in ours]
    _check_only_positions_differ(source, new, dropped)
    model.load_state_dict(state, strict=True, model_cfg=args)
    return state, (copied, new, dropped)


def _check_only_positions_differ(source: Source, new: list[Entry],
                                 dropped: list[Entry]) -> None:
    """A :class:`ConversionError` for a new parameter or a dropped tensor outside the
    modules of positions: the checkpoint holds more than its arguments' transformer (a
    mixture of experts, adapters), or less."""
    from .convert_source import CONVERTS

    extra = [e.name for e in dropped if not _POSITIONAL.match(e.name)]
    if extra:
        raise ConversionError(
            f"{source.path} holds {extra[0]}, which a transformer of its arguments has no "
            f"place for ({len(extra)} such tensors): it is no plain transformer (a mixture of "
            f"experts, adapters, layers of other code); {CONVERTS}")
    missing = [e.name for e in new if e.kind != "buffer" and not _POSITIONAL.match(e.name)]
    if missing:
        raise ConversionError(
            f"{source.path} lacks {missing[0]}, which a transformer of its arguments has "
            f"({len(missing)} such tensors): its arguments are not those of its weights")


def check_lengths(source: Source, model: torch.nn.Module, args: argparse.Namespace) -> None:
    """A :class:`ConversionError` where a stack's table of absolute positions (``--diet-
    abs-max-len``, ...) is shorter than the longest sequence the converted model takes."""
    for stack in STACKS:
        module, side = getattr(model, stack), SIDES[stack]
        limit, accepted = module.pos_max_length, int(getattr(args, f"max_{side}_positions"))
        if limit is not None and limit < accepted:
            flag = module.pos_flag or f"--max-{side}-positions"
            whose = ("the checkpoint's" if accepted == source.max_positions(stack)
                     else "as given")
            raise ConversionError(
                f"{flag} {limit} is shorter than the converted model's --max-{side}-positions "
                f"{accepted} ({whose}): it would refuse {side} sentences of {limit + 1} to "
                f"{accepted} tokens; give {flag} {accepted} or more, or leave it unset")


def _settings(source: Source) -> dict[str, Any]:
    """The source's settings but its model's (``cfg``), as a plain dict: its own ``cfg``,
    or, for a checkpoint of fairseq before 0.10, its ``args`` as fairseq converts them."""
    from omegaconf import OmegaConf

    cfg = source.state.get("cfg")
    if cfg is None:
        from fairseq.dataclass.utils import convert_namespace_to_omegaconf

        from .model_flags import ARCH

        legacy = copy.deepcopy(source.state["args"])
        legacy.arch = ARCH  # the architecture of the model written, which fairseq registers
        try:
            cfg = convert_namespace_to_omegaconf(legacy)
        except Exception as error:  # fairseq's own conversion, of any older settings
            raise ConversionError(
                f"{source.path}: fairseq 0.12 cannot read the settings of this checkpoint of "
                f"an older fairseq ({type(error).__name__}: {error})") from None
    if OmegaConf.is_config(cfg):
        cfg = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    return {key: copy.deepcopy(value) for key, value in cfg.items() if key != "model"}


def checkpoint_state(source: Source, args: argparse.Namespace,
                     state: "OrderedDict[str, torch.Tensor]") -> dict[str, Any]:
    """The converted checkpoint's contents, in the layout of ``fairseq-train``'s: the
    model's arguments as ``cfg.model`` beside the source's other settings, its state dict,
    the source's task state, no optimizer state, and a training history of zero updates
    (fairseq's loaders read it)."""
    last = (source.state.get("optimizer_history") or [{}])[-1]
    return {
        "args": None,
        "cfg": {**_settings(source), "model": args},
        "model": state,
        "criterion": None,
        "optimizer_history": [{
            "criterion_name": last.get("criterion_name", "CrossEntropyCriterion"),
            "optimizer_name": last.get("optimizer_name", "FairseqAdam"),
            "lr_scheduler_state": {},
            "num_updates": 0,
        }],
        "task_state": source.state.get("task_state") or {},
        "extra_state": {"train_iterator": {"epoch": 1, "iterations_in_epoch": 0},
                        "previous_training_time": 0.0},
    }
