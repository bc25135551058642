"""A reproduction's trainings and the checkpoint each paper evaluates: the recipe's
``fairseq-train`` run through the shared runner (:mod:`fairseq_posenc.experiment`), and the
paper's checkpoint rule (the last, the best on the validation set, or the average of the
last interval checkpoints).
"""

from __future__ import annotations

from pathlib import Path

from ..experiment import checkpoints
from ..experiment.checkpoints import average_checkpoints  # noqa: F401  (this module's API)
from ..experiment.fairseq_run import progress, run_fairseq
from .recipes import Paper
from .runs import Run, Scale, checkpoint_rule, train_args


def train(run: Run, data: Path, work: Path, scale: Scale, in_process: bool = False) -> None:
    save = run.save_dir(work)
    save.mkdir(parents=True, exist_ok=True)
    progress(f"train {run.paper.key} {run.row.label} {run.column.dataset} {run.pair} "
             f"seed {run.seed}")
    run_fairseq("fairseq-train", train_args(run, data, work, scale), log=save / "train.log",
                in_process=in_process)


def evaluated_checkpoint(paper: Paper) -> str:
    """The file name of the checkpoint ``paper`` evaluates (see :func:`final_checkpoint`)."""
    return checkpoints.checkpoint_name(checkpoint_rule(paper))


def final_checkpoint(run: Run, work: Path) -> Path:
    """The checkpoint the paper evaluates (averaged here where the paper averages)."""
    return checkpoints.final_checkpoint(run.save_dir(work), checkpoint_rule(run.paper),
                                        how_to_train="posenc-reproduce train ...")
