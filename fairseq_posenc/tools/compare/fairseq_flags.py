"""The fairseq flags a comparison takes from its user, ``--train-args`` and ``--variants``,
checked with fairseq's own parsers before any work: a flag that would fail inside
``fairseq-train`` or ``fairseq-generate``, or silently change what the comparison trains,
saves, translates or scores, stops the command before anything is prepared or written.

``--train-args`` (:func:`check_train_args`): every row's whole ``fairseq-train`` command
(:func:`.plan.train_args`: the comparison's own flags, the recipe, ``--train-args``, the
batch's split, the row's own flags) is parsed by fairseq's training parser for the row's
architecture, and the row's model is built from the result as ``fairseq-train`` builds it
(:func:`~fairseq_posenc.plugin.build.trial_build`: the plugin's check of the position
flags, every encoding's ``check_options`` and constructor with the model's real sizes):
an unknown flag, a bad value, or a flag of another encoding (``--shaw-clip`` when
comparing ``t5`` and ``rope``) is refused with fairseq's or the plugin's message and the
rows that refuse it. A row's own flags are read with the same parser
(:func:`.encoding_rows.check_flags`), and a value that only they make wrong is blamed on the row,
by its label. An error raised in the user's own code (an encoding of ``--user-dir``)
names the row, the user's file and line and a command that shows the traceback
(:func:`~fairseq_posenc.tools.experiment.user_dir.failure`). Refused too, although
fairseq would take them:

* the flags posenc-compare gives every run itself (:data:`DECIDED`, and whatever else
  :func:`.plan.train_args` sets in this comparison, e.g. ``--save-interval-updates`` under
  ``--checkpoint avgN``): fairseq reads the last of a repeated flag, so ``--train-args``
  would override them (``--save-dir`` trains into a folder that the evaluation never
  reads; ``--seed`` or ``--arch`` makes every run the same);
* the flags that change what the comparison relies on (:data:`RELIED_ON`): each run saves
  ``checkpoint_last.pt`` (the evaluated checkpoint of ``--checkpoint last``, and where an
  interrupted or continued run resumes, whole: weights, optimizer, schedule, data
  position), ``checkpoint_best.pt`` (the lowest validation loss) and the interval
  checkpoints of ``avgN``, validates for the report's convergence check, and trains for
  the same ``--max-update`` or ``--max-epoch`` as every other run;
* under ``--init-from``, fairseq's model flags but :data:`.init_from.TUNABLE` (dropout,
  layer drop, the longest sequences): every row's architecture is the checkpoint's.

``--keep-last-epochs`` and ``--save-interval`` stay allowed (the latter where the
comparison does not set it, as ``--until-converged`` does): epoch checkpoints are off
(``--no-epoch-checkpoints``), the only files ``--keep-last-epochs`` deletes, and every run
saves a checkpoint at each validation whatever ``--save-interval``. Recipe
flags (``--lr``, ``--max-tokens``, ``--dropout``, ...) and model flags of every compared
encoding are what ``--train-args`` is for.

``--variants`` (:func:`variant_flags`): a variant may set only the options that the
plugin's translation task adds to fairseq-generate's for a trained encoding
(the plugin task's own, :func:`_variant_options`: ``--rope-scaling``, ``--rope-scaling-factor``,
``--rope-scaling-original-len`` and every registered scaling's options, Llama 3's
``--rope-scaling-low-freq-factor`` and ``--rope-scaling-high-freq-factor``), the encoding
read otherwise at translation time. A variant
is a row tested against the baseline, which translates with the comparison's decoding
(beam 10, length penalty 0.6, the best hypothesis scored against the references); a
decoding flag in one row (``--beam``, ``--lenpen``, ``--max-len-b``, ``--nbest``,
``--sampling``, ``--prefix-size``, ``--score-reference``, ``--results-path``, ...) would
make its difference the decoder's or the scoring's, not the encoding's, so none is allowed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..launch.batch import Split
from . import init_from
from .encoding_rows import Row, check_flags, of
from .settings import Settings

#: fairseq-train settings that a comparison decides for every run: how.
DECIDED = {
    "seed": "run k of every encoding trains with seed k (--seeds)",
    "arch": "each run trains PREFIX_ENCODING (--size or --arch-prefix), or under "
            "--init-from the checkpoint's architecture",
    **dict.fromkeys(("pos_encoding", "encoder_pos_encoding", "decoder_pos_encoding"),
                    "each row's encodings are its --encodings value (ENCODER/DECODER: an "
                    "encoding per stack)"),
    "task": "translation, or translation_extrapolation with --train-max-len",
    "train_max_len": "set it with posenc-compare's --train-max-len",
    "source_lang": "set it with posenc-compare's -s",
    "target_lang": "set it with posenc-compare's -t",
    "user_dir": "set it with posenc-compare's --user-dir (every fairseq command gets it)",
    "save_dir": "every run saves into OUT/runs/ENC/seedK/checkpoints, where its evaluation, "
                "its resumption and the report read",
    "no_epoch_checkpoints": "runs keep no epoch checkpoints",
    "max_update": "set it with posenc-compare's --max-update",
    "max_epoch": "set it with posenc-compare's --max-epoch",
    "cpu": "set it with posenc-compare's --cpu",
    "update_freq": "set --batch-tokens: the launcher splits each update over the run's GPUs",
    "distributed_world_size": "set --batch-tokens: the launcher splits each update over the "
                              "run's GPUs",
    **dict.fromkeys(("distributed_rank", "distributed_num_procs", "device_id"),
                    "the launcher gives each run its GPUs"),
    "log_format": "the report reads train.log in fairseq's simple format",
    "log_interval": "the report reads train.log's progress lines every 50 updates",
    "train_subset": "every run trains on the train split of --data",
    "valid_subset": "set it with posenc-compare's --valid",
    "validate_interval_updates": "every run validates 20 times under --max-update, or every "
                                 "--validate-every updates under --until-converged",
    **dict.fromkeys(("save_interval_updates", "keep_interval_updates"),
                    "every run saves a checkpoint at each validation (avgN: every 1% of "
                    "--max-update) and keeps the newest (avgN: N)"),
    "patience": "set it with posenc-compare's --until-converged --patience P",
}

_RESUME = ("an interrupted or continued run resumes from its own checkpoint_last.pt, whole "
           "(weights, optimizer, schedule, data position)")
_SAVED = "every run is evaluated from, and resumes from, its checkpoint_last.pt"
_BEST = ("checkpoint_best.pt is the lowest validation loss (--checkpoint best, as the report "
         "says)")
_STOP = ("every run trains for the same --max-update or --max-epoch, or until converged by "
         "the same rule")

#: fairseq-train settings that the comparison relies on at fairseq's defaults: why.
RELIED_ON = {
    **dict.fromkeys(("restore_file", "reset_optimizer", "reset_lr_scheduler", "reset_meters",
                     "reset_dataloader", "finetune_from_model", "optimizer_overrides",
                     "continue_once", "no_save_optimizer_state"), _RESUME),
    **dict.fromkeys(("no_save", "no_last_checkpoints"), _SAVED),
    **dict.fromkeys(("disable_validation", "validate_after_updates"),
                    "the report's convergence check, --until-converged and --checkpoint best "
                    "read every validation"),
    **dict.fromkeys(("best_checkpoint_metric", "maximize_best_checkpoint_metric"), _BEST),
    **dict.fromkeys(("stop_time_hours", "stop_min_lr"), _STOP),
}

#: Set by the batch's split from the recipe's and --train-args' own value: theirs to set.
_FROM_USER = ("max_tokens",)


def _variant_options() -> frozenset[str]:
    from ...core.rope_scaling import scaling_names

    return frozenset(scaling_names())


def parse(make_parser: Callable[[], argparse.ArgumentParser],
          argv: Sequence[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """fairseq's ``parse_args_and_arch`` of ``argv`` with a new parser from
    ``make_parser``; the parser (with every option of the task and architecture the
    arguments name) and the arguments. :class:`ValueError` with argparse's message, the
    parser then in ``.parser``."""
    from fairseq import options

    from ... import register

    register()  # the plugin's architectures and tasks, which fairseq's parser offers
    parser = make_parser()
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return parser, options.parse_args_and_arch(parser, list(argv))
    except SystemExit:
        lines = err.getvalue().strip().splitlines()
        error = ValueError(lines[-1].split("error: ", 1)[-1] if lines
                           else "fairseq's parser refuses them")
        error.parser = parser  # type: ignore[attr-defined]
        raise error from None


def named(parser: argparse.ArgumentParser, flags: Sequence[str]) -> list[tuple[str, str]]:
    """``(option, dest)`` of every option of ``parser`` that ``flags`` names, as argparse
    reads them: ``--opt``, ``--opt=value``, ``-s`` and ``-sVALUE`` (fairseq's parsers
    take no abbreviations)."""
    actions = parser._option_string_actions  # argparse's map of option strings
    found = []
    for flag in flags:
        name = flag.split("=", 1)[0]
        if name not in actions and flag[:1] == "-" and flag[1:2] != "-":
            name = flag[:2]  # -sen: -s en
        if flag[:1] == "-" and name in actions:
            found.append((name, actions[name].dest))
    return found


def check_train_args(settings: Settings, encodings: Sequence[str], batch_split: Split) -> None:
    """Stop (:class:`SystemExit`, naming the flag, the rows and what to do) on
    ``--train-args`` that fairseq or the plugin would refuse for some row's run, or that
    override what the comparison decides or relies on (see the module docstring); on a
    row's flags that fairseq's parser reads as no options of its encodings, as one given
    twice or as one of ``--train-args`` too (:func:`.encoding_rows.check_flags`), or whose values
    fairseq or the plugin refuse (blamed on the row, by its label); and on a row whose
    model does not build (:func:`_refusal`)."""
    from fairseq import options

    from .data import Corpus
    from .plan import Run, train_args

    given = f"posenc-compare: --train-args \"{' '.join(settings.train_args)}\""
    corpus = Corpus(Path("/nonexistent"), settings.source_lang, settings.target_lang, {}, (),
                    {})  # a stand-in for the prepared corpus: parsing reads no data
    own = dataclasses.replace(settings, recipe=(), train_args=())  # the comparison's flags

    def command(s: Settings, row: Row) -> list[str]:
        return train_args(s, corpus, Run(row, 1), Path("/nonexistent/OUT"), batch_split)

    failures: dict[str, str] = {}  # row: fairseq's or the plugin's message
    parser: Optional[argparse.ArgumentParser] = None
    for row in map(of, encodings):
        bare = Row(row.label, row.encoder, row.decoder)  # the row without its flags
        if row.flags:  # read as fairseq-train reads them, with the row's own parser
            reader, _ = parse(options.get_training_parser, command(own, bare))
            try:
                check_flags(row, named(reader, row.flags), named(reader, settings.train_args))
            except ValueError as e:
                raise SystemExit(f"posenc-compare: {e}") from None
        parser, refusal = _refusal(command(settings, row), settings, row)
        if refusal and row.flags and _refusal(command(settings, bare), settings, row)[1] is None:
            raise SystemExit(f"posenc-compare: --encodings {row.label}: \"{row.written()}\" "
                             f"is refused: {refusal}")
        if refusal:
            failures[row] = refusal
    if parser is not None and settings.train_args:
        # what every row's command sets (a row's own flags aside: --train-args may not repeat
        # them, :func:`.encoding_rows.check_flags`; and --init-from's model flags, checked apart)
        plain = Row(of(encodings[0]).encoder)
        tool_sets = {dest for _, dest in named(parser, command(own, plain))} - {
            dest for _, dest in named(parser, _init_flags(settings, plain))}
        fixed = _fixed_model(settings)
        lines = []
        for option, dest in named(parser, settings.train_args):
            if dest in DECIDED:
                lines.append(f"{option}: posenc-compare sets it for every run: {DECIDED[dest]}")
            elif dest in RELIED_ON:
                lines.append(f"{option}: it changes what the comparison relies on: "
                             f"{RELIED_ON[dest]}")
            elif dest in fixed:
                lines.append(f"{option}: every row's model is --init-from's, its architecture "
                             "as the checkpoint has it; beside --init-from, --train-args sets "
                             "the fine-tuning's flags and of the model's only "
                             + ", ".join(sorted(_option(parser, d) for d in init_from.TUNABLE)))
            elif dest in tool_sets and dest not in _FROM_USER:
                lines.append(f"{option}: posenc-compare sets it for every run of this "
                             "comparison")
        if lines:
            raise SystemExit(f"{given}: remove these flags:\n  " + "\n  ".join(lines))
    if failures and not settings.train_args:  # the comparison's own command: no user flag
        row, refusal = next(iter(failures.items()))
        raise SystemExit(f"posenc-compare: --encodings {row}: its fairseq-train command is "
                         f"refused: {refusal.rstrip('.')}. Compare it with flags of its own: "
                         f"\"LABEL={row}:FLAGS\", or --train-args for every row")
    if failures:
        first = next(iter(failures.values())).rstrip(".")
        took = [e for e in encodings if e not in failures]
        raise SystemExit(
            f"{given}: the fairseq-train command of {', '.join(failures)} refuses it"
            + (f" ({', '.join(took)} take{'s' if len(took) == 1 else ''} it)" if took else "")
            + f": {first}" + (". Every run trains with the same --train-args: give only "
                              "flags that every compared encoding takes, and compare the "
                              "others with theirs in a comparison of their own" if took
                              else ""))


def _init_flags(settings: Settings, row: Row) -> list[str]:
    """``--init-from``'s model flags for ``row`` (none from scratch)."""
    return init_from.model_flags(settings.init_from, row) if settings.init_from else []


def _fixed_model(settings: Settings) -> frozenset[str]:
    """The model flags that ``--train-args`` may not set: under ``--init-from`` fairseq's
    model flags but :data:`.init_from.TUNABLE` (the plugin's position flags are the
    rows'); none from scratch."""
    if not settings.init_from:
        return frozenset()
    from ...plugin.model_flags import model_dests

    return model_dests()[0] - init_from.TUNABLE


def _option(parser: argparse.ArgumentParser, dest: str) -> str:
    """``dest``'s first option string in ``parser``."""
    return next(a.option_strings[0] for a in parser._actions if a.dest == dest)


def _refusal(argv: Sequence[str], settings: Settings,
             row: Row) -> tuple[argparse.ArgumentParser, Optional[str]]:
    """fairseq's parser of ``fairseq-train ARGV`` (the command of ``row``), and what
    fairseq or the plugin refuses in it (None: nothing): argparse's message, or the
    plugin's, as ``fairseq-train`` stops on it when it builds the model. The model is built
    (:func:`~fairseq_posenc.plugin.build.trial_build`), so that every encoding's checks and
    constructor run with the model's real sizes before any work. An error raised in the
    user's own code (an encoding of ``--user-dir``) is no refusal but a
    :class:`SystemExit` that names the row, the user's file and line, the error, and a
    command that shows its whole traceback
    (:func:`~fairseq_posenc.tools.experiment.user_dir.failure`)."""
    from fairseq import options

    from ...plugin.build import trial_build
    from ..experiment.user_dir import failure, users_line

    try:
        parser, args = parse(options.get_training_parser, argv)
    except ValueError as e:
        return e.parser, str(e)  # type: ignore[attr-defined]
    try:
        trial_build(args)
    except Exception as error:  # the package's refusal, or the user's code failing
        directory = Path(settings.user_dir) if settings.user_dir else None
        if users_line(error, directory) is not None:
            raise SystemExit(f"posenc-compare: --encodings {row.label}: " + failure(
                "building its model", error, _traceback_command(settings, row), directory)
            ) from None
        if not isinstance(error, ValueError):
            raise  # the package's own failure: its traceback
        return parser, str(error)
    return parser, None


def _traceback_command(settings: Settings, row: Row) -> str:
    """``posenc-params`` for the row's model with the comparison's flags: it builds the
    model on the CPU, as the row's runs would, and shows the traceback of what fails."""
    import shlex
    import sys

    from .plan import arch, model_flags

    user_dir = ["--user-dir", settings.user_dir] if settings.user_dir else []
    return shlex.join([sys.executable, "-m", "fairseq_posenc.tools.params", "--arch",
                       arch(settings, row), *user_dir, *model_flags(settings, row)])


def variant_flags(flags: Sequence[str], task: str) -> argparse.Namespace:
    """fairseq-generate's parse of a variant's ``flags`` with the variants' ``task``;
    :class:`ValueError` with argparse's message, or naming the flags a variant may not
    set (see the module docstring)."""
    from fairseq import options

    parser, args = parse(options.get_generation_parser, [
        "/nonexistent", "--task", task, "--path", "/nonexistent.pt", *flags])
    allowed = _variant_options()
    other = [option for option, dest in named(parser, flags) if dest not in allowed]
    if other:
        offered = sorted(option for option, action in parser._option_string_actions.items()
                         if action.dest in allowed and option.startswith("--"))
        raise ValueError(
            f"{', '.join(other)}: a variant sets only {', '.join(offered)}, how the "
            "encoding is read at translation time; every row is decoded and scored alike "
            "(beam 10, length penalty 0.6, the best hypothesis against the references), so "
            "that a row's difference is its encoding's")
    return args
