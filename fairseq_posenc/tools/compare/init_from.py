"""``--init-from CKPT``: every row fine-tuned from one trained checkpoint, converted to the
row's encoding, so that the rows differ only in the encoding.

    posenc-compare OUT --data PREPARED -s en -t de --encodings sinusoidal rope alibi \\
        --init-from checkpoint_best.pt --max-update 2000

The checkpoint is read once before any work (:func:`read`) by the plugin's reader of a
checkpoint to convert (:mod:`fairseq_posenc.plugin.convert_source`: fairseq's transformer or
the plugin's, anything else refused) and recorded in the settings
(:class:`.settings.InitFrom`: its path and SHA-256, so that a rerun with another checkpoint,
or with the same file changed, is a difference of settings). Its model flags are found as
``posenc-convert`` finds them, by converting it to its own encoding
(:func:`fairseq_posenc.plugin.convert.convert`).

Every row's run trains ``--arch transformer_posenc`` with the checkpoint's model flags and
the row's encoding (:func:`model_flags`; a plugin checkpoint's values of the options the
row's encodings have, as a conversion carries them over), then what every comparison's run
gets (:func:`.plan.train_args`: the recipe, here the fine-tuning's, the stop,
``--train-args``, the row's own flags), and ``--finetune-from-model RUN/init.pt``: the
checkpoint converted to the row's encoding with the run's seed, its new parameters started
as ``fairseq-train --seed k`` starts them (:func:`start_run`, where the run starts: in this
process, a worker or a SLURM job). fairseq-train reads ``--finetune-from-model`` only where
the run's save directory holds no ``checkpoint_last.pt`` (fairseq 0.12's
``checkpoint_utils.load_checkpoint``), and then resets the optimizer, the schedule, the
meters and the data position: ``--max-update`` counts the fine-tuning's updates. An
interrupted or continued run resumes from its own ``checkpoint_last.pt``, and
:func:`start_run` converts nothing for it.

Checked before any work too: every row's conversion, made in memory (:func:`check_rows`: a
learned table asked for another length, an option that changes the shape of a tensor to
copy), and ``--train-args``, which may set the fine-tuning's flags and :data:`TUNABLE` of
the model's, not its architecture (:mod:`.fairseq_flags`). The dictionaries are
:mod:`.init_dictionaries`'.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

from .encoding_rows import Row
from .settings import InitFrom

if TYPE_CHECKING:
    from ...plugin.convert_source import Source

#: fairseq's model flags that ``--train-args`` may set beside ``--init-from``: how the model
#: trains (dropout, layer drop, activation checkpointing), not what it is, and the longest
#: sequences, which each row's conversion checks (a learned table cannot change its length).
#: Every other model flag is the checkpoint's.
TUNABLE = frozenset({"dropout", "attention_dropout", "activation_dropout", "relu_dropout",
                     "adaptive_softmax_dropout", "encoder_layerdrop", "decoder_layerdrop",
                     "checkpoint_activations", "offload_activations",
                     "max_source_positions", "max_target_positions"})
#: A run's converted checkpoint, in the run's directory beside ``checkpoints/``.
INIT = "init.pt"
_LENGTHS = ("--max-source-positions", "--max-target-positions")


def read(path: Path) -> tuple["Source", InitFrom]:
    """The checkpoint at ``path``, read (the plugin's :class:`~fairseq_posenc.plugin.
    convert_source.Source`), and what the settings record of it; :class:`SystemExit` with
    the conversion's own message for a file that is missing, damaged or no transformer."""
    from ...plugin.convert import ConversionError, carried_options, convert, read_source
    from ...plugin.model_flags import names_flags

    try:
        source = read_source(path)
        own = convert(source, names_flags(source.encodings))
    except ConversionError as error:
        raise SystemExit(f"posenc-compare: --init-from: {error}") from None
    return source, InitFrom(
        path=str(source.path.resolve()), sha256=source.sha256, model=source.model,
        architecture=source.architecture, encoding=source.tag, updates=source.updates,
        flags=tuple(split(own.flags)[1]), options=tuple(carried_options(source).items()))


def split(words: Sequence[str], lengths: bool = False) -> tuple[list[str], list[str]]:
    """``words`` (flags and their values) split into the plugin's position flags with their
    values (with ``lengths``, ``--max-source-positions`` and ``--max-target-positions``
    too: the flags a conversion takes) and the rest, each in order."""
    from ...plugin.convert import position_parser

    actions = position_parser()._option_string_actions  # argparse's map of option strings
    picked: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(words):
        name = words[i].split("=", 1)[0]
        action = actions.get(name) if words[i].startswith("--") else None
        width = 2 if action is not None and action.nargs != 0 and "=" not in words[i] else 1
        position = action is not None and (lengths or name not in _LENGTHS)
        (picked if position else rest).extend(words[i:i + width])
        i += width
    return picked, rest


def conversion_flags(flags: Sequence[str]) -> list[str]:
    """The flags a run's conversion takes from the run's model flags
    (:func:`.plan.model_flags`): its encodings, their options, the position flags of
    ``--train-args`` and the row's, the longest sequences."""
    return split(flags, lengths=True)[0]


def model_flags(init: InitFrom, row: Row) -> list[str]:
    """What a row's run trains with beside ``--arch transformer_posenc``, before the
    comparison's flags: the checkpoint's model flags, ``--pos-encoding ENC`` (a pair's
    stacks are the row's own flags), and the checkpoint's values of the options of the
    row's encodings (:func:`fairseq_posenc.plugin.convert.kept_options`) where they are
    not the default."""
    from ...core.encodings import ENCODINGS
    from ...plugin.convert import kept_options

    declared = {o.name: o for name in row.encodings for o in ENCODINGS[name].options}
    carried: list[str] = []
    for name, value in kept_options(dict(init.options), row.encodings).items():
        option = declared[name]
        if value is None or value is False or value == option.default:
            continue
        carried += [option.flag] if option.type is None else [option.flag, str(value)]
    return [*init.flags, *([] if row.pair else ["--pos-encoding", row.encoder]), *carried]


def check_rows(source: "Source", commands: Mapping[Row, Sequence[str]]) -> None:
    """Convert ``source`` to every row in memory, with the position flags of the row's
    model flags (``commands``: :func:`.plan.model_flags` of each row), and throw the result
    away: :class:`SystemExit` naming the row and the conversion's refusal."""
    from ...plugin.convert import ConversionError, convert

    for row, flags in commands.items():
        try:
            convert(source, conversion_flags(flags), seed=1)
        except ConversionError as error:
            raise SystemExit(f"posenc-compare: --encodings {row.label}: --init-from "
                             f"{source.path} does not convert to it: {error}") from None


def start_run(init: InitFrom, flags: Sequence[str], seed: int, target: Path, save_dir: Path,
              step: Callable[[str], None]) -> None:
    """Convert the checkpoint for a run that starts: into ``target`` (the run's
    ``init.pt``), with the conversion flags of the run's model ``flags`` and its ``seed``.
    Nothing where the run resumes (``save_dir`` holds ``checkpoint_last.pt``, which
    fairseq-train loads instead) or was converted before (stopped before its first
    checkpoint). :class:`SystemExit` where the file has changed since the comparison
    recorded it (a SLURM job that started later than its command)."""
    if (save_dir / "checkpoint_last.pt").exists() or target.exists():
        return
    from ...plugin.convert import ConversionError, convert, read_source, save

    step(f"converting {init.path} to the row's encoding, new parameters of seed {seed} "
         f"(into {target})")
    try:
        source = read_source(init.path)
        if source.sha256 != init.sha256:
            raise SystemExit(
                f"posenc-compare: --init-from {init.path} has changed since the comparison "
                f"recorded it (sha256 {init.sha256} then, {source.sha256} now): its runs "
                "would start from different models; put the file back, or rerun the "
                "command with --force to start over from the new one")
        conversion = convert(source, conversion_flags(flags), seed=seed)
    except ConversionError as error:
        raise SystemExit(f"posenc-compare: --init-from {error}") from None
    save(conversion, target, force=True)
    step(f"converted: {conversion.report.summary()}")


def record(init: Optional[InitFrom]) -> Optional[dict[str, Any]]:
    """``report.json``'s ``init_from``: the checkpoint (path, SHA-256, model, architecture,
    encoding, updates) and the model flags every row trained with; None from scratch."""
    if init is None:
        return None
    return {"path": init.path, "sha256": init.sha256, "model": init.model,
            "architecture": init.architecture, "encoding": init.encoding,
            "updates": init.updates, "model_flags": list(init.flags)}


def intro(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The report's paragraph on ``--init-from``, once, after the settings: what the rows
    were fine-tuned from and how (none from scratch)."""
    init = report.get("init_from")
    if not init:
        return []
    what = ("fairseq's transformer" if init["model"] == "transformer"
            else "fairseq-posenc's transformer_posenc")
    arch = f"`--arch {init['architecture']}`" if init["architecture"] else "no --arch recorded"
    own = [label for label, row in (report.get("rows") or {}).items()
           if "/".join(dict.fromkeys((row["encoder"], row["decoder"]))) == init["encoding"]
           and not row["flags"]]
    flags = " ".join(init["model_flags"]) or "none beside the architecture's defaults"
    return [("p", f"Fine-tuned from `{init['path']}` (sha256 `{init['sha256']}`): {what}, "
                  f"{arch}, encoding `{init['encoding']}`, trained for {init['updates']:,} "
                  "updates. Every run starts from this checkpoint converted to its row's "
                  "encoding as `posenc-convert` converts it (every tensor both models have "
                  "copied, the encoding's new parameters started as `fairseq-train --seed k` "
                  "starts them for seed k), and trains `transformer_posenc` with the "
                  f"checkpoint's model flags (`{flags}`) and the fine-tuning recipe; the "
                  "updates counted are the fine-tuning's"
                  + (f". `{own[0]}` is the checkpoint's own encoding: that row is the "
                     "checkpoint fine-tuned alike." if own else "."))]
