"""The ``fairseq-train`` flags that build a given ``transformer_posenc`` model, beside
``--arch transformer_posenc``: how ``posenc-convert`` writes a converted checkpoint's model
out as the command that fine-tunes it (``--finetune-from-model`` loads the weights into the
model that the command's own flags build, so they must build the same one).

The flags are found by comparison, not by copying arguments: the model's flags are those of
``transformer_posenc`` (fairseq's transformer and the plugin's position flags), each
compared as the model reads it (fairseq's through ``TransformerConfig``, the way the model
is built from them, defaults included; the position flags once the plugin has configured
them, so that the input flags an encoding sets itself are no difference). Starting from the
encoding flags, each flag whose value differs from what the flags so far give is added, in
the parser's order, so that a value that follows from an earlier flag (``--decoder-embed-dim``
from ``--encoder-embed-dim``) is left out; then each flag that the others make follow
(``--share-decoder-input-output-embed`` beside a later ``--share-all-embeddings``) is taken
out again. The flags found are checked to give every value.
"""

from __future__ import annotations

import argparse
import functools
import shlex
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import encoding_record
from .build import model_args
from .encoding_record import STACKS

#: The architecture whose defaults the flags are written against.
ARCH = "transformer_posenc"
#: The plugin's directory, the ``--user-dir`` of the commands written out.
USER_DIR = Path(__file__).resolve().parents[1]
#: The fine-tuning recipe (ours: the optimizer and schedule of the from-scratch recipes with a
#: lower learning rate and a short warm-up; docs/convert.md says why).
FINETUNE_RECIPE = ("--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "1e-4",
                   "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "200",
                   "--warmup-init-lr", "1e-07", "--criterion", "label_smoothed_cross_entropy",
                   "--label-smoothing", "0.1", "--max-tokens", "4096")


@functools.lru_cache(maxsize=None)
def _actions() -> tuple[tuple[argparse.Action, ...], frozenset[str]]:
    """The model's flags in the parser's order, and the dests of the position flags."""
    from .models import PosencTransformerModel
    from .position_args import add_position_args

    parser = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    PosencTransformerModel.add_args(parser)
    positions = argparse.ArgumentParser(add_help=False)
    add_position_args(positions)
    return (tuple(a for a in parser._actions if a.option_strings),
            frozenset(a.dest for a in positions._actions))


def model_dests() -> tuple[frozenset[str], frozenset[str]]:
    """The dests of the model's flags: fairseq's transformer's, and the plugin's position
    flags."""
    actions, positions = _actions()
    return frozenset(a.dest for a in actions if a.dest not in positions), positions


def encoding_flags(args: argparse.Namespace) -> list[str]:
    """``--pos-encoding NAME``, or each stack's flag for a pair."""
    return names_flags(encoding_record.stack_names(args))


def names_flags(names: Mapping[str, str]) -> list[str]:
    """``--pos-encoding NAME`` where both stacks of ``names`` (each stack's encoding) have
    one, else each stack's flag."""
    if names["encoder"] == names["decoder"]:
        return ["--pos-encoding", names["encoder"]]
    return [flag for stack in STACKS for flag in (f"--{stack}-pos-encoding", names[stack])]


def configured(flags: Sequence[str]) -> argparse.Namespace:
    """The arguments ``fairseq-train --arch transformer_posenc FLAGS`` gives the model, as
    its build configures them (the position record and input flags; ``--share-all-
    embeddings`` sharing the decoder's output too, as fairseq's ``build_model`` sets it)."""
    from .position_args import configure_positions

    args = model_args(ARCH, flags)
    configure_positions(args)
    if getattr(args, "share_all_embeddings", False):
        args.share_decoder_input_output_embed = True
    return args


def values(args: argparse.Namespace) -> dict[str, Any]:
    """Each model flag's value in ``args`` as the model reads it (the module docstring)."""
    from fairseq.models.transformer import TransformerConfig

    actions, positions = _actions()
    config = TransformerConfig.from_namespace(args)
    return {a.dest: getattr(args, a.dest, None) if a.dest in positions
            else getattr(config, a.dest, None) for a in actions}


def differences(target: dict[str, Any], flags: Sequence[str]) -> list[argparse.Action]:
    """The model flags whose value in ``target`` (:func:`values`) the ``flags`` do not
    give, in order."""
    given = values(configured(flags))
    return [a for a in _actions()[0] if target[a.dest] != given[a.dest]]


def written(action: argparse.Action, value: Any) -> list[str]:
    """``action``'s flag giving ``value`` (nothing where a switch is off)."""
    flag = action.option_strings[0]
    if action.nargs == 0:
        return [flag] if value else []
    if isinstance(value, (list, tuple)):
        return [flag, ",".join(str(v) for v in value)]
    return [flag, str(value)]


def reproducing_flags(model: argparse.Namespace) -> list[str]:
    """The flags that build ``model`` (a built model's arguments) beside ``--arch
    transformer_posenc``, as the module docstring says; ``ValueError`` naming what no flag
    gives."""
    target = values(model)
    base = encoding_flags(model)

    def joined(chosen: list[list[str]]) -> list[str]:
        return base + [word for flag in chosen for word in flag]

    chosen: list[list[str]] = []
    for action in differences(target, base):
        if action in differences(target, joined(chosen)):
            chosen.append(written(action, target[action.dest]))
    # a flag that a later one made follow (--share-decoder-input-output-embed from
    # --share-all-embeddings) goes
    for i in reversed(range(len(chosen))):
        if not differences(target, joined(chosen[:i] + chosen[i + 1:])):
            chosen = chosen[:i] + chosen[i + 1:]
    left = differences(target, joined(chosen))
    if left:
        raise ValueError("no fairseq-train flag gives the model's " + ", ".join(
            f"{a.option_strings[0]} ({target[a.dest]!r})" for a in left))
    return joined(chosen)


def finetune_command(data: str, task: dict[str, Any], flags: Sequence[str],
                     checkpoint: Path) -> str:
    """The ``fairseq-train --finetune-from-model`` command line for ``checkpoint``: the
    data and task (``task``: ``_name``, ``source_lang``, ``target_lang``), the model
    (``flags``: :func:`reproducing_flags`), the recipe (:data:`FINETUNE_RECIPE`)."""
    words = ["fairseq-train", data, "--user-dir", str(USER_DIR)]
    if task.get("_name"):
        words += ["--task", str(task["_name"])]
    for key, flag in (("source_lang", "--source-lang"), ("target_lang", "--target-lang")):
        if task.get(key):
            words += [flag, str(task[key])]
    words += ["--arch", ARCH, *flags, *FINETUNE_RECIPE, "--finetune-from-model", str(checkpoint)]
    return shlex.join(words)
