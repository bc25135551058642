"""``posenc-compare``: every chosen encoding trained on your corpus, translated, scored and
inspected, with a report that says which differences are real.

    posenc-compare OUT --data DIR -s en -t de --encodings sinusoidal t5 rope \\
        --size tiny --seeds 3 --max-update 4000 --test test test_long --cpu

Everything that can be checked is checked before any training (a ``--user-dir`` of the
user's own encodings, imported here first: :mod:`fairseq_posenc.tools.experiment.user_dir`;
the data's files and line counts and encoding, the encodings and architectures, every row's
``fairseq-train`` command with ``--train-args`` and the row's flags, and its model, built
(:mod:`.fairseq_flags`), the baseline, a GPU
unless ``--cpu``, tables of absolute positions long enough for the training data, a
``--train-max-len`` that leaves enough training pairs, the ``--variants`` and the flags they
add, a rerun's settings against ``OUT/settings.json``; under ``--init-from`` the checkpoint,
its dictionaries against the prepared data's and every row's conversion:
:mod:`.init_from`). ``docs/compare.md`` explains the report.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Optional, Sequence

from ..experiment.checkpoints import check_rule
from ..launch import dispatch, launcher_flags, lock
from ..launch.launcher_flags import Launcher
from . import (budget, convergence, data, encoding_rows, extrapolation_study, fairseq_flags,
               init_dictionaries, init_from, jobs, plan, report, settings as settings_mod,
               stopping, summary, variants as variants_mod)
from .execute import say
from .settings import BATCH_TOKENS, DEFAULT_CLEANING, FINETUNE, RECIPES, SIZES, Settings


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="posenc-compare",
        description="Every chosen position encoding trained on your corpus with the same data, "
                    "settings and seeds, translated (beam 10), scored with sacreBLEU against "
                    "the baseline, inspected; a report that says which differences are real.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Rerun the same command to resume; add encodings or raise --seeds to train "
               "only the new runs; raise --max-update to continue every run from its last "
               "checkpoint. docs/compare.md explains the report.")
    p.add_argument("out", type=Path, metavar="OUT",
                   help="the comparison's directory: settings, data, runs, report")
    p.add_argument("--data", type=Path, required=True,
                   help="raw SPLIT.LANG files (train, --valid, --test splits), or a directory "
                        "prepared by posenc-prepare-corpus or posenc-prepare-wmt")
    p.add_argument("-s", "--source-lang", required=True, help="source language (file suffix)")
    p.add_argument("-t", "--target-lang", required=True, help="target language (file suffix)")
    p.add_argument("--encodings", nargs="+", required=True, metavar="ROW",
                   help="the rows to compare: an encoding (a --pos-encoding value), a pair "
                        "ENCODER/DECODER (an encoding per stack: t5/fox), or a labelled row "
                        "with options of its encodings, \"LABEL=ENC:FLAGS\" (ENC an "
                        "encoding or a pair: \"rope75=rope:--rope-fraction 0.75\")")
    p.add_argument("--user-dir", type=Path, metavar="DIR",
                   help="encodings of your own: a fairseq --user-dir, a Python package whose "
                        "__init__.py imports fairseq_posenc and the modules that register "
                        "them (@register_encoding); imported before any check, so that "
                        "--encodings and --train-args take their names and options, and given "
                        "to every fairseq-train and fairseq-generate (default: the plugin's "
                        "own directory). docs/compare.md, \"Your own encoding\"")
    p.add_argument("--baseline", metavar="ROW",
                   help="the row the others are tested against, by its label (an encoding, "
                        "ENCODER/DECODER, or LABEL; default: the first)")
    p.add_argument("--size", choices=sorted(SIZES),
                   help="tiny: transformer_tiny_ENC (2+2 layers, 128 wide), trains on a CPU; "
                        "base: transformer_wmt_en_de_ENC, the papers' base model (default: "
                        "tiny). Sets the architecture and the training recipe")
    p.add_argument("--arch-prefix", metavar="PREFIX",
                   help="train PREFIX_ENC instead of --size's architecture (the --size recipe "
                        "still applies)")
    p.add_argument("--init-from", type=Path, metavar="CKPT",
                   help="fine-tune every row from this trained checkpoint (fairseq's "
                        "transformer, or fairseq-posenc's), converted to the row's encoding as "
                        "posenc-convert converts it: the checkpoint's architecture, the "
                        "fine-tuning recipe, --max-update counting the fine-tuning's updates; "
                        "--data must be a directory prepared in its vocabulary. "
                        "docs/compare.md, \"From a trained model\"")
    p.add_argument("--init-dict", type=Path, nargs="+", metavar="DICT",
                   help="--init-from: the checkpoint's dictionaries, source then target (one "
                        "file: joined), compared with the corpus's (default: dict.LANG.txt "
                        "in the directory its cfg.task.data names, else beside it)")
    p.add_argument("--seeds", type=int, default=1, metavar="N",
                   help="train seeds 1..N of every encoding (default 1; 3 or more to tell a "
                        "difference from training noise)")
    stop = p.add_mutually_exclusive_group(required=True)
    stop.add_argument("--max-update", type=int, metavar="U",
                      help=f"train every run for U updates, validating every "
                           f"{100 // stopping.VALIDATIONS}%% of them; "
                           "raise it on a finished comparison to continue its runs")
    stop.add_argument("--max-epoch", type=int, metavar="E", help="train every run for E epochs")
    p.add_argument("--until-converged", action="store_true",
                   help="train each run until its validation loss stops improving: it stops "
                        "after --patience validations without a new best, or at "
                        "--max-update U, now the cap; a rerun with a larger cap continues "
                        "the runs that reached it. --checkpoint defaults to best")
    p.add_argument("--patience", type=int, metavar="P",
                   help=f"--until-converged: validations without a new best validation loss "
                        f"before a run stops (default {stopping.PATIENCE})")
    p.add_argument("--validate-every", type=int, metavar="U",
                   help="--until-converged: updates between validations, a checkpoint at "
                        "each (default: tiny "
                        f"{stopping.VALIDATE_EVERY['tiny']}, base "
                        f"{stopping.VALIDATE_EVERY['base']})")
    p.add_argument("--train-args", default="", metavar='"ARGS"',
                   help="more fairseq-train flags, the same for every run, after the --size "
                        "recipe; write it with '=': --train-args=\"--lr 5e-4 --dropout 0.3\"")
    p.add_argument("--valid", default="valid", help="validation split (default: valid)")
    p.add_argument("--test", nargs="+", default=["test"], metavar="SPLIT",
                   help="test splits, each translated and scored (default: test)")
    p.add_argument("--cpu", action="store_true", help="train and translate on the CPU")
    p.add_argument("--checkpoint", metavar="RULE",
                   help="the checkpoint every run is evaluated with: last, best (lowest "
                        "validation loss) or avgN (the average of the last N, saved every "
                        "1%% of --max-update, or every validation under --until-converged); "
                        "default: last, under --until-converged best")
    p.add_argument("--bpe-merges", type=int, default=32000, metavar="N",
                   help="raw data: joint subword-nmt merges (default 32000; fewer for small "
                        "corpora)")
    p.add_argument("--clean-max-len", type=int, default=DEFAULT_CLEANING.max_len, metavar="N",
                   help="raw data: drop training pairs with a side over N Moses tokens "
                        "(default %(default)s; 0: no limit). Empty sides are always dropped")
    p.add_argument("--clean-max-ratio", type=float, default=DEFAULT_CLEANING.max_ratio,
                   metavar="R", help="raw data: drop training pairs whose longer side has "
                                     "more than R times the tokens of the other (default "
                                     "%(default)s; 0: no limit)")
    p.add_argument("--bins", nargs="+", type=int, metavar="EDGE",
                   help="length bins of the report: upper edges in Moses tokens of the "
                        "source (and of the reference), ascending, the last bin open-ended "
                        "(default: each test split's own, as equal in count as its lengths "
                        "allow, none under 30 sentences)")
    p.add_argument("--train-max-len", type=int, metavar="N",
                   help="train only on the pairs of at most N tokens per side (subwords and "
                        "the end of sentence, --task translation_extrapolation), and score "
                        "every test split in bins of source length relative to N")
    p.add_argument("--variants", nargs="+", action="extend", default=[],
                   metavar='"[LABEL=]ENC:FLAGS"',
                   help="an encoding's checkpoints translated with more fairseq-generate "
                        "flags, no retraining, a row of its own (LABEL, or ENC+ the flags' "
                        "values): \"rope:--rope-scaling yarn --rope-scaling-factor 4\" is "
                        "the row rope+yarn-4")
    p.add_argument("--batch-tokens", type=int, metavar="N",
                   help="tokens per update, whatever the GPUs a run is given (default: tiny "
                        f"{BATCH_TOKENS['tiny']}, base {BATCH_TOKENS['base']}); the update "
                        "frequency and the tokens per GPU follow from the GPUs")
    p.add_argument("--workers", type=int, default=2,
                   help="processes for tokenization and BPE (default 2)")
    p.add_argument("--report-only", action="store_true",
                   help="train nothing: rebuild the report from the runs that have finished")
    p.add_argument("--force", action="store_true",
                   help="start over: delete OUT's runs, data and report when its settings "
                        "differ from these")
    launcher_flags.add(p, slurm_gpus=True)
    return p


def size_of(args: argparse.Namespace, p: argparse.ArgumentParser) -> str:
    """``--size`` (default tiny), or under ``--init-from`` the fine-tuning's defaults
    (:data:`.settings.FINETUNE`), where ``--size`` and ``--arch-prefix`` are refused: the
    architecture is the checkpoint's."""
    if args.init_from is None:
        if args.init_dict:
            p.error("--init-dict gives --init-from's dictionaries: add --init-from CKPT, or "
                    "drop --init-dict")
        return args.size or "tiny"
    for flag, value in (("--size", args.size), ("--arch-prefix", args.arch_prefix)):
        if value is not None:
            p.error(f"{flag} sets the architecture of a comparison from scratch, but "
                    "--init-from fine-tunes the checkpoint's (its sizes and model flags) "
                    f"with the fine-tuning recipe: drop {flag} (--train-args changes the "
                    "recipe; docs/compare.md, \"From a trained model\")")
    if len(args.init_dict or ()) > 2:
        p.error(f"--init-dict takes the source's dictionary and the target's, or one joined "
                f"dictionary: {len(args.init_dict)} files given")
    return FINETUNE


def stopping_of(args: argparse.Namespace, p: argparse.ArgumentParser, size: str) -> dict:
    """``--until-converged``, ``--patience`` and ``--validate-every``, checked, with their
    defaults for ``size``: Settings' fields."""
    if not args.until_converged:
        for name in ("patience", "validate_every"):
            if getattr(args, name) is not None:
                p.error(f"--{name.replace('_', '-')} is for --until-converged: add it, or "
                        f"drop --{name.replace('_', '-')}")
        return {}
    if not args.max_update:
        p.error(f"--until-converged stops each run by its validation loss, with --max-update "
                f"as the cap: pass --max-update instead of --max-epoch (e.g. --max-update "
                f"{20 * (args.validate_every or stopping.VALIDATE_EVERY[size])})")
    patience = stopping.PATIENCE if args.patience is None else args.patience
    if patience < 1:
        p.error(f"--patience {patience}: a run stops after P validations without a new best "
                f"validation loss; give 1 or more (default {stopping.PATIENCE})")
    every = args.validate_every or stopping.VALIDATE_EVERY[size]
    if args.validate_every is not None and args.validate_every < 1:
        p.error(f"--validate-every {args.validate_every}: give the updates between "
                "validations, 1 or more")
    if every > args.max_update:
        p.error(f"--validate-every {every} is above the cap --max-update {args.max_update}: "
                f"no run would validate before it; give --validate-every {args.max_update} or "
                f"less (e.g. {max(1, args.max_update // 20)}), or raise --max-update")
    return {"until_converged": True, "patience": patience, "validate_every": every}


def settings_of(args: argparse.Namespace, p: argparse.ArgumentParser) -> Settings:
    for name in ("seeds", "max_update", "max_epoch", "bpe_merges", "workers", "batch_tokens"):
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    size = size_of(args, p)
    stop = stopping_of(args, p, size)
    if args.checkpoint is None:
        args.checkpoint = "best" if stop else "last"
    if args.train_max_len is not None and args.train_max_len < 2:
        p.error("--train-max-len counts the end of sentence too: give at least 2")
    try:
        check_rule(args.checkpoint)
    except ValueError as e:
        p.error(f"--checkpoint: {e}")
    if args.checkpoint.startswith("avg") and not args.max_update:
        p.error("--checkpoint avgN averages checkpoints saved every 1% of --max-update: "
                "pass --max-update")
    try:
        train_args = tuple(shlex.split(args.train_args))
    except ValueError as e:
        p.error(f"--train-args: {e}")
    for flag in ("--update-freq", "--distributed-world-size"):
        if settings_mod.last_flag(train_args, flag) is not None:
            p.error(f"--train-args {flag}: the batch is --batch-tokens per update, and the "
                    "launcher splits it over each run's GPUs: set --batch-tokens instead")
    cleaning = settings_mod.Cleaning(
        min_len=1, max_len=args.clean_max_len or None, max_ratio=args.clean_max_ratio or None,
        rule=DEFAULT_CLEANING.rule if (args.clean_max_len, args.clean_max_ratio) == (
            DEFAULT_CLEANING.max_len, DEFAULT_CLEANING.max_ratio) else "--clean-max-len, "
        "--clean-max-ratio")
    if args.init_from is not None:  # the checkpoint itself is read by main, after --data
        from ...plugin.model_flags import ARCH, FINETUNE_RECIPE
        arch_prefix, recipe = ARCH, FINETUNE_RECIPE
    else:
        arch_prefix, recipe = args.arch_prefix or SIZES[size], RECIPES[size]
    return Settings(
        data=str(args.data.resolve()), source_lang=args.source_lang,
        target_lang=args.target_lang, arch_prefix=arch_prefix, recipe=recipe,
        train_args=train_args, max_update=args.max_update, max_epoch=args.max_epoch,
        valid=args.valid, tests=tuple(args.test), cpu=args.cpu, checkpoint=args.checkpoint,
        bpe_merges=args.bpe_merges, cleaning=cleaning, train_max_len=args.train_max_len,
        batch_tokens=args.batch_tokens or BATCH_TOKENS[size],
        # not resolved: fairseq names the module after the directory as given
        user_dir=os.path.abspath(args.user_dir) if args.user_dir else None, **stop)


def check_models(settings: Settings, encodings: Sequence[str]) -> None:
    """Every encoding is known and every architecture registered."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    from ... import register
    from ...core.encodings import ENCODINGS

    register()  # the architectures looked up below

    unknown = list(dict.fromkeys(e for row in encodings for e in encoding_rows.of(row).encodings
                                 if e not in ENCODINGS))
    if unknown:
        own = sorted(name for name, cls in ENCODINGS.items()
                     if not cls.__module__.startswith("fairseq_posenc."))
        if settings.user_dir:
            hint = (f"--user-dir {settings.user_dir} registers "
                    f"{', '.join(own) if own else 'none'}; to register {unknown[0]}, its "
                    "__init__.py imports the module whose encoding class has "
                    f"@register_encoding and name = \"{unknown[0]}\"")
        else:
            hint = ("an encoding of your own: pass --user-dir DIR, the directory whose "
                    "__init__.py imports fairseq_posenc and the module that registers it")
        raise SystemExit(f"posenc-compare: unknown encoding {', '.join(unknown)}; choose from "
                         f"{' '.join(sorted(ENCODINGS))}; {hint} "
                         "(docs/compare.md, \"Your own encoding\")")
    missing = [plan.arch(settings, e) for e in encodings
               if plan.arch(settings, e) not in ARCH_MODEL_REGISTRY]
    if missing:
        prefixes = sorted({a.rsplit("_", 1)[0] for a in ARCH_MODEL_REGISTRY
                           if a.endswith("_sinusoidal")})
        raise SystemExit(f"posenc-compare: no registered architecture {', '.join(missing)}; "
                         f"--arch-prefix must be one of {', '.join(prefixes)} (or --size)")


def check_lengths(settings: Settings, corpus: data.Corpus, encodings: Sequence[str],
                  train_longest: Optional[int] = None) -> None:
    """A table of absolute positions must cover every training sentence (``train_longest``
    tokens when given) and validation sentence (stop, naming the flag); test sources beyond
    it are left untranslated and counted."""
    from fairseq.models.transformer import (DEFAULT_MAX_SOURCE_POSITIONS,
                                            DEFAULT_MAX_TARGET_POSITIONS)

    from ...plugin.build import model_args
    from ...plugin.extrapolation import length_limits

    need = max(train_longest or data.longest(corpus, "train"), data.longest(corpus, "valid"))
    for encoding in encodings:
        args = model_args(plan.arch(settings, encoding), plan.model_flags(settings, encoding))
        # what fairseq's TransformerModel.build_model fills in when no flag sets them
        args.max_source_positions = (getattr(args, "max_source_positions", None)
                                     or DEFAULT_MAX_SOURCE_POSITIONS)
        args.max_target_positions = (getattr(args, "max_target_positions", None)
                                     or DEFAULT_MAX_TARGET_POSITIONS)
        limits = length_limits(args)
        for limit, flag in ((limits.source, limits.source_flag),
                            (limits.target, limits.target_flag)):
            if need > limit:
                raise SystemExit(
                    f"posenc-compare: {encoding} represents {limit} positions ({flag}) but "
                    f"the longest training or validation sentence has {need} tokens: raise "
                    f"it with --train-args \"{flag} {need}\" (every run gets --train-args: "
                    f"{flag} only where every compared encoding takes it, so compare the "
                    "others apart), or clean with a "
                    "smaller --clean-max-len")
        for test in corpus.tests:
            over = sum(n > limits.source for n in data.source_lengths(corpus, test.subset))
            if over:
                say(f"note: {encoding} represents {limits.source} source positions "
                    f"({limits.source_flag}): {over} {test.name} sources are longer and stay "
                    "untranslated (counted in the report)")


def start(out: Path, new: Settings, force: bool, report_only: bool = False,
          rows: Sequence[encoding_rows.Row] = ()) -> None:
    """Stop if ``out`` holds a comparison with other settings, or a row of ``rows`` defined
    otherwise under the same label (unless ``force``); a larger ``--max-update`` alone
    continues its runs (:func:`.budget.change`)."""
    old = settings_mod.read(out / "settings.json")
    changed = encoding_rows.changed(settings_mod.read_rows(out / "settings.json"), rows)
    if changed and not force:
        raise SystemExit("posenc-compare: " + str(out) + " holds runs of rows defined "
                         "otherwise under these labels:\n  " + "\n  ".join(changed)
                         + "\ngive the new definitions labels of their own (LABEL=ENC:FLAGS), "
                           "choose another OUT, or --force to start over (deletes its runs, "
                           "data and report)")
    if old is None or (old == new and not changed):
        return
    if not force and not changed and budget.change(out, old, new, report_only, say):
        return
    if not force:
        raise SystemExit("posenc-compare: " + str(out) + " holds a comparison with other "
                         "settings:\n  " + "\n  ".join(settings_mod.differences(old, new))
                         + "\nrerun with its settings, choose another OUT, or --force to "
                           "start over (deletes its runs, data and report)")
    if queued := jobs.queued_jobs(out):
        raise SystemExit(f"posenc-compare: --force would delete the runs of SLURM jobs still "
                         f"queued or running ({' '.join(queued)}): scancel them first")
    say(f"--force: starting over in {out}")
    for name in ("runs", "data", "report", "slurm"):
        shutil.rmtree(out / name, ignore_errors=True)
    for name in ("settings.json", "report.md", "report.json", "params.json"):
        (out / name).unlink(missing_ok=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    try:
        encodings = encoding_rows.parse_all(args.encodings)  # each a Row: its label
    except ValueError as e:
        p.error(str(e))
    baseline = args.baseline or encodings[0]
    if baseline not in encodings:
        p.error(f"--baseline {baseline} is not among --encodings {' '.join(encodings)} (a "
                "row is named by its label)")
    settings = settings_of(args, p)
    launcher = launcher_flags.of(args, p, "posenc-compare", gpus_per_run=1, cpu=settings.cpu)
    try:
        batch = plan.batch(settings, launcher.gpus_per_run)
    except ValueError as e:
        p.error(f"--batch-tokens: {e}")
    bins = None
    if args.bins:
        from ..evaluation import bins_from_edges
        try:
            bins = bins_from_edges(args.bins)
        except ValueError as e:
            p.error(f"--bins: {e}")
    try:
        variants = [variants_mod.parse(spec) for spec in args.variants]
    except ValueError as e:
        p.error(str(e))
    plan.import_user_dir(settings)  # its encodings, their architectures and flags
    data.check(settings, prepared=args.init_from is not None)
    source = None
    if args.init_from is not None:  # the checkpoint, its model and dictionaries
        source, init = init_from.read(args.init_from)
        settings = dataclasses.replace(settings, init_from=init)
        say(init_dictionaries.check(source, settings, args.init_dict or ()))
    check_models(settings, encodings)
    try:
        encoding_rows.check(encodings)
    except ValueError as e:
        raise SystemExit(f"posenc-compare: {e}") from None
    fairseq_flags.check_train_args(settings, encodings, batch)
    if source is not None:  # every row's conversion, in memory
        init_from.check_rows(source, {row: plan.model_flags(settings, row) for row in encodings})
        del source  # its tensors: the runs read the checkpoint where they start
    variants_mod.check(variants, encodings, settings)
    if not settings.cpu and launcher.kind == "local":  # a SLURM job finds its GPUs there
        import torch
        if not torch.cuda.is_available():
            raise SystemExit("posenc-compare: no CUDA GPU here: pass --cpu to train on the CPU")
        if not args.report_only:
            dispatch.slots(launcher, "posenc-compare")  # enough GPUs for a run
    if args.report_only and settings_mod.read(args.out / "settings.json") is None:
        raise SystemExit(f"posenc-compare: {args.out} has no comparison to report on")
    with lock.hold(args.out, "posenc-compare"):
        return compare(args, settings, launcher, batch.to_json(), encodings, baseline, bins,
                       variants)


def compare(args, settings: Settings, launcher: Launcher, batch: dict, encodings: list[str],
            baseline: str, bins, variants: list) -> int:
    """The comparison, once the command line is checked, with ``OUT`` locked."""
    start(args.out, settings, args.force, args.report_only, encodings)
    if note := convergence.epochs_note(settings.max_epoch):
        say(f"note: {note}")
    corpus = data.corpus(settings, args.out, args.workers, say)
    limit = (extrapolation_study.train_limit(corpus, settings.train_max_len)
             if settings.train_max_len else None)
    if limit:
        extrapolation_study.check_train_limit(limit)
    check_lengths(settings, corpus, encodings, limit.longest if limit else None)
    runs = plan.runs(encodings, args.seeds)
    if args.report_only:
        for line in jobs.pending_lines(settings, corpus, runs, args.out):
            say(f"pending: {line}")
    else:
        settings_mod.write(args.out / "settings.json", settings,
                           {**launcher.to_json(), "batch": batch},
                           {row.label: row.to_json() for row in encodings})
        outcome = jobs.run_all(settings, corpus, runs, args.out, variants, launcher)
        if outcome.pending:
            return 0  # the report once the jobs have finished: a rerun collects them
        variants_mod.translate_all(settings, corpus, runs, variants, args.out)
    say("report: scoring, significance, pictures")
    params = plan.parameter_counts(settings, corpus, encodings, args.out / "params.json")
    built = summary.build(args.out, settings, corpus, encodings, args.seeds, baseline,
                          bins, params, limit=limit, variants=variants)
    summary.write(args.out / "report.json", built)
    runs_done = [r for r in runs if r.seed == 1]
    inspect = {r.encoding: r.inspect_dir(args.out) / "index.html" for r in runs_done
               if (r.inspect_dir(args.out) / "index.html").exists()}
    written = report.write(built, args.out, inspect)
    for path in [*written, args.out / "report.json"]:
        say(f"report: {path}")
    if not args.report_only and outcome.failed:
        raise SystemExit("posenc-compare: the report leaves out the runs that failed: "
                         + ", ".join(t.label for t in outcome.failed)
                         + " (their logs' ends above); rerun to run them again")
    return 0


if __name__ == "__main__":
    sys.exit(main())
