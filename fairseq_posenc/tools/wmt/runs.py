"""What a reproduction runs: one :class:`Run` per table cell and seed, and the
``fairseq-train`` / ``fairseq-generate`` arguments of each, from the recipes (``recipes.py``).

Training follows each paper: Transformer base, the paper's batch in tokens per update reached
on any number of GPUs through ``--max-tokens`` per GPU and ``--update-freq``, the paper's
number of updates, the interval checkpoints the paper averages. Decoding: the shared
runner's (:func:`fairseq_posenc.tools.experiment.translate.generate_args`) with the papers' beam 10
and length penalty 0.6, GNMT's or fairseq's per paper.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Optional

from ..experiment import translate
from ..experiment.checkpoints import interval_flags
from ..experiment.fairseq_run import USER_DIR  # noqa: F401  (also this module's API)
from ..launch import batch
from .recipes import BEAM, LENPEN, PAPERS, Column, Paper, Row

if TYPE_CHECKING:  # an argument's type only; the module imports fairseq
    from ...plugin.extrapolation import Untranslatable


@dataclass(frozen=True)
class Run:
    paper: Paper
    row: Row
    column: Column
    seed: int = 1  # fairseq-train --seed; seed 1 keeps the paths without a seed suffix

    @property
    def pair(self) -> str:
        return f"{self.column.src}-{self.column.tgt}"

    @property
    def seed_suffix(self) -> str:
        return "" if self.seed == 1 else f".seed{self.seed}"

    def save_dir(self, work: Path) -> Path:
        return work / "checkpoints" / self.paper.key / slug(self.row.label) / (
            f"{self.column.dataset}.{self.pair}{self.seed_suffix}")

    def result_path(self, work: Path) -> Path:
        return (work / "results" / self.paper.key / slug(self.row.label) / self.pair
                / f"{self.column.testset}{self.seed_suffix}.json")


def slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", label).strip("_").lower()


def select(paper: str, row: Optional[str] = None, column: Optional[str] = None,
           alternative_schedule: bool = False, seeds: int = 1) -> list[Run]:
    if paper not in PAPERS:
        raise SystemExit(f"unknown --paper {paper!r}; choose one of {', '.join(PAPERS)}")
    p = PAPERS[paper]
    if alternative_schedule:
        if p.alternative_schedule is None:
            raise SystemExit(f"--alternative-schedule: {paper} states its training length; "
                             "there is no other reading")
        max_update, average_last, _why = p.alternative_schedule
        p = replace(p, max_update=max_update, average_last=average_last)
    rows = [r for r in p.rows if row in (None, r.label, slug(r.label), r.encoding)]
    cols = [c for c in p.columns if column in (None, c.label)]
    if not rows or not cols:
        raise SystemExit(
            f"{paper} has rows {[r.label for r in p.rows]} and columns "
            f"{[c.label for c in p.columns]}; got --row {row!r} --column {column!r}")
    return [Run(p, r, c, seed) for seed in range(1, seeds + 1) for r in rows for c in cols]


def trainings(runs: Iterable[Run]) -> list[Run]:
    """One training per (row, dataset, direction): columns that differ only in the test set
    (AT5's four years) share a model."""
    seen: dict[tuple, Run] = {}
    for run in runs:
        seen.setdefault((run.paper.key, run.row.label, run.column.dataset, run.pair, run.seed),
                        run)
    return list(seen.values())


@dataclass(frozen=True)
class Scale:
    """What differs between the real recipe and the smoke mode."""

    arch_size: str = "transformer_wmt_en_de"
    max_update: Optional[int] = None  # None: the paper's
    max_tokens: int = 4096  # per GPU and forward pass
    gpus: int = 1
    extra_train: tuple[str, ...] = ()
    # outputs capped at this many tokens (None: the paper's decoding): the smoke mode's
    # untrained models never end a sentence and would run to fairseq's 200 every time
    max_output: Optional[int] = None


def checkpoint_rule(paper: Paper) -> str:
    """The checkpoint ``paper`` evaluates, as a rule of
    :mod:`fairseq_posenc.tools.experiment.checkpoints`: ``avgN``, ``best`` or ``last``."""
    return f"avg{paper.average_last}" if paper.average_last else paper.checkpoint


def update_freq(paper: Paper, scale: Scale) -> int:
    return batch.update_freq(paper.batch_tokens, scale.max_tokens, scale.gpus)


def train_args(run: Run, data: Path, work: Path, scale: Scale) -> list[str]:
    """``fairseq-train`` arguments for one run (the program name excluded)."""
    paper = run.paper
    args = [
        str(data / run.column.dataset / "bin"),
        "--user-dir", str(USER_DIR),
        *(("--task", "translation_extrapolation", "--train-max-len", str(paper.train_max_len))
          if paper.train_max_len else ("--task", "translation")),
        "--source-lang", run.column.src, "--target-lang", run.column.tgt,
        "--arch", f"{scale.arch_size}_{run.row.encoding}",
        *paper.model_flags, *run.row.flags, *paper.train_flags,
        "--max-tokens", str(scale.max_tokens),
        "--update-freq", str(update_freq(paper, scale)),
        "--max-update", str(scale.max_update or paper.max_update),
        "--save-dir", str(run.save_dir(work)), "--seed", str(run.seed),
        "--no-epoch-checkpoints", "--log-format", "simple", "--log-interval", "100",
    ]
    args += interval_flags(checkpoint_rule(paper), scale.max_update or paper.max_update)
    # Always: fairseq's default world size is every visible GPU, and --update-freq above
    # is computed for scale.gpus of them.
    args += ["--distributed-world-size", str(scale.gpus)]
    return args + list(scale.extra_train)


def generate_args(run: Run, data: Path, checkpoint: Path, split: str, results: Path,
                  bpe: str, limits: Optional[Untranslatable] = None,
                  scale: Scale = Scale()) -> list[str]:
    """``fairseq-generate`` arguments of one cell (:func:`translate.generate_args`): the
    paper's beam, length penalty and its normalization; ``limits``: sources the model cannot
    represent are skipped (and reported), outputs capped at the decoder's table;
    ``scale.max_output`` caps them further."""
    return translate.generate_args(
        data / run.column.dataset / "bin", checkpoint, split, run.column.src, run.column.tgt,
        results, bpe=bpe, task=generate_task(run.paper), limits=limits,
        max_output=scale.max_output, beam=BEAM, lenpen=LENPEN)


def generate_task(paper: Paper) -> str:
    """The ``fairseq-generate`` task: translation_gnmt is fairseq's translation with the
    hypotheses normalized by GNMT's length penalty."""
    return "translation_gnmt" if paper.length_penalty == "gnmt" else "translation"


def decoding(paper: Paper) -> str:
    penalty = (f"GNMT length penalty ((5 + L) / 6)^{LENPEN}" if paper.length_penalty == "gnmt"
               else f"fairseq's length penalty L^{LENPEN}")
    return f"beam {BEAM}, {penalty}"
