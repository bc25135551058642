"""``posenc-reproduce``: train, translate, score and tabulate the papers' WMT experiments.

Usage (after ``posenc-prepare-wmt`` has prepared the datasets under ``--data``)::

    posenc-reproduce commands --paper diet            # print every fairseq-train command
    posenc-reproduce train    --paper diet --row DIET-REL --column EN-DE --gpus 8
    posenc-reproduce evaluate --paper diet --row DIET-REL --column EN-DE
    posenc-reproduce train    --paper at5 --seeds 3   # seeds 1..3 of each cell
    posenc-reproduce table                            # Markdown: paper, ours, diff, p, buckets
    posenc-reproduce smoke    --work /tmp/smoke       # whole chain, tiny, offline
    posenc-reproduce scripts  --out examples/wmt      # the PAPER_table.sh scripts

(``python examples/wmt/reproduce.py ...`` is the same command.) Layout under ``--work``
(default ``work/wmt``): ``checkpoints/PAPER/ROW/DATASET.SRC-TGT/`` and
``results/PAPER/ROW/SRC-TGT/TESTSET.json`` (BLEU, chrF, sacreBLEU signatures, metric, number
of sentences, buckets, checkpoint) beside ``TESTSET.hyp.LANG``. ``--data`` (default
``data/wmt``) holds one directory per dataset as written by ``posenc-prepare-wmt``
(``bin/``, ``refs/``, ``manifest.json``).

The parts: :mod:`.recipes` (the papers' tables and settings, data), :mod:`.runs` (what runs,
with which flags), :mod:`.execute` (the trainings, the checkpoint each paper evaluates),
:mod:`.evaluate` (translate and score a cell), :mod:`.paper_tables` (the Markdown tables), all
running fairseq through the shared runner :mod:`fairseq_posenc.tools.experiment`; this module
holds the smoke mode and the command line.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
from pathlib import Path
from typing import Optional, Sequence

from . import cli as prepare
from .evaluate import evaluate
from ..launch import launcher_flags, lock
from .execute import train, train_all
from .recipes import PAPERS
from .runs import Scale, select, train_args, trainings
from .table_scripts import write_scripts
from .paper_tables import table


SMOKE = Scale(arch_size="transformer_tiny", max_update=2, max_tokens=2000, extra_train=(
    "--num-workers", "0", "--no-progress-bar", "--log-interval", "1",
    # a validation set of a few sentences would be dropped whole by the default multiple 8
    "--required-batch-size-multiple", "1",
    "--max-source-positions", "256", "--max-target-positions", "256"), max_output=64)


def smoke(work: Path, papers: Sequence[str], bpe_size: int = 60) -> str:
    """Every step on CPU in minutes: fake archives with the real layout (served from
    a local directory), preparation, a tiny model per table cell trained for 2 updates,
    translation, scoring, tables. The BLEU is meaningless; the chain is what is tested."""
    from fairseq_posenc.tools.wmt import fake_archives

    data = work / "data"
    mirror = fake_archives.build_fake_mirror(work / "mirror")
    runs = [run for key in papers for run in select(key)]
    for dataset in sorted({run.column.dataset for run in runs}):
        code = prepare.main([dataset, "--dest", str(data / dataset), "--bpe-size",
                             str(bpe_size), *fake_archives.prepare_flags(mirror)])
        if code:
            raise SystemExit(f"prepare.py {dataset} failed (exit code {code})")
    with contextlib.redirect_stdout(sys.stderr):  # stdout: the tables only
        for n, run in enumerate(trainings(runs)):
            # the first run as users run it: the fairseq-train console script
            train(run, data, work, SMOKE, in_process=n > 0)
        evaluate(runs[:1], data, work, in_process=False, scale=SMOKE)  # fairseq-generate too
        evaluate(runs[1:], data, work, in_process=True, scale=SMOKE)
    return table(work, papers)


# --- command line ---------------------------------------------------------------------

#: The commands that take a paper's cells, and what each does.
COMMANDS = {
    "commands": "print the fairseq-train command of every training of the paper's cells",
    "train": "train the paper's cells (fairseq-train), resuming where a training stopped",
    "evaluate": "translate and score the paper's trained cells",
}
WORK = "checkpoints and results (default: work/wmt)"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description="Train, translate, score and tabulate the papers' WMT experiments on the "
                    "datasets posenc-prepare-wmt prepared; 'COMMAND -h' lists a command's "
                    "options.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    subparsers = {}
    for name, what in COMMANDS.items():
        p = subparsers[name] = sub.add_parser(name, help=what, description=what)
        p.add_argument("--paper", required=True, choices=sorted(PAPERS),
                       help="the paper whose table is reproduced")
        p.add_argument("--row", help="a row label, its slug or its encoding (default: all)")
        p.add_argument("--column", help="a column label, e.g. EN-DE or 2016 (default: all)")
        p.add_argument("--data", type=Path, default=Path("data/wmt"),
                       help="the datasets as posenc-prepare-wmt wrote them, one directory "
                            "each (default: data/wmt)")
        p.add_argument("--work", type=Path, default=Path("work/wmt"), help=WORK)
        p.add_argument("--seeds", type=int, default=1, metavar="N",
                       help="train and evaluate seeds 1..N of every cell; the table shows "
                            "mean +- standard deviation (n) where a cell has several")
        p.add_argument("--alternative-schedule", action="store_true",
                       help="the other reading of a paper's unstated training length (Chen "
                            "2021a: DIET's 250k updates without averaging)")
        if name != "evaluate":
            p.add_argument("--gpus", type=int, default=1,
                           help="GPUs per run: sets --distributed-world-size and, with "
                                "--max-tokens, the --update-freq that gives the paper's batch")
            p.add_argument("--max-tokens", type=int, default=4096,
                           help="tokens per GPU and forward pass (default 4096)")
        if name == "train":
            launcher_flags.add(p, slurm_gpus=False)  # a job's GPUs: --gpus
    what = "print the Markdown tables: the paper's numbers, ours, the difference, p, buckets"
    p = sub.add_parser("table", help=what, description=what)
    p.add_argument("--work", type=Path, default=Path("work/wmt"), help=WORK)
    p.add_argument("--paper", action="append", choices=sorted(PAPERS),
                   help="a paper to tabulate (repeat for several; default: all)")
    what = "write examples/wmt/PAPER_table.sh from the recipes"
    p = sub.add_parser("scripts", help=what, description=what)
    p.add_argument("--out", type=Path, required=True, help="directory (examples/wmt)")
    what = ("the whole chain on CPU in minutes, offline: fake archives, preparation, a tiny "
            "model per cell trained for 2 updates, translation, scoring, tables")
    p = sub.add_parser("smoke", help=what, description=what)
    p.add_argument("--work", type=Path, required=True,
                   help="a scratch directory for the archives, data, checkpoints and results")
    p.add_argument("--paper", action="append", choices=sorted(PAPERS),
                   help="a paper whose chain runs (repeat for several; default: all)")
    args = parser.parse_args(argv)

    if args.command == "table":
        print(table(args.work, args.paper or list(PAPERS)))
        return 0
    if args.command == "scripts":
        for path in write_scripts(args.out):
            print(path)
        return 0
    if args.command == "smoke":
        print(smoke(args.work, args.paper or list(PAPERS)))
        return 0
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    runs = select(args.paper, args.row, args.column, args.alternative_schedule, args.seeds)
    if args.command == "evaluate":
        evaluate(runs, args.data, args.work)
        return 0
    scale = Scale(gpus=args.gpus, max_tokens=args.max_tokens)
    if args.command == "commands":
        for run in trainings(runs):
            args_ = train_args(run, args.data, args.work, scale)
            print(" ".join(["fairseq-train", *map(shlex.quote, args_)]))
        return 0
    launcher = launcher_flags.of(args, subparsers["train"], "posenc-reproduce",
                                 gpus_per_run=args.gpus)
    with lock.hold(args.work, "posenc-reproduce"):
        train_all(trainings(runs), args.data, args.work, scale, launcher)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
