"""A trained checkpoint with other position encodings: fairseq's ``transformer`` (or the
plugin's ``transformer_posenc``) as a ``transformer_posenc`` checkpoint, ready to fine-tune.
``posenc-convert`` is this module's command line (:mod:`fairseq_posenc.tools.convert_cli`);
docs/convert.md says what is copied, new and dropped, and why.

:func:`convert` takes the checkpoint and the position flags of ``fairseq-train`` (``--pos-
encoding NAME`` or each stack's, any option of the chosen encodings, ``--keep-input-
positions``, ``--max-source-positions``, ...) and returns a :class:`Conversion`: the new
checkpoint's contents, a :class:`Report` of every tensor, and the flags that build the model
again; it writes nothing (:func:`save` does). It

1. reads the checkpoint (:mod:`.convert_source`: refused there if it is no transformer);
2. gives the model the checkpoint's arguments, but ``--arch transformer_posenc`` and the
   position flags: those given, else an encoding option's value in the checkpoint where
   the checkpoint's encodings have that option too, else the default (a stack that no
   flag names keeps the checkpoint's encoding); input positions as the plugin sets them
   for the encoding (off for an attention-level one unless ``--keep-input-positions``);
3. builds that model as ``fairseq-train --seed S`` does (fairseq's ``build_model`` right
   after seeding, over dictionaries of the checkpoint's embedding sizes), so that what the
   checkpoint lacks starts as training would start it; ``S`` is the checkpoint's seed
   unless given;
4. upgrades the checkpoint's state dict as fairseq does on every load (the model's
   ``upgrade_state_dict``, then ``prune_state_dict``), and takes each of the model's tensors
   from it where it has one of the same name, else the fresh one; a tensor of the same name
   and another shape is an error (a learned table of another length, an option of the
   encoding that differs from the checkpoint's), as is a table of absolute positions
   shorter than the model's longest sequence;
5. loads the result into the model, strictly (the encoding tag checked), and writes the
   checkpoint's contents: fairseq's layout, the model's arguments with the plugin's record
   of its encodings and of the conversion (:mod:`.encoding_record`), the source's task and
   other settings, no optimizer state, zero updates.
"""

from __future__ import annotations

import argparse
import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import torch

from . import encoding_record
from .convert_source import ConversionError, Source, read_source
from .convert_tensors import Entry, check_lengths, checkpoint_state, transfer
from .encoding_record import STACKS
from .model_flags import ARCH, finetune_command, reproducing_flags
from .stacks import SIDES, model_tag

__all__ = ["ConversionError", "Conversion", "Entry", "Report", "carried_options", "check_output",
           "convert", "kept_options", "position_parser", "read_source", "save"]


@dataclass
class Report:
    """What a conversion did, tensor by tensor."""

    source: dict[str, Any]
    #: The source in one line (:meth:`.Source.describe`).
    described: str
    #: The converted model's encodings, as its tag names them.
    encoding: str
    seed: int
    copied: list[Entry] = field(default_factory=list)
    new: list[Entry] = field(default_factory=list)
    dropped: list[Entry] = field(default_factory=list)

    @staticmethod
    def parameters(entries: Sequence[Entry]) -> int:
        """The values of ``entries``' parameters, each parameter once."""
        return sum(e.numel for e in entries if e.kind in ("parameter", "tensor"))

    def summary(self) -> str:
        counts = [f"{title} {len(entries)} tensors ({self.parameters(entries):,} {unit})"
                  for title, entries, unit in (("copied", self.copied, "parameters"),
                                               ("new", self.new, "parameters"),
                                               ("dropped", self.dropped, "values"))]
        return "; ".join(counts)

    def lines(self) -> list[str]:
        """The report as ``posenc-convert`` prints it: copied tensors grouped by layer
        (``layers.*``), each new and dropped one with its note."""
        out = [self.summary(), "copied:"]
        groups: dict[tuple[str, tuple[int, ...], str], int] = {}
        for e in self.copied:
            key = (re.sub(r"\.layers\.\d+\.", ".layers.*.", e.name), e.shape, e.kind)
            groups[key] = groups.get(key, 0) + 1
        for (name, shape, kind), count in groups.items():
            times = f" x{count}" if count > 1 else ""
            out.append(f"  {name} {list(shape)}{times}" + (f" ({kind})" if kind != "parameter"
                                                           else ""))
        for title, entries in (("new", self.new), ("dropped", self.dropped)):
            out.append(f"{title}:" if entries else f"{title}: none")
            out += [f"  {e.name} {list(e.shape)} ({e.kind}): {e.note}" for e in entries]
        return out

    def to_json(self) -> dict[str, Any]:
        def listed(entries: Sequence[Entry]) -> list[dict[str, Any]]:
            return [{"name": e.name, "shape": list(e.shape), "kind": e.kind, "note": e.note}
                    for e in entries]

        return {"source": self.source, "encoding": self.encoding, "seed": self.seed,
                "copied": listed(self.copied), "new": listed(self.new),
                "dropped": listed(self.dropped)}


@dataclass
class Conversion:
    """A conversion's result (:func:`convert`)."""

    source: Source
    #: The converted model's arguments (the checkpoint's ``cfg.model``).
    args: argparse.Namespace
    #: The checkpoint's contents, as :func:`save` writes them.
    state: dict[str, Any]
    report: Report
    #: ``fairseq-train`` flags beside ``--arch transformer_posenc`` that build the model.
    flags: list[str]

    def finetune_command(self, checkpoint: Path | str) -> str:
        """The ``fairseq-train --finetune-from-model checkpoint`` command line: the
        source's data directory (``DATA`` where it records none) and task, the model's
        flags, the fine-tuning recipe (:data:`.model_flags.FINETUNE_RECIPE`)."""
        return finetune_command(str(self.source.task.get("data") or "DATA"), self.source.task,
                                self.flags, Path(checkpoint))


class _FlagParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own message, as a ConversionError
        raise ConversionError(f"{message}; posenc-convert takes fairseq-train's position flags "
                              "(--pos-encoding, an encoding's options, --keep-input-positions) "
                              "and --max-source-positions / --max-target-positions")


def position_parser() -> argparse.ArgumentParser:
    """The flags a conversion takes: ``fairseq-train``'s position flags and
    ``--max-source-positions`` / ``--max-target-positions``, each set only where given (a
    parse error is a :class:`ConversionError`)."""
    from .position_args import add_position_args

    parser = _FlagParser(prog="posenc-convert", add_help=False, allow_abbrev=False)
    add_position_args(parser)
    for side in SIDES.values():
        parser.add_argument(f"--max-{side}-positions", type=int)
    for action in parser._actions:
        action.default = argparse.SUPPRESS
    return parser


def position_flags(flags: Sequence[str]) -> dict[str, Any]:
    """The flags given in ``flags``, parsed as ``fairseq-train`` parses them: only those
    given, by destination; :class:`ConversionError` for anything else."""
    given = vars(position_parser().parse_args(list(flags)))
    for side in SIDES.values():
        if given.get(f"max_{side}_positions", 1) < 1:
            raise ConversionError(f"--max-{side}-positions must be a positive integer, got "
                                  f"{given[f'max_{side}_positions']}")
    if not any(entry in given for entry in encoding_record.ENTRIES):
        raise ConversionError("name the encoding to convert to: --pos-encoding NAME, or "
                              "--encoder-pos-encoding NAME and/or --decoder-pos-encoding NAME "
                              "(a stack not named keeps its encoding)")
    return given


def carried_options(source: Source) -> dict[str, Any]:
    """The option values a conversion carries over from ``source``: a plugin checkpoint's
    values of its encodings' options, by name (a stock checkpoint has none). An encoding
    converted to takes those of its own options (:func:`kept_options`) unless a flag gives
    them."""
    from ..core.encodings import ENCODINGS

    if not source.plugin:
        return {}
    theirs = {o.name for name in source.encodings.values() for o in ENCODINGS[name].options}
    return {name: getattr(source.args, name) for name in sorted(theirs)
            if hasattr(source.args, name)}


def kept_options(carried: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """The values of ``carried`` (:func:`carried_options`) that the encodings ``names``
    take: those of their own options."""
    from ..core.encodings import get_encoding

    own = {o.name for name in names for o in get_encoding(name).options}
    return {name: value for name, value in carried.items() if name in own}


def converted_args(source: Source, given: dict[str, Any]) -> argparse.Namespace:
    """The converted model's arguments before its build (step 2 of the module docstring)."""
    from ..core.encodings import get_encoding
    from .position_args import add_position_args

    names = {stack: given.get(f"{stack}_pos_encoding") or given.get("pos_encoding")
             or source.encodings[stack] for stack in STACKS}
    args = copy.deepcopy(source.args)
    args.arch = args._name = ARCH
    parser = argparse.ArgumentParser(add_help=False)
    add_position_args(parser)
    for dest in [a.dest for a in parser._actions] + [encoding_record.CONVERTED_FROM]:
        if hasattr(args, dest):
            delattr(args, dest)
    for option, value in kept_options(carried_options(source), names.values()).items():
        setattr(args, option, value)
    for dest, value in given.items():
        setattr(args, dest, value)
    encoding_record.write(args, names)
    args.no_token_positional_embeddings = False
    for stack in STACKS:
        setattr(args, f"{stack}_learned_pos", False)
        if given.get("keep_input_positions") and not get_encoding(names[stack]).at_input:
            kept = source.input_positions(stack)
            if kept is None:
                raise ConversionError(
                    f"--keep-input-positions: {source.path}'s {stack} has no input positions "
                    "to keep; drop the flag")
            setattr(args, f"{stack}_learned_pos", kept == "learned")
    return args


def build(source: Source, args: argparse.Namespace, seed: int) -> torch.nn.Module:
    """The model of ``args`` as ``fairseq-train --seed seed`` builds it, over dictionaries
    of the source's embedding sizes (the caller's random state left as it was)."""
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    from .build import toy_dictionary
    from .position_args import uses_segments

    dictionaries = []
    for stack in STACKS:
        size = source.state["model"][f"{stack}.embed_tokens.weight"].shape[0]
        d = toy_dictionary(size - 1 if uses_segments(args) else size)
        if uses_segments(args):
            d.add_symbol(args.segment_separator)
        dictionaries.append(d)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # fairseq-train: utils.set_torch_seed, then build_model
        try:
            return TranslationTask(TranslationConfig(), *dictionaries).build_model(args)
        except ValueError as error:  # the plugin's and fairseq's checks of the flags
            raise ConversionError(str(error)) from None


def convert(source: Source | Path | str, flags: Sequence[str] = (), *,
            seed: Optional[int] = None) -> Conversion:
    """``source`` (a path, or a checkpoint :func:`read_source` read) converted as the
    position ``flags`` say (the module docstring); :class:`ConversionError` for anything
    that makes it impossible, before anything is written."""
    if not isinstance(source, Source):
        source = read_source(source)
    given = position_flags(flags)
    args = converted_args(source, given)
    if seed is None:  # the checkpoint's own, else fairseq-train's default
        recorded = getattr(source.args, "seed", None)
        seed = 1 if recorded is None else int(recorded)
    model = build(source, args, seed)
    check_lengths(source, model, args)
    state, entries = transfer(source, model, args, seed)
    provenance = source.provenance(seed)
    encoding_record.write_conversion(args, provenance)
    report = Report(provenance, source.describe(), model_tag(args), seed, *entries)
    try:
        flags_out = reproducing_flags(args)
    except ValueError as error:
        raise ConversionError(f"the converted model cannot be fine-tuned by fairseq-train: "
                              f"{error}") from None
    return Conversion(source, args, checkpoint_state(source, args, state), report, flags_out)


def check_output(source: Path | str, out: Path | str, force: bool = False) -> None:
    """:class:`ConversionError` where ``out`` cannot take the converted checkpoint: it is
    the source, a directory, or a file that exists (unless ``force``)."""
    source, out = Path(source), Path(out)
    if out.exists() and source.exists() and out.resolve() == source.resolve():
        raise ConversionError(f"{out} is the checkpoint to convert: write the converted one to "
                              "another file")
    if out.is_dir():
        raise ConversionError(f"{out} is a directory: give the converted checkpoint's file "
                              f"name (for example {out / 'converted.pt'})")
    if out.exists() and not force:
        raise ConversionError(f"{out} exists: give another path, or --force to replace it")


def save(conversion: Conversion, out: Path | str, *, force: bool = False) -> None:
    """Write ``conversion``'s checkpoint to ``out`` atomically (fairseq's own save: a
    temporary file renamed), creating its directory; :func:`check_output` first."""
    from fairseq.checkpoint_utils import torch_persistent_save

    check_output(conversion.source.path, out, force)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch_persistent_save(conversion.state, str(out))
